// The playground: builds a chat completion from the form and sends it to this gateway's proxy, from the
// browser, as any client does (apps/console/views/playground.py says why). Same origin, so every
// response header can be read. Text from the model or the proxy is only ever set as text, never parsed
// as markup.
(() => {
  "use strict";
  const form = document.getElementById("playground");
  if (!form) return;

  const names = JSON.parse(document.getElementById("playground-header-names").textContent);
  const result = document.getElementById("playground-result");
  const statusLine = document.getElementById("playground-status");
  const errorBox = document.getElementById("playground-error");
  const answer = document.getElementById("playground-answer");
  const summary = document.getElementById("playground-summary");
  const headerRows = document.getElementById("playground-header-rows");
  const entry = document.getElementById("playground-entry");
  const keyState = document.getElementById("playground-key-state");
  const sendButton = form.querySelector("button[type=submit]");
  const stopButton = document.getElementById("playground-stop");
  const turns = document.getElementById("playground-turns");
  const format = window.ConsoleFormat || { dollars: (v) => "$" + v, duration: (v) => v + " ms" };
  const KEY_MARGIN_MS = 60 * 1000; // a stored key this close to its end is replaced, not used
  const storageName = "playground-key:" + form.dataset.keyScope;
  let inFlight = null; // the AbortController of the request being answered

  class Refusal extends Error {}

  // --- The form ---------------------------------------------------------------------------------

  function source() {
    return form.elements.source.value;
  }

  function showSource() {
    for (const part of form.querySelectorAll("[data-source]")) part.hidden = part.dataset.source !== source();
    // Only a template can bring its own model.
    const templateModel = form.elements.model.querySelector("option[value='']");
    templateModel.disabled = source() !== "template";
    if (templateModel.disabled && templateModel.selected && form.elements.model.options.length > 1) {
      form.elements.model.selectedIndex = 0;
    }
  }

  form.addEventListener("change", (event) => {
    if (event.target.name === "source") showSource();
  });
  showSource();

  document.getElementById("playground-add-turn").addEventListener("click", () => {
    const last = turns.querySelector("li:last-child select[name=role]");
    const row = document.getElementById("playground-turn").content.firstElementChild.cloneNode(true);
    row.querySelector("select[name=role]").value = last && last.value === "user" ? "assistant" : "user";
    turns.append(row);
    row.querySelector("textarea").focus();
  });

  turns.addEventListener("click", (event) => {
    const remove = event.target.closest("[data-remove-turn]");
    if (remove) remove.closest("li").remove();
  });

  function requestBody() {
    const body = {};
    const model = form.elements.model.value;
    if (model) body.model = model;
    const messages = [];
    if (source() === "messages") {
      const system = form.elements.system.value;
      if (system.trim()) messages.push({ role: "system", content: system });
      for (const turn of turns.querySelectorAll("li")) {
        const content = turn.querySelector("textarea").value;
        if (content.trim()) messages.push({ role: turn.querySelector("select").value, content });
      }
      if (!model) throw new Refusal("Choose a model.");
      if (!messages.some((message) => message.role !== "system")) throw new Refusal("Write a message.");
    } else {
      const template = form.elements.prompt_template.value;
      if (!template) throw new Refusal("Choose a prompt template.");
      const prompt = { id: template };
      const version = form.querySelector("[name=prompt_version]");
      if (version) prompt.version = version.value;
      const variables = {};
      for (const field of form.querySelectorAll("[data-variable]")) {
        if (field.value !== "") variables[field.dataset.variable] = field.value;
      }
      prompt.variables = variables;
      body.prompt = prompt;
      const own = form.elements.prompt_message.value;
      if (own.trim()) messages.push({ role: "user", content: own });
    }
    body.messages = messages;
    const temperature = form.elements.temperature.value;
    if (temperature !== "") body.temperature = Number(temperature);
    const maxTokens = form.elements.max_tokens.value;
    if (maxTokens !== "") body.max_tokens = Number(maxTokens);
    body.stream = form.elements.stream.checked;
    return body;
  }

  // --- The key --------------------------------------------------------------------------------

  function storedKey(team) {
    try {
      const stored = JSON.parse(sessionStorage.getItem(storageName) || "null");
      if (stored && stored.team === team && Date.parse(stored.expiresAt) - Date.now() > KEY_MARGIN_MS) return stored;
    } catch (error) {
      // storage refused or unreadable: a new key is made
    }
    return null;
  }

  function forgetKey() {
    try {
      sessionStorage.removeItem(storageName);
    } catch (error) {
      // nothing stored
    }
  }

  function describeKey(key) {
    const ends = new Date(key.expiresAt).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    keyState.textContent = `Sending as “${key.name}”, until ${ends}.`;
  }

  async function playgroundKey() {
    const team = form.elements.team_id ? form.elements.team_id.value : "";
    const stored = storedKey(team);
    if (stored) {
      describeKey(stored);
      return stored.secret;
    }
    const response = await fetch(form.dataset.keyUrl, {
      method: "POST",
      credentials: "same-origin",
      headers: { "X-CSRFToken": form.elements.csrfmiddlewaretoken.value },
      body: new URLSearchParams(team ? { team_id: team } : {}),
    });
    let made = null;
    try {
      made = await response.json();
    } catch (error) {
      // a page, not JSON: the console refused (signed out, or the role)
    }
    if (!response.ok || !made || !made.key) {
      const reason = made && made.error ? made.error.message : `the console answered HTTP ${response.status}`;
      throw new Refusal(`No key could be made for you: ${reason}`);
    }
    const key = { secret: made.key, name: made.name, expiresAt: made.expires_at, team };
    try {
      sessionStorage.setItem(storageName, JSON.stringify(key));
    } catch (error) {
      // not kept: the next send makes another
    }
    describeKey(key);
    return key.secret;
  }

  async function secret() {
    if (form.elements.credential.value === "own") {
      const own = form.elements.api_key.value.trim();
      if (!own) throw new Refusal("Paste an API key, or choose the key made for you.");
      keyState.textContent = "";
      return own;
    }
    return playgroundKey();
  }

  // --- The answer -----------------------------------------------------------------------------

  function reset() {
    result.hidden = false;
    errorBox.hidden = true;
    errorBox.textContent = "";
    answer.textContent = "";
    answer.classList.remove("streaming");
    summary.replaceChildren();
    headerRows.replaceChildren();
    entry.replaceChildren();
    statusLine.textContent = "Sending…";
  }

  function showError(text) {
    errorBox.hidden = false;
    errorBox.textContent = text;
  }

  function fact(term, value, exact) {
    const dt = document.createElement("dt");
    dt.textContent = term;
    const dd = document.createElement("dd");
    dd.textContent = value;
    if (exact) dd.title = exact; // the amount to the last digit the gateway sent
    summary.append(dt, dd);
  }

  function showHeaders(headers) {
    const shown = [];
    headers.forEach((value, name) => {
      if (name.startsWith(names.prefix) || name === "cache-status" || name === "retry-after" || name.startsWith("x-ratelimit-")) {
        shown.push([name, value]);
      }
    });
    shown.sort(([a], [b]) => a.localeCompare(b));
    for (const [name, value] of shown) {
      const row = document.createElement("tr");
      const th = document.createElement("th");
      th.scope = "row";
      th.textContent = name;
      const td = document.createElement("td");
      td.textContent = value;
      row.append(th, td);
      headerRows.append(row);
    }
  }

  function showSummary(headers, extra) {
    const provider = headers.get(names.provider);
    if (provider) fact("Served by", `${provider} · ${headers.get(names.model)}`);
    const cost = extra.cost ?? headers.get(names.cost);
    if (cost !== null && cost !== undefined) fact("Cost", format.dollars(cost), `$${cost}`);
    fact("Cache", headers.get(names.cache) || "—");
    const action = headers.get(names.policyAction);
    fact("Policy", action ? `${action} · ${headers.get(names.policyReason) || ""}` : "none acted");
    const ttft = headers.get(names.ttft);
    if (ttft) fact("First token after", format.duration(ttft));
    const latency = headers.get(names.latency);
    if (latency) fact("Gateway latency", format.duration(latency));
    if (extra.usage) fact("Tokens", `${extra.usage.prompt_tokens} in, ${extra.usage.completion_tokens} out`);
  }

  function followEntry(headers) {
    const requestId = headers.get(names.requestId);
    if (!requestId || !window.htmx) return;
    const url = form.dataset.entryUrl.replace("00000000-0000-0000-0000-000000000000", encodeURIComponent(requestId));
    window.htmx.ajax("GET", url, { target: entry, swap: "innerHTML" });
  }

  async function refusal(response) {
    let text = await response.text();
    let code = response.headers.get(names.errorCode);
    try {
      const error = JSON.parse(text).error;
      text = error.message;
      code = error.code || code;
    } catch (error) {
      // not the proxy's JSON shape (a proxy in front of the gateway, say): shown as it came
    }
    return `HTTP ${response.status}${code ? " · " + code : ""}: ${text}`;
  }

  function choiceText(choice) {
    const message = choice.message || {};
    if (typeof message.content === "string" && message.content) return message.content;
    return JSON.stringify(message, null, 2); // a tool call or a refusal: shown as it came
  }

  // Server-sent events: content deltas appended as they come; the gateway's closing comment carries
  // the cost; an error event (a stream cut short) is shown as an error.
  async function readStream(response, extra) {
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    answer.classList.add("streaming");
    const costPrefix = names.cost + "=";
    const line = (text) => {
      if (text.startsWith(":")) {
        const comment = text.slice(1).trim();
        if (comment.startsWith(costPrefix)) extra.cost = comment.slice(costPrefix.length);
        return;
      }
      if (!text.startsWith("data:")) return;
      const data = text.slice(5).trim();
      if (data === "[DONE]") return;
      let event;
      try {
        event = JSON.parse(data);
      } catch (error) {
        return;
      }
      if (event.error) {
        showError(`The stream ended with an error${event.error.code ? " · " + event.error.code : ""}: ${event.error.message}`);
        return;
      }
      if (event.usage) extra.usage = event.usage;
      for (const choice of event.choices || []) {
        const delta = choice.delta || {};
        if (typeof delta.content === "string") answer.textContent += delta.content;
      }
    };
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n")) >= 0) {
          line(buffer.slice(0, end).replace(/\r$/, ""));
          buffer = buffer.slice(end + 1);
        }
      }
      if (buffer) line(buffer);
    } finally {
      answer.classList.remove("streaming");
    }
  }

  async function post(body, key) {
    inFlight = new AbortController();
    stopButton.hidden = false;
    return fetch(form.dataset.proxyUrl, {
      method: "POST",
      credentials: "omit", // the key authenticates; the console's cookies have no business at /v1/
      headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
      body: JSON.stringify(body),
      signal: inFlight.signal,
    });
  }

  async function send() {
    const body = requestBody();
    const started = performance.now();
    let response = await post(body, await secret());
    if (response.status === 401 && form.elements.credential.value !== "own") {
      // The key kept for this tab ended (expired, or revoked): once more with a new one.
      forgetKey();
      response = await post(body, await secret());
    }
    statusLine.textContent = `HTTP ${response.status} ${response.statusText}`.trim();
    showHeaders(response.headers);
    followEntry(response.headers);
    const extra = {};
    if (!response.ok) {
      if (response.status === 401 && form.elements.credential.value !== "own") forgetKey();
      showError(await refusal(response));
    } else if ((response.headers.get("content-type") || "").startsWith("text/event-stream")) {
      await readStream(response, extra);
    } else {
      const completion = await response.json();
      answer.textContent = (completion.choices || []).map(choiceText).join("\n\n");
      extra.usage = completion.usage;
    }
    const seconds = ((performance.now() - started) / 1000).toFixed(2);
    statusLine.textContent += ` · ${body.stream ? "streamed" : "answered"} in ${seconds} s`;
    showSummary(response.headers, extra);
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (inFlight) return;
    reset();
    sendButton.disabled = true;
    try {
      await send();
    } catch (error) {
      if (error.name === "AbortError") {
        statusLine.textContent += " · stopped";
      } else {
        if (statusLine.textContent === "Sending…") statusLine.textContent = "Not sent";
        showError(error instanceof Refusal ? error.message : `The request failed: ${error.message}`);
      }
    } finally {
      inFlight = null;
      stopButton.hidden = true;
      sendButton.disabled = false;
    }
  });

  stopButton.addEventListener("click", () => {
    if (inFlight) inFlight.abort();
  });
})();
