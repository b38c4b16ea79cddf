// The live tail: adds each finished request at the top of the table as the WebSocket announces it.
// Without JavaScript the page still lists the latest requests (rendered on the server).
(() => {
  "use strict";
  const TAIL_ROWS = 200; // rows kept on the page; the logs hold every entry
  const REFUSED = new Set([4401, 4403, 4404]); // no session, another organization, no such socket

  const body = document.getElementById("tail-rows");
  const state = document.getElementById("tail-state");
  if (!body || !state || !("WebSocket" in window)) return;

  const logUrl = body.dataset.logUrl;
  let delay = 1000;
  let failures = 0; // connections refused in a row (a refused handshake reaches a page as code 1006)

  function show(name, text) {
    state.dataset.state = name;
    state.textContent = text;
  }

  function cell(text, className) {
    const td = document.createElement("td");
    if (className) td.className = className;
    td.textContent = text; // text only: nothing a client sent is ever parsed as markup
    return td;
  }

  function code(text) {
    const element = document.createElement("code");
    element.textContent = text;
    return element;
  }

  function statusClass(status) {
    return status < 400 ? "succeeded" : status < 500 ? "pending" : "failed";
  }

  function dollars(text) {
    const amount = Number(text);
    if (!Number.isFinite(amount) || amount === 0) return "$0";
    if (Math.abs(amount) >= 1) return "$" + amount.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
    return "$" + amount.toFixed(8).replace(/0+$/, "");
  }

  function row(request) {
    const tr = document.createElement("tr");
    tr.dataset.logId = request.log_id;
    tr.className = "fresh";

    const time = cell("");
    const link = document.createElement("a");
    link.href = logUrl + encodeURIComponent(request.log_id) + "/";
    const stamp = document.createElement("time");
    stamp.dateTime = request.created_at;
    stamp.textContent = String(request.created_at).replace("T", " ").replace("Z", "");
    link.append(stamp);
    time.append(link);

    const status = cell("");
    const badge = document.createElement("span");
    badge.className = "status status-" + statusClass(Number(request.status));
    badge.textContent = String(request.status);
    status.append(badge);
    if (request.error_code) status.append(" ", code(request.error_code));

    let model = request.requested_model || "—";
    if (request.model && request.model !== request.requested_model) model += " → " + request.model;

    const team = request.team_id ? (request.team_name || "deleted team") : "—";
    const key = cell("");
    key.append(code((request.api_key_prefix || "") + "…"));

    tr.append(
      time,
      status,
      cell(model),
      cell(request.provider || "—"),
      cell(team),
      key,
      cell(request.input_tokens + " / " + request.output_tokens, "num"),
      cell(dollars(request.cost_usd), "num"),
      cell(Number(request.latency_ms).toLocaleString("en-US", { maximumFractionDigits: 1 }) + " ms", "num"),
      cell(request.cache || ""),
      cell(request.policy_action || "—"),
    );
    return tr;
  }

  function add(request) {
    if (body.querySelector('tr[data-log-id="' + CSS.escape(request.log_id) + '"]')) return;
    const empty = body.querySelector(".tail-empty");
    if (empty) empty.remove();
    body.prepend(row(request));
    while (body.rows.length > TAIL_ROWS) body.lastElementChild.remove();
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + body.dataset.websocket);
    show("connecting", "Connecting…");
    socket.addEventListener("open", () => {
      delay = 1000;
      failures = 0;
      show("live", "Live: new requests appear at the top");
    });
    socket.addEventListener("message", (event) => {
      let message;
      try { message = JSON.parse(event.data); } catch (error) { return; }
      if (message.type === "request") add(message);
    });
    socket.addEventListener("close", (event) => {
      if (REFUSED.has(event.code)) {
        show("closed", "Live updates stopped: sign in again or reload the page.");
        return;
      }
      failures += 1;
      if (failures >= 5) {
        show("closed", "Live updates are unavailable: reload the page to try again.");
        return;
      }
      show("closed", "Disconnected; trying again…");
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 30000);
    });
  }

  connect();
})();
