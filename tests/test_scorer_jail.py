"""The kernel, not Python, keeps a stranger's code away from the peer (issue: Security v2).

Every attack runs through Reasoning Gym's ``spiral_matrix`` scorer, which ``eval``s the answer
text in a real sandboxed worker. Each first switches off the worker's Python audit hook (it finds
the hook's closure with ``gc`` and replaces its ``refuse`` cell: code in the interpreter can always
reach the interpreter's guards), then tries to learn something, and leaks one bit through the
score: 0.1 (the oracle's answer, which ``eval`` can read from the scorer's frame) when it got
what it wanted, else 0.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from genrl_swarm.scoring.pool import ScorerPool

from helpers.spiral import spiral, spiral_entry, spiral_pool

pytest.importorskip("reasoning_gym")
from genrl_swarm.scoring import rg_sandboxed  # noqa: E402, F401 - the scorer the sandbox preloads: it needs Reasoning Gym

SECRET = "0x5ec2e7-chain-key"
#: Replace the audit hook's ``refuse`` with a no-op: afterwards the hook refuses nothing.
BYPASS = (
    "[setattr(c, 'cell_contents', lambda why: None) for f in __import__('gc').get_objects()"
    " if type(f).__name__ == 'function' and f.__name__ == 'hook' and f.__closure__"
    " for c in f.__closure__ if getattr(c.cell_contents, '__name__', '') == 'refuse']"
)


def leak_if(condition: str) -> str:
    """An answer that disables the audit hook, then scores 0.1 exactly when ``condition`` holds."""
    return f"({BYPASS}, oracle_answer.split() if ({condition}) else [])[1]"


@pytest.fixture(scope="module")
def secrets_around(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """A run directory holding a key as the peer's working directory, a 0600 key elsewhere, and
    the chain key in the peer's environment: everything a careless operator leaves around."""
    cwd = tmp_path_factory.mktemp("peer-cwd")
    (cwd / "runs").mkdir()
    (cwd / "runs" / "identity.key").write_text(SECRET)
    private = tmp_path_factory.mktemp("keys") / "chain.key"
    private.write_text(SECRET)
    private.chmod(0o600)
    old_cwd, old_env = os.getcwd(), os.environ.get("GENRL_SWARM_PRIVATE_KEY")
    os.chdir(cwd)
    os.environ["GENRL_SWARM_PRIVATE_KEY"] = SECRET
    try:
        yield {"cwd_file": cwd / "runs" / "identity.key", "private": private}
    finally:
        os.chdir(old_cwd)
        if old_env is None:
            os.environ.pop("GENRL_SWARM_PRIVATE_KEY", None)
        else:
            os.environ["GENRL_SWARM_PRIVATE_KEY"] = old_env


@pytest.fixture(scope="module")
def pool(secrets_around: dict[str, Path]) -> Iterator[ScorerPool]:
    p = spiral_pool()
    yield p
    p.close()


@pytest.fixture(scope="module")
def entry() -> dict:
    return spiral_entry()


def score(pool: ScorerPool, entry: dict, answer: str, budget: float = 2.0, sender: str = "evil") -> tuple[float | str, float]:
    return spiral(pool, entry, answer, sender, budget)


def test_the_bypass_works_so_the_attacks_below_test_the_kernel(pool: ScorerPool, entry: dict) -> None:
    """The audit hook alone refuses this read; after the bypass it does not, so whatever stops
    the attacks below is not Python."""
    assert "forbids" in str(score(pool, entry, "open('/etc/hostname').read()")[0])
    got, _ = score(pool, entry, leak_if("__import__('os').listdir('/') is not None"))
    assert got == 0.1


def test_no_secret_is_readable_once_the_audit_hook_is_off(pool: ScorerPool, entry: dict, secrets_around: dict[str, Path]) -> None:
    attacks = {
        "a file in the peer's working directory": f"open({str(secrets_around['cwd_file'])!r}).read() == {SECRET!r}",
        "the same file by a relative path": f"open('runs/identity.key').read() == {SECRET!r}",
        "a 0600 key outside every allowed directory": f"open({str(secrets_around['private'])!r}).read() == {SECRET!r}",
        "the zygote's environment": f"{SECRET!r}.encode() in open('/proc/%d/environ' % __import__('os').getppid(), 'rb').read()",
        "any process's environment": f"any({SECRET!r}.encode() in open('/proc/%s/environ' % p, 'rb').read() for p in __import__('os').listdir('/proc') if p.isdigit())",
        "its own environment": f"{SECRET!r} in str(__import__('os').environ)",
        "the peer's home": "len(__import__('os').listdir('/root')) > 1 or __import__('os').path.exists('/home')",
        "/etc": "__import__('os').path.exists('/etc/shadow') or __import__('os').path.exists('/etc/passwd')",
        "the peer's processes": f"__import__('os').path.exists('/proc/{os.getpid()}/cmdline') and b'pytest' in open('/proc/{os.getpid()}/cmdline', 'rb').read()",
    }
    leaked = {name: got for name, attack in attacks.items() if (got := score(pool, entry, leak_if(attack))[0]) != 0.0}
    assert not leaked


