// Charts: line charts with uPlot (vendor/uplot), and two small canvas views uPlot
// does not draw (a scatter with category axes, parallel coordinates).
//
// Every chart is registered in window.detCharts by its element id, so a page test
// (and a curious developer in the console) can read what is drawn.

export const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
  "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"];

window.detCharts = window.detCharts || {};

/**
 * A line chart of several series that need not share x values.
 *
 * spec: {title, xLabel, yLabel, series: [{label, x: [], y: [], color?, points?}],
 *        vlines?: [x...] (dashed, e.g. ASHA rungs), onZoom?(xmin, xmax) }
 * Returns {update(spec), destroy()}; update keeps the user's zoom.
 */
export function lineChart(el, spec) {
  const width = () => Math.max(300, el.clientWidth || 600);
  let vlines = spec.vlines || [];
  let zooming = false;
  const opts = {
    title: spec.title,
    width: width(),
    height: spec.height || 260,
    scales: { x: { time: false } },
    axes: [{ label: spec.xLabel }, { label: spec.yLabel, size: 60 }],
    series: [{ label: spec.xLabel }, ...spec.series.map((s, i) => ({
      label: s.label,
      stroke: s.color || PALETTE[i % PALETTE.length],
      width: 1.5,
      spanGaps: true,
      points: { show: s.points ?? undefined, size: s.points ? 6 : 4 },
    }))],
    cursor: { drag: { x: true, y: false } },
    hooks: {
      draw: [(u) => drawVlines(u, vlines)],
      setScale: [(u, key) => {
        if (key === "x" && spec.onZoom && !zooming) spec.onZoom(u.scales.x.min, u.scales.x.max);
      }],
    },
  };
  const u = new uPlot(opts, join(spec.series), el);
  if (el.id) window.detCharts[el.id] = u;
  const onResize = () => u.setSize({ width: width(), height: opts.height });
  window.addEventListener("resize", onResize);
  return {
    plot: u,
    update(next, keepZoom = true) {
      vlines = next.vlines || vlines;
      if (next.series.length !== spec.series.length) {
        // a new series (a trial started reporting): rebuild
        this.destroy();
        Object.assign(this, lineChart(el, { ...spec, ...next }));
        return;
      }
      zooming = true;
      const { min, max } = u.scales.x;
      u.setData(join(next.series), !keepZoom);
      if (keepZoom && min !== null && min !== undefined) u.setScale("x", { min, max });
      zooming = false;
    },
    destroy() {
      window.removeEventListener("resize", onResize);
      u.destroy();
    },
  };
}

/**
 * One line chart spec per metric, from metric groups as the master sends a trial's or a
 * job's ({group: {steps, epoch, time, metrics: {name: [...]}}}): "loss" holds training
 * loss and validation val_loss together. `xOf(g)` picks a group's x values.
 */
export function metricSpecs(groups, xOf, xLabel) {
  const specs = {};
  for (const [group, g] of Object.entries(groups)) {
    const x = xOf(g);
    for (const [name, ys] of Object.entries(g.metrics)) {
      const base = name.replace(/^val_/, "");
      const spec = specs[base] ||= { title: base, xLabel, yLabel: base, series: [] };
      spec.series.push({ label: `${group}: ${name}`, x, y: ys,
        color: PALETTE[spec.series.length], points: group !== "training" ? true : undefined });
    }
  }
  return specs;
}

/** uPlot wants one sorted x array with every series aligned on it (nulls where absent). */
function join(series) {
  if (series.length === 1) return [series[0].x, series[0].y];
  return uPlot.join(series.map((s) => [s.x, s.y]));
}

