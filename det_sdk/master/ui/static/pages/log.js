// A task's log: the last 256 KB at first, then whatever is appended while "Follow" is on.
// Terminal control codes (Keras' progress bars: colours, backspaces, carriage returns)
// are applied the way a terminal would, so a log reads as it did in the console.

import { api } from "../util.js";

const TAIL = 256 * 1024;
const KEEP = 1024 * 1024; // characters of raw log kept for the view

/**
 * Text as a terminal shows it: colour codes dropped, backspace erases, a carriage
 * return starts the line over.
 *
 *   terminalText("ab\bc\rxy\n")  ->  "xy\n"   ("ac", then overwritten by "xy")
 */
export function terminalText(raw) {
  const text = raw.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, "");
  const lines = [];
  let line = [];
  let col = 0;
  for (const ch of text) {
    if (ch === "\n") {
      lines.push(line.join(""));
      line = [];
      col = 0;
    } else if (ch === "\r") {
      col = 0;
    } else if (ch === "\b") {
      col = Math.max(0, col - 1);
    } else {
      line[col++] = ch;
    }
  }
  return lines.join("\n") + (lines.length ? "\n" : "") + line.join("");
}

const LEVELS = ["TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"];
const FILTERED = 500; // the newest matching lines a filtered view shows

/** The query of the filters (issue 60): text, a minimum level, a rank ("" for any). */
export function filterQuery(text, level, rank) {
  const q = new URLSearchParams({ limit: String(FILTERED) });
  if (text) q.append("search_text", text);
  if (level) LEVELS.slice(LEVELS.indexOf(level)).forEach((l) => q.append("levels", `LOG_LEVEL_${l}`));
  if (rank !== "") q.append("rank_ids", rank);
  return q.toString();
}

/**
 * Show the log at `url` (/ui/api/trials/N/logs or /ui/api/jobs/N/logs) in `box`; with
 * `recordsUrl` (a trial's /ui/api/trials/N/log-records) a text filter and level and rank
 * selects: the newest matching lines, parsed by the master.
 */
export function logView(box, url, { recordsUrl = null } = {}) {
  box.innerHTML = `<div class="toolbar"><label><input type="checkbox" id="follow" checked>
    Follow</label>
    ${recordsUrl ? `<input type="search" id="log-filter" maxlength="1000"
        placeholder="Filter lines (text)" aria-label="filter the log's lines">
      <label>level <select id="log-level"><option value="">any</option>
        ${LEVELS.map((l) => `<option value="${l}">${l} and above</option>`).join("")}
      </select></label>
      <label>rank <select id="log-rank"><option value="">all</option></select></label>` : ""}
    <span id="log-size" class="muted"></span></div>
    <pre id="log" class="log"></pre>`;
  const pre = box.querySelector("#log");
  const follow = box.querySelector("#follow");
  const filterBox = box.querySelector("#log-filter");
  const levelPick = box.querySelector("#log-level");
  const rankPick = box.querySelector("#log-rank");
  let offset = null;
  let raw = "";
  let skipped = 0;
  let query = ""; // the filters' query; "" while none is set
  let shownQuery = null;

  function filters() {
    if (!recordsUrl) return "";
    const [text, level, rank] = [filterBox.value, levelPick.value, rankPick.value];
    return text || level || rank !== "" ? filterQuery(text, level, rank) : "";
  }

  let filteredSize = -1; // the log's size when the filtered lines were read

  async function refreshFiltered() {
    if (shownQuery === query) {
      if (!follow.checked) return;
      // following: ask again only when the log grew (a cheap probe at its end)
      const probe = await api(`${url}?offset=${filteredSize}`);
      if (probe.size === filteredSize) return;
    }
    const asked = query;
    const page = await api(`${recordsUrl}?${asked}`);
    if (asked !== query) return; // the filters changed meanwhile: that answer is newer
    shownQuery = asked;
    filteredSize = page.size;
    const lines = page.records.slice().reverse().map((r) => r.raw).join("");
    box.querySelector("#log-size").textContent = `${page.records.length} matching lines` +
      (page.records.length >= FILTERED ? ` (the newest ${FILTERED})` : "") +
      (page.done ? "" : " in the log's last part");
    pre.textContent = terminalText(lines);
    pre.dataset.filtered = "1";
  }

  async function refresh() {
    if (query) return refreshFiltered();
    if (offset !== null && !follow.checked) return;
    const chunk = await api(`${url}?offset=${offset === null ? -TAIL : offset}`);
    if (query) return; // filters were set meanwhile: the filtered view owns the box
    if (offset === null) skipped = chunk.start;
    offset = chunk.offset;
    box.querySelector("#log-size").textContent = `${chunk.size} bytes`;
    if (!chunk.text && pre.textContent) return;
    raw += chunk.text;
    if (raw.length > KEEP) {
      skipped += raw.length - KEEP;
      raw = raw.slice(-KEEP);
    }
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 20;
    pre.textContent = (skipped ? `… (${skipped} earlier bytes not shown)\n` : "") +
      terminalText(raw);
    if (follow.checked && atEnd) pre.scrollTop = pre.scrollHeight;
  }
  follow.addEventListener("change", () => { if (follow.checked) refresh(); });
  if (recordsUrl) {
    let timer = null;
    const changed = () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        const next = filters();
        if (next === query) return;
        query = next;
        shownQuery = null;
        if (!query) { // back to the whole log, from its tail
          offset = null;
          raw = "";
          skipped = 0;
          pre.textContent = "";
          delete pre.dataset.filtered;
        }
        refresh();
      }, 250);
    };
    filterBox.addEventListener("input", changed);
    levelPick.addEventListener("change", changed);
    rankPick.addEventListener("change", changed);
    // the rank choices: one per process of the trial
    api(`${recordsUrl}?limit=1`).then((page) => {
      for (let r = 0; r < (page.ranks || 0); r++) {
        rankPick.insertAdjacentHTML("beforeend", `<option value="${r}">${r}</option>`);
      }
    }).catch(() => {});
  }
  return { refresh };
}
