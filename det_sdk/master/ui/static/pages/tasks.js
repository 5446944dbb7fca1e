// Tasks (issue 58): the interactive tasks the master runs (det cmd run, det shell start,
// det tensorboard start; notebooks join once they exist) in one list, with Open, Logs and
// Kill. Kill is offered only where the user may (the owner or an admin: the row's
// may_kill); the master checks again. A task's log is the shared log view (log.js).

import { age, api, esc, isoTime, stateBadge } from "../util.js";
import { logView } from "./log.js";

// What Open is for each kind. A notebook's row will open its page through the master.
const KINDS = { command: "Command", shell: "Shell", tensorboard: "TensorBoard" };
KINDS.notebook = "Notebook";  // JupyterLab, opened through the master's proxy
const ENDED = "TERMINATED";

function openCell(t) {
  if (!t.open) return "";
  if (t.kind === "tensorboard" || t.kind === "notebook") {
    return `<a class="task-open" href="${esc(t.open)}" target="_blank" rel="noopener">Open</a>`;
  }
  // a shell opens in a terminal (its key is its owner's): the line to paste there
  return `<code class="mono task-open">${esc(t.open)}</code>
    <button class="link task-copy" data-copy="${esc(t.open)}">Copy</button>`;
}

function logHash(t) {
  return `#/tasks/${t.kind === "tensorboard" ? "tensorboards" : "commands"}/` +
    `${encodeURIComponent(t.id)}/logs`;
}

export async function renderList(main) {
  main.innerHTML = `<h1>Tasks</h1> <span id="task-count" class="muted"></span>
    <table id="tasks" class="grid"><thead><tr><th>ID</th><th>Kind</th><th>Description</th>
    <th>Owner</th><th>State</th><th>Slots</th><th>Started</th><th>Actions</th></tr></thead>
    <tbody></tbody></table>`;
  const body = main.querySelector("#tasks tbody");
  let last = "";

  async function refresh() {
    const page = await api("/ui/api/tasks");
    const text = JSON.stringify(page);
    if (text === last) return;
    last = text;
    main.querySelector("#task-count").textContent = page.total > page.tasks.length
      ? `the newest ${page.tasks.length} of ${page.total}` : "";
    body.innerHTML = page.tasks.map((t) => `<tr data-kind="${esc(t.kind)}"
        data-id="${esc(t.id)}" data-state="${esc(t.state)}">
      <td class="mono">${esc(t.id)}</td><td>${esc(KINDS[t.kind] || t.kind)}</td>
      <td>${esc(t.description)}</td><td>${esc(t.owner)}</td>
      <td>${stateBadge(t.state)}</td><td>${t.slots ?? ""}</td>
      <td title="${t.started ? isoTime(t.started) : ""}">${t.started ? `${age(t.started)} ago` : ""}</td>
      <td class="actions">${openCell(t)}
        <a class="task-logs" href="${logHash(t)}">Logs</a>
        ${t.may_kill && t.state !== ENDED
          ? `<button class="act act-kill" data-kill="${esc(t.kill)}">Kill</button>` : ""}
      </td></tr>`).join("")
      || '<tr><td colspan="8" class="muted">No tasks yet: det cmd run, det shell start, ' +
         "det tensorboard start</td></tr>";
  }

  body.addEventListener("click", async (ev) => {
    const copy = ev.target.closest("button[data-copy]");
    if (copy) {
      try {
        await navigator.clipboard.writeText(copy.dataset.copy);
        copy.textContent = "Copied";
      } catch {
        // no clipboard (plain http on another host): select the line to copy by hand
        const code = copy.previousElementSibling;
        getSelection().selectAllChildren(code);
      }
      return;
    }
    const kill = ev.target.closest("button[data-kill]");
    if (!kill) return;
    const row = kill.closest("tr");
    if (!confirm(`Kill ${row.dataset.kind} ${row.dataset.id}? Its processes stop.`)) return;
    kill.disabled = true;
    try {
      await api(kill.dataset.kill, { method: "POST" });
    } catch (err) {
      alert(`kill failed: ${err.message}`);
    }
    await refresh();
  });
  await refresh();
  return { refresh };
}

export async function renderLogs(main, [kind, id]) {
  const noun = kind === "tensorboards" ? "TensorBoard" : "Command";
  main.innerHTML = `<p class="crumbs"><a href="#/tasks">Tasks</a> › ${esc(noun)}
    ${esc(decodeURIComponent(id))}</p><h1>${esc(noun)} ${esc(decodeURIComponent(id))}</h1><div id="log-box"></div>`;
  const log = logView(main.querySelector("#log-box"), `/ui/api/${kind}/${id}/logs`);
  await log.refresh();
  return { refresh: log.refresh };
}
