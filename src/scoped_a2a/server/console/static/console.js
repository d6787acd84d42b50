// The console page: runs in flight, recently ended runs, ends per reason, one task's timeline.
// One client of the JSON + SSE API under console/api/ (docs/console.md).
import { clock, el, getJson, post, seconds, stream } from "./api.js";
import { drawChart, reasonClass } from "./chart.js";
import { Timeline } from "./timeline.js";

const MAX_ENDED = 1000;
const state = { live: [], ended: [], offset: 0, counts: [] };
const $ = (id) => document.getElementById(id);

function showError(text) {
  const box = $("error");
  box.textContent = text;
  box.hidden = !text;
}

const timeline = new Timeline(showError);

function mode(run) {
  return run.mode === "detached" ? `detached (${run.why})` : "interactive";
}

function taskButton(run) {
  const button = el("button", { type: "button", class: "link", title: "show its timeline" },
    run.taskId);
  button.addEventListener("click", () => timeline.open(run.taskId, run.endedAt === undefined));
  return button;
}

async function cancel(taskId, button) {
  button.disabled = true;
  try {
    await post(`tasks/${encodeURIComponent(taskId)}/cancel`);
  } catch (err) {
    showError(err.message);
    button.disabled = false;
  }
}

function renderLive() {
  const body = $("live-body");
  const rows = state.live.map((run) => {
    const holders = Object.entries(run.holders).filter(([, n]) => n > 0)
      .map(([kind, n]) => `${kind} ${n}`).join(", ") || "none";
    const stop = el("button", { type: "button", class: "cancel" }, "Cancel");
    stop.addEventListener("click", () => cancel(run.taskId, stop));
    const status = run.cancelling ? `${run.state} (cancelling: ${run.cancelling})`
      : run.parked ? `${run.state} (waiting for input)` : run.state;
    return el("tr", { data: { taskId: run.taskId } },
      el("td", {}, taskButton(run)),
      el("td", { class: "mono" }, run.contextId),
      el("td", {}, run.owner || "anonymous"),
      el("td", {}, run.tenant),
      el("td", { class: "mode" }, mode(run)),
      el("td", { class: "holders" }, holders),
      el("td", { class: "age", data: { started: String(run.startedAt) } }, ""),
      el("td", { class: "state" }, status),
      el("td", {}, stop));
  });
  body.replaceChildren(...rows);
  // Until the first snapshot the page does not know: it says "connecting" (index.html).
  $("live-empty").textContent = "No run in flight.";
  $("live-empty").hidden = rows.length > 0;
  $("live-count").textContent = `(${state.liveTotal ?? rows.length})`;
  tickAges();
  const open = timeline.taskId;
  if (open) timeline.setLive(state.live.some((run) => run.taskId === open));
}

function tickAges() {
  const now = Date.now() + state.offset;
  for (const cell of document.querySelectorAll("#live-body td.age")) {
    cell.textContent = seconds(Math.max(0, (now - Number(cell.dataset.started)) / 1000));
  }
}

function addOptions(select, values) {
  const have = new Set([...select.options].map((o) => o.value));
  for (const value of values) {
    if (value && !have.has(value)) {
      select.append(el("option", { value }, value));
      have.add(value);
    }
  }
}

function renderEnded() {
  const reason = $("f-reason").value, st = $("f-state").value;
  const owner = $("f-owner").value.trim(), context = $("f-context").value.trim();
  addOptions($("f-reason"), state.ended.map((r) => r.reason));
  addOptions($("f-state"), state.ended.map((r) => r.state));
  const shown = state.ended.filter((r) => (!reason || r.reason === reason)
    && (!st || r.state === st) && (!owner || (r.owner || "anonymous").includes(owner))
    && (!context || r.contextId.includes(context)));
  const rows = shown.slice(0, 300).map((run) => el("tr", { data: { taskId: run.taskId } },
    el("td", {}, taskButton(run)),
    el("td", { class: "mono" }, run.contextId),
    el("td", {}, run.owner || "anonymous"),
    el("td", { class: "mode" }, mode(run)),
    el("td", { class: `reason ${reasonClass(run.reason)}` },
      run.canceledBy ? `${run.reason} (by ${run.canceledBy})` : run.reason),
    el("td", { class: "state" }, run.state),
    el("td", {}, seconds(run.durationSeconds)),
    el("td", {}, clock(run.endedAt))));
  $("ended-body").replaceChildren(...rows);
  $("ended-count").textContent = `(${shown.length} of ${state.ended.length})`;
}

function onSnapshot(snapshot) {
  state.offset = snapshot.now - Date.now();
  state.live = snapshot.live;
  state.liveTotal = snapshot.liveTotal;
  const known = new Set(snapshot.ended.map((r) => r.taskId));
  state.ended = [...snapshot.ended, ...state.ended.filter((r) => !known.has(r.taskId))]
    .slice(0, MAX_ENDED);
  renderLive();
  renderEnded();
  drawChart($("chart"), $("legend"), snapshot.counts);
}

// The browser retries a dropped feed by itself, but gives up on an HTTP error: then, if the
// session has ended (a restarted server, a revoked key), show the login form again.
async function feedRefused() {
  try {
    await getJson("me");
    showError("the live feed was refused; reload the page to try again");
  } catch (err) {
    if (err.status === 401) window.location.reload();
  }
}

function connect() {
  const connection = $("connection");
  const source = stream("runs/stream", {
    open: () => { connection.textContent = "live"; connection.className = "connection on"; },
    error: () => {
      connection.textContent = "reconnecting…";
      connection.className = "connection off";
      if (source.readyState === EventSource.CLOSED) feedRefused();
    },
    snapshot: onSnapshot,
    logout: () => window.location.reload(),
    shutdown: () => { connection.textContent = "server shut down"; connection.className = "connection off"; },
  });
}

async function main() {
  for (const id of ["f-reason", "f-state", "f-owner", "f-context"]) {
    $(id).addEventListener("input", renderEnded);
  }
  $("filters").addEventListener("submit", (event) => event.preventDefault());
  try {
    const me = await getJson("me");
    $("who").textContent = me.authentication
      ? `${me.principal}${me.operator ? " (operator: sees every run)" : " (sees own runs)"}`
      : "no authentication: every run";
    const logout = $("logout");
    logout.hidden = !me.authentication;
    logout.addEventListener("click", async () => {
      await post("logout").catch(() => {});
      window.location.reload();
    });
  } catch (err) {
    showError(err.message);
  }
  connect();
  setInterval(tickAges, 1000);
}

main();
