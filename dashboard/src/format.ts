// Numbers and times as the tables show them.

export function fixed(value: number | null | undefined, digits = 3): string {
  return value === null || value === undefined || !Number.isFinite(value) ? "–" : value.toFixed(digits);
}

export function count(value: number | null | undefined): string {
  return value === null || value === undefined || !Number.isFinite(value) ? "–" : String(Math.round(value));
}

export function seconds(value: number | null | undefined): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return "–";
  return value < 1 ? `${(value * 1000).toFixed(0)} ms` : `${value.toFixed(2)} s`;
}

export function ago(unix: number | null | undefined, now: number): string {
  if (unix === null || unix === undefined || !Number.isFinite(unix)) return "–";
  const s = Math.max(0, now - unix);
  if (s < 60) return `${s.toFixed(0)} s ago`;
  if (s < 3600) return `${(s / 60).toFixed(0)} min ago`;
  return `${(s / 3600).toFixed(1)} h ago`;
}

const PALETTE = ["#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f", "#bab0ac"];

// A color per peer from its place among all peers (sorted ids): distinct for the first ten,
// then spread around the hue circle; the same peer keeps its color while the swarm does.
export function colorAt(index: number): string {
  return index < PALETTE.length ? PALETTE[index] : `hsl(${Math.round((index * 137.508) % 360)}, 60%, 45%)`;
}

// A color for a name outside the peers (tasks): a hash of the name.
export function colorOf(name: string): string {
  let h = 2166136261;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 16777619);
  return `hsl(${(h >>> 0) % 360}, 65%, 45%)`;
}
