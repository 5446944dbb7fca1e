// Helpers the pages share: fetching JSON from the master, formatting, sortable tables.

export const POLL_MS = 1000; // live updates: the issue asks for at most 2 s behind

/** GET (or POST with `body`) JSON from the master; a lost session goes to sign-in. */
export async function api(path, { method = "GET", body } = {}) {
  const init = { method, headers: { "X-Det-UI": "1" }, credentials: "same-origin" };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const resp = await fetch(path, init);
  if (resp.status === 401) {
    location.href = "/ui/signin";
    throw new Error("signed out");
  }
  const data = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error(data.detail || `${resp.status} ${resp.statusText}`);
  return data;
}

/**
 * The newest `count` rows of a paged list (`/ui/api/experiments`, `/ui/api/jobs`), page
 * after page: `{rows, total, more}` (`more`: older rows exist beyond them).
 */
export async function newest(path, key, count) {
  let rows = [];
  let cursor = null;
  let total = 0;
  do {
    const q = new URLSearchParams({ limit: Math.min(1000, count - rows.length) });
    if (cursor) q.set("cursor", cursor);
    const page = await api(`${path}?${q}`);
    rows = rows.concat(page[key]);
    total = page.total;
    cursor = page.next_cursor;
  } while (cursor && rows.length < count);
  return { rows, total, more: cursor !== null };
}

/** HTML-escape anything for a template string. */
export function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

/** A number for a table: 4 significant digits, integers as they are. */
export function num(v) {
  if (v === null || v === undefined || v === "") return "";
  if (typeof v !== "number") return esc(v);
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  return a !== 0 && (a < 1e-3 || a >= 1e5) ? v.toExponential(3) : String(+v.toPrecision(4));
}

/** "42s", "5m", "3h", "2d" since a UNIX time. */
export function age(created) {
  const s = Math.max(0, Date.now() / 1000 - created);
  if (s < 60) return `${Math.round(s)}s`;
  if (s < 3600) return `${Math.round(s / 60)}m`;
  if (s < 86400) return `${Math.round(s / 3600)}h`;
  return `${Math.round(s / 86400)}d`;
}

/** A UNIX time as "2026-11-22 17:01:16" (toLocaleString costs ~0.3 ms a call: 1,000 rows). */
export function isoTime(t) {
  return new Date(t * 1000).toISOString().slice(0, 19).replace("T", " ");
}

export function stateBadge(state) {
  return `<span class="state state-${esc(state)}">${esc(state)}</span>`;
}

export function progressBar(fraction) {
  const pct = Math.round(Math.max(0, Math.min(1, fraction || 0)) * 100);
  // a <progress> element: no inline style, which the Content-Security-Policy refuses
  return `<progress class="progress" max="100" value="${pct}" title="${pct}%"></progress>` +
    `<span class="pct">${pct}%</span>`;
}

/** Ask, then POST a pause/activate/kill; `after()` refreshes the page. */
export async function experimentAction(id, verb, after) {
  const why = { kill: "Kill experiment %d? Its trials stop and cannot be resumed.",
    pause: "Pause experiment %d? Running trials checkpoint and stop.",
    activate: "Activate experiment %d? Its paused trials are queued again." }[verb];
  if (!confirm(why.replace("%d", id))) return;
  try {
    await api(`/ui/api/experiments/${id}/${verb}`, { method: "POST" });
  } catch (err) {
    alert(`${verb} failed: ${err.message}`);
  }
  if (after) await after();
}

/** Buttons for the actions an experiment's state allows. */
export function actionButtons(exp) {
  // what the master's lifecycle allows (det_sdk/master/lifecycle.py)
  const out = [];
  const s = exp.state;
  if (s === "ACTIVE") out.push("pause");
  if (s === "PAUSED" || s === "STOPPING_PAUSED") out.push("activate");
  if (s === "ACTIVE" || s === "PAUSED" || s === "STOPPING_PAUSED") out.push("kill");
  return out.map((v) => `<button class="act act-${v}" data-act="${v}" data-id="${exp.id}">` +
    `${v[0].toUpperCase()}${v.slice(1)}</button>`).join(" ");
}

/** Sortable tables: click a header with data-key; rows come from `sortRows`. */
export function sortRows(rows, key, dir, get) {
  const val = (r) => get(r, key);
  return rows.slice().sort((a, b) => {
    const x = val(a), y = val(b);
    if (x === y) return 0;
    if (x === null || x === undefined || x === "") return 1; // blanks last
    if (y === null || y === undefined || y === "") return -1;
    const c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y), undefined, { numeric: true });
    return dir === "desc" ? -c : c;
  });
}

export function headerCell(key, label, sort) {
  const mark = sort.key === key ? (sort.dir === "asc" ? " ▲" : " ▼") : "";
  return `<th data-key="${esc(key)}" class="sortable">${esc(label)}${mark}</th>`;
}

/** Clicking a header sorts by it (again: reverses). */
export function bindSort(table, sort, redraw) {
  table.addEventListener("click", (ev) => {
    const th = ev.target.closest("th[data-key]");
    if (!th) return;
    const key = th.dataset.key;
    sort.dir = sort.key === key && sort.dir === "asc" ? "desc" : "asc";
    sort.key = key;
    redraw();
  });
}

/**
 * Mark a moment of a page's drawing for scripts/bench_ui.py: "det:NAME" once the
 * frame that shows it has been painted (after the next animation frame).
 */
export function markShown(name) {
  requestAnimationFrame(() => setTimeout(() => performance.mark(`det:${name}`), 0));
}
