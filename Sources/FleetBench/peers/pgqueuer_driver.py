#!/usr/bin/env python3
"""Benchmark driver for the PyPI queue library pgqueuer (1.6.0, asyncpg driver).

fleet-bench runs this file as a subprocess to measure pgqueuer on the same
PostgreSQL, in the same run, as our own queue.  Usage:

    python pgqueuer_driver.py --dsn DSN install
    python pgqueuer_driver.py --dsn DSN enqueue --jobs 100000 --batch 1000
    python pgqueuer_driver.py --dsn DSN drain   --jobs 20000 --workers 2
    python pgqueuer_driver.py --dsn DSN latency --samples 200

Every command prints exactly one JSON object as the LAST line of stdout (logs
go to stderr); on failure that object has an "error" key and the exit code is
non-zero.

What is measured, and why it is fair:
  * install: uninstall + install of pgqueuer's own schema (Queries.uninstall /
    Queries.install, i.e. what `pgq uninstall && pgq install` does), with
    pgqueuer's default durability ("durable": all tables LOGGED, like ours).
  * enqueue: N no-op jobs in batches of B, one Queries.enqueue(list, list, list)
    call per batch (one INSERT ... UNNEST statement = one transaction).  Only
    the enqueue calls are timed; building the lists is not.  Afterwards the
    queue and log tables are truncated so the next command starts clean.
  * drain: W worker *processes* (this script, hidden `worker` command), each a
    QueueManager on its own asyncpg connection with a no-op async entrypoint.
    Workers first prove their LISTEN connection works (a NOTIFY health-check
    round trip) and report READY; only then are all N jobs enqueued in ONE
    batched call.  The clock starts when that call (its commit) returns and
    stops when pgqueuer's queue table is empty; pgqueuer deletes a job from it
    and writes its 'successful' log row in the same statement, which is
    verified afterwards (exactly N successful log rows).  Throughput settings
    are chosen to give pgqueuer its best result on a 2-core box (see
    DRAIN_SETTINGS), and reported in the output JSON.
  * latency: one idle worker woken by pgqueuer's default LISTEN/NOTIFY
    mechanism (dequeue_timeout is 30 s, so polling cannot explain the numbers).
    Per sample: time.time_ns() goes into the payload, one job is enqueued, the
    handler computes time.time_ns() - sent at entry and reports it on its
    stdout pipe; the next sample is sent ~15 ms after the previous one was seen.
    A few warm-up samples are discarded.

All worker processes are started by this script, terminated by pid (SIGTERM,
then SIGKILL after 5 s) in a finally block, and exit by themselves if their
parent dies.  No network is used except the given DSN.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from datetime import timedelta

import asyncpg
from pgqueuer import AsyncpgDriver, Queries, QueueManager
from pgqueuer.errors import FailingListenerError
from pgqueuer.models import Job

log = logging.getLogger("pgqueuer_driver")

# Best throughput found on the 2-core bench box (see the report for the sweep):
# batch_size 10..100 all land within a few %; unlimited max_concurrent_tasks
# (None) avoids the per-worker budget CTE in the dequeue query, a bounded value
# must be >= 2 * batch_size (pgqueuer's rule).  One asyncpg connection per
# worker (AsyncpgDriver), as in pgqueuer's docs.
DRAIN_SETTINGS = {"batch_size": 50, "max_concurrent_tasks": 0, "dequeue_timeout_s": 30.0}
# Latency: wake-up is LISTEN/NOTIFY; the 30 s dequeue_timeout is only a fallback.
LATENCY_SETTINGS = {"batch_size": 10, "max_concurrent_tasks": 0, "dequeue_timeout_s": 30.0}
COMMON_SETTINGS = {"driver": "AsyncpgDriver (1 asyncpg connection per worker process)",
                   "durability": "durable (pgqueuer default)", "heartbeat_timeout_s": 30.0,
                   "log_aggregation_interval_s": 30.0, "pgqueuer": None}
READY_TIMEOUT_S = 30.0
LATENCY_WARMUP = 5


class BenchError(Exception):
    pass


def emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def queries_for(conn: asyncpg.Connection) -> Queries:
    return Queries(AsyncpgDriver(conn))


class StampedConnection:
    """Duck-typed asyncpg connection for the parent's AsyncpgDriver that records
    when each fetch returned (= the enqueue statement has committed), before
    pgqueuer converts the 20k returned ids in Python, so that conversion time
    is not hidden from the drain clock."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn, self.returned_at = conn, 0.0

    async def fetch(self, query: str, *args: object) -> list:
        rows = await self.conn.fetch(query, *args)
        self.returned_at = time.perf_counter()
        return rows

    async def execute(self, query: str, *args: object) -> str:
        return await self.conn.execute(query, *args)


def queue_table(q: Queries) -> str:
    return q.qbe.settings.qualified.queue_table


def log_table(q: Queries) -> str:
    return q.qbe.settings.qualified.queue_table_log