function drawVlines(u, xs) {
  if (!xs.length) return;
  const ctx = u.ctx;
  ctx.save();
  ctx.strokeStyle = "#999";
  ctx.setLineDash([4, 4]);
  ctx.lineWidth = 1;
  for (const x of xs) {
    const px = Math.round(u.valToPos(x, "x", true));
    if (px < u.bbox.left || px > u.bbox.left + u.bbox.width) continue;
    ctx.beginPath();
    ctx.moveTo(px, u.bbox.top);
    ctx.lineTo(px, u.bbox.top + u.bbox.height);
    ctx.stroke();
  }
  ctx.restore();
}

/**
 * Map a column of values to [0, 1]: numbers linearly (or on a log scale: `log` true,
 * as for a `type: log` hyperparameter, or values spanning 100x and more), anything
 * else as categories in sorted order.
 */
export function axisOf(values, log = false) {
  const numeric = values.every((v) => typeof v === "number" || v === null || v === undefined);
  if (numeric) {
    const nums = values.filter((v) => typeof v === "number");
    const lo = Math.min(...nums), hi = Math.max(...nums);
    log = lo > 0 && (log || hi / lo >= 100);
    return { kind: log ? "log" : "linear", lo, hi, pos: (v) => {
      if (typeof v !== "number") return null;
      if (hi === lo) return 0.5;
      return log ? Math.log(v / lo) / Math.log(hi / lo) : (v - lo) / (hi - lo);
    } };
  }
  const cats = [...new Set(values.map((v) => JSON.stringify(v)))].sort();
  return { kind: "category", cats, pos: (v) =>
    cats.length === 1 ? 0.5 : cats.indexOf(JSON.stringify(v)) / (cats.length - 1) };
}

function fmt(v) {
  return typeof v === "number" ? String(+v.toPrecision(3)) : String(v);
}

function setupCanvas(el, height) {
  el.innerHTML = "";
  const canvas = document.createElement("canvas");
  const w = Math.max(240, el.clientWidth || 300);
  const dpr = window.devicePixelRatio || 1;
  canvas.width = w * dpr;
  canvas.height = height * dpr;
  canvas.style.width = `${w}px`;
  canvas.style.height = `${height}px`;
  el.appendChild(canvas);
  const ctx = canvas.getContext("2d");
  ctx.scale(dpr, dpr);
  ctx.font = "11px system-ui, sans-serif";
  return { ctx, w, h: height };
}

/** Ticks of an axis: category names, or lo / mid / hi. */
function ticks(axis) {
  if (axis.kind === "category") return axis.cats.map((c) => [axis.pos(JSON.parse(c)), JSON.parse(c)]);
  if (axis.lo === axis.hi) return [[0.5, axis.lo]];
  const mid = axis.kind === "log" ? Math.sqrt(axis.lo * axis.hi) : (axis.lo + axis.hi) / 2;
  return [[0, axis.lo], [axis.pos(mid), mid], [1, axis.hi]];
}

/**
 * One hyperparameter against the searcher metric: a point per trial.
 * spec: {title, xLabel, yLabel, points: [{x, y, id}]}
 */
