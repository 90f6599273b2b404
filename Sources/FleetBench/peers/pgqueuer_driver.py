#!/usr/bin/env python3
"""Benchmark driver for the PyPI queue library pgqueuer (1.6.0, asyncpg driver).

fleet-bench runs this file as a subprocess to measure pgqueuer on the same
PostgreSQL, in the same run, as our own queue:

    python pgqueuer_driver.py --dsn DSN install
    python pgqueuer_driver.py --dsn DSN enqueue --jobs 100000 --batch 1000
    python pgqueuer_driver.py --dsn DSN drain   --jobs 20000 --workers 2
    python pgqueuer_driver.py --dsn DSN latency --samples 200
    python pgqueuer_driver.py --dsn DSN single  --connections 64 --seconds 5

Every command prints exactly one JSON object as the LAST line of stdout (logs
go to stderr).  On failure that object is {"error": ..., "command": ...} and
the exit code is 1.

What is measured, and why it is fair:
  * install: Queries.uninstall() + Queries.install(), i.e. `pgq uninstall &&
    pgq install`, with pgqueuer's default durability "durable" (all tables
    LOGGED, WAL + fsync on commit, like ours).
  * enqueue: N no-op jobs ("noop", payload b"x") in batches of B, one
    Queries.enqueue(list, list, list) call per batch (one INSERT ... UNNEST
    statement, one commit).  Only the enqueue calls are timed, not building
    the lists.  This command truncates pgqueuer's queue and log tables before
    and after, so every command starts and ends with empty tables.
  * single: what a backend does per request, pgqueuer's way: C asyncpg
    connections, each enqueueing ONE job per Queries.enqueue call (one
    statement, one commit), the next as soon as it returned, for S seconds
    after a 0.5 s warm-up.  Reports jobs/s, p50/p99 of the calls and this
    process's CPU seconds per job (the client may be its own limit: it is
    one Python process).
  * drain: W worker *processes* (this script, hidden `worker` command), each a
    QueueManager on its own asyncpg connection with a no-op async entrypoint.
    A worker reports READY only after its LISTEN connection got its own NOTIFY
    health check back.  Then all N jobs are enqueued in ONE call (one commit;
    workers can see nothing before it).  The clock starts when that statement
    returned from PostgreSQL (before pgqueuer's Python-side id conversion) and
    stops when pgqueuer's queue table is empty (polled every 10 ms with a cheap
    EXISTS): pgqueuer deletes a finished job and writes its 'successful' log
    row in one statement; exactly N such rows are verified afterwards.
    Settings are the best of a sweep (DRAIN_SETTINGS) and reported in the JSON.
  * latency: one idle worker, woken by pgqueuer's default LISTEN/NOTIFY (its
    fallback poll is 30 s, so polling cannot explain the numbers).  Per sample
    time.time_ns() goes into the payload, ONE job is enqueued, the handler
    reports time.time_ns() - sent at entry over its stdout pipe, and the next
    sample follows ~15 ms after this one was seen.  5 warm-up samples are
    discarded.  enqueue_p50/p99_ms show the enqueue commit alone.

Workers are started by this script only, stopped by pid (SIGTERM, SIGKILL after
5 s) in a finally block, and exit on their own if this process dies.  No
network is used except the given DSN.
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

# Drain: best of a sweep on the 2-core bench box (20k jobs, W=1/2, batch_size
# 10/25/50/100/200/500, max_concurrent_tasks unlimited vs 2-4x batch_size,
# AsyncpgDriver vs AsyncpgPoolDriver).  batch_size dominates: 10 -> ~6k jobs/s,
# 50 -> ~20k, 200 -> ~23k with 2 workers; 500 is within noise of 200.  A bounded
# max_concurrent_tasks (pgqueuer requires >= 2 * batch_size) adds a per-worker
# budget CTE to every dequeue and was never faster than unlimited (0 -> None,
# pgqueuer's default).  A pool driver was not faster than one connection.
DRAIN_SETTINGS = {"batch_size": 200, "max_concurrent_tasks": 0, "dequeue_timeout_s": 30.0}
# Latency: batch_size 1 makes pgqueuer's status-log buffer (max_size =
# batch_size) flush right after each job rather than on its ~100 ms timer,
# where it can collide with the next sample; p50/p99 came out a bit better
# than with batch_size 10.
LATENCY_SETTINGS = {"batch_size": 1, "max_concurrent_tasks": 0, "dequeue_timeout_s": 30.0}
COMMON_SETTINGS = {"driver": "AsyncpgDriver (one asyncpg connection per worker process)",
                   "wakeup": "LISTEN/NOTIFY", "durability": "durable (pgqueuer default)",
                   "heartbeat_timeout_s": 30.0, "log_aggregation_interval_s": 30.0}
READY_TIMEOUT_S = 30.0
LATENCY_WARMUP = 5


class BenchError(Exception):
    pass


class StampedConnection:
    """asyncpg connection stand-in for the parent's AsyncpgDriver: remembers
    when the last fetch came back from PostgreSQL (= the statement committed)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn, self.returned_at = conn, 0.0

    async def fetch(self, query: str, *args: object) -> list:
        rows = await self.conn.fetch(query, *args)
        self.returned_at = time.perf_counter()
        return rows

    async def execute(self, query: str, *args: object) -> str:
        return await self.conn.execute(query, *args)


