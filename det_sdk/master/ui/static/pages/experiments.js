// The experiments list: state, progress, searcher, best metric, trials, age, owner;
// filter by text, state, workspace and project, sort by any column, pause / activate / kill.
// The newest PAGE experiments load first ("Show more" adds older ones): what the page
// costs does not grow with the master's history. Filter and sort apply to those loaded.
// Ticking experiments and "Compare" opens them side by side (pages/compare.js).

import { actionButtons, age, bindSort, esc, experimentAction, headerCell, isoTime,
  markShown, newest, num, progressBar, sortRows, stateBadge } from "../util.js";
import { compareHash } from "./compare.js";

const COLUMNS = [
  ["id", "ID"], ["name", "Name"], ["state", "State"], ["progress", "Progress"],
  ["searcher", "Searcher"], ["best", "Best metric"], ["trials", "Trials"], ["created", "Age"],
  ["owner", "Owner"], ["workspace", "Workspace"], ["project", "Project"],
];

const FIRST_ROWS = 60;
const PAGE = 100;

// the experiments ticked for comparison, kept while the list redraws and across visits
const picked = new Set();

function rowHtml(r) {
  return `<tr data-id="${r.id}">
      <td><a href="#/experiments/${r.id}">${r.id}</a></td>
      <td><a href="#/experiments/${r.id}">${esc(r.name)}</a></td>
      <td>${stateBadge(r.state)}</td>
      <td>${progressBar(r.progress)}</td>
      <td>${esc(r.searcher)}</td>
      <td title="${esc(r.metric)} (${r.smaller_is_better ? "smaller" : "larger"} is better)">
        ${num(r.best)} <span class="muted">${esc(r.metric)}</span></td>
      <td>${r.running ? `${r.running} running / ` : ""}${r.trials}</td>
      <td title="${isoTime(r.created)}">${age(r.created)}</td>
      <td class="owner">${esc(r.owner)}</td>
      <td class="workspace">${esc(r.workspace)}</td>
      <td class="project">${esc(r.project)}</td>
      <td>${actionButtons(r)}</td>
      <td><input type="checkbox" class="cmp-pick" data-id="${r.id}"
        title="compare experiment ${r.id}" ${picked.has(r.id) ? "checked" : ""}></td></tr>`;
}

