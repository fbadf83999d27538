// The small panels: each run's progress, the leaderboards (local per game, and on chain), recent faults.

import { byId, el } from "./dom";
import { ago, fixed } from "./format";
import type { Chain, Incident, RunProgress, Standing } from "./types";

const runRounds = (r: RunProgress): string => {
  const done = Math.min(r.rounds_done, r.max_rounds ?? r.rounds_done);
  return r.max_rounds ? `${done} of ${r.max_rounds} rounds` : `${done} rounds`;
};

function bar(r: RunProgress): HTMLElement {
  const fill = el("div", { class: "bar-fill" });
  fill.style.width = r.max_rounds ? `${Math.min(100, (100 * r.rounds_done) / r.max_rounds).toFixed(1)}%` : "100%";
  return el("div", { class: "bar" }, fill);
}

// One run: the bar, its rounds and where its peers are. Several: a line and a bar for each run,
// its own rounds only ("run alpha: 3 of 3 rounds, finished"): two runs' rounds are never one count.
export function drawProgress(runs: RunProgress[], now: number): void {
  const one = runs.length === 1 ? runs[0] : null;
  byId("progress-one").hidden = one === null;
  if (one !== null) {
    byId("progress-text").textContent = `${runRounds(one)} done by every peer · furthest peer in round ${one.round}`;
    byId("progress-stages").textContent = one.stages ? `${one.stages} stage(s) per round` : "";
    byId("progress-bar").replaceChildren(bar(one));
    const spread = one.peers_at.map(([round, n]) => `round ${round}: ${n}`).join(" · ");
    byId("progress-spread").textContent = spread ? `peers at ${spread}` : "no peers yet";
  }
  byId("progress-none").hidden = runs.length > 0;
  const lines = runs.length < 2 ? [] : runs.map((r) => {
    const state = r.state === "stopped" ? `stopped (no write for ${ago(r.last_write, now).replace(/ ago$/, "")})` : r.state;
    return el("li", { class: `run-state ${r.state}`, "data-run": r.run, title: `game ${r.game} · furthest peer in round ${r.round}` },
      el("span", {}, `run ${r.run}: ${runRounds(r)}, ${state}`), bar(r));
  });
  byId("run-states").replaceChildren(...lines);
}

function standingsTable(rows: Standing[], chain: boolean): HTMLTableElement {
  const head = el("tr", {}, el("th", {}, "#"), el("th", {}, "peer"), el("th", {}, "cumulative reward"), el("th", {}, "wins"), el("th", {}, chain ? "account" : "rounds"));
  const body = el("tbody");
  rows.forEach((r, i) => {
    body.append(el("tr", { "data-peer": r.id },
      el("td", {}, r.rank ?? i + 1),
      el("td", { class: "peer-id", title: r.id }, r.id),
      el("td", {}, fixed(r.cumulative)),
      el("td", {}, r.wins),
      el("td", {}, chain ? (r.account ?? "") : (r.rounds ?? "")),
    ));
  });
  return el("table", { class: "standings" }, el("thead", {}, head), body);
}

// The local standings come ranked within each game (a bandit's reward and an LM's are not one
// scale): one table per game, headed by its name when there are several.
function byGame(rows: Standing[]): Node[] {
  const games = new Map<string, Standing[]>();
  for (const r of rows) games.set(r.game ?? "", [...(games.get(r.game ?? "") ?? []), r]);
  if (games.size < 2) return [standingsTable(rows, false)];
  return [...games].flatMap(([game, members]) => [el("h3", { class: "game", title: game }, `game: ${game}`), standingsTable(members, false)]);
}

export function drawLeaderboard(local: Standing[], chain: Chain | null): void {
  byId("leaderboard-local").replaceChildren(...(local.length ? byGame(local) : [el("p", { class: "muted" }, "no rounds yet")]));
  const section = byId("leaderboard-chain");
  section.hidden = chain === null;
  if (chain === null) return;
  const title = `on chain: ${chain.contract}` + (chain.round !== undefined ? ` · round ${chain.round}, stage ${chain.stage}/${chain.stages}` : "");
  const parts: Node[] = [el("h3", {}, title)];
  if (chain.error) parts.push(el("p", { class: "error" }, chain.error));
  if (chain.rows) parts.push(standingsTable(chain.rows, true));
  section.replaceChildren(...parts);
}

const FEW_FAULTS = 12;
let allFaults = false;

export function drawIncidents(items: Incident[], now: number): void {
  const more = byId<HTMLButtonElement>("faults-more");
  more.onclick = () => {
    allFaults = !allFaults;
    drawIncidents(items, now);
  };
  more.hidden = items.length <= FEW_FAULTS;
  more.textContent = allFaults ? "show fewer" : `show all ${items.length}`;
  const shown = allFaults ? items : items.slice(0, FEW_FAULTS);
  const body = byId("faults-body");
  body.replaceChildren(...shown.map((e) => el("tr", { class: `fault ${e.kind === "quarantine" ? "quarantine" : ""}` },
    el("td", {}, ago(e.t, now)),
    el("td", {}, e.round ?? "–"),
    el("td", {}, e.stage ?? "–"),
    el("td", { class: "peer-id", title: e.observer }, e.observer),
    el("td", { class: "peer-id", title: e.sender }, e.sender),
    el("td", {}, e.kind),
    el("td", { class: "reason" }, e.reason),
  )));
  byId("faults-empty").hidden = items.length > 0;
}