# ----------------------------------------------------------------- worker side
async def cmd_worker(a: argparse.Namespace) -> None:
    conn = await asyncpg.connect(a.dsn)
    qm = QueueManager(Queries(AsyncpgDriver(conn)))
    out = sys.stdout  # protocol pipe to the parent: "READY", "LAT <ns>"

    @qm.entrypoint("noop")
    async def noop(job: Job) -> None:
        return None

    @qm.entrypoint("latency")
    async def latency(job: Job) -> None:
        out.write(f"LAT {time.time_ns() - int(job.payload or b'0')}\n")
        out.flush()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, qm.shutdown.set)
    parent = os.getppid()
    run = asyncio.create_task(qm.run(
        batch_size=a.batch_size,
        max_concurrent_tasks=a.max_concurrent_tasks or None,
        dequeue_timeout=timedelta(seconds=a.dequeue_timeout)))
    while not run.done():  # ready = our own health-check NOTIFY came back
        try:
            await qm.listener_healthy(timeout=timedelta(seconds=1))
            break
        except FailingListenerError:
            continue
    if not run.done():
        await asyncio.sleep(0.2)  # let the first (empty) dequeue finish: idle
        out.write("READY\n")
        out.flush()
    while not run.done():
        await asyncio.wait({run}, timeout=0.5)
        if os.getppid() != parent:  # orphaned: the parent is gone
            qm.shutdown.set()
    await run
    await conn.close()


# ----------------------------------------------------------------- parent side
class Workers:
    """Worker subprocesses started by this process; stopped by pid."""

    def __init__(self, dsn: str) -> None:
        self.dsn, self.procs = dsn, []

    async def start(self, n: int, settings: dict) -> None:
        for _ in range(n):
            self.procs.append(await asyncio.create_subprocess_exec(
                sys.executable, os.path.abspath(__file__), "--dsn", self.dsn, "worker",
                "--batch-size", str(settings["batch_size"]),
                "--max-concurrent-tasks", str(settings["max_concurrent_tasks"]),
                "--dequeue-timeout", str(settings["dequeue_timeout_s"]),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE))
        for p in self.procs:
            if (line := await self.readline(p, READY_TIMEOUT_S)) != "READY":
                raise BenchError(f"worker {p.pid} not ready: {line!r}")
        await asyncio.sleep(0.3)  # every worker idle in its LISTEN wait
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
                log.warning("worker %d ignored SIGTERM, killing it", p.pid)
                p.kill()
                await p.wait()
        self.procs.clear()


def settings_for(base: dict, a: argparse.Namespace) -> dict:
    overrides = {k: getattr(a, k) for k in ("batch_size", "max_concurrent_tasks")
                 if getattr(a, k, None) is not None}
    return {**base, **overrides}


