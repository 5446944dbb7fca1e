// A trial's "Profiler" section: the system metrics its process sampled (det_sdk.profiler:
// CPU, memory, disk, network, each GPU, and the per-batch timings), one chart per group,
// one series per host, GPU and metric, over seconds since the first sample. Drawn as the
// metric charts are (lineChart); redrawn when new records arrive.

import { lineChart } from "../charts.js";
import { api, esc, markShown } from "../util.js";

const TITLES = {
  cpu: "CPU (%)", memory: "Memory (bytes)", disk: "Disk", network: "Network (bytes/s)",
  gpu: "GPU", timings: "Batch timings (s)",
};

/** The Profiler section in `el` for trial `id`: {refresh(), destroy()}. */
export function profilerView(el, id) {
  let charts = {};
  let last = "";
  let fetched = 0; // the page polls every second; the profiler reports every 10 s at most
  const EVERY_MS = 5000;
  el.innerHTML = `<h2 id="profiler">Profiler</h2>
    <p class="muted" id="profiler-empty">No system metrics yet (the profiler samples every
      10 s by default; <code>profiling: {enabled: false}</code> turns it off).</p>
    <div id="profiler-charts" class="charts"></div>`;

  async function refresh() {
    if (Date.now() - fetched < EVERY_MS) return;
    fetched = Date.now();
    const data = await api(`/ui/api/trials/${id}/system-metrics`);
    const text = JSON.stringify(data);
    if (text === last) return;
    last = text;
    const groups = Object.entries(data.groups);
    el.querySelector("#profiler-empty").hidden = groups.length > 0;
    const box = el.querySelector("#profiler-charts");
    const keys = groups.map(([g, v]) => `${g}:${Object.keys(v.series).join()}`).join("|");
    if (keys !== box.dataset.keys) {
      for (const c of Object.values(charts)) c.destroy();
      charts = {};
      box.dataset.keys = keys;
      box.innerHTML = groups.map(([g]) =>
        `<div class="chart" id="profiler-${esc(g)}" data-group="${esc(g)}"></div>`).join("");
    }
    for (const [g, v] of groups) {
      const t0 = v.time[0];
      const x = v.time.map((t) => t - t0);
      const spec = {
        title: TITLES[g] || g, xLabel: "Time (s)", yLabel: g,
        series: Object.entries(v.series).map(([name, y]) => ({ label: name, x, y,
          points: v.time.length < 3 })),
      };
      if (charts[g]) charts[g].update(spec);
      else charts[g] = lineChart(box.querySelector(`[id="profiler-${CSS.escape(g)}"]`), spec);
    }
    box.dataset.groups = groups.map(([g]) => g).join(",");
    markShown("trial-profiler");
  }

  return { refresh, destroy() { for (const c of Object.values(charts)) c.destroy(); } };
}
