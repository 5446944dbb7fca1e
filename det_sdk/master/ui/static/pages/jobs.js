// Jobs (det job run): the list; each job's state, progress, throughput chart (rows per
// second over time), metric charts (its script's report_metrics, drawn as a trial's),
// pause / activate / kill buttons and its log.

import { lineChart, metricSpecs } from "../charts.js";
import { age, api, esc, newest, num, progressBar, stateBadge } from "../util.js";
import { logView } from "./log.js";

const PAGE = 100;

export async function renderList(main) {
  let last = "";
  let wanted = PAGE; // the newest jobs first; "Show more" adds older ones
  main.innerHTML = `<h1>Jobs</h1> <span id="job-count" class="muted"></span>
    <table id="jobs" class="grid"><thead><tr><th>ID</th><th>Name</th><th>State</th>
    <th>Progress</th><th>Entrypoint</th><th>Slots</th><th>Exit code</th><th>Age</th></tr></thead>
    <tbody></tbody></table><p><button id="job-more" hidden>Show ${PAGE} more</button></p>`;
  const body = main.querySelector("#jobs tbody");
  const moreButton = main.querySelector("#job-more");
  moreButton.addEventListener("click", () => {
    wanted += PAGE;
    refresh();
  });

  async function refresh() {
    const page = await newest("/ui/api/jobs", "jobs", wanted);
    const text = JSON.stringify(page);
    if (text === last) return;
    last = text;
    const jobs = page.rows;
    moreButton.hidden = !page.more;
    main.querySelector("#job-count").textContent = page.more
      ? `the newest ${jobs.length} of ${page.total}` : "";
    body.innerHTML = jobs.map((j) => `<tr data-id="${j.id}">
      <td><a href="#/jobs/${j.id}">${j.id}</a></td><td>${esc(j.name)}</td>
      <td>${stateBadge(j.state)}</td>
      <td>${j.progress === null ? "" : progressBar(j.progress)}</td>
      <td class="mono">${esc(j.entrypoint)}</td>
      <td>${j.slots ?? ""}</td><td>${j.exit_code ?? ""}</td>
      <td>${age(j.created)}</td></tr>`).join("")
      || '<tr><td colspan="8" class="muted">No jobs yet: det job run CONFIG DIR</td></tr>';
  }
  await refresh();
  return { refresh };
}

// What the master's lifecycle allows (det_sdk/master/lifecycle.py JOB_TRANSITIONS): a
// button is enabled only in the states where its action changes something.
const JOB_ACTIONS = {
  pause: ["QUEUED", "RUNNING"],
  activate: ["PAUSED", "STOPPING_PAUSED"],
  kill: ["QUEUED", "RUNNING", "STOPPING_PAUSED", "PAUSED"],
};
const WHY = {
  pause: "Pause job %d? It stops at its next progress point; activate resumes it.",
  activate: "Activate job %d? It goes on from its progress.",
  kill: "Kill job %d? Its process stops and it is not resumed.",
};