def test_the_worker_has_no_rights_and_no_terminal(pool: ScorerPool, entry: dict) -> None:
    attacks = {
        "root": "__import__('os').getuid() == 0",
        "a capability": "int(open('/proc/self/status').read().split('CapEff:')[1].split()[0], 16) != 0",
        "/dev/tty": "__import__('os').open('/dev/tty', __import__('os').O_RDONLY) >= 0",
        "the peer's session": f"__import__('os').getsid(0) == {os.getsid(0)}",
    }
    leaked = {name: got for name, attack in attacks.items() if (got := score(pool, entry, leak_if(attack))[0]) != 0.0}
    assert not leaked


def test_a_worker_carries_nothing_from_one_body_to_the_next(pool: ScorerPool, entry: dict) -> None:
    """Two bodies of one stranger: the first plants a value in the interpreter (a builtin) and
    in the scorer's module, the second looks for it."""
    plant = leak_if(
        "setattr(__import__('builtins'), 'CARRIED', 1) or setattr(__import__('sys').modules['genrl_swarm.scoring.rg_sandboxed'], 'CARRIED', 1) or True"
    )
    look = leak_if("hasattr(__import__('builtins'), 'CARRIED') or hasattr(__import__('sys').modules['genrl_swarm.scoring.rg_sandboxed'], 'CARRIED')")
    assert score(pool, entry, plant)[0] == 0.1  # planted
    assert score(pool, entry, look)[0] == 0.0


def stall(kind: str) -> str:
    """Write part of a reply frame on the worker's socket, then hold the peer without computing."""
    write = "__import__('os').write(fd, b'\\x00\\x00\\x00\\x40ab')" if kind == "partial" else "__import__('os').write(fd, b'\\x00')"
    sockets = "[s.fileno() for s in __import__('gc').get_objects() if type(s).__name__ == 'socket' and s.fileno() >= 0]"
    body = f"[{write} for fd in {sockets}]"
    if kind == "partial":
        return leak_if(f"{body} and __import__('time').sleep(30)")
    return leak_if(f"[({body}, __import__('time').sleep(0.3)) for _ in range(200)]")


@pytest.mark.parametrize("kind", ["partial", "drip"])
def test_a_half_written_reply_costs_at_most_the_senders_budget_and_is_charged(pool: ScorerPool, entry: dict, kind: str) -> None:
    """A round of a stranger's bodies, each scored with what is left of its budget (as
    ``score_under_budget`` does): the round waits at most the budget, and every second is the
    stranger's. (The sandbox is warm first: its one-time start is nobody's doing.)"""
    assert score(pool, entry, entry["answer"], sender="warm-up")[0] == 1.0
    budget, spent, began, waited = 1.0, 0.0, time.monotonic(), pool.cpu_wait
    for _ in range(4):
        if spent > budget:
            break
        got, charged = score(pool, entry, stall(kind), budget=budget - spent)
        assert isinstance(got, str), got
        spent += charged
    took = time.monotonic() - began
    assert took <= budget + 0.5 + (pool.cpu_wait - waited), (took, pool.cpu_wait - waited)  # a loaded machine's wait is nobody's
    assert spent >= 0.8 * min(took, budget), (spent, took)


def signal_by_proxy(target: str, signal: int) -> str:
    """A plain answer (no bypass needed: ``pipe`` and ``fcntl`` are not audit events) that makes
    the kernel deliver ``signal`` to ``target`` through an fd's owner (F_SETOWN + F_SETSIG)."""
    return (
        "(lambda os, fcntl: (lambda r, w: (fcntl.fcntl(r, fcntl.F_SETOWN, " + target + "), fcntl.fcntl(r, 10, " + str(signal) + "),"
        " fcntl.fcntl(r, fcntl.F_SETFL, os.O_ASYNC), os.write(w, b'x')))(*os.pipe()))(__import__('os'), __import__('fcntl'))"
    )