# ----------------------------------------------------------------- worker side
async def cmd_worker(a: argparse.Namespace) -> None:
    if os.environ.get("PGQ_POOL"):
        from pgqueuer import AsyncpgPoolDriver
        conn = await asyncpg.create_pool(a.dsn, min_size=2, max_size=int(os.environ["PGQ_POOL"]))
        qm = QueueManager(Queries(AsyncpgPoolDriver(conn)))
    else:
        conn = await asyncpg.connect(a.dsn)
        qm = QueueManager(queries_for(conn))
    out = sys.stdout

    @qm.entrypoint("noop")
    async def noop(job: Job) -> None:
        return None

    @qm.entrypoint("latency")
    async def latency(job: Job) -> None:
        delta = time.time_ns() - int(job.payload or b"0")
        out.write(f"LAT {delta}\n")
        out.flush()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, qm.shutdown.set)
    parent = os.getppid()
    run = asyncio.create_task(qm.run(
        batch_size=a.batch_size,
        max_concurrent_tasks=a.max_concurrent_tasks or None,
        dequeue_timeout=timedelta(seconds=a.dequeue_timeout)))
    # Ready = our LISTEN connection has received our own health-check NOTIFY.
    while not run.done():
        try:
            await qm.listener_healthy(timeout=timedelta(seconds=1))
            break
        except FailingListenerError:
            continue
    if not run.done():
        await asyncio.sleep(0.2)  # let the first (empty) dequeue finish: idle
        out.write("READY\n")
        out.flush()
    while not run.done():  # exit on our own if the parent process is gone
        await asyncio.wait({run}, timeout=0.5)
        if os.getppid() != parent:
            qm.shutdown.set()
    await run
    await conn.close()


# ----------------------------------------------------------------- parent side
class Workers:
    """Worker subprocesses started by this process; stopped by pid."""

    def __init__(self) -> None:
        self.procs: list[asyncio.subprocess.Process] = []

    async def start(self, a: argparse.Namespace, n: int, settings: dict) -> None:
        for _ in range(n):
            self.procs.append(await asyncio.create_subprocess_exec(
                sys.executable, os.path.abspath(__file__), "--dsn", a.dsn, "worker",
                "--batch-size", str(settings["batch_size"]),
                "--max-concurrent-tasks", str(settings["max_concurrent_tasks"]),
                "--dequeue-timeout", str(settings["dequeue_timeout_s"]),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE))
        for p in self.procs:
            line = await self.readline(p, READY_TIMEOUT_S)
            if line != "READY":
                raise BenchError(f"worker {p.pid} not ready: {line!r}")
        log.info("%d worker(s) ready: pids %s", n, [p.pid for p in self.procs])

    @staticmethod
    async def readline(p: asyncio.subprocess.Process, timeout: float) -> str:
        try:
            raw = await asyncio.wait_for(p.stdout.readline(), timeout)
        except asyncio.TimeoutError:
            raise BenchError(f"worker {p.pid}: no output within {timeout} s") from None
        if not raw:
            raise BenchError(f"worker {p.pid} exited (rc={await p.wait()})")
        return raw.decode().strip()

    def check_alive(self) -> None:
        for p in self.procs:
            if p.returncode is not None:
                raise BenchError(f"worker {p.pid} died with rc={p.returncode}")

    async def stop(self) -> None:
        for p in self.procs:
            if p.returncode is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                await asyncio.wait_for(p.wait(), 5.0)
            except asyncio.TimeoutError:
                log.warning("worker %d ignored SIGTERM, killing", p.pid)
                p.kill()
                await p.wait()
        self.procs.clear()


def overridden(settings: dict, a: argparse.Namespace) -> dict:
    for key in ("batch_size", "max_concurrent_tasks"):
        if getattr(a, key) is not None:
            settings[key] = getattr(a, key)
    return settings


async def clean(q: Queries) -> None:
    await q.clear_queue()  # TRUNCATE pgqueuer
    await q.clear_queue_log()  # TRUNCATE pgqueuer_log


async def cmd_install(a: argparse.Namespace, conn: asyncpg.Connection) -> dict:
    q = queries_for(conn)
    await q.uninstall()  # DROP ... IF EXISTS of every pgqueuer object
    await q.install()
    return {"ok": True}


async def cmd_enqueue(a: argparse.Namespace, conn: asyncpg.Connection) -> dict:
    q = queries_for(conn)
    await clean(q)
    elapsed, done = 0.0, 0
    while done < a.jobs:
        n = min(a.batch, a.jobs - done)
        eps, payloads, prios = ["noop"] * n, [b"x"] * n, [0] * n
        t0 = time.perf_counter()
        await q.enqueue(eps, payloads, prios)
        elapsed += time.perf_counter() - t0
        done += n
    await clean(q)  # leave the tables empty for the next command
    return {"metric": "enqueue", "value": round(a.jobs / elapsed, 1), "unit": "jobs/s",
            "jobs": a.jobs, "batch": a.batch, "seconds": round(elapsed, 4)}


