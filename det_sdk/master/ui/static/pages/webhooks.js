// Webhooks (issue 60): the master's webhooks, admin only as their API is. The list with
// Test and Delete, a form that creates one (its signing key shown once, in the answer,
// never again), and the newest deliveries' outcomes (QUEUED, SENDING, DELIVERED, FAILED).
// The master checks every call; a user who is not an admin gets its 403 as the page.

import { age, api, esc, isoTime } from "../util.js";

const STATES = ["COMPLETED", "ERROR", "CANCELED", "PAUSED"];
const DELIVERY_CLASS = { DELIVERED: "COMPLETED", FAILED: "ERROR", SENDING: "RUNNING",
                         QUEUED: "PAUSED" };

function triggerText(t) {
  const type = t.trigger_type.replace(/^TRIGGER_TYPE_/, "");
  if (type === "EXPERIMENT_STATE_CHANGE") return `state ${t.condition.state}`;
  if (type === "TASK_LOG") return `log /${t.condition.regex}/`;
  return type.toLowerCase();
}

const FORM = `<form id="webhook-form" class="toolbar">
  <input id="wh-name" required maxlength="128" placeholder="name">
  <input id="wh-url" required maxlength="2048" size="40" placeholder="https://…">
  <select id="wh-type"><option value="DEFAULT">Default (signed JSON)</option>
    <option value="SLACK">Slack</option></select>
  ${STATES.map((s) => `<label><input type="checkbox" class="wh-state" value="${s}">
    ${s.toLowerCase()}</label>`).join("")}
  <label><input type="checkbox" id="wh-custom"> custom alerts</label>
  <input id="wh-regex" maxlength="1000" placeholder="log regex (optional)">
  <button type="submit" class="act">Create</button>
</form>
<p id="webhook-error" class="error" hidden></p>
<div id="webhook-secret" hidden><p><b>Signing key of <span id="wh-secret-name"></span></b>
  (shown this once: receivers check each delivery's X-Determined-AI-Signature with it)</p>
  <pre class="mono" id="wh-secret"></pre></div>`;

export async function render(main) {
  main.innerHTML = `<h1>Webhooks</h1>${FORM}
    <table id="webhooks" class="grid"><thead><tr><th>ID</th><th>Name</th><th>URL</th>
    <th>Type</th><th>Mode</th><th>Triggers</th><th>Actions</th></tr></thead>
    <tbody></tbody></table>
    <h2>Deliveries</h2>
    <table id="webhook-deliveries" class="grid"><thead><tr><th>ID</th><th>Webhook</th>
    <th>Event</th><th>Experiment</th><th>State</th><th>Attempts</th><th>Status</th>
    <th>Error</th><th>Created</th></tr></thead><tbody></tbody></table>`;
  const hooksBody = main.querySelector("#webhooks tbody");
  const deliveriesBody = main.querySelector("#webhook-deliveries tbody");
  const error = main.querySelector("#webhook-error");
  let last = "";
  const results = {}; // webhook id -> its last test's outcome (kept across re-renders)

  function showError(message) {
    error.textContent = message;
    error.hidden = !message;
  }

  async function refresh() {
    const data = await api("/ui/api/webhooks");
    const text = JSON.stringify(data);
    if (text === last) return;
    last = text;
    const names = Object.fromEntries(data.webhooks.map((h) => [h.id, h.name]));
    hooksBody.innerHTML = data.webhooks.map((h) => `<tr data-id="${h.id}"
        data-name="${esc(h.name)}">
      <td>${h.id}</td><td>${esc(h.name)}</td><td class="mono">${esc(h.url)}</td>
      <td>${esc(h.webhook_type.replace(/^WEBHOOK_TYPE_/, ""))}</td>
      <td>${esc(h.mode.replace(/^WEBHOOK_MODE_/, ""))}</td>
      <td>${h.triggers.map((t) => esc(triggerText(t))).join(", ")}</td>
      <td class="actions"><button class="act wh-test" data-test="${h.id}">Test</button>
        <button class="act act-kill wh-delete" data-delete="${h.id}">Delete</button>
        <span class="wh-result muted">${esc(results[h.id] ?? "")}</span></td></tr>`).join("")
      || '<tr><td colspan="7" class="muted">No webhooks yet</td></tr>';
    deliveriesBody.innerHTML = data.deliveries.map((d) => `<tr data-id="${d.id}"
        data-state="${esc(d.state)}">
      <td>${d.id}</td><td>${esc(names[d.webhook_id] ?? d.webhook_id)}</td>
      <td>${esc(d.event_type)}</td><td>${d.experiment_id ?? ""}</td>
      <td><span class="state state-${DELIVERY_CLASS[d.state] || ""}">${esc(d.state)}</span></td>
      <td>${d.attempts}</td><td>${d.status_code ?? ""}</td><td>${esc(d.error ?? "")}</td>
      <td title="${isoTime(d.created)}">${age(d.created)} ago</td></tr>`).join("")
      || '<tr><td colspan="9" class="muted">No deliveries yet</td></tr>';
  }

  main.querySelector("#webhook-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const q = (sel) => main.querySelector(sel);
    const triggers = [...main.querySelectorAll(".wh-state:checked")].map((box) =>
      ({ trigger_type: "EXPERIMENT_STATE_CHANGE", condition: { state: box.value } }));
    if (q("#wh-custom").checked) triggers.push({ trigger_type: "CUSTOM", condition: {} });
    if (q("#wh-regex").value) {
      triggers.push({ trigger_type: "TASK_LOG", condition: { regex: q("#wh-regex").value } });
    }
    try {
      const { webhook } = await api("/ui/api/webhooks", { method: "POST", body: {
        name: q("#wh-name").value, url: q("#wh-url").value,
        webhook_type: q("#wh-type").value, triggers } });
      showError("");
      q("#wh-secret-name").textContent = webhook.name;
      q("#wh-secret").textContent = webhook.signing_key;
      q("#webhook-secret").hidden = false;
      ev.target.reset();
    } catch (err) {
      showError(err.message);
    }
    await refresh();
  });

  hooksBody.addEventListener("click", async (ev) => {
    const button = ev.target.closest("button[data-test], button[data-delete]");
    if (!button) return;
    const row = button.closest("tr");
    if (button.dataset.delete) {
      if (!confirm(`Delete webhook ${row.dataset.name}? Its deliveries' records go too.`)) return;
      try {
        await api(`/ui/api/webhooks/${button.dataset.delete}`, { method: "DELETE" });
        showError("");
      } catch (err) {
        showError(err.message);
      }
    } else {
      button.disabled = true;
      try {
        const { completed } = await api(`/ui/api/webhooks/${button.dataset.test}/test`,
                                        { method: "POST" });
        results[button.dataset.test] = completed ? "delivered" : "failed";
        last = ""; // re-render with the outcome
      } catch (err) {
        showError(err.message);
      } finally {
        button.disabled = false;
      }
    }
    await refresh();
  });
  await refresh();
  // the key is shown once: it leaves with the page
  return { refresh, destroy() { main.querySelector("#wh-secret").textContent = ""; } };
}
