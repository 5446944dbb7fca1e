// The model registry (det model create / register-version, client.create_model): each
// model with its versions, each version's checkpoint and trial.

import { age, api, esc } from "../util.js";

export async function render(main) {
  let last = "";
  main.innerHTML = `<h1>Models</h1>
    <table id="models" class="grid"><thead><tr><th>Name</th><th>Description</th>
    <th>Version</th><th>Checkpoint</th><th>Trial</th><th>Batches</th><th>Registered</th>
    </tr></thead><tbody></tbody></table>`;
  const body = main.querySelector("#models tbody");

  async function refresh() {
    const models = await api("/ui/api/models");
    const text = JSON.stringify(models);
    if (text === last) return;
    last = text;
    const rows = [];
    for (const m of models) {
      const versions = m.versions.length ? m.versions : [null];
      versions.forEach((v, i) => rows.push(`<tr data-model="${esc(m.name)}">
        <td>${i ? "" : esc(m.name)}</td><td>${i ? "" : esc(m.description)}</td>
        <td>${v ? v.version : '<span class="muted">none yet</span>'}</td>
        <td class="mono">${v ? `<a href="/ui/api/checkpoints/${esc(v.checkpoint_uuid)}/download">${esc(v.checkpoint_uuid)}</a>` : ""}</td>
        <td>${v && v.trial_id != null ? `<a href="#/trials/${v.trial_id}">${v.trial_id}</a>` : ""}</td>
        <td>${v && v.steps != null ? v.steps : ""}</td>
        <td>${v ? age(v.created) : ""}</td></tr>`));
    }
    body.innerHTML = rows.join("")
      || '<tr><td colspan="7" class="muted">No models yet: det model create NAME</td></tr>';
  }
  await refresh();
  return { refresh };
}
