// uPlot charts that keep the user's zoom across live updates: drag to zoom into rounds,
// double-click to zoom out. A chart's element carries data-series / data-points (what was
// drawn) so the page can be checked without reading pixels.

import uPlot from "uplot";
import { colorOf } from "./format";
import type { Num } from "./types";

// Rounds and steps are whole numbers: no tick at round 2.5.
const WHOLE = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 1e7, 1e8, 1e9];

export interface Line {
  label: string;
  values: Num[];
  color: string;
  dash?: number[];
  width?: number;
}

// A run's mean over its peers: dashed and thick; black when one run is watched.
export function meanLines(means: Record<string, Num[]>): Line[] {
  return Object.entries(means).map(([label, values]) => ({
    label, values, dash: [6, 4], width: 2, color: label === "swarm mean" ? "#222" : colorOf(label),
  }));
}

export class LineChart {
  private plot: uPlot | null = null;
  private labels = "";
  private zoomed = false;

  constructor(private readonly host: HTMLElement, private readonly yLabel: string, private readonly xLabel = "round") {
    host.addEventListener("dblclick", () => (this.zoomed = false));
    new ResizeObserver(() => this.plot?.setSize(this.size())).observe(host);
  }

  update(x: number[], lines: Line[]): void {
    const data = [x, ...lines.map((l) => l.values)] as uPlot.AlignedData;
    const labels = JSON.stringify(lines.map((l) => [l.label, l.color]));
    if (this.plot === null || labels !== this.labels) {
      this.plot?.destroy();
      this.plot = new uPlot(this.options(lines), data, this.host);
      this.labels = labels;
    } else {
      this.plot.setData(data, !this.zoomed);
    }
    this.host.dataset.series = String(lines.length);
    this.host.dataset.points = String(x.length);
  }

  private size(): { width: number; height: number } {
    return { width: Math.max(240, this.host.clientWidth - 8), height: 220 };
  }

  private options(lines: Line[]): uPlot.Options {
    return {
      ...this.size(),
      scales: { x: { time: false } },
      axes: [{ label: this.xLabel, incrs: WHOLE }, { label: this.yLabel }],
      cursor: { drag: { x: true, y: false, setScale: true } },
      legend: { live: true },
      hooks: {
        setSelect: [(u: uPlot) => { if (u.select.width > 0) this.zoomed = true; }],
        setScale: [(u: uPlot, key: string) => { if (key === "x") this.host.dataset.xRange = `${u.scales.x.min},${u.scales.x.max}`; }],
      },
      series: [
        { label: this.xLabel },
        ...lines.map((l) => ({ label: l.label, stroke: l.color, width: l.width ?? 1.5, dash: l.dash, spanGaps: true, points: { show: lines.length <= 8 } })),
      ],
    };
  }
}

// Stacked bars per round: generate, exchange and train seconds (means over peers).
export class StackedBars {
  private plot: uPlot | null = null;
  private parts: Num[][] = [];

  constructor(private readonly host: HTMLElement, private readonly names: string[], private readonly colors: string[]) {
    new ResizeObserver(() => this.plot?.setSize({ width: Math.max(240, host.clientWidth - 8), height: 220 })).observe(host);
  }

  update(x: number[], parts: Num[][]): void {
    this.parts = parts;
    // Series i is drawn as the sum of parts 0..i, tallest first, so each shows as its own band.
    const stacked = parts.map((_, i) => x.map((__, j) => parts.slice(0, i + 1).reduce<number>((s, p) => s + (p[j] ?? 0), 0)));
    const data = [x, ...stacked.reverse()] as uPlot.AlignedData;
    if (this.plot === null) {
      const bars = uPlot.paths.bars ? uPlot.paths.bars({ size: [0.8, 40] }) : undefined;
      const order = this.names.map((n, i) => ({ n, c: this.colors[i], i })).reverse();
      this.plot = new uPlot({
        width: Math.max(240, this.host.clientWidth - 8),
        height: 220,
        scales: { x: { time: false } },
        axes: [{ label: "round", incrs: WHOLE }, { label: "seconds" }],
        cursor: { drag: { x: true, y: false, setScale: true } },
        series: [
          { label: "round" },
          ...order.map(({ n, c, i }) => ({ label: n, fill: c, stroke: c, paths: bars, points: { show: false }, value: (_u: uPlot, _v: number | null, _s: number, idx: number | null) => this.part(i, idx) })),
        ],
      }, data, this.host);
    } else {
      this.plot.setData(data);
    }
    this.host.dataset.points = String(x.length);
  }

  private part(i: number, idx: number | null): string {
    const v = idx === null ? null : this.parts[i]?.[idx];
    return v === null || v === undefined ? "–" : `${v.toFixed(3)} s`;
  }
}
