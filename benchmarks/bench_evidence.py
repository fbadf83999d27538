"""Issue 46's pre-registered experiment (docs/evidence.md): does sharing help, on the exact metric?

Three arms per seed, each in its own process (its memory freed when it ends, its CPU time and
peak RSS its own), on the pilot's game (bench_sharing.py: 3 specialists, per-peer questions):

- ``sharing``: 4 questions per peer-round, trains on 2 own + 2 informative swarm groups;
- ``isolated``: 4 questions, trains on its 4 own (equal generation);
- ``isolated_rows``: ``rows_factor`` x 4 questions, trains on exactly as many informative own
  groups as peer i of ``sharing`` did in the same round of the same seed (equal training rows;
  it runs after ``sharing`` and replays its counts; a shortfall is recorded).

Metric and training reward: ``stated`` (``rewards.reasoning.stated_accuracy``: the first line
states the answer and nothing else; docs/evidence.md amendment 2: the registered ``exact``, a
closed ``<answer>`` tag, is never written by this model); ``exact``, lenient accuracy and Reasoning
Gym's partial-credit score are recorded beside it. Every swarm token weighs 1 (the pilot's game;
amendment 3). Held-out: greedy, before training and every ``--every`` rounds.

Records, in ``--out``: ``arms.jsonl`` (one line per finished arm) and ``seeds.jsonl`` (one line
per finished seed: its arms and the paired differences). Run the same command again and it
resumes: finished seeds and arms are skipped, a half-written last line is dropped. Settings other
than those the folder's records were made with are refused (use another ``--out``).

    python benchmarks/bench_evidence.py --calibrate                       # step 0: the budget rule
    python benchmarks/bench_evidence.py --max-new-tokens 8                # the 14 seeds, resumable (B = 8: amendment 2)
    python benchmarks/bench_evidence.py --analyze                         # the pre-registered analysis
    python benchmarks/bench_evidence.py --model tiny-random --rounds 1 --tasks 2 --generations 4 \\
        --eval-size 9 --max-new-tokens 8 --seeds 100-101 --out /tmp/ev       # smoke (minutes)
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from common import machine, table

ARMS = ("sharing", "isolated", "isolated_rows")
OPS = ("+", "-", "*")
METRICS = ("stated", "exact", "lenient", "rg", "format")
PREREGISTERED_SEEDS = tuple(range(100, 114))
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


@dataclass(frozen=True)
class Settings:
    """Everything that decides an arm's outcome besides its seed: a folder's records share one."""

    model: str = SMOLLM2
    rounds: int = 8
    every: int = 2
    tasks: int = 4
    generations: int = 8
    max_new_tokens: int = 0
    lr: float = 3e-5
    eval_size: int = 96
    rows_factor: int = 2
    shaping: float = 0.0  # lenient_weight of the training reward (the calibration's fallback: 0.5)
    metric: str = "stated"  # the primary metric and the training reward's answer rule (amendment 2)
    swarm_weight_bound: bool = False  # every swarm token weighs 1, as in the pilot (amendment 3)
    beta: float = 0.0  # KL weight to the starting model (grpo.beta); 0 in every registered arm

    def key(self) -> str:
        """A digest of the settings; a field added after records were made counts only when it is
        not its default, so those records keep their key."""
        later = {"beta": 0.0}
        kept = {k: v for k, v in asdict(self).items() if k not in later or v != later[k]}
        return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------------------- scoring
def score_texts(tasks: Sequence[Any], texts: Sequence[str]) -> dict[str, dict[str, float]]:
    """metric -> op (and "all") -> mean over ``tasks``: stated, exact, lenient, Reasoning Gym's default
    score (partial credit) and format (one closed answer block)."""
    from genrl_swarm.paradigms.lm.answers import tagged_answer, well_formatted
    from genrl_swarm.rewards.reasoning import exact_accuracy, lenient_accuracy, stated_accuracy
    from genrl_swarm.scoring.rg_exact import default

    each: dict[str, Callable[[Any, str], float]] = {
        "stated": stated_accuracy,
        "exact": exact_accuracy,
        "lenient": lenient_accuracy,
        "rg": lambda t, x: default(tagged_answer(x), {"answer": t.answer}),
        "format": lambda t, x: float(well_formatted(x)),
    }
    out: dict[str, dict[str, float]] = {}
    for name, fn in each.items():
        values = [(t.prompt.split()[3], fn(t, x)) for t, x in zip(tasks, texts)]
        out[name] = {op: statistics.mean(v for o, v in values if o == op) for op in OPS if any(o == op for o, _ in values)}
        out[name]["all"] = statistics.mean(v for _, v in values)
    return out


FAILURES = ("right", "other_op", "wrong", "unstated")


def failure_kinds(tasks: Sequence[Any], texts: Sequence[str]) -> dict[str, dict[str, int]]:
    """op -> why each held-out answer is what it is (the decline's diagnosis, issue 46 item 3):
    ``right``; ``other_op``: the first line states the result of another operation on the same
    operands (a ``+`` specialist answering 4 * 7 with 11); ``wrong``: another number;
    ``unstated``: the first line states nothing (an echo, words, a truncated expression)."""
    from genrl_swarm.data.digits import solve
    from genrl_swarm.rewards.reasoning import stated_answer

    out = {op: dict.fromkeys(FAILURES, 0) for op in OPS}
    for t, x in zip(tasks, texts):
        a, op, b = t.prompt.split()[2], t.prompt.split()[3], t.prompt.split()[4].rstrip("?")
        said = stated_answer(t, x)
        others = {str(solve(int(a), o, int(b))) for o in OPS if o != op} - {t.answer}
        kind = "unstated" if said is None else "right" if said == t.answer else "other_op" if said in others else "wrong"
        out[op][kind] += 1
    return out


def top_answers(tasks: Sequence[Any], texts: Sequence[str], k: int = 3) -> list[tuple[str, int]]:
    """The ``k`` answers the first lines state most often (None: nothing stated), with counts: a
    policy collapsed onto one answer shows here."""
    from genrl_swarm.rewards.reasoning import stated_answer

    return Counter(str(stated_answer(t, x)) for t, x in zip(tasks, texts)).most_common(k)


#: What each update reports (``GRPOLearner.train``) that the arm keeps per peer and round.
UPDATE_KEYS = ("train/sequences", "train/grad_norm", "train/is_weight_mean", "train/clip_frac", "train/kl", "train/loss")


def greedy_texts(policy: Any, tasks: Sequence[Any]) -> list[str]:
    bodies = policy.act([t.input(0) for t in tasks], 0, greedy=True)
    return [policy.texts(b)[0] for b in bodies]


def mean_scores(per_peer: Sequence[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    return {m: {k: statistics.mean(p[m][k] for p in per_peer) for k in per_peer[0][m]} for m in per_peer[0]}


# ------------------------------------------------------------------------------ the rows-matched draw
def informative(rewards: Sequence[float]) -> bool:
    return max(rewards) - min(rewards) > 1e-6


def rows_select(groups: Sequence[Any], want: int, rng: random.Random) -> tuple[list[Any], int]:
    """``want`` of the informative ``groups`` (ScoredRollouts) in a random order, and the shortfall
    when there are fewer: arm C trains on as many informative groups as arm A did."""
    pool = [g for g in groups if informative(g.rewards)]
    rng.shuffle(pool)
    return pool[:want], max(0, want - len(pool))


# ------------------------------------------------------------------------------- one arm (a child)
def overrides(s: Settings, seed: int, arm: str, out: str, peers: int = len(OPS)) -> list[str]:
    tasks = s.tasks * (s.rows_factor if arm == "isolated_rows" else 1)
    local, external = {"sharing": (s.tasks // 2, s.tasks - s.tasks // 2), "isolated": (s.tasks, 0), "isolated_rows": (-1, 0)}[arm]
    reward = [f"+reward.answer_rule={s.metric}", *([f"+reward.lenient_weight={s.shaping}"] if s.shaping else [])]
    return [
        f"seed={seed}", f"swarm.num_peers={peers}", f"game.max_rounds={s.rounds}", "game.mode=train",
        f"run.dir={out}", "run.console=false", "run.tensorboard=false", "run.plot=false", "run.checkpoint_every=0",
        f"data.tasks_per_round={tasks}", f"data.eval_size={s.eval_size}", "data.questions=per_peer",
        *(f"+data.peer_ops.peer-{i}=['{op}']" for i, op in enumerate(OPS[:peers])),
        f"policy.model={s.model}", f"policy.sampling.max_new_tokens={s.max_new_tokens}",
        f"policy.sampling.num_generations={s.generations}", f"learner.grpo.learning_rate={s.lr}",
        f"learner.grpo.num_local={local}", f"learner.grpo.num_external={external}", *reward,
        f"++learner.grpo.swarm_weight_bound={s.swarm_weight_bound}", f"++learner.grpo.beta={s.beta}",
    ]  # fmt: skip


def play_arm(s: Settings, seed: int, arm: str, schedule: dict[str, list[int]] | None) -> dict[str, Any]:
    """Train one arm of one seed; its scores, curve and training rows."""
    from genrl_swarm.config import load_recipe
    from genrl_swarm.data.reasoning_gym import stable_seed
    from genrl_swarm.run.launcher import Checkpointer, build_managers, run_managers

    with tempfile.TemporaryDirectory() as out:
        managers, _ = build_managers(load_recipe("reasoning_gym/digits", overrides(s, seed, arm, out)))
        held_out = managers[0].data.eval_tasks()
        before = score_texts(held_out, greedy_texts(managers[0].policy, held_out))  # every peer starts from these weights
        points: dict[int, dict[str, dict[str, dict[str, float]]]] = {}  # rounds -> peer -> scores
        kinds: dict[int, dict[str, dict[str, dict[str, int]]]] = {}  # rounds -> peer -> op -> failure kind -> count
        answers: dict[int, dict[str, list[tuple[str, int]]]] = {}  # rounds -> peer -> its commonest stated answers
        updates: dict[str, list[list[float]]] = {m.peer_id: [] for m in managers}  # peer -> [round, *UPDATE_KEYS]
        rows: dict[str, dict[int, tuple[int, int, int]]] = {m.peer_id: {} for m in managers}  # peer -> round -> (groups, sequences, shortfall)

        def curve(m: Any, result: Any) -> None:
            done = result.round + 1
            updates[m.peer_id].append([float(done), *(float(result.metrics.get(k, float("nan"))) for k in UPDATE_KEYS)])
            if done == s.rounds or (s.every > 0 and done % s.every == 0):
                texts = greedy_texts(m.policy, held_out)
                sc = points.setdefault(done, {})[m.peer_id] = score_texts(held_out, texts)
                why = kinds.setdefault(done, {})[m.peer_id] = failure_kinds(held_out, texts)
                answers.setdefault(done, {})[m.peer_id] = top_answers(held_out, texts)
                print(
                    f"  seed {seed} {arm} {m.peer_id} round {done}: {s.metric} {sc[s.metric]['all']:.3f}, lenient {sc['lenient']['all']:.3f}"
                    f" | {json.dumps(why, separators=(',', ':'))}",
                    flush=True,
                )  # a killed arm leaves its curve in the log

        for m in managers:
            m.hooks.after_round = [h for h in m.hooks.after_round if not isinstance(h, Checkpointer)] + [curve]
            m.hooks.after_game = []
            instrument(m, arm, schedule, rows[m.peer_id], random.Random(stable_seed(seed, "rows", m.peer_id)))
        run_managers(managers)
    per_round = [r for peer in rows.values() for r in peer.values()]
    curve_points = [(0, before)] + [(r, mean_scores(list(p.values()))) for r, p in sorted(points.items()) if len(p) == len(managers)]
    return {
        "before": before,
        "after": curve_points[-1][1],
        "curve": [[r, sc[s.metric]["all"], sc["lenient"]["all"]] for r, sc in curve_points],
        "failures": {r: kinds[r] for r in sorted(kinds)},  # rounds -> peer -> op -> kind -> count (failure_kinds)
        "answers": {r: answers[r] for r in sorted(answers)},  # rounds -> peer -> commonest stated answers (top_answers)
        "updates": {"keys": ["round", *UPDATE_KEYS], **updates},  # per peer and round, what its update reported
        "train": {
            "groups_per_update": statistics.mean(g for g, _, _ in per_round) if per_round else 0.0,
            "sequences_per_update": statistics.mean(q for _, q, _ in per_round) if per_round else 0.0,
            "shortfall": sum(f for _, _, f in per_round),
            "schedule": {p: [v[r][0] for r in sorted(v)] for p, v in sorted(rows.items())},
        },
    }


def instrument(m: Any, arm: str, schedule: dict[str, list[int]] | None, log: dict[int, tuple[int, int, int]], rng: random.Random) -> None:
    """Wrap the learner's draw: record what it trains on (informative groups: the only ones with a
    gradient), and in ``isolated_rows`` cut its own groups to arm A's count for this peer and round."""
    learner, draw = m.learner, m.learner.select

    def select(state: Any, rewards: Any) -> list[Any]:
        chosen, short = draw(state, rewards), 0
        if arm == "isolated_rows":
            if schedule is None:
                raise RuntimeError("isolated_rows needs the sharing arm's schedule")
            wanted = schedule[m.peer_id]
            chosen, short = rows_select(chosen, wanted[rewards.round] if rewards.round < len(wanted) else 0, rng)
        useful = [g for g in chosen if informative(g.rewards)]
        log[rewards.round] = (len(useful), sum(len(g.rewards) for g in useful), short)
        return chosen

    learner.select = select


