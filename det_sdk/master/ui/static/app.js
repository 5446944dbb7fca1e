// The web UI's shell: a hash router, the data fetcher, the live-update timer, helpers.
//
// Each page is a module in pages/ exporting `render(main, params) -> page`, where the
// page may have `refresh()` (called every POLL_MS while the tab is visible: live
// updates) and `destroy()`. To add a page: write pages/thing.js and add a route below.

import * as experiments from "./pages/experiments.js";
import * as experiment from "./pages/experiment.js";
import * as trial from "./pages/trial.js";
import * as jobs from "./pages/jobs.js";
import * as models from "./pages/models.js";
import * as compare from "./pages/compare.js";
import * as tasks from "./pages/tasks.js";
import * as webhooks from "./pages/webhooks.js";
import { api, esc, POLL_MS } from "./util.js";

const ROUTES = [
  [/^#?\/?(experiments)?$/, experiments.render, "experiments"],
  [/^#\/experiments\/(\d+)$/, experiment.render, "experiments"],
  [/^#\/trials\/(\d+)$/, trial.render, "experiments"],
  [/^#\/jobs$/, jobs.renderList, "jobs"],
  [/^#\/jobs\/(\d+)$/, jobs.renderJob, "jobs"],
  [/^#\/models$/, models.render, "models"],
  [/^#\/compare(?:\?(.*))?$/, compare.render, "experiments"],
  [/^#\/tasks$/, tasks.renderList, "tasks"],
  [/^#\/tasks\/(commands|tensorboards)\/([0-9A-Za-z-]+)\/logs$/, tasks.renderLogs, "tasks"],
  [/^#\/webhooks$/, webhooks.render, "webhooks"],
];

let current = null;
let timer = null;
let busy = false;

async function tick() {
  if (busy || !current || !current.refresh || document.hidden) return;
  busy = true;
  const live = document.getElementById("live");
  try {
    await current.refresh();
    live.classList.remove("stale");
  } catch (err) {
    live.classList.add("stale");
    console.warn("refresh failed", err);
  } finally {
    busy = false;
  }
}

let navigation = 0; // which route() call is the latest

async function route() {
  const mine = ++navigation;
  if (current && current.destroy) current.destroy();
  current = null;
  const hash = location.hash || "#/experiments";
  // Each navigation renders into a container of its own: a page still loading when the
  // user moves on (a click during a slow load) finishes into a detached element, never
  // over the page that replaced it.
  const main = document.createElement("div");
  document.getElementById("app").replaceChildren(main);
  for (const [re, render, nav] of ROUTES) {
    const m = hash.match(re);
    if (!m) continue;
    document.querySelectorAll("[data-nav]").forEach((a) =>
      a.classList.toggle("active", a.dataset.nav === nav));
    main.innerHTML = '<p class="muted">Loading…</p>';
    try {
      const page = await render(main, m.slice(1));
      if (mine !== navigation) {
        if (page && page.destroy) page.destroy(); // overtaken while it loaded
        return;
      }
      current = page;
      document.body.dataset.ready = hash; // page tests wait for this
    } catch (err) {
      if (mine === navigation) main.innerHTML = `<p class="error">${esc(err.message)}</p>`;
    }
    return;
  }
  main.innerHTML = `<p class="error">No page ${esc(hash)}</p>`;
}

// Sign-out ends the session on the master (the header proves it is this page asking)
document.getElementById("signout").addEventListener("submit", async (event) => {
  event.preventDefault();
  await fetch("/ui/signout", { method: "POST", headers: { "X-Det-UI": "1" },
                               credentials: "same-origin" });
  location.href = "/ui/signin";
});

window.addEventListener("hashchange", route);
route();
timer = setInterval(tick, POLL_MS);
document.addEventListener("visibilitychange", tick);
window.detUI = { api, get page() { return current; }, timer };
