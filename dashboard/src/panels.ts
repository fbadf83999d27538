// The small panels: round progress, the leaderboards (local and on chain), recent faults.

import { byId, el } from "./dom";
import { ago, fixed } from "./format";
import type { Chain, Incident, Progress, RunState, Standing } from "./types";

export function drawProgress(p: Progress): void {
  const total = p.max_rounds;
  const done = Math.min(p.rounds_done, total ?? p.rounds_done);
  byId("progress-text").textContent = total ? `${done} of ${total} rounds done by every peer · furthest peer in round ${p.round}` : `${done} rounds done · furthest peer in round ${p.round}`;
  byId("progress-stages").textContent = p.stages ? `${p.stages} stage(s) per round` : "";
  const bar = byId("progress-bar");
  bar.style.width = total ? `${Math.min(100, (100 * done) / total).toFixed(1)}%` : "100%";
  const spread = p.peers_at.map(([round, n]) => `round ${round}: ${n}`).join(" · ");
  byId("progress-spread").textContent = spread ? `peers at ${spread}` : "no peers yet";
}

// One line per run when several are watched: "run alpha: 3 of 3 rounds, finished".
export function drawRunStates(states: RunState[], now: number): void {
  const lines = states.length < 2 ? [] : states.map((r) => {
    const rounds = r.max_rounds ? `${Math.min(r.rounds_done, r.max_rounds)} of ${r.max_rounds} rounds` : `${r.rounds_done} rounds`;
    const state = r.state === "stopped" ? `stopped (no write for ${ago(r.last_write, now).replace(/ ago$/, "")})` : r.state;
    return el("li", { class: `run-state ${r.state}`, "data-run": r.run }, `run ${r.run}: ${rounds}, ${state}`);
  });
  byId("run-states").replaceChildren(...lines);
}

function standingsTable(rows: Standing[], chain: boolean): HTMLTableElement {
  const head = el("tr", {}, el("th", {}, "#"), el("th", {}, "peer"), el("th", {}, "cumulative reward"), el("th", {}, "wins"), el("th", {}, chain ? "account" : "rounds"));
  const body = el("tbody");
  rows.forEach((r, i) => {
    body.append(el("tr", { "data-peer": r.id },
      el("td", {}, i + 1),
      el("td", { class: "peer-id", title: r.id }, r.id),
      el("td", {}, fixed(r.cumulative)),
      el("td", {}, r.wins),
      el("td", {}, chain ? (r.account ?? "") : (r.rounds ?? "")),
    ));
  });
  return el("table", { class: "standings" }, el("thead", {}, head), body);
}

export function drawLeaderboard(local: Standing[], chain: Chain | null): void {
  byId("leaderboard-local").replaceChildren(local.length ? standingsTable(local, false) : el("p", { class: "muted" }, "no rounds yet"));
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