async def cmd_drain(a: argparse.Namespace, conn: asyncpg.Connection, workers: Workers) -> dict:
    stamped = StampedConnection(conn)
    q = Queries(AsyncpgDriver(stamped))  # type: ignore[arg-type]
    await clean(q)
    any_left = f"SELECT EXISTS (SELECT 1 FROM {queue_table(q)})"  # cheap poll
    await workers.start(a, a.workers, overridden(DRAIN_SETTINGS, a))
    await asyncio.sleep(0.3)  # all workers idle on LISTEN
    eps, payloads, prios = ["noop"] * a.jobs, [b"x"] * a.jobs, [0] * a.jobs
    await q.enqueue(eps, payloads, prios)  # one statement, one commit
    t0 = stamped.returned_at
    log.info("enqueue returned; pgqueuer's id conversion took %.1f ms",
             (time.perf_counter() - t0) * 1e3)
    deadline = t0 + a.timeout
    while await conn.fetchval(any_left):
        if time.perf_counter() > deadline:
            left = await conn.fetchval(f"SELECT count(*) FROM {queue_table(q)}")
            raise BenchError(f"drain timed out after {a.timeout} s with {left} jobs left")
        workers.check_alive()
        await asyncio.sleep(0.01)
    seconds = time.perf_counter() - t0
    ok = await conn.fetchval(
        f"SELECT count(*) FROM {log_table(q)} WHERE status = 'successful'")
    if ok != a.jobs:
        raise BenchError(f"expected {a.jobs} successful jobs in the log, found {ok}")
    await workers.stop()
    await clean(q)
    return {"metric": "drain", "value": round(a.jobs / seconds, 1), "unit": "jobs/s",
            "workers": a.workers, "jobs": a.jobs, "seconds": round(seconds, 4),
            "settings": {**COMMON_SETTINGS, **DRAIN_SETTINGS}}


async def cmd_latency(a: argparse.Namespace, conn: asyncpg.Connection, workers: Workers) -> dict:
    q = queries_for(conn)
    await clean(q)
    await workers.start(a, 1, overridden(LATENCY_SETTINGS, a))
    worker = workers.procs[0]
    await asyncio.sleep(0.3)
    samples: list[float] = []
    for i in range(LATENCY_WARMUP + a.samples):
        await q.enqueue("latency", str(time.time_ns()).encode())
        line = await workers.readline(worker, 5.0)
        if not line.startswith("LAT "):
            raise BenchError(f"unexpected worker output {line!r}")
        if i >= LATENCY_WARMUP:
            samples.append(int(line[4:]) / 1e6)
        await asyncio.sleep(0.015)
    await workers.stop()
    await clean(q)
    samples.sort()

    def pct(p: float) -> float:  # nearest-rank percentile
        return round(samples[max(0, -(-len(samples) * p // 100) - 1)], 3)

    return {"p50_ms": pct(50), "p99_ms": pct(99), "max_ms": round(samples[-1], 3),
            "samples": len(samples), "settings": {**COMMON_SETTINGS, **LATENCY_SETTINGS}}


async def run_parent(a: argparse.Namespace) -> dict:
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    conn = await asyncpg.connect(a.dsn, timeout=10)
    workers = Workers()
    try:
        if a.command == "install":
            return await cmd_install(a, conn)
        if a.command == "enqueue":
            return await cmd_enqueue(a, conn)
        if a.command == "drain":
            return await cmd_drain(a, conn, workers)
        return await cmd_latency(a, conn, workers)
    finally:
        await asyncio.shield(workers.stop())
        await conn.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", required=True)
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("install")
    p = sub.add_parser("enqueue")
    p.add_argument("--jobs", type=int, required=True)
    p.add_argument("--batch", type=int, default=1000)
    p = sub.add_parser("drain")
    p.add_argument("--jobs", type=int, required=True)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--timeout", type=float, default=300.0)
    p = sub.add_parser("latency")
    p.add_argument("--samples", type=int, default=200)
    for p in (sub.choices["drain"], sub.choices["latency"]):  # for settings sweeps only
        p.add_argument("--batch-size", type=int, help="override the built-in setting")
        p.add_argument("--max-concurrent-tasks", type=int, help="override; 0 = unlimited")
    p = sub.add_parser("worker")  # internal: one QueueManager process
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--max-concurrent-tasks", type=int, default=0)
    p.add_argument("--dequeue-timeout", type=float, default=30.0)
    a = ap.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format=f"%(asctime)s pgqueuer_driver[{os.getpid()}] %(message)s")
    logging.getLogger("pgqueuer").setLevel(logging.WARNING)
    if a.command == "worker":
        asyncio.run(cmd_worker(a))
        return 0
    import pgqueuer
    COMMON_SETTINGS["pgqueuer"] = pgqueuer.__version__
    try:
        emit(asyncio.run(run_parent(a)))
        return 0
    except BaseException as e:  # noqa: BLE001 - the JSON line must always be printed
        msg = "interrupted" if isinstance(e, (asyncio.CancelledError, KeyboardInterrupt)) else (
            f"{type(e).__name__}: {e}")
        log.error("%s failed: %s", a.command, msg)
        emit({"error": msg, "command": a.command})
        return 1


if __name__ == "__main__":
    sys.exit(main())
