// An experiment: its trials (sortable by any hyperparameter or metric), the searcher
// metric of its best trials over training length (ASHA rungs as dashed lines), and the
// metric against each hyperparameter (scatters and parallel coordinates).
// Trials ticked here (and on other experiments' pages) open side by side: pages/compare.js.

import { lineChart, PALETTE, parallel, scatter } from "../charts.js";
import { actionButtons, age, api, bindSort, esc, experimentAction, headerCell, isoTime, num,
  progressBar, sortRows, stateBadge } from "../util.js";
import { compareHash, pickedTrials } from "./compare.js";

export async function render(main, [id]) {
  const sort = { key: "id", dir: "asc" };
  let info = null;
  let curves = null;
  let curveChart = null;
  let lastInfo = "";
  let lastCurves = "";

  main.innerHTML = `
    <p class="crumbs"><a href="#/experiments">Experiments</a> › experiment ${esc(id)}</p>
    <section id="exp-head"></section>
    <h2>Trials</h2>
    <div class="toolbar"><button id="trials-compare" disabled>Compare ticked trials</button>
      <span class="muted">trials stay ticked while you open other experiments</span></div>
    <table id="trials" class="grid"><thead></thead><tbody></tbody></table>
    <h2 id="curves-title">Searcher metric</h2>
    <div id="curves" class="chart wide"></div>
    <h2>Hyperparameters</h2>
    <p class="muted">Each trial's best searcher metric against each hyperparameter, then all of
      them at once (darker lines: better trials).</p>
    <div id="scatters" class="scatters"></div>
    <div id="parcoords" class="chart wide"></div>`;
  const table = main.querySelector("#trials");

  function metricCols() {
    const names = new Set();
    for (const t of info.trials) for (const k of Object.keys(t.validation)) names.add(k);
    return [...names].sort();
  }

  function get(t, key) {
    if (key.startsWith("hp.")) return t.hparams_flat[key.slice(3)];
    if (key.startsWith("val.")) return t.validation[key.slice(4)];
    return t[key];
  }

  function drawHead() {
    const s = info.searcher;
    const exp = info;
    // the master accepts http(s) links only; checked here too, so no other scheme is a link
    const tbs = info.tensorboards.filter((tb) => /^https?:\/\//i.test(tb.url)).map((tb) =>
      `<a href="${esc(tb.url)}" target="_blank" rel="noopener">TensorBoard</a>`).join(" ");
    main.querySelector("#exp-head").innerHTML = `
      <h1>${esc(exp.name || `Experiment ${exp.id}`)} <span class="muted">#${exp.id}</span></h1>
      <div class="facts">
        <span id="exp-state">${stateBadge(exp.state)}</span>
        <span>${progressBar(exp.progress)}</span>
        <span>searcher <b>${esc(s.name)}</b> on <b>${esc(s.metric)}</b>
          (${s.smaller_is_better ? "smaller" : "larger"} is better)</span>
        <span id="exp-trials">${info.num_trials} trials${info.trials.length < info.num_trials
          ? ` (the first ${info.trials.length} shown)` : ""}</span>
        <span title="${isoTime(exp.created)}">created ${age(exp.created)} ago</span>
        <span class="actions">${actionButtons(exp)}</span>
        <span><a id="exp-compare" href="#/compare?experiments=${exp.id}">Compare its trials</a></span>
        <span class="tb">${tbs || `TensorBoard: <code>det tensorboard start ${exp.id}</code>`}</span>
      </div>`;
  }

  function drawTrials() {
    const hps = info.hparam_names;
    const vals = metricCols();
    const cols = [["id", "Trial"], ["state", "State"], ["progress", "Progress"],
      ["steps_completed", "Batches"], ["best_metric", `Best ${info.searcher.metric}`],
      ["restarts", "Restarts"], ...hps.map((h) => [`hp.${h}`, h]),
      ...vals.map((v) => [`val.${v}`, v])];
    table.tHead.innerHTML = `<tr>${cols.map(([k, l]) => headerCell(k, l, sort)).join("")}
      <th title="tick to compare">Compare</th></tr>`;
    table.tBodies[0].innerHTML = sortRows(info.trials, sort.key, sort.dir, get).map((t) => `
      <tr data-id="${t.id}">
        <td><a href="#/trials/${t.id}">${t.id}</a></td>
        <td>${stateBadge(t.state)}</td>
        <td>${progressBar(t.progress)}</td>
        <td>${t.steps_completed}</td>
        <td>${num(t.best_metric)}</td>
        <td>${t.restarts}</td>
        ${hps.map((h) => `<td class="hp" data-hp="${esc(h)}">${num(t.hparams_flat[h])}</td>`)
          .join("")}
        ${vals.map((v) => `<td>${num(t.validation[v])}</td>`).join("")}
        <td><input type="checkbox" class="cmp-pick-trial" data-id="${t.id}"
          title="compare trial ${t.id}" ${pickedTrials.has(t.id) ? "checked" : ""}></td>
      </tr>`).join("");
  }

  function drawCurves() {
    const unit = curves.unit;
    const x = (t) => (unit === "epochs" ? t.epoch : t.steps);
    const shown = curves.trials.length;
    main.querySelector("#curves-title").textContent =
      `Searcher metric (${curves.metric}) over ${unit}${curves.total_trials > shown
        ? `: best ${shown} of ${curves.total_trials} trials` : ""}`;
    const spec = {
      title: "", xLabel: unit, yLabel: curves.metric,
      vlines: info.searcher.rung_lengths,
      series: curves.trials.map((t, i) => ({
        label: `trial ${t.id}`, x: t.epoch.map((_, j) => x(t)[j]), y: t.value,
        color: PALETTE[i % PALETTE.length], points: true,
      })),
    };
    const el = main.querySelector("#curves");
    if (!spec.series.length) {
      el.innerHTML = '<p class="muted">No validation yet.</p>';
      if (curveChart) curveChart.destroy();
      curveChart = null;
      return;
    }
    if (curveChart) curveChart.update(spec);
    else {
      el.innerHTML = "";
      curveChart = lineChart(el, spec);
    }
  }

  function drawHparams() {
    const metric = (t) => t.best_metric;
    const hps = info.hparam_names.filter((h) =>
      new Set(info.trials.map((t) => JSON.stringify(t.hparams_flat[h]))).size > 1);
    const box = main.querySelector("#scatters");
    box.innerHTML = hps.map((h) => `<div class="chart small" id="scatter-${esc(h)}"></div>`).join("")
      || '<p class="muted">No hyperparameter varies between trials.</p>';
    // nested hyperparameters by dotted name: hparams_flat, hparam_log (views.py)
    const logDims = hps.filter((h) => info.hparam_log.includes(h));
    for (const h of hps) {
      scatter(box.querySelector(`[id="scatter-${CSS.escape(h)}"]`), {
        title: `${info.searcher.metric} vs ${h}`, xLabel: h, yLabel: info.searcher.metric,
        xLog: logDims.includes(h),
        points: info.trials.map((t) => ({ id: t.id, x: t.hparams_flat[h], y: metric(t) })),
      });
    }
    const pc = main.querySelector("#parcoords");
    if (!hps.length) { pc.innerHTML = ""; return; }
    parallel(pc, {
      dims: [...hps, info.searcher.metric],
      logDims,
      smallerIsBetter: info.searcher.smaller_is_better,
      rows: info.trials.map((t) => ({ id: t.id, metric: metric(t),
        values: [...hps.map((h) => t.hparams_flat[h]), metric(t)] })),
    });
  }

  async function refresh() {
    const [i, c] = await Promise.all([api(`/ui/api/experiments/${id}`),
      api(`/ui/api/experiments/${id}/curves`)]);
    const iText = JSON.stringify(i), cText = JSON.stringify(c);
    if (iText !== lastInfo) {
      lastInfo = iText;
      info = i;
      drawHead();
      drawTrials();
      drawHparams();
    }
    if (cText !== lastCurves) {
      lastCurves = cText;
      curves = c;
      drawCurves();
    }
  }

  const compareButton = main.querySelector("#trials-compare");
  function pickedChanged() {
    compareButton.disabled = pickedTrials.size === 0;
    compareButton.textContent = pickedTrials.size
      ? `Compare ${pickedTrials.size} ticked trial${pickedTrials.size === 1 ? "" : "s"}`
      : "Compare ticked trials";
  }
  table.addEventListener("change", (ev) => {
    const box = ev.target.closest("input.cmp-pick-trial");
    if (!box) return;
    if (box.checked) pickedTrials.add(+box.dataset.id); else pickedTrials.delete(+box.dataset.id);
    pickedChanged();
  });
  compareButton.addEventListener("click", () => {
    const trials = [...pickedTrials].sort((x, y) => x - y);
    pickedTrials.clear();
    location.hash = compareHash({ trials });
  });
  pickedChanged();
  bindSort(table, sort, drawTrials);
  main.addEventListener("click", (ev) => {
    const b = ev.target.closest("button[data-act]");
    if (b) experimentAction(+b.dataset.id, b.dataset.act, refresh);
  });
  await refresh();
  return { refresh, destroy() { if (curveChart) curveChart.destroy(); } };
}