NEXT_WORKER = "max(int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, 2, os.getpid()))"


@pytest.mark.parametrize(("target", "signal"), [("os.getppid()", 19), ("os.getppid()", 9), (NEXT_WORKER, 19), (NEXT_WORKER, 9)])
def test_a_worker_cannot_signal_the_zygote_or_the_next_worker_by_proxy(pool: ScorerPool, entry: dict, target: str, signal: int) -> None:
    """Stopping the zygote froze every later call for 120 s each; stopping the next worker
    charged the next honest sender its budget and dropped its body. Honest calls after the
    attack must be as before: scored, fast, barely charged."""
    honest = entry["answer"]
    assert score(pool, entry, honest, sender="honest-before")[0] == 1.0
    score(pool, entry, signal_by_proxy(target, signal))
    score(pool, entry, leak_if(signal_by_proxy(target, signal)))  # and after switching the audit hook off
    for sender in ("honest-after", "honest-later"):
        began = time.monotonic()
        got, charged = score(pool, entry, honest, sender=sender)
        assert got == 1.0 and charged < 0.5 and time.monotonic() - began < 5, (got, charged)


def test_memory_in_files_is_refused(pool: ScorerPool, entry: dict) -> None:
    """memfd_create held 1.5 GB outside RLIMIT_AS; pipes are bounded by the open-file limit."""
    memfd = "[__import__('os').write(__import__('os').memfd_create('m'), b'x' * (1 << 20)) for _ in range(64)]"
    pipes = "[__import__('os').pipe() for _ in range(64)]"
    for attack in (memfd, pipes):
        assert score(pool, entry, leak_if(f"{attack} is not None"))[0] == 0.0


def test_a_forged_reply_is_never_a_non_finite_score_nor_a_control_sequence(pool: ScorerPool, entry: dict) -> None:
    """The worker's reply is the stranger's word: a forged NaN or an error text holding terminal
    escapes reaches neither training nor this peer's logs as such."""
    nonce = "[f.f_locals['nonce'] for f in [__import__('sys')._getframe(i) for i in range(1, 12)] if 'nonce' in f.f_locals][0]"
    sockets = "[s for s in __import__('gc').get_objects() if type(s).__name__ == 'socket' and s.fileno() >= 0]"

    def forge(reply: str) -> str:
        frame = f"(lambda b: len(b).to_bytes(4, 'big') + b)(__import__('msgspec').msgpack.encode({reply}))"
        return f"({BYPASS}, [__import__('os').write(s.fileno(), {frame}) for s in {sockets}], __import__('os')._exit(0))[2]"

    got, _ = score(pool, entry, forge(f"{{'value': float('nan'), 'nonce': {nonce}}}"))
    assert isinstance(got, str) and "nan" in got
    got, _ = score(pool, entry, forge(f"{{'error': 'x\\x1b]0;owned\\x07\\r\\x1b[2Kfake log line', 'nonce': {nonce}}}"))
    assert isinstance(got, str) and "\x1b" not in got and "\r" not in got, repr(got)


def test_a_peer_started_from_a_terminal_keeps_it_to_itself(tmp_path: Path) -> None:
    """The peer runs on a pseudo-terminal of its own (as from a shell). A worker that opens
    /dev/tty, or the pty it could find, and pushes a command into it with TIOCSTI (legacy kernels
    execute what it types in the shell that started the peer) must find neither."""
    script = tmp_path / "peer.py"
    script.write_text(
        textwrap.dedent(f"""
        import reasoning_gym
        from genrl_swarm.core.meter import metered
        from genrl_swarm.scoring.pool import ScorerPool
        from genrl_swarm.scoring import ScorerFailed, ScorerLimits
        entry = dict(reasoning_gym.create_dataset("spiral_matrix", size=1, seed=3)[0])
        pool = ScorerPool(ScorerLimits(wall_seconds=60.0), ("genrl_swarm.scoring.rg_sandboxed",))
        attacks = {{
            "tty": {leak_if("__import__('os').open('/dev/tty', __import__('os').O_RDWR) >= 0")!r},
            "sti": {leak_if("[__import__('fcntl').ioctl(__import__('os').open(t, __import__('os').O_RDONLY), 0x5412, b'X') for t in ('/dev/tty', '/proc/self/fd/0', '/dev/pts/0')]")!r},
        }}
        for name, answer in attacks.items():
            with metered("evil", 5.0):
                try:
                    print(name, pool.call("genrl_swarm.scoring.rg_sandboxed:score", "spiral_matrix", {{}}, answer, entry), flush=True)
                except ScorerFailed as e:
                    print(name, "failed", e, flush=True)
        pool.close()
        """)
    )
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session whose controlling terminal is the pty
        os.execv(sys.executable, [sys.executable, str(script)])
    out, deadline = b"", time.monotonic() + 120
    while time.monotonic() < deadline:
        if select.select([fd], [], [], 1.0)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    os.kill(pid, 9) if os.waitpid(pid, os.WNOHANG) == (0, 0) else None
    text = out.decode(errors="replace")
    assert "tty 0.0" in text and "sti 0.0" in text, text
    assert "X" not in text.replace("X'", ""), text  # nothing was typed into the terminal


