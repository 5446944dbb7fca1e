// Experiments side by side: the chosen trials' metrics on one chart per metric (a line
// per trial and group: training as a line, validation with its points, as the trial page
// draws them), then their hyperparameters and configs as one table, a column per trial,
// the rows that differ marked ("Only differences" hides the others).
//
// #/compare?experiments=1,2&trials=7,9&best=5 : every trial of experiments 1 and 2 (or
// each one's best 5), and trials 7 and 9 of any experiment. The master answers at most
// 50 trials, each series downsampled to the points a chart can show
// (det_sdk/master/compare.py).

import { lineChart, PALETTE } from "../charts.js";
import { api, esc, markShown, num, stateBadge } from "../util.js";

const X_MODES = { batches: "Batches", epochs: "Epochs", time: "Time (s)" };
const MAX_IDS = 50; // the master's limit on each list (and on trials in all)
const REFETCH_MS = 5000; // a comparison's answer is larger than a page's: every 5 s

/** Trials ticked on experiments' pages: kept while the UI is open, across experiments,
 * until compared. */
export const pickedTrials = new Set();

/** The hash of a comparison: `#/compare?experiments=1,2&trials=7`. */
export function compareHash({ experiments = [], trials = [], best = null } = {}) {
  const q = [];
  if (experiments.length) q.push(`experiments=${experiments.join(",")}`);
  if (trials.length) q.push(`trials=${trials.join(",")}`);
  if (best) q.push(`best=${best}`);
  return `#/compare?${q.join("&")}`;
}

/** "1, 2 3" -> [1, 2, 3]; null when something is not a whole number. */
function parseIds(text) {
  const parts = String(text || "").split(/[\s,]+/).filter(Boolean);
  if (!parts.every((p) => /^\d{1,15}$/.test(p))) return null;
  return [...new Set(parts.map(Number))];
}

function cell(v) {
  if (v === null || v === undefined) return "";
  if (typeof v === "object") return esc(JSON.stringify(v));
  return num(v);
}

