// The metric picker: any numeric key the peers log, per peer and as the swarm mean (one mean
// per run when several are watched). The snapshot lists the keys; the curves of the picked
// one are asked for (api/metric?key=...) once per snapshot, so a tick never carries every key.
// Keys come from peers' files: they are option text and a query value, nothing else.

import { LineChart, meanLines, type Line } from "./charts";
import { byId, el } from "./dom";
import type { MetricCurves, Num } from "./types";

// Keys the other charts already show, and the process's memory (mem/: picked by hand): the
// default pick is the first key outside them (a game's own metric).
const CHARTED = /^(reward\/|eval\/|heldout\/|mem\/|time\/|trust\/|swarm\/|success\/|wins$)/;

export class MetricPicker {
  private readonly select = byId<HTMLSelectElement>("metric-pick");
  private readonly chart = new LineChart(byId("chart-metric"), "value");
  private key = "";
  private listed = "";
  private version = 0;
  private asked = ""; // key@version of the last request
  private busy = false;
  private data: MetricCurves | null = null;

  constructor(private readonly peerLines: (curves: Record<string, Num[]>) => Line[]) {
    this.select.addEventListener("change", () => {
      this.key = this.select.value;
      this.data = null;
      void this.ask();
    });
  }

  update(keys: string[], version: number): void {
    this.version = version;
    byId("metric").hidden = keys.length === 0; // nothing logged yet: no empty frame
    const listed = JSON.stringify(keys);
    if (listed !== this.listed) {
      this.listed = listed;
      this.select.replaceChildren(...keys.map((k) => el("option", { value: k }, k)));
    }
    if (!keys.includes(this.key)) {
      this.key = keys.find((k) => !CHARTED.test(k)) ?? (keys.includes("reward/own") ? "reward/own" : keys[0] ?? "");
      this.data = null;
    }
    this.select.value = this.key;
    void this.ask();
  }

  private async ask(): Promise<void> {
    const want = `${this.key}@${this.version}`;
    if (this.key === "" || this.busy || want === this.asked) return;
    this.busy = true;
    this.asked = want;
    try {
      const response = await fetch(`api/metric?key=${encodeURIComponent(this.key)}`, { cache: "no-store" });
      const data = response.ok ? ((await response.json()) as MetricCurves) : null;
      if (data === null || data.key === this.key) {
        this.data = data;
        this.draw();
      }
    } catch {
      this.asked = ""; // the server is away: the next snapshot asks again
    } finally {
      this.busy = false;
    }
    if (`${this.key}@${this.version}` !== this.asked && this.asked !== "") void this.ask();
  }

  draw(): void {
    const d = this.data;
    const empty = d === null || d.x.length === 0;
    byId("metric-empty").hidden = !empty;
    byId("chart-metric").hidden = empty;
    if (d === null || empty) return;
    this.chart.update(d.x, [...this.peerLines(d.peers), ...meanLines(d.means)]);
    const host = byId("chart-metric");
    host.dataset.key = d.key;
    host.dataset.lines = JSON.stringify([...Object.keys(d.peers), ...Object.keys(d.means)].sort());
    byId("metric-note").textContent = `${d.x.length} points per curve`;
  }
}