def test_the_sandbox_refuses_to_start_where_the_kernel_cannot_build_it() -> None:
    """With user namespaces switched off for the peer (a nested namespace that forbids them),
    the pool refuses third-party scorers; ``unconfined`` is the operator's explicit choice."""
    code = textwrap.dedent("""
        from genrl_swarm.core.meter import Unavailable
        from genrl_swarm.scoring.pool import ScorerPool
        from genrl_swarm.scoring import ScorerLimits
        try:
            ScorerPool(ScorerLimits(), ()).call("math:sqrt", 4.0)
        except Unavailable as e:
            print("refused:", e)
        p = ScorerPool(ScorerLimits(unconfined=True), ())
        print("unconfined:", p.call("math:sqrt", 4.0), p.confinement.name)
        p.close()
    """)
    done = _without_user_namespaces([sys.executable, "-c", code])
    assert "refused: the scorer sandbox cannot be built here" in done.stdout, done.stdout + done.stderr
    assert "unconfined: 2.0" in done.stdout, done.stdout + done.stderr


def _without_user_namespaces(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` where the kernel refuses new user namespaces (the sandbox cannot be built)."""
    script = 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"'
    return subprocess.run(
        ["unshare", "--user", "--map-root-user", "sh", "-c", script, "sh", *argv], capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.parametrize(
    ("overrides", "refused"),
    [
        (["data.datasets=[spiral_matrix]"], True),  # Reasoning Gym's own scorer: eval on the answer
        (["data.datasets=[spiral_matrix]", "+reward.sandbox.unconfined=true"], False),  # the operator's explicit choice
        (["data.datasets=[basic_arithmetic]"], False),  # scored by code written here: no sandbox needed
    ],
)
def test_a_recipe_that_needs_the_sandbox_is_refused_at_start_where_the_kernel_cannot_build_it(overrides: list[str], refused: bool) -> None:
    exe = str(Path(sys.executable).parent / "genrl-swarm")
    done = _without_user_namespaces([exe, "validate", "--recipe", "reasoning_gym", "policy.model=tiny-random", *overrides])
    lines = done.stderr.strip().splitlines()
    if refused:
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert "reward.sandbox.unconfined=true" in lines[-1] and "spiral_matrix" in lines[-1], done.stderr
    else:
        assert done.returncode == 0, done.stderr


def test_the_chain_key_is_gone_from_the_environment_before_any_child_starts(tmp_path: Path) -> None:
    """The key passed as GENRL_SWARM_PRIVATE_KEY is still the EVM coordinator's, no child the peer
    starts afterwards (a scorer, a daemon, a tool sandbox) inherits it, and none reads it back from
    the environment the peer started with (/proc/<peer>/environ)."""
    key = "0x" + "ab" * 32
    code = textwrap.dedent("""
        import subprocess, sys
        from genrl_swarm.run.launcher import run_recipe
        from genrl_swarm.config import load_recipe
        from genrl_swarm.coord.evm import load_private_key
        run_recipe(load_recipe("bandit", ["game.max_rounds=1", "run.dir=%s", "run.console=false", "run.plot=false"]))
        print("child:", subprocess.run(["env"], capture_output=True, text=True).stdout.count("GENRL_SWARM_PRIVATE_KEY"))
        print("environ:", subprocess.run(["cat", "/proc/%%d/environ" %% __import__("os").getpid()], capture_output=True).stdout.count(%r.encode()))
        print("coordinator:", load_private_key(None) == %r)
    """) % (tmp_path / "run", key[2:], key)
    env = {**os.environ, "GENRL_SWARM_PRIVATE_KEY": key}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, check=False)
    assert "child: 0" in done.stdout and "environ: 0" in done.stdout and "coordinator: True" in done.stdout, done.stdout + done.stderr
