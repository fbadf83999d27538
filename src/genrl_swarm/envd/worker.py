"""An envd worker process: one SessionHost serving its controller over a socket.

Started by the controller (``python -m genrl_swarm.envd.worker <fd> '<HostConfig json>'``)
with one end of a socketpair. Each request runs as its own task, so a slow tool call of one
session does not hold up the others. The worker leaves when its controller does (end of stream,
or the parent-death signal if the controller is killed).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import socket
import sys

import msgspec

from genrl_swarm.envd.errors import EnvError, Failure
from genrl_swarm.envd.host import HostConfig, SessionHost
from genrl_swarm.envd.protocol import HELLO, Closed, CloseRequest, Frame, StatsRequest, StepRequest, WorkerReply, WorkerReset, WorkerStats, rss_bytes
from genrl_swarm.sandbox.frames import pack, read_frame

log = logging.getLogger("genrl_swarm.envd.worker")


def _children_rss() -> int:
    try:
        with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as f:
            return sum(rss_bytes(int(pid)) for pid in f.read().split())
    except OSError:
        return 0


async def answer(host: SessionHost, frame: Frame) -> WorkerReply:
    job = frame.job
    try:
        if isinstance(job, WorkerReset):
            return WorkerReply(frame.id, reset=await host.reset(job.session, job.spec))
        if isinstance(job, StepRequest):
            return WorkerReply(frame.id, step=await host.step(job.session, job.action, job.tokens))
        if isinstance(job, CloseRequest):
            return WorkerReply(frame.id, closed=Closed(host.close(job.session)))
        assert isinstance(job, StatsRequest)
        s = host.stats()
        stats = WorkerStats(os.getpid(), s["sessions"], s["steps"], s["sandbox_deaths"], s["isolation"], rss_bytes(os.getpid()) + _children_rss())
        return WorkerReply(frame.id, stats=stats)
    except EnvError as e:
        return WorkerReply(frame.id, failure=Failure.of(e))
    except Exception as e:  # noqa: BLE001 - a bug on one request must not take down every session here
        log.exception("worker %d: request %s failed", os.getpid(), type(job).__name__)
        return WorkerReply(frame.id, failure=Failure("internal", f"worker error: {type(e).__name__}: {e}"))


async def serve(fd: int, config: HostConfig) -> None:
    host = SessionHost(config)
    await host.start()
    reader, writer = await asyncio.open_unix_connection(sock=socket.socket(fileno=fd))
    decode, encode = msgspec.msgpack.Decoder(Frame).decode, msgspec.msgpack.Encoder().encode
    tasks: set[asyncio.Task[None]] = set()

    async def handle(frame: Frame) -> None:
        writer.write(pack(encode(await answer(host, frame))))

    writer.write(pack(HELLO))
    try:
        while True:
            task = asyncio.get_running_loop().create_task(handle(decode(await read_frame(reader))))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass  # the controller is gone
    finally:
        await host.stop()


def main() -> None:
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the controller
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(int(sys.argv[1]), msgspec.json.decode(sys.argv[2], type=HostConfig)))


if __name__ == "__main__":
    main()