export async function renderJob(main, [id]) {
  main.innerHTML = `<p class="crumbs"><a href="#/jobs">Jobs</a> › job ${esc(id)}</p>
    <section id="job-head"></section>
    <p id="job-actions" class="actions">${Object.keys(JOB_ACTIONS).map((v) =>
      `<button class="act act-${v}" data-act="${v}" disabled>${v[0].toUpperCase()}${v.slice(1)}` +
      "</button>").join(" ")}</p>
    <div class="facts" id="job-progress"></div>
    <h2>Throughput</h2><p id="throughput-none" class="muted">no rate yet: it takes two
      progress reports of one process</p><div class="chart wide" id="job-throughput" hidden></div>
    <section id="job-metrics" hidden><h2>Metrics</h2><div id="job-charts" class="charts"></div>
    </section>
    <h2>Log</h2><div id="log-box"></div>`;
  const log = logView(main.querySelector("#log-box"), `/ui/api/jobs/${id}/logs`);
  let lastHead = "";
  let lastRate = "";
  let lastGroups = "";
  let rateChart = null;
  let charts = {};

  function drawThroughput(t) {
    const box = main.querySelector("#job-throughput");
    const spec = { title: "Rows per second", xLabel: "Time (s)", yLabel: "rows/s",
      series: [{ label: "rows/s", x: t.time, y: t.rows_per_second, points: true }] };
    box.hidden = !t.time.length;
    main.querySelector("#throughput-none").hidden = !box.hidden;
    box.dataset.points = String(t.time.length);
    if (!t.time.length) return;
    if (rateChart) rateChart.update(spec, false);
    else rateChart = lineChart(box, spec);
  }

  async function loadMetrics() {
    const box = main.querySelector("#job-charts");
    const data = await api(`/ui/api/jobs/${id}/metrics?max_points=${
      Math.round((box.clientWidth || 1000) * 2)}`);
    const specs = metricSpecs(data.groups, (g) => g.steps, "Batches");
    main.querySelector("#job-metrics").hidden = !Object.keys(specs).length;
    if (Object.keys(specs).join() !== Object.keys(charts).join()) {
      for (const c of Object.values(charts)) c.destroy();
      charts = {};
      box.innerHTML = Object.keys(specs).map((k) =>
        `<div class="chart" id="job-chart-${esc(k)}"></div>`).join("");
      for (const [k, spec] of Object.entries(specs)) {
        charts[k] = lineChart(box.querySelector(`[id="job-chart-${CSS.escape(k)}"]`), spec);
      }
    } else {
      for (const [k, spec] of Object.entries(specs)) charts[k].update(spec, false);
    }
    box.dataset.points = String(Object.values(data.groups).reduce((a, g) => a + g.steps.length, 0));
  }

  async function refresh() {
    const j = await api(`/ui/api/jobs/${id}`);
    const head = JSON.stringify([j.state, j.name, j.exit_code, j.restarts, j.rows_done,
      j.rows_total, j.rows_per_second, j.eta_seconds, j.output, j.progress]);
    if (head !== lastHead) {
      lastHead = head;
      main.querySelector("#job-head").innerHTML = `<h1>${esc(j.name || `Job ${j.id}`)}
        <span class="muted">#${j.id}</span></h1><div class="facts">
        <span id="job-state">${stateBadge(j.state)}</span>
        <span class="mono">${esc(j.config.entrypoint_script)}</span>
        ${j.exit_code !== null ? `<span>exit code ${j.exit_code}</span>` : ""}
        <span>created ${age(j.created)} ago</span>
        ${j.restarts ? `<span>${j.restarts} restarts</span>` : ""}</div>`;
      main.querySelector("#job-progress").innerHTML = progressFacts(j);
      // the buttons stay (a click is never lost to a redraw); only their states change
      for (const b of main.querySelectorAll("#job-actions button[data-act]")) {
        b.disabled = !JOB_ACTIONS[b.dataset.act].includes(j.state);
      }
      main.querySelector("#job-actions").dataset.state = j.state;
    }
    const rate = JSON.stringify(j.throughput);
    if (rate !== lastRate) {
      lastRate = rate;
      drawThroughput(j.throughput);
    }
    const groups = JSON.stringify(j.groups);
    if (groups !== lastGroups) { // new metrics were reported
      lastGroups = groups;
      await loadMetrics();
    }
    await log.refresh();
  }

  main.querySelector("#job-actions").addEventListener("click", async (ev) => {
    const b = ev.target.closest("button[data-act]");
    if (!b || b.disabled) return;
    const verb = b.dataset.act;
    if (!confirm(WHY[verb].replace("%d", id))) return;
    try {
      await api(`/ui/api/jobs/${id}/${verb}`, { method: "POST" });
    } catch (err) {
      alert(`${verb} failed: ${err.message}`);
    }
    await refresh();
  });
  await refresh();
  return {
    refresh,
    destroy() {
      if (rateChart) rateChart.destroy();
      for (const c of Object.values(charts)) c.destroy();
    },
  };
}

// Rows done of the total as a bar (none while the total is unknown), the rate, the time
// left and where the output goes (reported by the job's chief: det job describe).
function progressFacts(j) {
  if (j.rows_done === null) return '<span class="muted">no progress reported</span>';
  const of = j.rows_total === null ? "" : ` of ${j.rows_total}`;
  const left = j.eta_seconds === null ? "" : `<span>${duration(j.eta_seconds)} left</span>`;
  return `<span>${j.progress === null ? "" : progressBar(j.progress)}</span>
    <span id="job-rows">${j.rows_done}${of} rows</span>
    ${j.rows_per_second === null ? "" : `<span>${num(j.rows_per_second)} rows/s</span>`}
    ${left}<span>output <span class="mono" id="job-output">${esc(j.output || "")}</span></span>`;
}

function duration(seconds) {
  const s = Math.round(seconds);
  if (s >= 3600) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  return s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s` : `${s}s`;
}
