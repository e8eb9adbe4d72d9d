// The demo host: every callback of connect.js is printed and kept in window.connectLog.
(function () {
  "use strict";
  const params = new URLSearchParams(location.search);
  window.connectLog = [];
  function log(kind, value) {
    window.connectLog.push({ kind: kind, value: value });
    document.getElementById("log").textContent += kind + " " + JSON.stringify(value) + "\n";
  }
  function widget(mode) {
    return new window.LedgerlakeConnect({
      key: params.get("key") || "", mode: mode,
      products: params.get("products") || undefined,
      accountType: params.get("account_type") || undefined,
      customer: params.get("customer") || undefined,
      returning: ["1", "true"].includes(params.get("returning")),
      paymentAmount: params.get("payment_amount") ? Number(params.get("payment_amount")) : undefined,
      onSuccess: (p) => log("success", p),
      onError: (e) => log("error", e),
      onClose: () => log("close", null),
      onEvent: (name, data) => log("event", { name: name, data: data }),
    });
  }
  document.getElementById("open-iframe").addEventListener("click", () => widget("iframe").open());
  document.getElementById("open-popup").addEventListener("click", () => widget("popup").open());
})();
