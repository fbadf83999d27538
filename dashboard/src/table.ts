// The peers table: sortable, filterable and paged, so 100 or 10,000 peers cost one page of rows.
// Clicking a row toggles that peer's curves in the charts.

import { byId, el } from "./dom";
import { ago, count, fixed, seconds } from "./format";
import type { PeerRow } from "./types";

interface Column {
  key: string;
  title: string;
  hint: string;
  value: (row: PeerRow) => number | string;
  cell: (row: PeerRow, now: number) => Node | string;
}

const stageText = (r: PeerRow): string => {
  if (r.round === undefined) return "–";
  if (r.max_rounds && r.round >= r.max_rounds) return `done (${r.round} rounds)`;
  return `${r.round}` + (r.stages ? ` · ${r.stage ?? 0}/${r.stages}` : "");
};

const reasonList = (r: PeerRow): Node => {
  const list = el("ul", { class: "reasons" });
  for (const reason of r.reasons) list.append(el("li", { title: reason }, reason));
  return list;
};

const COLUMNS: Column[] = [
  { key: "id", title: "peer", hint: "peer id (from the peer: shown as text)", value: (r) => r.id, cell: (r) => el("span", { class: "peer-id", title: r.id }, r.id) },
  { key: "backend", title: "backend", hint: "communication backend", value: (r) => r.backend ?? "", cell: (r) => el("span", { title: r.backend ?? "" }, (r.backend ?? "–").replace(/Backend$/, "")) },
  { key: "round", title: "round · stage", hint: "round in progress and stages done in it", value: (r) => r.round ?? -1, cell: stageText },
  { key: "last_seen", title: "last seen", hint: "last write to its metrics or events", value: (r) => r.last_seen ?? 0, cell: (r, now) => ago(r.last_seen, now) },
  { key: "reward", title: "reward", hint: "own reward in its last round (or the swarm's score of it)", value: (r) => r.reward ?? r.scored ?? -Infinity, cell: (r) => fixed(r.reward ?? r.scored) },
  { key: "eval", title: "eval", hint: "last evaluation", value: (r) => r.eval ?? -Infinity, cell: (r) => fixed(r.eval) },
  { key: "latency", title: "exchange", hint: "exchange time of its last round (all stages)", value: (r) => r.latency ?? -1, cell: (r) => seconds(r.latency) },
  { key: "dropped", title: "dropped", hint: "its payloads or bodies others dropped", value: (r) => r.dropped, cell: (r) => count(r.dropped) },
  { key: "quarantined_by", title: "quarantined", hint: "peers quarantining it now (times in all)", value: (r) => r.quarantined_by, cell: (r) => `${r.quarantined_by} (${r.quarantines})` },
  { key: "reasons", title: "reasons", hint: "latest drop and quarantine reasons", value: (r) => r.reasons.join(" "), cell: reasonList },
];

export class PeerTable {
  private rows: PeerRow[] = [];
  private sortKey = "id";
  private descending = false;
  private filter = "";
  private page = 0;
  private now = Date.now() / 1000;
  constructor(private readonly pageSize: number, private readonly onToggle: (id: string) => void, private readonly isSelected: (id: string) => boolean) {
    byId<HTMLInputElement>("peer-filter").addEventListener("input", (e) => {
      this.filter = (e.target as HTMLInputElement).value.toLowerCase();
      this.page = 0;
      this.draw();
    });
    byId("peer-prev").addEventListener("click", () => this.turn(-1));
    byId("peer-next").addEventListener("click", () => this.turn(1));
    const head = el("tr");
    for (const c of COLUMNS) {
      const th = el("th", { title: c.hint, "data-key": c.key }, c.title);
      th.addEventListener("click", () => this.sortBy(c.key));
      head.append(th);
    }
    byId("peers-head").replaceChildren(head);
  }

  update(rows: PeerRow[], now: number): void {
    this.rows = rows;
    this.now = now;
    this.draw();
  }

  private sortBy(key: string): void {
    this.descending = this.sortKey === key ? !this.descending : key !== "id";
    this.sortKey = key;
    this.draw();
  }

  private turn(by: number): void {
    this.page += by;
    this.draw();
  }

  private visible(): PeerRow[] {
    const column = COLUMNS.find((c) => c.key === this.sortKey) ?? COLUMNS[0];
    const sign = this.descending ? -1 : 1;
    return this.rows
      .filter((r) => !this.filter || r.id.toLowerCase().includes(this.filter) || (r.backend ?? "").toLowerCase().includes(this.filter))
      .sort((a, b) => {
        const x = column.value(a), y = column.value(b);
        return sign * (x < y ? -1 : x > y ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
      });
  }

  draw(): void {
    const rows = this.visible();
    const pages = Math.max(1, Math.ceil(rows.length / this.pageSize));
    this.page = Math.min(Math.max(0, this.page), pages - 1);
    const body = byId("peers-body");
    const shown = rows.slice(this.page * this.pageSize, (this.page + 1) * this.pageSize);
    body.replaceChildren(...shown.map((r) => this.row(r)));
    byId("peer-page").textContent = `page ${this.page + 1} of ${pages} · ${rows.length} peers`;
    byId<HTMLButtonElement>("peer-prev").disabled = this.page === 0;
    byId<HTMLButtonElement>("peer-next").disabled = this.page >= pages - 1;
    for (const th of byId("peers-head").querySelectorAll("th")) {
      th.classList.toggle("sorted", th.dataset.key === this.sortKey);
      th.classList.toggle("desc", th.dataset.key === this.sortKey && this.descending);
    }
  }

  private row(r: PeerRow): HTMLTableRowElement {
    const classes = ["peer"];
    if (!r.local) classes.push("remote");
    if (r.quarantined_by > 0) classes.push("quarantined");
    if (this.isSelected(r.id)) classes.push("selected");
    const tr = el("tr", { class: classes.join(" "), "data-peer": r.id });
    for (const c of COLUMNS) tr.append(el("td", { "data-col": c.key }, c.cell(r, this.now)));
    tr.addEventListener("click", () => {
      this.onToggle(r.id);
      this.draw();
    });
    return tr;
  }
}