export function scatter(el, spec) {
  const pts = spec.points.filter((p) => typeof p.y === "number");
  const { ctx, w, h } = setupCanvas(el, spec.height || 200);
  const pad = { l: 64, r: 24, t: 20, b: 34 };
  const xa = axisOf(pts.map((p) => p.x), spec.xLog);
  const ya = axisOf(pts.map((p) => p.y));
  const X = (v) => pad.l + xa.pos(v) * (w - pad.l - pad.r);
  const Y = (v) => h - pad.b - ya.pos(v) * (h - pad.t - pad.b);
  ctx.fillStyle = "#333";
  ctx.fillText(spec.title, pad.l, 12);
  ctx.strokeStyle = "#ccc";
  ctx.strokeRect(pad.l, pad.t, w - pad.l - pad.r, h - pad.t - pad.b);
  ctx.fillStyle = "#666";
  for (const [p, v] of ticks(xa)) {
    ctx.textAlign = p === 0 ? "left" : p === 1 ? "right" : "center";
    ctx.fillText(fmt(v), pad.l + p * (w - pad.l - pad.r), h - pad.b + 14);
  }
  ctx.textAlign = "center";
  ctx.fillText(spec.xLabel + (xa.kind === "log" ? " (log)" : ""), (w + pad.l) / 2, h - 4);
  ctx.textAlign = "right";
  if (pts.length) for (const [p, v] of ticks(ya)) ctx.fillText(fmt(v), pad.l - 4, h - pad.b - p * (h - pad.t - pad.b) + 4);
  pts.forEach((p, i) => {
    ctx.fillStyle = PALETTE[i % PALETTE.length];
    ctx.beginPath();
    ctx.arc(X(p.x), Y(p.y), 4, 0, 2 * Math.PI);
    ctx.fill();
  });
  el.dataset.points = String(pts.length);
  el.title = pts.map((p) => `trial ${p.id}: ${spec.xLabel}=${fmt(p.x)} → ${fmt(p.y)}`).join("\n");
  if (el.id) window.detCharts[el.id] = { kind: "scatter", points: pts };
}

/**
 * Parallel coordinates: one vertical axis per hyperparameter and the metric last; a
 * line per trial, coloured from best (dark blue) to worst (light).
 * spec: {dims: [name...], rows: [{id, values: [...], metric}], smallerIsBetter}
 */
export function parallel(el, spec) {
  const rows = spec.rows;
  const { ctx, w, h } = setupCanvas(el, spec.height || 260);
  const pad = { l: 40, r: 40, t: 24, b: 30 };
  const n = spec.dims.length;
  const logs = spec.logDims || [];
  const axes = spec.dims.map((d, j) => axisOf(rows.map((r) => r.values[j]), logs.includes(d)));
  const X = (j) => pad.l + (n === 1 ? 0.5 : j / (n - 1)) * (w - pad.l - pad.r);
  const Y = (p) => h - pad.b - p * (h - pad.t - pad.b);
  // colour by rank, not by value: one outlier must not wash out all the others
  const ms = rows.map((r) => r.metric).filter((m) => typeof m === "number").sort((a, b) => a - b);
  const rank = (m) => (ms.length < 2 ? 0.5 : ms.indexOf(m) / (ms.length - 1));
  const good = (m) => (spec.smallerIsBetter ? 1 - rank(m) : rank(m));
  // worst first, so the best lines are drawn on top
  const order = rows.slice().sort((a, b) => good(a.metric) - good(b.metric));
  ctx.lineWidth = 1.5;
  for (const r of order) {
    const g = good(r.metric);
    ctx.strokeStyle = typeof r.metric === "number"
      ? `hsla(215, 80%, ${75 - 50 * g}%, ${0.35 + 0.6 * g})` : "rgba(150,150,150,0.4)";
    ctx.beginPath();
    r.values.forEach((v, j) => {
      const p = axes[j].pos(v);
      if (p === null) return;
      if (j === 0) ctx.moveTo(X(j), Y(p)); else ctx.lineTo(X(j), Y(p));
    });
    ctx.stroke();
  }
  ctx.strokeStyle = "#888";
  ctx.lineWidth = 1;
  spec.dims.forEach((d, j) => {
    ctx.beginPath();
    ctx.moveTo(X(j), Y(0));
    ctx.lineTo(X(j), Y(1));
    ctx.stroke();
    ctx.fillStyle = "#222";
    ctx.textAlign = "center";
    ctx.fillText(d, X(j), 14);
    ctx.fillStyle = "#666";
    ctx.textAlign = j === n - 1 ? "right" : "left";
    for (const [p, v] of ticks(axes[j])) ctx.fillText(fmt(v), X(j) + (j === n - 1 ? -4 : 4), Y(p) + 4);
  });
  el.dataset.lines = String(rows.length);
  if (el.id) window.detCharts[el.id] = { kind: "parallel", dims: spec.dims, rows };
}
