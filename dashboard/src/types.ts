// The snapshot the server pushes (src/genrl_swarm/dashboard/view.py builds it).
// Every string in it may come from an untrusted peer: render with textContent only.

export type Num = number | null;

export interface PeerRow {
  id: string;
  local: boolean;
  run?: string;
  backend?: string | null;
  round?: number;
  stage?: number;
  stages?: number | null;
  max_rounds?: number | null;
  rounds_done?: number;
  last_seen?: Num;
  reward?: Num;
  eval?: Num;
  scored?: Num;
  cumulative?: Num;
  wins?: Num;
  latency?: Num;
  drops_made?: Num;
  quarantining?: Num;
  live?: boolean;
  dropped: number;
  quarantined_by: number;
  quarantines: number;
  reasons: string[];
}

export interface Standing {
  id: string;
  cumulative: number;
  wins: number;
  rounds?: number;
  account?: string;
  game?: string; // local standings: ranked within their game (the recipe's name), never across games
  run?: string;
  rank?: number; // 1 = the best of its game
}

export interface Chain {
  contract: string;
  round?: number;
  stage?: number;
  stages?: number;
  rows?: Standing[];
  error?: string | null;
}

// One watched run: its own rounds, never mixed with another run's.
export interface RunProgress {
  run: string;
  game: string;
  state: "running" | "stopped" | "finished";
  rounds_done: number;
  max_rounds: number | null;
  round: number;
  stages: number | null;
  peers_at: [number, number][];
  last_write: Num;
}

// Curves per peer and their mean per run on an x of their own (the metric picker, held-out accuracy).
export interface PeerCurves {
  x: number[];
  peers: Record<string, Num[]>;
  means: Record<string, Num[]>; // "swarm mean", or "<run> mean" per run when several are watched
}

export interface Curves {
  x: number[];
  reward: Record<string, Num[]>;
  eval?: Record<string, Num[]>; // absent: no peer evaluates (the chart is hidden, not drawn empty)
  swarm_mean: Num[];
  times?: { generate: Num[]; exchange: Num[]; train: Num[] };
  marl?: { steps: Num[]; eval_return: Num[]; eval_std: Num[] };
  tasks?: Record<string, Num[]>;
  heldout?: PeerCurves; // x: rounds trained (0 = before training); absent: no peer logs held-out accuracy
}

export interface Incident {
  t: Num;
  round: number | null;
  stage: number | null;
  observer: string;
  sender: string;
  kind: string;
  reason: string;
}

export interface Snapshot {
  version: number;
  time: number;
  runs: string[];
  progress: RunProgress[]; // one per watched run
  state: "running" | "stopped" | "finished";
  peers: PeerRow[];
  leaderboard: Standing[]; // grouped by game, best first in each
  chain: Chain | null;
  curves: Curves;
  incidents: Incident[];
  status_errors: string[];
  metrics: string[]; // numeric keys the peers log: the metric picker's choices (their curves: api/metric?key=)
}

// api/metric?key=...: one key per peer (named as in the snapshot) and its mean per run.
export interface MetricCurves extends PeerCurves {
  key: string;
  version: number;
}
