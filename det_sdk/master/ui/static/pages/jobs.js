// Jobs (det job run): the list, and each job's state and log.

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

export async function renderJob(main, [id]) {
  main.innerHTML = `<p class="crumbs"><a href="#/jobs">Jobs</a> › job ${esc(id)}</p>
    <section id="job-head"></section><h2>Log</h2><div id="log-box"></div>`;
  const log = logView(main.querySelector("#log-box"), `/ui/api/jobs/${id}/logs`);
  async function refresh() {
    const j = await api(`/ui/api/jobs/${id}`);
    main.querySelector("#job-head").innerHTML = `<h1>${esc(j.name || `Job ${j.id}`)}
      <span class="muted">#${j.id}</span></h1><div class="facts">
      <span id="job-state">${stateBadge(j.state)}</span>
      <span class="mono">${esc(j.config.entrypoint_script)}</span>
      ${j.exit_code !== null ? `<span>exit code ${j.exit_code}</span>` : ""}
      <span>created ${age(j.created)} ago</span>
      ${j.restarts ? `<span>${j.restarts} restarts</span>` : ""}</div>
      <div class="facts" id="job-progress">${progressFacts(j)}</div>`;
    await log.refresh();
  }
  await refresh();
  return { refresh };
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
