/*! Bundles uPlot 1.6.32, (c) Leon Sorokin, MIT License: https://github.com/leeoniya/uPlot */
// The page: one EventSource on /api/events; each "snapshot" event redraws the panels in place
// (no reload, the charts keep their zoom). The token of a remote dashboard is taken from the
// link once, removed from the address bar, and sent with the stream.

import "uplot/dist/uPlot.min.css";
import "./style.css";
import { LineChart, StackedBars, meanLines, type Line } from "./charts";
import { byId, el } from "./dom";
import { colorAt, colorOf } from "./format";
import { drawIncidents, drawLeaderboard, drawProgress } from "./panels";
import { MetricPicker } from "./picker";
import { PeerTable } from "./table";
import type { Num, Snapshot } from "./types";

const DEFAULT_CURVES = 8; // peers drawn before any is picked: the leaderboard's top
const selected = new Set<string>();
let picked = false;
let last: Snapshot | null = null;

const table = new PeerTable(25, toggle, (id) => shownPeers().includes(id));
const rewards = new LineChart(byId("chart-reward"), "reward");
const evals = new LineChart(byId("chart-eval"), "eval reward");
const times = new StackedBars(byId("chart-times"), ["generate", "exchange", "train"], ["#4e79a7", "#f28e2b", "#59a14f"]);
const marl = new LineChart(byId("chart-marl"), "return", "environment steps");
const tasks = new LineChart(byId("chart-tasks"), "success rate");
const heldout = new LineChart(byId("chart-heldout"), "accuracy", "rounds trained");
const metric = new MetricPicker(peerLines);

function toggle(id: string): void {
  if (!picked) {
    for (const p of shownPeers()) selected.add(p);
    picked = true;
  }
  if (selected.has(id)) selected.delete(id);
  else selected.add(id);
  if (last) drawCharts(last);
  metric.draw();
}

// Before any pick: the best of each game first (the leaderboard ranks within games).
function shownPeers(): string[] {
  if (picked) return [...selected];
  const board = [...(last?.leaderboard ?? [])].sort((a, b) => (a.rank ?? 0) - (b.rank ?? 0));
  return board.slice(0, DEFAULT_CURVES).map((s) => s.id);
}

function peerLines(curves: Record<string, Num[]>): Line[] {
  const order = new Map(Object.keys(curves).sort().map((p, i) => [p, i]));
  return shownPeers().filter((p) => p in curves).map((p) => ({ label: p, values: curves[p], color: colorAt(order.get(p) ?? 0) }));
}

function drawCharts(s: Snapshot): void {
  const c = s.curves;
  // No empty frames: a chart without a value is hidden (evaluation, timings) or says "no data" (rewards).
  const empty = c.x.length === 0;
  byId("reward-empty").hidden = !empty;
  byId("chart-reward").hidden = empty;
  if (!empty) rewards.update(c.x, [...peerLines(c.reward), { label: "swarm mean", values: c.swarm_mean, color: "#222", dash: [6, 4], width: 2 }]);
  byId("eval").hidden = !c.eval;
  if (c.eval) evals.update(c.x, peerLines(c.eval));
  byId("times").hidden = !c.times;
  if (c.times) times.update(c.x, [c.times.generate, c.times.exchange, c.times.train]);
  byId("marl").hidden = !c.marl;
  if (c.marl) {
    const steps = c.marl.steps.map((v, i) => v ?? c.x[i]);
    marl.update(steps, [{ label: "eval return (mean over peers)", values: c.marl.eval_return, color: "#e15759", width: 2 }, ...peerLines(c.reward)]);
  }
  byId("heldout").hidden = !c.heldout;
  if (c.heldout) heldout.update(c.heldout.x, [...peerLines(c.heldout.peers), ...meanLines(c.heldout.means)]);
  byId("tasks").hidden = !c.tasks;
  if (c.tasks) {
    tasks.update(c.x, Object.entries(c.tasks).map(([task, values]) => ({ label: task, values, color: colorOf(task) })));
    const latest = Object.entries(c.tasks).map(([task, v]) => el("li", {}, `${task}: ${latestOf(v)}`));
    byId("tasks-latest").replaceChildren(...latest);
  }
  byId("curves-note").textContent = `${shownPeers().length} of ${Object.keys(c.reward).length} peers drawn (click rows to pick) · ${c.x.length} points per curve`;
}

function latestOf(values: Num[]): string {
  for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null) return `${((values[i] as number) * 100).toFixed(1)}%`;
  return "–";
}

function draw(s: Snapshot): void {
  last = s;
  byId("runs").textContent = s.runs.join(", ") || "(no run directory)";
  drawProgress(s.progress, s.time);
  drawBadge();
  drawLeaderboard(s.leaderboard, s.chain);
  table.update(s.peers, s.time);
  drawCharts(s);
  metric.update(s.metrics ?? [], s.version);
  drawIncidents(s.incidents, s.time);
  byId("status-errors").replaceChildren(...s.status_errors.map((e) => el("li", {}, e)));
  byId("updated").textContent = `updated ${new Date(s.time * 1000).toLocaleTimeString()}`;
  document.body.dataset.version = String(s.version);
}

let connected = false;

// "live" only while the stream is open and a run is still writing: a run that did its rounds
// reads "finished", one that stopped writing before that "stopped".
function drawBadge(): void {
  const state = byId("connection");
  if (!connected) {
    state.textContent = "reconnecting…";
    state.className = "down";
  } else if (last && last.state !== "running") {
    state.textContent = last.state;
    state.className = last.state;
  } else {
    state.textContent = "live";
    state.className = "live";
  }
}

function connect(): void {
  const params = new URLSearchParams(location.search);
  const token = params.get("token");
  if (token !== null) history.replaceState(null, "", location.pathname);
  const source = new EventSource("api/events" + (token ? `?token=${encodeURIComponent(token)}` : ""));
  source.addEventListener("open", () => { connected = true; drawBadge(); });
  source.addEventListener("error", () => { connected = false; drawBadge(); });
  source.addEventListener("snapshot", (event) => { connected = true; draw(JSON.parse((event as MessageEvent<string>).data) as Snapshot); });
}

connect();