export async function render(main, [query]) {
  const params = new URLSearchParams(query || "");
  const chosen = {
    experiments: parseIds(params.get("experiments")) || [],
    trials: parseIds(params.get("trials")) || [],
    best: parseIds(params.get("best"))?.[0] || null,
  };
  let data = null;
  let xMode = "batches";
  let charts = {};
  let lastText = "";
  let fetched = 0;

  main.innerHTML = `
    <p class="crumbs"><a href="#/experiments">Experiments</a> › compare</p>
    <h1>Compare</h1>
    <form id="cmp-pick" class="toolbar">
      <label>Experiments <input id="cmp-experiments" placeholder="1, 2"
        value="${esc(chosen.experiments.join(", "))}"></label>
      <label>Trials <input id="cmp-trials" placeholder="trial ids of any experiments"
        value="${esc(chosen.trials.join(", "))}"></label>
      <label title="only each experiment's best trials by its searcher metric">best
        <input id="cmp-best" type="number" min="1" max="${MAX_IDS}"
        value="${chosen.best || ""}"></label>
      <button type="submit" id="cmp-go">Compare</button>
      <span id="cmp-note" class="muted"></span>
    </form>
    <p id="cmp-error" class="error" hidden></p>
    <div class="toolbar">
      <span>x axis:</span>
      ${Object.entries(X_MODES).map(([k, l]) => `<label><input type="radio" name="cmp-xmode"
        value="${k}" ${k === xMode ? "checked" : ""}> ${l}</label>`).join("")}
    </div>
    <div id="cmp-charts" class="charts"></div>
    <h2>Hyperparameters and configs</h2>
    <div class="toolbar">
      <label><input type="checkbox" id="cmp-only-diff"> Only differences</label>
      <span id="cmp-diff-count" class="muted"></span>
    </div>
    <div class="scroll-x"><table id="compare-table" class="grid compare"></table></div>`;

  const error = main.querySelector("#cmp-error");
  function showError(message) {
    error.hidden = !message;
    error.textContent = message || "";
  }

  function xOf(g) {
    if (xMode === "epochs") return g.epoch;
    if (xMode === "time") return g.time;
    return g.steps;
  }

  /** One chart per metric ("loss": training loss and validation val_loss), a colour per
   * trial, one series per trial and group. */
  function chartSpecs() {
    const specs = {};
    data.trials.forEach((t, i) => {
      const color = PALETTE[i % PALETTE.length];
      for (const [group, g] of Object.entries(t.series)) {
        const x = xOf(g);
        for (const [name, ys] of Object.entries(g.metrics)) {
          const base = name.replace(/^val_/, "");
          const spec = specs[base] ||= { title: base, xLabel: X_MODES[xMode], yLabel: base,
            series: [] };
          spec.series.push({ label: `trial ${t.id} ${group}: ${name}`, x, y: ys, color,
            points: group !== "training" ? true : undefined, trial: t.id });
        }
      }
    });
    return specs;
  }

  function drawCharts(rebuild) {
    const box = main.querySelector("#cmp-charts");
    const specs = chartSpecs();
    const names = Object.keys(specs).sort();
    if (rebuild || names.join() !== Object.keys(charts).join()) {
      for (const c of Object.values(charts)) c.destroy();
      charts = {};
      box.innerHTML = names.map((k) => `<div class="chart" id="cmp-chart-${esc(k)}"></div>`)
        .join("") || '<p class="muted">No metrics reported yet.</p>';
      for (const k of names) {
        charts[k] = lineChart(box.querySelector(`[id="cmp-chart-${CSS.escape(k)}"]`), specs[k]);
      }
    } else {
      for (const k of names) charts[k].update(specs[k]);
    }
    // for tests and scripts: which trials each chart draws
    box.dataset.trials = data.trials.map((t) => t.id).join(",");
    markShown("compare-charts");
  }

  function drawTable() {
    const trials = data.trials;
    const exps = Object.fromEntries(data.experiments.map((e) => [e.id, e]));
    const n = trials.length;
    const head = `<thead><tr><th>Trial</th>${trials.map((t, i) => `
      <th data-trial="${t.id}"><span class="swatch swatch-${i % PALETTE.length}"></span>
        <a href="#/trials/${t.id}">trial ${t.id}</a>
        <button type="button" class="link remove" data-remove="${t.id}"
          title="leave trial ${t.id} out">×</button></th>`).join("")}</tr></thead>`;
    const facts = [
      ["Experiment", (t) => `<a href="#/experiments/${t.experiment_id}">${
        esc(exps[t.experiment_id]?.name || "experiment")} #${t.experiment_id}</a>`],
      ["State", (t) => stateBadge(t.state)],
      ["Batches", (t) => String(t.steps_completed)],
      ["Best metric", (t) => `${num(t.best_metric)} <span class="muted">${
        esc(t.searcher_metric)}</span>`],
    ];
    const rows = (kind, list) => list.map((r) => `
      <tr data-key="${kind}.${esc(r.name)}" class="${r.differs ? "differs" : "same"}">
        <th>${esc(r.name)}${r.differs ? ' <span class="diff-mark" title="differs">≠</span>'
          : ""}</th>
        ${r.values.map((v) => `<td>${cell(v)}</td>`).join("")}</tr>`).join("");
    main.querySelector("#compare-table").innerHTML = `${head}
      <tbody id="cmp-facts">${facts.map(([label, f]) =>
        `<tr><th>${label}</th>${trials.map((t) => `<td>${f(t)}</td>`).join("")}</tr>`).join("")}
      </tbody>
      <tbody id="cmp-hparams"><tr class="section"><th colspan="${n + 1}">Hyperparameters</th>
        </tr>${rows("hp", data.hparams)}</tbody>
      <tbody id="cmp-config"><tr class="section"><th colspan="${n + 1}">Config</th></tr>
        ${rows("cfg", data.config)}</tbody>`;
    const differing = data.hparams.filter((r) => r.differs).length +
      data.config.filter((r) => r.differs).length;
    main.querySelector("#cmp-diff-count").textContent =
      `${differing} of ${data.hparams.length + data.config.length} rows differ`;
    applyOnlyDiff();
  }

  function applyOnlyDiff() {
    const only = main.querySelector("#cmp-only-diff").checked;
    main.querySelectorAll("#compare-table tr.same").forEach((tr) => { tr.hidden = only; });
  }

  async function load() {
    if (!chosen.experiments.length && !chosen.trials.length) {
      main.querySelector("#cmp-note").textContent =
        "Choose experiments (tick them in the list) or trials.";
      return;
    }
    const q = new URLSearchParams();
    for (const e of chosen.experiments) q.append("experiment_ids", e);
    for (const t of chosen.trials) q.append("trial_ids", t);
    if (chosen.best) q.set("best", chosen.best);
    q.set("max_points", 1000);
    let next;
    fetched = Date.now(); // a refused comparison is not asked again every second either
    try {
      next = await api(`/ui/api/compare?${q}`);
    } catch (err) {
      showError(err.message);
      return;
    }
    showError("");
    const text = JSON.stringify(next);
    if (text === lastText) return; // nothing new: no redraw under the pointer
    lastText = text;
    data = next;
    const exps = new Set(data.trials.map((t) => t.experiment_id));
    main.querySelector("#cmp-note").textContent =
      `${data.trials.length} trials of ${exps.size} experiment${exps.size === 1 ? "" : "s"}`;
    drawCharts(false);
    drawTable();
  }

  main.querySelector("#cmp-pick").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const experiments = parseIds(main.querySelector("#cmp-experiments").value);
    const trials = parseIds(main.querySelector("#cmp-trials").value);
    const bestText = main.querySelector("#cmp-best").value.trim();
    const best = bestText ? parseIds(bestText) : [];
    if (!experiments || !trials || !best || best.length > 1) {
      showError("experiments, trials and best take whole numbers (ids: 1, 2, 3)");
      return;
    }
    if (experiments.length > MAX_IDS || trials.length > MAX_IDS) {
      showError(`at most ${MAX_IDS} experiments and ${MAX_IDS} trials`);
      return;
    }
    location.hash = compareHash({ experiments, trials, best: best[0] || null });
  });
  main.querySelector("#cmp-only-diff").addEventListener("change", applyOnlyDiff);
  main.querySelectorAll('input[name="cmp-xmode"]').forEach((r) => r.addEventListener("change",
    (ev) => { xMode = ev.target.value; if (data) drawCharts(true); }));
  main.querySelector("#compare-table").addEventListener("click", (ev) => {
    const b = ev.target.closest("button[data-remove]");
    if (!b || !data) return;
    // what is left is a list of trials (an experiment's other trials stay chosen)
    const trials = data.trials.map((t) => t.id).filter((id) => id !== +b.dataset.remove);
    location.hash = compareHash({ trials });
  });

  await load();
  return {
    async refresh() {
      if (Date.now() - fetched >= REFETCH_MS) await load();
    },
    destroy() { for (const c of Object.values(charts)) c.destroy(); },
  };
}
