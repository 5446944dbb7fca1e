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

/** Show the log at `url` (/ui/api/trials/N/logs or /ui/api/jobs/N/logs) in `box`. */
export function logView(box, url) {
  box.innerHTML = `<div class="toolbar"><label><input type="checkbox" id="follow" checked>
    Follow</label> <span id="log-size" class="muted"></span></div>
    <pre id="log" class="log"></pre>`;
  const pre = box.querySelector("#log");
  const follow = box.querySelector("#follow");
  let offset = null;
  let raw = "";
  let skipped = 0;

  async function refresh() {
    if (offset !== null && !follow.checked) return;
    const chunk = await api(`${url}?offset=${offset === null ? -TAIL : offset}`);
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
  return { refresh };
}