def pct(values: list[float], p: int) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return round(ordered[max(0, -(-len(ordered) * p // 100) - 1)], 3)


async def clean(q: Queries) -> None:
    await q.clear_queue()  # TRUNCATE pgqueuer
    await q.clear_queue_log()  # TRUNCATE pgqueuer_log


async def cmd_install(a, q: Queries, db, workers) -> dict:
    await q.uninstall()  # DROP ... IF EXISTS of every pgqueuer object
    await q.install()
    return {"ok": True}


async def cmd_enqueue(a, q: Queries, db, workers) -> dict:
    await clean(q)
    elapsed, done = 0.0, 0
    while done < a.jobs:
        n = min(a.batch, a.jobs - done)
        eps, payloads, prios = ["noop"] * n, [b"x"] * n, [0] * n
        t0 = time.perf_counter()
        await q.enqueue(eps, payloads, prios)
        elapsed += time.perf_counter() - t0
        done += n
    await clean(q)
    return {"metric": "enqueue", "value": round(a.jobs / elapsed, 1), "unit": "jobs/s",
            "jobs": a.jobs, "batch": a.batch, "seconds": round(elapsed, 4)}


async def cmd_single(a, q: Queries, db, workers) -> dict:
    await clean(q)
    conns = [await asyncpg.connect(a.dsn, timeout=10) for _ in range(a.connections)]
    latencies: list[float] = []
    measuring = False
    stop_at = 0.0

    async def one(conn: asyncpg.Connection) -> None:
        queries = Queries(AsyncpgDriver(conn))
        while True:
            t0 = time.perf_counter()
            if stop_at and t0 >= stop_at:
                return
            await queries.enqueue(["noop"], [b"x"], [0])
            if measuring:
                latencies.append(time.perf_counter() - t0)

    try:
        tasks = [asyncio.create_task(one(c)) for c in conns]
        await asyncio.sleep(0.5)
        measuring, cpu0, t0 = True, time.process_time(), time.perf_counter()
        stop_at = t0 + a.seconds
        await asyncio.gather(*tasks)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        for c in conns:
            await c.close()
    await clean(q)
    ms = [x * 1000 for x in latencies]
    return {"metric": "single", "value": round(len(ms) / seconds, 1), "unit": "jobs/s",
            "p50_ms": pct(ms, 50), "p99_ms": pct(ms, 99), "connections": a.connections,
            "cpu_ms_per_job": round(cpu * 1000 / max(1, len(ms)), 4)}


async def cmd_drain(a, q: Queries, db: StampedConnection, workers: Workers) -> dict:
    settings = settings_for(DRAIN_SETTINGS, a)
    table = q.qbe.settings.qualified.queue_table
    await clean(q)
    await workers.start(a.workers, settings)
    eps, payloads, prios = ["noop"] * a.jobs, [b"x"] * a.jobs, [0] * a.jobs
    await q.enqueue(eps, payloads, prios)  # one statement, one commit
    t0 = db.returned_at  # the enqueue statement came back = committed
    deadline = t0 + a.timeout
    while await db.conn.fetchval(f"SELECT EXISTS (SELECT 1 FROM {table})"):
        if time.perf_counter() > deadline:
            left = await db.conn.fetchval(f"SELECT count(*) FROM {table}")
            raise BenchError(f"drain timed out after {a.timeout} s with {left} jobs left")
        workers.check_alive()
        await asyncio.sleep(0.01)
    seconds = time.perf_counter() - t0
    ok = await db.conn.fetchval(f"SELECT count(*) FROM {q.qbe.settings.qualified.queue_table_log}"
                             " WHERE status = 'successful'")
    if ok != a.jobs:
        raise BenchError(f"expected {a.jobs} successful jobs in pgqueuer's log, found {ok}")
    await workers.stop()
    await clean(q)
    return {"metric": "drain", "value": round(a.jobs / seconds, 1), "unit": "jobs/s",
            "workers": a.workers, "jobs": a.jobs, "seconds": round(seconds, 4),
            "settings": {**COMMON_SETTINGS, **settings}}


async def cmd_latency(a, q: Queries, db, workers: Workers) -> dict:
    settings = settings_for(LATENCY_SETTINGS, a)
    await clean(q)
    await workers.start(1, settings)
    samples, enqueue_ms = [], []
    for i in range(LATENCY_WARMUP + a.samples):
        t0 = time.perf_counter()
        await q.enqueue("latency", str(time.time_ns()).encode())
        t1 = time.perf_counter()
        line = await workers.readline(workers.procs[0], 5.0)
        if not line.startswith("LAT "):
            raise BenchError(f"unexpected worker output {line!r}")
        if i >= LATENCY_WARMUP:
            samples.append(int(line[4:]) / 1e6)
            enqueue_ms.append((t1 - t0) * 1e3)
        await asyncio.sleep(0.015)
    await workers.stop()
    await clean(q)
    return {"p50_ms": pct(samples, 50), "p99_ms": pct(samples, 99),
            "max_ms": round(max(samples), 3), "samples": len(samples),
            "enqueue_p50_ms": pct(enqueue_ms, 50), "enqueue_p99_ms": pct(enqueue_ms, 99),
            "settings": {**COMMON_SETTINGS, **settings}}


COMMANDS = {"install": cmd_install, "enqueue": cmd_enqueue, "single": cmd_single,
            "drain": cmd_drain, "latency": cmd_latency}


async def run_parent(a: argparse.Namespace) -> dict:
    task = asyncio.current_task()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, task.cancel)
    conn = await asyncpg.connect(a.dsn, timeout=10)
    db = StampedConnection(conn)
    q = Queries(AsyncpgDriver(db))  # type: ignore[arg-type]
    workers = Workers(a.dsn)
    try:
        return await COMMANDS[a.command](a, q, db, workers)
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
    p = sub.add_parser("single")
    p.add_argument("--connections", type=int, required=True)
    p.add_argument("--seconds", type=float, default=5.0)
    p = sub.add_parser("drain")
    p.add_argument("--jobs", type=int, required=True)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--timeout", type=float, default=300.0, help="give up after this (s)")
    p = sub.add_parser("latency")
    p.add_argument("--samples", type=int, default=200)
    for p in (sub.choices["drain"], sub.choices["latency"]):  # for settings sweeps
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
        result = asyncio.run(run_parent(a))
    except BaseException as e:  # noqa: BLE001 - the JSON line must always be printed
        cancelled = isinstance(e, (asyncio.CancelledError, KeyboardInterrupt))
        result = {"error": "interrupted" if cancelled else f"{type(e).__name__}: {e}",
                  "command": a.command}
        log.error("%s failed: %s", a.command, result["error"])
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())
