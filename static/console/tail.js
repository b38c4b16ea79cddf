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

  function statusClass(status) {
    return status < 400 ? "succeeded" : status < 500 ? "pending" : "failed";
  }

  const format = window.ConsoleFormat;
  const CACHE_HITS = new Set(["l1", "l2", "l3"]);
  const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

  function tag(text, className) {
    const element = document.createElement("span");
    element.className = "tag " + className;
    element.textContent = text;
    return element;
  }

  function when(iso) {
    // "Nov 26, 14:03:22", in UTC like the rows the server drew.
    const moment = new Date(iso);
    if (Number.isNaN(moment.getTime())) return String(iso);
    const pad = (number) => String(number).padStart(2, "0");
    return MONTHS[moment.getUTCMonth()] + " " + moment.getUTCDate() + ", " +
      pad(moment.getUTCHours()) + ":" + pad(moment.getUTCMinutes()) + ":" + pad(moment.getUTCSeconds());
  }

  // The columns of templates/console/logs/row.html, in its order.
  function row(request) {
    const tr = document.createElement("tr");
    tr.dataset.logId = request.log_id;
    tr.className = "fresh";

    const time = cell("");
    const link = document.createElement("a");
    link.href = logUrl + encodeURIComponent(request.log_id) + "/";
    const stamp = document.createElement("time");
    stamp.dateTime = request.created_at;
    stamp.textContent = when(request.created_at);
    link.append(stamp);
    time.append(link);

    const status = cell("");
    const badge = document.createElement("span");
    badge.className = "status status-" + statusClass(Number(request.status));
    badge.textContent = String(request.status);
    if (request.error_code) badge.title = request.error_code;
    status.append(badge);
    if (request.policy_action) status.append(" ", tag(request.policy_action, "tag-" + request.policy_action));

    const model = cell(request.requested_model || "—", "log-model");
    model.title = request.provider ? "served by " + request.provider + " / " + request.model : "no upstream called";

    const key = cell(request.api_key_id ? (request.api_key_name || request.api_key_prefix || "") : "—", "log-name");
    const team = cell(request.team_id ? (request.team_name || "deleted team") : "—", "log-name");
    const tokens = cell(format.compact(request.input_tokens) + " / " + format.compact(request.output_tokens), "num");
    tokens.title = request.input_tokens + " in, " + request.output_tokens + " out";
    const cost = cell(format.dollars(request.cost_usd), "num");
    cost.title = request.cost_usd + " USD";

    const cache = cell("");
    if (CACHE_HITS.has(request.cache)) cache.append(tag("hit " + request.cache.toUpperCase(), "tag-hit"));
    else {
      const muted = document.createElement("span");
      muted.className = "hint";
      muted.textContent = request.cache || "";
      cache.append(muted);
    }

    tr.append(time, status, model, key, team, tokens, cost, cell(format.duration(request.latency_ms), "num"), cache);
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