def child(spec: str) -> None:
    job = json.loads(spec)
    s = Settings(**job["settings"])
    result = play_arm(s, job["seed"], job["arm"], job.get("schedule"))
    path = Path(job["result"])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------ the records
def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records in ``path``; a last line cut short (a crash mid-write) is dropped from the file."""
    if not path.exists():
        return []
    text = path.read_text()
    if text and not text.endswith("\n"):
        keep = text[: text.rfind("\n") + 1]
        print(f"{path.name}: dropping a half-written last line ({len(text) - len(keep)} bytes)", flush=True)
        path.write_text(keep)
        text = keep
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def spawn(s: Settings, seed: int, arm: str, schedule: dict[str, list[int]] | None, out: Path) -> dict[str, Any]:
    """Run one arm in a child process; its record with the child's own CPU time and peak RSS."""
    result = out / f".arm-{seed}-{arm}.json"
    result.unlink(missing_ok=True)
    job = {"settings": asdict(s), "seed": seed, "arm": arm, "schedule": schedule, "result": str(result)}
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    started, load0, t0 = datetime.datetime.now(datetime.timezone.utc), os.getloadavg()[0], time.perf_counter()
    code = code_version()  # the checkout the child starts from (read at its start: a commit during the arm is not its code)
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(job)], env=env)
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0 or not result.exists():
        raise ArmFailed(f"seed {seed} arm {arm}: the child exited with {_status(proc.returncode)}")
    record = json.loads(result.read_text())
    result.unlink()
    return {
        "seed": seed, "arm": arm, "settings_key": s.key(), "metric": s.metric, "code": code, **record,
        "wall_s": round(time.perf_counter() - t0, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "load": [round(load0, 2), round(os.getloadavg()[0], 2)],
        "started": started.isoformat(timespec="seconds"),
        "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }  # fmt: skip


def code_version() -> str:
    """The commit the arm ran (with ``+dirty`` when the tree differs from it): records say what made them."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "../src", "."], cwd=here, capture_output=True, text=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (head or "unknown") + ("+dirty" if dirty else "")


class ArmFailed(RuntimeError):
    pass


def _status(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"status {code}"


def seed_record(s: Settings, seed: int, arms: dict[str, dict[str, Any]]) -> dict[str, Any]:
    final = {a: r["after"][s.metric]["all"] for a, r in arms.items()}
    auc = {a: statistics.mean(e for rounds, e, _ in r["curve"] if rounds > 0) for a, r in arms.items()}
    return {
        "seed": seed, "settings_key": s.key(), "settings": asdict(s),
        "diff": {
            "sharing-isolated": final["sharing"] - final["isolated"],
            "sharing-isolated_rows": final["sharing"] - final["isolated_rows"],
            "auc sharing-isolated": auc["sharing"] - auc["isolated"],
            "lenient sharing-isolated": arms["sharing"]["after"]["lenient"]["all"] - arms["isolated"]["after"]["lenient"]["all"],
        },
        "cpu_s": round(sum(r["cpu_s"] for r in arms.values()), 1),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in arms.values()),
        "wall_s": round(sum(r["wall_s"] for r in arms.values()), 1),
        "arms": {a: {k: v for k, v in r.items() if k not in ("seed", "settings_key")} for a, r in arms.items()},
    }  # fmt: skip


def run(s: Settings, seeds: Sequence[int], out: Path, retries: int, only: Sequence[str] = ARMS) -> int:
    out.mkdir(parents=True, exist_ok=True)
    arms_path, seeds_path = out / "arms.jsonl", out / "seeds.jsonl"
    arm_records, seed_records = read_jsonl(arms_path), read_jsonl(seeds_path)
    other = {r["settings_key"] for r in arm_records + seed_records} - {s.key()}
    if other:
        print(f"bench_evidence: {out} holds records made with other settings ({', '.join(sorted(other))}, "
              f"these are {s.key()}): use another --out", file=sys.stderr)  # fmt: skip
        return 2
    done = {r["seed"] for r in seed_records}
    print(f"{machine()} | settings {s.key()}: {json.dumps(asdict(s))}", flush=True)
    for seed in seeds:
        if seed in done:
            print(f"seed {seed}: done before, kept", flush=True)
            continue
        arms = {r["arm"]: r for r in arm_records if r["seed"] == seed}
        for arm in (a for a in ARMS if a in only):
            if arm in arms:
                print(f"seed {seed} {arm}: done before, kept", flush=True)
                continue
            schedule = arms["sharing"]["train"]["schedule"] if arm == "isolated_rows" else None
            for attempt in range(1, retries + 2):
                try:
                    arms[arm] = spawn(s, seed, arm, schedule, out)
                    break
                except ArmFailed as e:
                    print(f"{e} (attempt {attempt} of {retries + 1})", flush=True)
            else:
                print(f"bench_evidence: seed {seed} arm {arm} failed {retries + 1} times: stopped; the same command "
                      "resumes (docs/evidence.md: a seed failing three times is reported and replaced)", file=sys.stderr)  # fmt: skip
                return 1
            r = arms[arm]
            append_jsonl(arms_path, r)
            short = f", shortfall {r['train']['shortfall']}" if arm == "isolated_rows" else ""
            print(f"seed {seed} {arm}: {s.metric} {r['before'][s.metric]['all']:.3f} -> {r['after'][s.metric]['all']:.3f}, "
                  f"lenient {r['before']['lenient']['all']:.3f} -> {r['after']['lenient']['all']:.3f}, "
                  f"{r['train']['groups_per_update']:.2f} groups / {r['train']['sequences_per_update']:.1f} sequences per update"
                  f"{short}, {r['wall_s']:.0f} s, CPU {r['cpu_s']:.0f} s, peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)  # fmt: skip
        if set(arms) != set(ARMS):
            continue  # an exploratory subset of the arms: no seed record
        record = seed_record(s, seed, arms)
        append_jsonl(seeds_path, record)
        seed_records.append(record)
        d = record["diff"]
        print(f"seed {seed} done: sharing - isolated {d['sharing-isolated']:+.3f}, sharing - isolated_rows "
              f"{d['sharing-isolated_rows']:+.3f} | CPU {record['cpu_s']:.0f} s, peak RSS {record['peak_rss_mb']:.0f} MB "
              f"(largest arm), wall {record['wall_s']:.0f} s, load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    analyze(seed_records, s)
    return 0


# ----------------------------------------------------------------------------------- the analysis
@dataclass(frozen=True)
class Paired:
    n: int
    mean: float
    sd: float
    low: float
    high: float
    p: float
    ahead: int
    behind: int
    sign_p: float
    mde: float  # the effect a two-sided paired t-test at 0.05 detects with 80% power at this n and sd


def sign_test(ahead: int, behind: int) -> float:
    """Exact two-sided sign test (ties dropped before): 2 P(Binomial(n, 1/2) >= max(k, n - k)), capped at 1."""
    n = ahead + behind
    if n == 0:
        return 1.0
    k = max(ahead, behind)
    return min(1.0, 2 * sum(math.comb(n, j) for j in range(k, n + 1)) / 2**n)


def power(d: float, n: int, alpha: float = 0.05) -> float:
    from scipy import stats

    df, crit, ncp = n - 1, stats.t.ppf(1 - alpha / 2, n - 1), d * math.sqrt(n)
    return float(stats.nct.sf(crit, df, ncp) + stats.nct.cdf(-crit, df, ncp))


def paired(diffs: Sequence[float]) -> Paired:
    from scipy import stats

    n, mean = len(diffs), statistics.mean(diffs)
    sd = statistics.stdev(diffs) if n > 1 else float("nan")
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n) if n > 1 else float("nan")
    p = float(2 * stats.t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1)) if n > 1 and sd > 0 else float("nan")
    ahead, behind = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    mde = float("nan")
    if n > 2 and sd > 0:
        lo, hi = 0.0, 10.0  # bisect the effect size with 80% power
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if power(mid, n) < 0.8 else (lo, mid)
        mde = hi * sd
    return Paired(n, mean, sd, mean - half, mean + half, p, ahead, behind, sign_test(ahead, behind), mde)


CONTRASTS = (
    ("sharing-isolated", "primary: sharing - isolated, {metric} after the last round"),
    ("sharing-isolated_rows", "(a) sharing - isolated with equal rows, {metric} after the last round"),
    ("auc sharing-isolated", "(b) sharing - isolated, mean {metric} over the curve's points"),
    ("lenient sharing-isolated", "(c) sharing - isolated, lenient after the last round (the pilot's metric)"),
)


def verdict(p: Paired, rounds: int, metric: str) -> str:
    where = f"(95% CI {p.low:+.3f}..{p.high:+.3f}, {p.n} seeds, ahead in {p.ahead} of {p.n}, sign test p = {p.sign_p:.3f})"
    if p.low > 0:
        return f"Sharing helps: after {rounds} rounds, sharing peers' {metric} held-out accuracy is higher than isolated peers' with equal generation by {p.mean:+.3f} {where}."
    if p.high < 0:
        return f"Sharing hurts: after {rounds} rounds, sharing peers' {metric} held-out accuracy is lower than isolated peers' with equal generation by {p.mean:+.3f} {where}."
    return (f"No effect of sharing shown: sharing - isolated = {p.mean:+.3f} (95% CI {p.low:+.3f}..{p.high:+.3f}, {p.n} seeds, "
            f"ahead in {p.ahead} of {p.n}); effects above {p.high:+.3f} are excluded, and the design had 80% power for effects of "
            f"{p.mde:.3f} or more.")  # fmt: skip


def analyze(records: Sequence[dict[str, Any]], s: Settings | None = None) -> None:
    if not records:
        print("no finished seed yet")
        return
    records = sorted(records, key=lambda r: r["seed"])
    s = s or Settings(**records[0]["settings"])
    seeds = [r["seed"] for r in records]
    rows = []
    for arm in ARMS:
        after = [r["arms"][arm]["after"] for r in records]
        rows.append([arm, *(f"{statistics.mean(a[s.metric][k] for a in after):.3f}" for k in (*OPS, "all")),
                     f"{statistics.mean(a['lenient']['all'] for a in after):.3f}",
                     f"{statistics.mean(r['arms'][arm]['train']['groups_per_update'] for r in records):.2f}",
                     f"{statistics.mean(r['arms'][arm]['train']['sequences_per_update'] for r in records):.1f}"])  # fmt: skip
    before = [r["arms"]["sharing"]["before"] for r in records]
    rows.insert(0, ["before", *(f"{statistics.mean(b[s.metric][k] for b in before):.3f}" for k in (*OPS, "all")),
                    f"{statistics.mean(b['lenient']['all'] for b in before):.3f}", "", ""])  # fmt: skip
    print(f"\nseeds {', '.join(map(str, seeds))} | mean over seeds of the 3 peers' mean")
    print(table(["arm", *(f"{s.metric} {o}" for o in OPS), f"{s.metric} all", "lenient all", "groups/update", "sequences/update"], rows))
    out = []
    for key, name in CONTRASTS:
        diffs = [r["diff"][key] for r in records]
        p = paired(diffs)
        out.append([name.format(metric=s.metric), ", ".join(f"{d:+.3f}" for d in diffs), f"{p.mean:+.3f} ± {p.sd:.3f}", f"{p.low:+.3f}..{p.high:+.3f}",
                    f"{p.p:.3f}", f"{p.ahead}/{p.ahead + p.behind}", f"{p.sign_p:.3f}"])  # fmt: skip
    print(table(["contrast", "per seed", "mean ± sd", "95% t-interval", "p", "ahead", "sign p"], out))
    cpu = [r["cpu_s"] for r in records]
    print(f"CPU per seed {statistics.mean(cpu):.0f} s (range {min(cpu):.0f}-{max(cpu):.0f}), peak RSS of an arm up to "
          f"{max(r['peak_rss_mb'] for r in records):.0f} MB")  # fmt: skip
    primary = paired([r["diff"]["sharing-isolated"] for r in records])
    registered = tuple(seeds) == PREREGISTERED_SEEDS and s.model == SMOLLM2 and (s.rounds, s.tasks, s.generations, s.eval_size) == (8, 4, 8, 96)
    registered = registered and s.metric == "stated" and not s.swarm_weight_bound and s.beta == 0.0
    if registered:
        print(f"pre-registered verdict: {verdict(primary, s.rounds, s.metric)}")
    else:
        print(f"exploratory (not the pre-registered 14 seeds and settings; no verdict): {verdict(primary, s.rounds, s.metric)}")


def seed_table(records: Sequence[dict[str, Any]]) -> None:
    """Every finished seed as one markdown row (docs/evidence.md#results): the raw per-seed
    record, with no pooling, so it can be published before the stopping rule allows an interval."""
    head = ["seed", "before", "sharing", "isolated", "isolated, equal rows", "sharing − isolated (primary)", "sharing − equal rows",
            "curve mean, sharing − isolated", "lenient, sharing − isolated", "groups per update (A / B / C)", "C's shortfall", "CPU s", "peak RSS MB"]  # fmt: skip
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in sorted(records, key=lambda r: r["seed"]):
        metric, arms, d = r["settings"]["metric"], r["arms"], r["diff"]
        groups = "/".join(f"{arms[a]['train']['groups_per_update']:.2f}" for a in ARMS)
        cells = [str(r["seed"]), f"{arms['sharing']['before'][metric]['all']:.3f}", *(f"{arms[a]['after'][metric]['all']:.3f}" for a in ARMS),
                 *(f"{d[k]:+.3f}" for k, _ in CONTRASTS), groups, str(arms["isolated_rows"]["train"]["shortfall"]), f"{r['cpu_s']:.0f}",
                 f"{r['peak_rss_mb']:.0f}"]  # fmt: skip
        print("| " + " | ".join(cells) + " |")


# ----------------------------------------------------------------------------------- the curves
def plot_curves(records: Sequence[dict[str, Any]], path: Path) -> None:
    """Held-out accuracy against rounds, one line per arm: the mean over seeds, the band the
    spread (min..max) of the seeds; the metric the records were made with, and lenient dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    metric = records[0].get("metric", "stated")
    for arm in ARMS:
        curves = [r["curve"] for r in records if r["arm"] == arm]
        if not curves:
            continue
        rounds = [c[0] for c in curves[0]]
        color = None
        for col, style in ((1, "-"), (2, "--")):
            ys = [[c[i][col] for c in curves] for i in range(len(rounds))]
            mean = [statistics.mean(y) for y in ys]
            name = metric if col == 1 else "lenient"
            color = ax.plot(rounds, mean, style, color=color, marker="o" if col == 1 else None, label=f"{arm} ({name})")[0].get_color()
            if col == 1 and len(curves) > 1:
                ax.fill_between(rounds, [min(y) for y in ys], [max(y) for y in ys], color=color, alpha=0.15)
    seeds = sorted({r["seed"] for r in records})
    title = f"seeds {', '.join(map(str, seeds))}: mean, band = min..max" if len(seeds) > 1 else f"seed {seeds[0]}, mean of the 3 peers"
    ax.set(xlabel="round", ylabel="held-out accuracy (greedy)", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


# -------------------------------------------------------------------------------- step 0: budget
def calibrate(s: Settings, budgets: Iterable[int] = (8, 16, 24, 32), seed: int = 0) -> int:
    """docs/evidence.md step 0 on the untrained model: greedy accuracy (``s.metric``) on pilot seed 0's
    held-out split per budget; B is the smallest with accuracy >= 0.10."""
    from genrl_swarm.config import load_recipe
    from genrl_swarm.run.launcher import build_managers

    print(f"{machine()} | load average {os.getloadavg()[0]:.1f} | model {s.model}, held-out {s.eval_size} of seed {seed}, untrained, greedy")
    rows, chosen = [], None
    for budget in budgets:
        with tempfile.TemporaryDirectory() as out:
            cfg = load_recipe("reasoning_gym/digits", overrides(Settings(**{**asdict(s), "max_new_tokens": budget}), seed, "isolated", out, peers=1))
            managers, _ = build_managers(cfg)
            tasks = managers[0].data.eval_tasks()
            t0 = time.perf_counter()
            sc = score_texts(tasks, greedy_texts(managers[0].policy, tasks))
            rows.append([budget, *(f"{sc[s.metric][k]:.3f}" for k in (*OPS, "all")), f"{sc['lenient']['all']:.3f}",
                         f"{sc['rg']['all']:.3f}", f"{sc['format']['all']:.3f}", f"{time.perf_counter() - t0:.1f}"])  # fmt: skip
            if chosen is None and sc[s.metric]["all"] >= 0.10:
                chosen = budget
    print(table(["max new tokens", *(f"{s.metric} {o}" for o in OPS), f"{s.metric} all", "lenient all", "rg all", "format", "s"], rows))
    if chosen is None:
        print(f"rule: no budget reaches 0.10: B = 32, training reward {s.metric} + 0.5 x lenient (--max-new-tokens 32 --shaping 0.5)")
    else:
        print(f"rule: B = {chosen} (the smallest budget with {s.metric} >= 0.10): --max-new-tokens {chosen}")
    return 0


def parse_arms(p: argparse.ArgumentParser, text: str) -> tuple[str, ...]:
    arms = tuple(a.strip() for a in text.split(",") if a.strip())
    if not arms or set(arms) - set(ARMS) or ("isolated_rows" in arms and "sharing" not in arms):
        p.error(f"--arms: a subset of {', '.join(ARMS)} (isolated_rows replays sharing's counts, so it needs sharing)")
    return arms


def parse_seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        out += list(range(int(first), int(last or first) + 1))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="runs/evidence", help="where the records are (and resume from)")
    p.add_argument("--seeds", default="100-113", help="e.g. 100-113 or 100,102")
    p.add_argument("--model", default=SMOLLM2)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--every", type=int, default=2, help="held-out curve every this many rounds")
    p.add_argument("--tasks", type=int, default=4, help="questions per peer and round in arms A and B")
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=0, help="the budget B of docs/evidence.md step 0 (required to run)")
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--eval-size", type=int, default=96)
    p.add_argument("--rows-factor", type=int, default=2, help="arm C's questions per round, as a multiple of --tasks")
    p.add_argument("--shaping", type=float, default=0.0, help="lenient_weight of the training reward (0: the metric only)")
    p.add_argument("--metric", default="stated", choices=("stated", "exact"), help="the primary metric and the training reward's answer rule")
    p.add_argument("--beta", type=float, default=0.0, help="exploratory: KL weight to the starting model (grpo.beta)")
    p.add_argument("--swarm-weight-bound", action="store_true", help="bound swarm tokens' weight (grpo.swarm_weight_bound; off as in the pilot)")
    p.add_argument("--arms", default=",".join(ARMS), help="exploratory runs only: a subset of the arms (a seed's record needs all three)")
    p.add_argument("--retries", type=int, default=1, help="reruns of a failed arm before stopping")
    p.add_argument("--calibrate", action="store_true", help="step 0: the budget rule on the untrained model")
    p.add_argument("--analyze", action="store_true", help="the pre-registered analysis of --out's seeds.jsonl")
    p.add_argument("--table", action="store_true", help="every finished seed of --out as a markdown row (no pooling)")
    p.add_argument("--plot", metavar="PNG", help="plot the curves of --out's arms.jsonl into this file")
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a.child)
        return
    fields = (
        "model",
        "rounds",
        "every",
        "tasks",
        "generations",
        "max_new_tokens",
        "lr",
        "eval_size",
        "rows_factor",
        "shaping",
        "metric",
        "swarm_weight_bound",
        "beta",
    )
    s = Settings(**{f: getattr(a, f) for f in fields})
    if a.plot:
        plot_curves(read_jsonl(Path(a.out) / "arms.jsonl"), Path(a.plot))
        return
    if a.table:
        seed_table(read_jsonl(Path(a.out) / "seeds.jsonl"))
        return
    if a.analyze:
        analyze(read_jsonl(Path(a.out) / "seeds.jsonl"))
        return
    if a.calibrate:
        sys.exit(calibrate(s))
    if s.max_new_tokens <= 0:
        p.error("--max-new-tokens: the budget docs/evidence.md's step 0 gives (python benchmarks/bench_evidence.py --calibrate)")
    try:
        sys.exit(run(s, parse_seeds(a.seeds), Path(a.out), a.retries, parse_arms(p, a.arms)))
    except KeyboardInterrupt:
        print("\nstopped: finished arms and seeds are kept; the same command resumes", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
