// A trial: every training and validation metric over batches, epochs or time; its
// hyperparameters, restarts, error and Keras backend; checkpoints with a download link; its
// log.
// A script of several fits (stages: teacher, student, ...) gets a table of its stages and
// a stage picker: the charts show one stage's series at a time.
//
// Long series come downsampled to the chart's width (the server keeps each bucket's
// extremes); zooming in asks for that window at full detail; "All points" asks for
// everything.

import { lineChart, metricSpecs } from "../charts.js";
import { api, esc, markShown, num, progressBar, stateBadge } from "../util.js";
import { logView } from "./log.js";
import { profilerView } from "./profiler.js";

const X_MODES = { batches: "Batches", epochs: "Epochs", time: "Time (s)" };

export async function render(main, [id]) {
  let info = null;
  let data = null;
  let xMode = "batches";
  let full = false;
  let zoom = null; // [min, max] in batches while zoomed in
  let charts = {};
  let lastGroups = "";
  let lastInfo = "";
  let stage = null; // the stage whose series the charts show (null: the default, "fit")

  main.innerHTML = `
    <p class="crumbs"><a href="#/experiments">Experiments</a> ›
      <a id="exp-link" href="#/experiments">experiment</a> › trial ${esc(id)}</p>
    <section id="trial-head"></section>
    <section id="stages"></section>
    <div class="toolbar">
      <label id="stage-pick" hidden>stage: <select id="stage"></select></label>
      <span>x axis:</span>
      ${Object.entries(X_MODES).map(([k, l]) => `<label><input type="radio" name="xmode"
        value="${k}" ${k === xMode ? "checked" : ""}> ${l}</label>`).join("")}
      <label title="Charts get each series downsampled to their width (extremes kept)">
        <input type="checkbox" id="full"> All points</label>
      <button id="unzoom" hidden>Show all batches</button>
      <span id="points" class="muted"></span>
    </div>
    <div id="charts" class="charts"></div>
    <section id="profiler-box"></section>
    <div class="two">
      <section><h2>Hyperparameters</h2><table id="hparams" class="grid kv"></table></section>
      <section><h2>Checkpoints</h2><table id="checkpoints" class="grid"></table></section>
    </div>
    <section id="errors"></section>
    <h2>Log</h2>
    <div id="log-box"></div>`;

  const log = logView(main.querySelector("#log-box"), `/ui/api/trials/${id}/logs`,
    { recordsUrl: `/ui/api/trials/${id}/log-records` });
  const profiler = profilerView(main.querySelector("#profiler-box"), id);

  function drawInfo() {
    main.querySelector("#exp-link").href = `#/experiments/${info.experiment_id}`;
    main.querySelector("#exp-link").textContent =
      `${info.experiment_name || "experiment"} #${info.experiment_id}`;
    main.querySelector("#trial-head").innerHTML = `
      <h1>Trial ${info.id}</h1>
      <div class="facts">
        <span id="trial-state">${stateBadge(info.state)}</span>
        <span>${progressBar(info.progress)}</span>
        <span>${info.steps_completed} batches, ${info.epoch} epochs</span>
        <span>best ${esc(info.searcher_metric)}: <b>${num(info.best_metric)}</b></span>
        <span>restarts: <b id="restarts">${info.restarts}</b></span>
        <span>seed ${info.seed}</span>
        ${info.keras_backend ? `<span title="the Keras backend its latest checkpoint was trained on"
          >Keras on <b id="keras-backend">${esc(info.keras_backend)}</b></span>` : ""}
      </div>`;
    // nested hyperparameters by dotted name (optimizer.learning_rate)
    main.querySelector("#hparams").innerHTML = Object.entries(info.hparams_flat).map(([k, v]) =>
      `<tr><th>${esc(k)}</th><td class="hp" data-hp="${esc(k)}">${num(v)}</td></tr>`).join("");
    const stages = info.stages || [];
    const staged = stages.length > 1 || (stages.length === 1 && stages[0].name !== "fit");
    main.querySelector("#stages").innerHTML = staged ? `<h2>Stages</h2>
      <table id="stage-table" class="grid"><tr><th>Stage</th><th>State</th><th>Searched</th>
      <th>Batches</th><th>Epochs</th><th>Best ${esc(info.searcher_metric)}</th>
      <th>Last checkpoint</th></tr>${stages.map((s) => `<tr data-stage="${esc(s.name)}">
        <td>${esc(s.name)}</td><td>${stateBadge(s.state)}</td><td>${s.searched ? "yes" : ""}</td>
        <td>${s.steps_completed}</td><td>${s.epoch}</td><td>${num(s.best_metric)}</td>
        <td class="mono">${esc((s.latest_checkpoint || "").slice(0, 8))}</td></tr>`).join("")}
      </table>` : "";
    const pick = main.querySelector("#stage");
    main.querySelector("#stage-pick").hidden = !staged;
    if (staged) {
      pick.innerHTML = stages.map((s) => `<option value="${esc(s.name)}"
        ${s.name === (stage || "fit") ? "selected" : ""}>${esc(s.name)}</option>`).join("");
    }
    main.querySelector("#checkpoints").innerHTML = `<tr>${staged ? "<th>Stage</th>" : ""}
      <th>UUID</th><th>Batches</th>
      <th>Epoch</th><th>Metrics</th><th>Size</th><th></th></tr>` +
      info.checkpoints.slice().reverse().map((c) => `<tr>
        ${staged ? `<td>${esc(c.stage || "fit")}</td>` : ""}
        <td class="mono" title="${esc(c.uuid)}">${esc(c.uuid.slice(0, 8))}</td>
        <td>${c.steps_completed}</td><td>${c.epoch}</td>
        <td>${Object.entries(c.metrics).map(([k, v]) => `${esc(k)}=${num(v)}`).join(", ")}</td>
        <td>${(c.size / 1e6).toFixed(2)} MB</td>
        <td><a class="download" href="/ui/api/checkpoints/${encodeURIComponent(c.uuid)}/download">
          download</a></td></tr>`).join("");
    const errors = [];
    if (info.restarts) errors.push(`<p>Restarted ${info.restarts} time(s) after failures.</p>`);
    if (info.last_error) errors.push(`<pre class="error">${esc(info.last_error)}</pre>`);
    if (info.rungs.length) {
      errors.push(`<p>ASHA rungs: ${info.rungs.map((r) =>
        `rung ${r.rung}: ${num(r.metric)} ${r.promoted ? "→ promoted" : "→ stopped"}`)
        .join("; ")}</p>`);
    }
    main.querySelector("#errors").innerHTML = errors.length
      ? `<h2>Searcher, restarts and errors</h2>${errors.join("")}` : "";
  }

  function xOf(g) {
    if (xMode === "epochs") {
      const spe = data.steps_per_epoch;
      return spe ? g.steps.map((s) => s / spe) : g.epoch;
    }
    if (xMode === "time") return g.time;
    return g.steps;
  }

  /** One chart per metric ("loss": training loss and validation val_loss together). */
  function chartSpecs() {
    return metricSpecs(data.groups, xOf, X_MODES[xMode]);
  }

  function drawCharts(rebuild) {
    const box = main.querySelector("#charts");
    const specs = chartSpecs();
    if (rebuild || Object.keys(specs).join() !== Object.keys(charts).join()) {
      for (const c of Object.values(charts)) c.destroy();
      charts = {};
      box.innerHTML = Object.keys(specs).map((k) =>
        `<div class="chart" id="chart-${esc(k)}"></div>`).join("");
      for (const [k, spec] of Object.entries(specs)) {
        spec.onZoom = onZoom;
        charts[k] = lineChart(box.querySelector(`[id="chart-${CSS.escape(k)}"]`), spec);
      }
    } else {
      for (const [k, spec] of Object.entries(specs)) charts[k].update(spec);
    }
    const shown = Object.values(data.groups).reduce((a, g) => a + g.steps.length, 0);
    const total = Object.values(data.groups).reduce((a, g) => a + g.total, 0);
    main.querySelector("#points").textContent = shown < total
      ? `${shown} of ${total} points drawn (extremes kept)` : `${total} points`;
    main.querySelector("#charts").dataset.points = String(shown);
    markShown("trial-charts");
  }

  // Zoomed in on a downsampled series: fetch that window at full detail.
  let zoomTimer = null;
  function onZoom(min, max) {
    if (full || xMode === "time" || min === null) return;
    const spe = data.steps_per_epoch || 1;
    const toSteps = (v) => (xMode === "epochs" ? v * spe : v);
    const all = Object.values(data.groups).flatMap((g) => [g.steps[0], g.steps.at(-1)]);
    const wholeMin = Math.min(...all), wholeMax = Math.max(...all);
    const next = toSteps(min) <= wholeMin && toSteps(max) >= wholeMax ? null
      : [toSteps(min), toSteps(max)];
    if (JSON.stringify(next) === JSON.stringify(zoom)) return;
    zoom = next;
    main.querySelector("#unzoom").hidden = !zoom;
    clearTimeout(zoomTimer);
    zoomTimer = setTimeout(() => loadMetrics(false), 150);
  }

  async function loadMetrics(rebuild) {
    const width = main.querySelector("#charts").clientWidth || 1000;
    const params = new URLSearchParams({ max_points: full ? 0 : Math.round(width * 2) });
    if (zoom && !full) {
      params.set("x_min", zoom[0]);
      params.set("x_max", zoom[1]);
    }
    if (stage && stage !== "fit") params.set("stage", stage);
    data = await api(`/ui/api/trials/${id}/metrics?${params}`);
    drawCharts(rebuild);
  }

  async function refresh() {
    const i = await api(`/ui/api/trials/${id}`);
    const text = JSON.stringify(i);
    if (text !== lastInfo) {
      lastInfo = text;
      info = i;
      drawInfo();
    }
    const groups = JSON.stringify([i.groups, i.stages]);
    if (groups !== lastGroups) { // new metrics were reported
      lastGroups = groups;
      await loadMetrics(false);
    }
    await log.refresh();
    await profiler.refresh();
  }

  main.querySelectorAll('input[name="xmode"]').forEach((r) => r.addEventListener("change",
    (ev) => { xMode = ev.target.value; zoom = null; drawCharts(true); }));
  main.querySelector("#stage").addEventListener("change", (ev) => {
    stage = ev.target.value;
    zoom = null;
    loadMetrics(true);
  });
  main.querySelector("#unzoom").addEventListener("click", () => {
    zoom = null;
    main.querySelector("#unzoom").hidden = true;
    loadMetrics(true);
  });
  main.querySelector("#full").addEventListener("change", (ev) => {
    full = ev.target.checked;
    zoom = null;
    loadMetrics(true);
  });
  await refresh();
  return { refresh, destroy() {
    for (const c of Object.values(charts)) c.destroy();
    profiler.destroy();
  } };
}
