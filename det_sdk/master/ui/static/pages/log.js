// A task's log: the last 256 KB at first, then whatever is appended while "Follow" is on.

import { api } from "../util.js";

const TAIL = 256 * 1024;

/** Show the log at `url` (/ui/api/trials/N/logs or /ui/api/jobs/N/logs) in `box`. */
export function logView(box, url) {
  box.innerHTML = `<div class="toolbar"><label><input type="checkbox" id="follow" checked>
    Follow</label> <span id="log-size" class="muted"></span></div>
    <pre id="log" class="log"></pre>`;
  const pre = box.querySelector("#log");
  const follow = box.querySelector("#follow");
  let offset = null;

  async function refresh() {
    if (offset !== null && !follow.checked) return;
    const chunk = await api(`${url}?offset=${offset === null ? -TAIL : offset}`);
    if (offset === null && chunk.start > 0) {
      pre.textContent = `… (${chunk.start} earlier bytes not shown)\n`;
    }
    offset = chunk.offset;
    if (chunk.text) {
      const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 20;
      pre.insertAdjacentText("beforeend", chunk.text);
      if (follow.checked && atEnd) pre.scrollTop = pre.scrollHeight;
    }
    box.querySelector("#log-size").textContent = `${chunk.size} bytes`;
  }
  follow.addEventListener("change", () => { if (follow.checked) refresh(); });
  return { refresh };
}