export async function render(main) {
  const sort = { key: "id", dir: "desc" };
  const filter = { text: "", state: "", workspace: "", project: "" };
  let rows = [];
  let total = 0;
  let more = false;
  let wanted = PAGE; // how many of the newest to show: "Show more" adds a page
  let lastText = "";
  let drawn = 0; // bumped by each draw: a stale second half is not appended

  main.innerHTML = `
    <h1>Experiments</h1>
    <div class="toolbar">
      <input id="exp-filter" type="search" placeholder="Filter by id, name, searcher…">
      <select id="exp-state">
        <option value="">any state</option>
        ${["ACTIVE", "STOPPING_PAUSED", "PAUSED", "STOPPING_CANCELED", "CANCELED", "COMPLETED",
          "ERROR"]
          .map((s) => `<option>${s}</option>`).join("")}
      </select>
      <select id="exp-workspace" title="workspace"><option value="">any workspace</option></select>
      <select id="exp-project" title="project"><option value="">any project</option></select>
      <span id="exp-count" class="muted"></span>
      <button id="exp-compare" disabled title="tick experiments to compare">Compare</button>
    </div>
    <table id="experiments" class="grid"><thead></thead><tbody></tbody></table>
    <p><button id="exp-more" hidden>Show ${PAGE} more</button></p>`;
  const table = main.querySelector("#experiments");
  const moreButton = main.querySelector("#exp-more");

  function draw() {
    const text = filter.text.toLowerCase();
    const shown = sortRows(rows.filter((r) =>
      (!filter.state || r.state === filter.state) &&
      (!filter.workspace || r.workspace === filter.workspace) &&
      (!filter.project || `${r.workspace}/${r.project}` === filter.project) &&
      (!text || `${r.id} ${r.name ?? ""} ${r.owner ?? ""} ${r.searcher ?? ""} ${r.metric ?? ""} ${r.state}`
        .toLowerCase().includes(text))), sort.key, sort.dir, (r, k) => r[k]);
    table.tHead.innerHTML = `<tr>${COLUMNS.map(([k, l]) => headerCell(k, l, sort)).join("")}
      <th>Actions</th><th title="tick to compare">Compare</th></tr>`;
    // The first screen at once, the rest in the next task: laying out 1,000 rows takes
    // a few hundred ms here, and nobody sees row 500 before scrolling.
    const body = table.tBodies[0];
    const gen = ++drawn;
    body.innerHTML = shown.slice(0, FIRST_ROWS).map(rowHtml).join("");
    markShown("list-first-screen");
    if (shown.length > FIRST_ROWS) {
      requestAnimationFrame(() => setTimeout(() => { // after the first screen is painted
        if (gen === drawn) {
          body.insertAdjacentHTML("beforeend", shown.slice(FIRST_ROWS).map(rowHtml).join(""));
          markShown("list-all-rows");
        }
      }, 0));
    } else {
      markShown("list-all-rows");
    }
    main.querySelector("#exp-count").textContent = rows.length < total
      ? `${shown.length} of the newest ${rows.length} of ${total} experiments`
      : `${shown.length} of ${total} experiments`;
    moreButton.hidden = !more;
  }

  // the workspace and project choices: those of the loaded experiments (kept when chosen)
  function fillChoices() {
    const fill = (id, values, label, chosen) => {
      const sel = main.querySelector(id);
      const all = [...new Set([...values, ...(chosen ? [chosen] : [])])].sort();
      sel.innerHTML = `<option value="">any ${label}</option>` + all.map((v) =>
        `<option value="${esc(v)}" ${v === chosen ? "selected" : ""}>${esc(v)}</option>`)
        .join("");
    };
    fill("#exp-workspace", rows.map((r) => r.workspace), "workspace", filter.workspace);
    fill("#exp-project", rows.filter((r) => !filter.workspace || r.workspace === filter.workspace)
      .map((r) => `${r.workspace}/${r.project}`), "project", filter.project);
  }

  async function refresh() {
    const resp = await newest("/ui/api/experiments", "experiments", wanted);
    const text = JSON.stringify(resp);
    // Redraw only on change: a redraw under the pointer can swallow a click.
    if (text !== lastText) {
      lastText = text;
      ({ rows, total, more } = resp);
      fillChoices();
      draw();
    }
  }

  main.querySelector("#exp-filter").addEventListener("input", (ev) => {
    filter.text = ev.target.value;
    draw();
  });
  main.querySelector("#exp-state").addEventListener("change", (ev) => {
    filter.state = ev.target.value;
    draw();
  });
  main.querySelector("#exp-workspace").addEventListener("change", (ev) => {
    filter.workspace = ev.target.value;
    filter.project = "";
    fillChoices();
    draw();
  });
  main.querySelector("#exp-project").addEventListener("change", (ev) => {
    filter.project = ev.target.value;
    draw();
  });
  const compareButton = main.querySelector("#exp-compare");
  function pickedChanged() {
    compareButton.disabled = picked.size === 0;
    compareButton.textContent = picked.size ? `Compare ${picked.size}` : "Compare";
  }
  table.addEventListener("change", (ev) => {
    const box = ev.target.closest("input.cmp-pick");
    if (!box) return;
    if (box.checked) picked.add(+box.dataset.id); else picked.delete(+box.dataset.id);
    pickedChanged();
  });
  compareButton.addEventListener("click", () => {
    location.hash = compareHash({ experiments: [...picked].sort((a, b) => a - b) });
  });
  pickedChanged();
  bindSort(table, sort, draw);
  moreButton.addEventListener("click", () => {
    wanted += PAGE;
    refresh();
  });
  table.addEventListener("click", (ev) => {
    const b = ev.target.closest("button[data-act]");
    if (b) experimentAction(+b.dataset.id, b.dataset.act, refresh);
  });
  await refresh();
  return { refresh };
}
