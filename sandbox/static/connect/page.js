// The connect page: one step at a time against <base>connect/api/<step>. Every text the
// server or the user supplies goes in through textContent, never as HTML.
(function () {
  "use strict";
  const params = new URLSearchParams(location.search);
  const api = location.pathname.replace(/\/+$/, "") + "/api/";
  const hostOrigin = params.get("origin");
  const TERMINAL = new Set([1004, 1005, 1006, 1007, 1012, 1013, 1026]);
  const APP_ERRORS = new Set([1004, 1005, 1006, 1007, 1026]);
  const APP_PROBLEM = "This app cannot link your bank right now. Please try again later, or contact the app's support.";
  const BLOCKED = { down: "Down", unavailable: "Under maintenance", unsupported: "No longer supported" };
  const METHOD_NAMES = { bank: "Internet banking", mobile: "Mobile banking", bvn: "BVN", account_number: "Account number" };
  const $ = (id) => document.getElementById(id);
  const state = { session: null, banks: [], bank: null, hint: {}, offers: [], finished: false };

  // -- talking to the host page (connect.js), in an iframe or a popup --------------------
  function send(kind, data) {
    const target = window.parent !== window ? window.parent : window.opener;
    if (target && hostOrigin) target.postMessage({ source: "ledgerlake-connect", kind: kind, data: data }, hostOrigin);
  }
  function event(name, data) { send("event", { name: name, data: data || {} }); }

  async function call(step, body) {
    const resp = await fetch(api + step, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    });
    let answer;
    try { answer = await resp.json(); } catch (e) { answer = { error_message: "the service answered " + resp.status }; }
    if (resp.ok) return answer.data;
    throw answer;
  }

  function show(step) {
    document.querySelectorAll("section[data-step]").forEach((s) => { s.hidden = s.dataset.step !== step; });
    // the first field or button the user can see (not one in a hidden part of the step)
    const first = Array.from(document.querySelectorAll(`section[data-step="${step}"] input, section[data-step="${step}"] button`))
      .find((el) => el.getClientRects().length > 0 && !el.disabled);
    if (first) first.focus();
  }

  // A widget error goes to onError; the steps a user can retry stay open, the others end.
  function failed(err, messageId) {
    if (err && err.type === "error") {
      send("error", err);
      event("ERROR", { code: err.code });
      if (TERMINAL.has(err.code) || !messageId) {
        // the application's own problems (plan, wallet, keys, agreement) in a user's words;
        // the developer's message went to onError above
        $("error-message").textContent = APP_ERRORS.has(err.code) ? APP_PROBLEM : err.message;
        $("error-code").textContent = String(err.code);
        $("error-method").textContent = err.method;
        state.finished = true;
        show("error");
        return;
      }
      $(messageId).textContent = err.message + " (" + err.code + ")";
      return;
    }
    const text = (err && (err.display_message || err.error_message)) || String(err);
    if (messageId) $(messageId).textContent = text;
    else { $("error-message").textContent = text; $("error-code").textContent = (err && err.error_code) || "?"; show("error"); }
  }

  function close() {
    event("EXIT", { finished: state.finished });
    send("close", {});
    if (!hostOrigin) show(state.finished ? "success" : "bank");
  }

  // -- step 1: the bank ----------------------------------------------------------------
  function bankButton(b) {
    const li = document.createElement("li");
    const btn = document.createElement("button");
    btn.type = "button"; btn.className = "bank"; btn.dataset.bank = b._id; btn.dataset.name = b.name.toLowerCase();
    const logo = document.createElement("span");
    logo.className = "logo"; logo.style.background = b.colors.primary; logo.textContent = b.name.charAt(0);
    logo.setAttribute("aria-hidden", "true");
    const name = document.createElement("span"); name.textContent = b.name;
    btn.append(logo, name);
    btn.setAttribute("aria-label", b.name);  // the logo's letter is decoration, not the name
    if (BLOCKED[b.status] || b.status === "not_responding") {
      const st = document.createElement("span"); st.className = "status";
      st.textContent = BLOCKED[b.status] || "Slow to respond";
      btn.append(st);
      btn.setAttribute("aria-label", b.name + ": " + st.textContent);
    }
    if (BLOCKED[b.status]) { btn.disabled = true; btn.setAttribute("aria-disabled", "true"); }
    btn.addEventListener("click", () => chooseBank(b));
    li.append(btn);
    return li;
  }

  function filterBanks() {
    const q = $("bank-search").value.trim().toLowerCase();
    let shown = 0;
    $("bank-list").querySelectorAll("li").forEach((li) => {
      const hit = li.firstChild.dataset.name.includes(q);
      li.hidden = !hit; shown += hit ? 1 : 0;
    });
    $("bank-empty").hidden = shown > 0;
  }

  function radio(group, value, label, checked) {
    const l = document.createElement("label");
    const input = document.createElement("input");
    input.type = "radio"; input.name = group; input.value = value; input.checked = checked;
    l.append(input, document.createTextNode(label));
    return l;
  }

  function chooseBank(b) {
    state.bank = b;
    event("INSTITUTION_SELECTED", { bank: b._id, name: b.name });
    $("login-bank").textContent = b.name;
    const methods = $("login-methods");
    methods.querySelectorAll("label").forEach((l) => l.remove());
    b.login_types.forEach((m, i) => methods.append(radio("login_type", m, METHOD_NAMES[m], i === 0)));
    const types = $("account-types");
    types.querySelectorAll("label").forEach((l) => l.remove());
    const offered = state.accountType ? [state.accountType] : b.account_types;
    offered.forEach((t, i) => types.append(radio("account_type", t, t === "personal" ? "Personal" : "Business", i === 0)));
    types.hidden = offered.length < 2;
    $("login-message").textContent = "";
    methodChanged();
    show("login");
  }

  function method() { const r = document.querySelector("input[name=login_type]:checked"); return r && r.value; }

  function methodChanged() {
    const m = method();
    document.querySelectorAll(".method").forEach((d) => { d.hidden = d.dataset.method !== m; });
    $("hint-text").textContent = state.hint[m] || "";
    event("AUTH_METHOD_SWITCHED", { login_type: m });
  }

  // -- step 2: the login --------------------------------------------------------------
  async function submitLogin(e) {
    e.preventDefault();
    const m = method();
    const box = document.querySelector(`.method[data-method="${m}"]`);
    const credentials = {};
    box.querySelectorAll("input").forEach((i) => { credentials[i.name] = i.value; });
    const type = document.querySelector("input[name=account_type]:checked");
    $("login-message").textContent = "";
    $("login-submit").disabled = true;
    event("SUBMIT_CREDENTIALS", { login_type: m });
    try {
      const next = await call("login", { session: state.session, bank: state.bank._id, login_type: m,
        account_type: type ? type.value : null, credentials: credentials });
      box.querySelectorAll("input[type=password]").forEach((i) => { i.value = ""; });
      if (next.step === "mfa") {
        $("mfa-prompt").textContent = next.mfa.prompt;
        $("mfa-hint").textContent = "Test: " + (state.hint[next.mfa.type] || "");
        $("mfa-answer").inputMode = next.mfa.type === "token" ? "numeric" : "text";
        show("mfa");
      } else accounts(next.accounts, state.bank.name);
    } catch (err) { failed(err, "login-message"); } finally { $("login-submit").disabled = false; }
  }

  async function submitMfa(e) {
    e.preventDefault();
    $("mfa-message").textContent = "";
    event("SUBMIT_MFA", {});
    try {
      const next = await call("mfa", { session: state.session, answer: $("mfa-answer").value });
      accounts(next.accounts, state.bank.name);
    } catch (err) { failed(err, "mfa-message"); }
  }

  // -- step 3: accounts and consent ------------------------------------------------------
  function accounts(offers, bankName) {
    state.offers = offers;
    $("accounts-bank").textContent = bankName;
    const list = $("account-list");
    list.querySelectorAll("label").forEach((l) => l.remove());
    offers.forEach((o, i) => {
      const l = document.createElement("label"); l.className = "account";
      const box = document.createElement("input");
      box.type = "checkbox"; box.name = "account"; box.value = String(o.index); box.checked = i === 0;
      l.append(box, document.createTextNode(`${o.type} ••${(o.nuban || "").slice(-4)}: ${o.name}`));
      list.append(l);
    });
    $("consent").checked = false;
    $("accounts-message").textContent = "";
    show("accounts");
  }

  async function submitAccounts(e) {
    e.preventDefault();
    const chosen = Array.from(document.querySelectorAll("input[name=account]:checked")).map((b) => Number(b.value));
    if (!chosen.length) { $("accounts-message").textContent = "Choose at least one account."; return; }
    if (!$("consent").checked) { $("accounts-message").textContent = "Tick the box to agree to share your data."; return; }
    event("ACCOUNTS_SELECTED", { count: chosen.length });
    $("accounts-submit").disabled = true;
    try {
      const done = await call("finish", { session: state.session, accounts: chosen, consent: true });
      state.finished = true;
      $("success-record").textContent = done.record;
      $("success-bank").textContent = done.bank.name;
      const ul = $("success-accounts"); ul.textContent = "";
      done.accounts.forEach((a) => { const li = document.createElement("li"); li.textContent = `${a.type} ••${a.nuban.slice(-4)}: ${a.name}`; ul.append(li); });
      // an account number: the micro-deposits come first, on this screen or at a later login
      awaitDeposits(!done.verified);
      event("ACCOUNT_LINKED", { record: done.record });
      send("success", done);
      show("success");
    } catch (err) { failed(err, "accounts-message"); } finally { $("accounts-submit").disabled = false; }
  }

  // -- step 4, for an account number: the two micro-deposits, three tries ------------------
  function awaitDeposits(pending) {
    $("success-title").textContent = pending ? "Confirm your account" : "Your account is linked";
    $("verify-form").hidden = !pending;
    $("success-actions").hidden = pending;
    $("success-verified").hidden = true;
    $("verify-message").textContent = "";
    document.querySelectorAll("input[name=deposit]").forEach((i) => { i.value = ""; });
    $("verify-hint-text").textContent = state.hint.micro_deposits || "";
  }

  function triesLeft(n) {
    if (n === 0) return "No tries left: one more attempt locks this link for good.";
    return n === 1 ? "1 try left." : n + " tries left.";
  }

  async function submitDeposits(e) {
    e.preventDefault();
    const amounts = Array.from(document.querySelectorAll("input[name=deposit]")).map((i) => i.value.trim());
    if (amounts.some((a) => !a)) { $("verify-message").textContent = "Enter both amounts."; return; }
    $("verify-message").textContent = "";
    $("verify-submit").disabled = true;
    event("SUBMIT_DEPOSITS", {});
    try {
      const done = await call("verify", { session: state.session, amounts: amounts });
      $("verify-form").hidden = true;
      $("success-title").textContent = "Your account is linked";
      $("success-verified").hidden = false;
      $("success-actions").hidden = false;
      event("ACCOUNT_VERIFIED", { record: done.record });
      $("success-done").focus();
    } catch (err) {
      if (err && err.error_code === "INCORRECT_DEPOSIT_AMOUNTS") {
        $("verify-message").textContent = (err.display_message || err.error_message) + " " + triesLeft(err.attempts_left);
        $("deposit-1").focus();
      } else if (err && err.error_code === "TOO_MANY_VERIFICATION_ATTEMPTS") {
        state.finished = false;  // the link is dead; the session is back at the bank step
        event("ERROR", { code: err.error_code });
        $("locked-message").textContent = err.display_message || err.error_message;
        $("locked-code").textContent = err.error_code;
        show("locked");
        $("locked-other").focus();
      } else failed(err, err && err.error_code === "INVALID_FIELD" ? "verify-message" : null);
    } finally { $("verify-submit").disabled = false; }
  }

  // -- the start -------------------------------------------------------------------------
  async function start() {
    const body = { key: params.get("key") || "" };
    if (params.get("products")) body.products = params.get("products");
    if (params.get("account_type")) body.account_type = params.get("account_type");
    if (params.get("customer")) body.customer = params.get("customer");
    if (["1", "true"].includes(params.get("returning"))) body.returning = true;
    if (params.get("payment_amount")) body.payment_amount = Number(params.get("payment_amount"));
    state.accountType = body.account_type || null;
    try {
      const s = await call("session", body);
      state.session = s.session; state.banks = s.banks; state.hint = s.hint;
      $("sandbox-note").hidden = s.env !== "production-sandbox";
      const list = $("bank-list");
      s.banks.forEach((b) => list.append(bankButton(b)));
      event("OPENED", { env: s.env });
      if (s.returning) {
        state.bank = s.returning.bank;
        $("returning-note").hidden = false;
        $("returning-note").textContent = `Welcome back, ${s.returning.customer.name}.`;
        accounts(s.returning.accounts, s.returning.bank.name);
      } else show("bank");
    } catch (err) { failed(err, null); }
  }

  $("bank-search").addEventListener("input", filterBanks);
  $("login-methods").addEventListener("change", methodChanged);
  $("login-form").addEventListener("submit", submitLogin);
  $("login-back").addEventListener("click", () => show("bank"));
  $("mfa-form").addEventListener("submit", submitMfa);
  $("accounts-form").addEventListener("submit", submitAccounts);
  $("close").addEventListener("click", close);
  $("verify-form").addEventListener("submit", submitDeposits);
  $("verify-later").addEventListener("click", close);
  $("locked-other").addEventListener("click", () => { $("bank-search").value = ""; filterBanks(); show("bank"); });
  $("locked-done").addEventListener("click", close);
  $("success-done").addEventListener("click", close);
  $("error-done").addEventListener("click", close);
  document.addEventListener("keydown", (e) => { if (e.key === "Escape") close(); });
  start();
})();
