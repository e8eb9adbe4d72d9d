// connect.js: embed the sandbox's connect page in a host page.
//
//   load <sandbox URL>/sandbox/v2/connect/connect.js with a script tag, then:
//   const widget = new LedgerlakeConnect({
//     key: "pk_test_...",                 // the environment's public key (settings/connect)
//     products: ["auth", "transactions"], // optional; default every product
//     accountType: "business",            // optional: only that kind of account
//     customer: "<customer id>", returning: true,  // optional: skip bank and login
//     paymentAmount: 150000,              // optional: a direct debit, in kobo
//     mode: "iframe",                     // or "popup"
//     onSuccess(payload) {}, onError(error) {}, onClose() {}, onEvent(name, data) {},
//   });
//   widget.open();
//
// Messages are taken only from the page's own origin and window.
(function () {
  "use strict";
  const script = document.currentScript;
  const pageUrl = script ? script.src.replace(/\/connect\.js(\?.*)?$/, "") : null;

  function LedgerlakeConnect(options) {
    if (!(this instanceof LedgerlakeConnect)) return new LedgerlakeConnect(options);
    if (!options || typeof options.key !== "string" || !options.key) throw new Error("LedgerlakeConnect: options.key (the public key) is required");
    this.options = options;
    this.url = options.url || pageUrl;
    if (!this.url) throw new Error("LedgerlakeConnect: load connect.js with a <script src> or pass options.url");
    this.frame = null; this.popup = null; this.overlay = null;
    this._onMessage = this._onMessage.bind(this);
  }

  LedgerlakeConnect.prototype.link = function () {
    const o = this.options;
    const q = new URLSearchParams({ key: o.key, origin: location.origin });
    if (o.products) q.set("products", [].concat(o.products).join(","));
    if (o.accountType) q.set("account_type", o.accountType);
    if (o.customer) q.set("customer", o.customer);
    if (o.returning) q.set("returning", "1");
    if (o.paymentAmount) q.set("payment_amount", String(o.paymentAmount));
    return this.url + "?" + q.toString();
  };

  LedgerlakeConnect.prototype.open = function () {
    if (this.frame || this.popup) return;
    this.opener = document.activeElement;  // where the focus goes back when the page closes
    window.addEventListener("message", this._onMessage);
    if (this.options.mode === "popup") {
      this.popup = window.open(this.link(), "ledgerlake-connect", "width=440,height=720");
      return;
    }
    const overlay = document.createElement("div");
    overlay.id = "ledgerlake-connect-overlay";
    Object.assign(overlay.style, { position: "fixed", inset: "0", background: "rgba(0,0,0,0.45)", zIndex: "2147483000", display: "flex", alignItems: "center", justifyContent: "center" });
    const frame = document.createElement("iframe");
    frame.id = "ledgerlake-connect-frame";
    frame.title = "Link your bank account";
    frame.src = this.link();
    Object.assign(frame.style, { width: "420px", maxWidth: "100%", height: "680px", maxHeight: "100%", border: "0", borderRadius: "8px", background: "#fff" });
    overlay.append(frame);
    document.body.append(overlay);
    this.overlay = overlay; this.frame = frame;
    frame.focus();
  };

  LedgerlakeConnect.prototype.close = function () {
    window.removeEventListener("message", this._onMessage);
    if (this.overlay) this.overlay.remove();
    if (this.popup && !this.popup.closed) this.popup.close();
    this.overlay = this.frame = this.popup = null;
    if (this.opener && this.opener.isConnected && typeof this.opener.focus === "function") this.opener.focus();
    this.opener = null;
  };

  LedgerlakeConnect.prototype._onMessage = function (e) {
    const from = this.frame ? this.frame.contentWindow : this.popup;
    if (e.source !== from || e.origin !== new URL(this.url).origin) return;
    const m = e.data;
    if (!m || m.source !== "ledgerlake-connect") return;
    const o = this.options;
    const call = (fn, ...args) => { if (typeof fn === "function") fn(...args); };
    if (m.kind === "success") call(o.onSuccess, m.data);
    else if (m.kind === "error") call(o.onError, m.data);
    else if (m.kind === "event") call(o.onEvent, m.data.name, m.data.data);
    else if (m.kind === "close") { this.close(); call(o.onClose); }
  };

  window.LedgerlakeConnect = LedgerlakeConnect;
})();
