"""Benchmarks for the Python binding.

    python bench/bench.py [--quick] [--uvloop] [--json]

1. Latency of one agent step (`await gate.execute(...)` of a no-op async tool), 20,000 steps per
   variant, interleaved in blocks: a plain `await tool(args)` (the baseline), `execute` of an
   ungated tool, and `execute` of a gated tool answered by (a) a sync handler approver
   (`gate.on_request`), (b) an event-stream approver (a task reading `gate.events()` and
   calling `gate.approve`) and (c) the same reading only requests
   (`gate.events(types=["confirmation-request"])`), each checking the tool name and the
   arguments before approving.
   Overhead per approval = gated - ungated; ungated overhead = ungated - plain await. The same
   for `confirm` alone, and an ungated `execute` of a sync tool (run on a worker thread).
2. Approvals per second with 1,000 pending (sync handler approver).
3. Memory per pending request (tracemalloc and RSS).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import time
import tracemalloc
from typing import Any, Awaitable, Callable, Coroutine, Dict, List, Optional

import signoff

ARGS = {"path": "/tmp/bench.txt", "n": 1}
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}, "n": {"type": "integer"}}}


def approver(req: signoff.PendingRequest) -> None:
    if req.tool == "noop_gated" and req.arguments == ARGS:
        req.approve()
    else:
        req.deny("unexpected call")


async def noop(args: Any) -> None:
    return None


def make_gate(**kw: Any) -> signoff.Gate:
    gate = signoff.Gate(**kw)
    gate.register("noop_gated", parameters=SCHEMA, approval="required", executor=noop)
    gate.register("noop_free", parameters=SCHEMA, approval="not_required", executor=noop)
    gate.register("sync_free", parameters=SCHEMA, approval="not_required", executor=lambda a: None)
    return gate


async def stream_approver(gate: signoff.Gate, ready: asyncio.Event, requests_only: bool = False) -> None:
    """An approver reading the event stream, as a UI would (every event, or only requests)."""
    with gate.events(types=["confirmation-request"] if requests_only else None) as events:
        ready.set()
        async for event in events:
            if isinstance(event, signoff.ConfirmationRequest):
                if event.tool == "noop_gated" and event.arguments == ARGS:
                    gate.approve(event)
                else:
                    gate.deny(event, "unexpected call")


def pct(xs: List[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


Step = Callable[[], Awaitable[Any]]


async def latencies(step: Step, n: int) -> List[float]:
    out = []
    perf = time.perf_counter_ns
    for _ in range(n):
        t0 = perf()
        r = await step()
        out.append((perf() - t0) / 1000)
        if r is not None and not (r.approved if isinstance(r, signoff.Decision) else r.status == "executed"):
            raise SystemExit(f"unexpected result {r!r}")
    return out


async def bench_latency(n: int) -> Dict[str, Any]:
    handler_gate = make_gate()
    handler_gate.on_request(approver)
    stream_gate = make_gate()
    ready = asyncio.Event()
    reader = asyncio.ensure_future(stream_approver(stream_gate, ready))
    await ready.wait()
    request_gate = make_gate()
    ready = asyncio.Event()
    request_reader = asyncio.ensure_future(stream_approver(request_gate, ready, requests_only=True))
    await ready.wait()
    h, s, q = handler_gate, stream_gate, request_gate
    steps: Dict[str, Step] = {
        "plain_await": lambda: noop(ARGS),
        "execute_ungated": lambda: h.execute("noop_free", ARGS),
        "execute_gated_handler": lambda: h.execute("noop_gated", ARGS),
        "execute_gated_stream": lambda: s.execute("noop_gated", ARGS),
        "execute_gated_req_stream": lambda: q.execute("noop_gated", ARGS),
        "confirm_ungated": lambda: h.confirm("noop_free", ARGS),
        "confirm_gated_handler": lambda: h.confirm("noop_gated", ARGS),
        "confirm_gated_stream": lambda: s.confirm("noop_gated", ARGS),
        "confirm_gated_req_stream": lambda: q.confirm("noop_gated", ARGS),
        "execute_ungated_sync_tool": lambda: h.execute("sync_free", ARGS),
    }
    for step in steps.values():  # warm up
        await latencies(step, 500)
    xs: Dict[str, List[float]] = {k: [] for k in steps}
    for _ in range(10):  # interleave blocks so drift hits every variant alike
        for k, step in steps.items():
            xs[k] += await latencies(step, n // 10)
    handler_gate.close()
    stream_gate.close()
    request_gate.close()
    reader.cancel()
    request_reader.cancel()
    await asyncio.gather(reader, request_reader, return_exceptions=True)
    med = {k: statistics.median(v) for k, v in xs.items()}
    p99 = {k: pct(v, 99) for k, v in xs.items()}
    return {
        "steps": n,
        "median_us": med,
        "p99_us": p99,
        "overhead_per_approval_handler_us": med["execute_gated_handler"] - med["execute_ungated"],
        "overhead_per_approval_stream_us": med["execute_gated_stream"] - med["execute_ungated"],
        "overhead_per_approval_request_stream_us": med["execute_gated_req_stream"] - med["execute_ungated"],
        "confirm_overhead_handler_us": med["confirm_gated_handler"] - med["confirm_ungated"],
        "confirm_overhead_stream_us": med["confirm_gated_stream"] - med["confirm_ungated"],
        "confirm_overhead_request_stream_us": med["confirm_gated_req_stream"] - med["confirm_ungated"],
        "ungated_over_plain_await_us": med["execute_ungated"] - med["plain_await"],
    }


async def bench_throughput(pending: int, rounds: int) -> Dict[str, Any]:
    """`pending` confirmations in flight at once, approved by the handler; repeated `rounds` times."""
    gate = make_gate(bus_capacity=max(4096, 4 * pending))
    gate.on_request(approver)
    rates = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        ds = await asyncio.gather(*(gate.confirm("noop_gated", ARGS) for _ in range(pending)))
        dt = time.perf_counter() - t0
        assert all(d.approved for d in ds)
        rates.append(pending / dt)
    # Sustained: keep `pending` requests in flight while 20 x `pending` are approved.
    total = 20 * pending
    done = 0
    t0 = time.perf_counter()

    async def worker() -> None:
        nonlocal done
        while done < total:
            done += 1
            d = await gate.confirm("noop_gated", ARGS)
            assert d.approved

    await asyncio.gather(*(worker() for _ in range(pending)))
    sustained = total / (time.perf_counter() - t0)
    gate.close()
    return {
        "pending": pending,
        "burst_approvals_per_s_median": statistics.median(rates),
        "sustained_approvals_per_s": sustained,
    }


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


MEMORY_MODES = ("native_future", "facade_task")


async def memory_child(mode: str, n: int, trace: bool) -> float:
    """Bytes per pending request: RSS growth (`trace=False`) or live Python allocations
    (tracemalloc). Run in a fresh process per measurement, so freed memory is not reused."""
    gate = make_gate(deny_when_unobserved=False, default_timeout=600)

    def make() -> Any:
        if mode == "native_future":
            # What the core and the binding hold per request: the awaited native future.
            return gate._native.confirm("noop_gated", ARGS, None, None, None)
        # What an application typically holds: a Task running the facade's coroutine.
        return asyncio.ensure_future(gate.confirm("noop_gated", ARGS))

    async def fill(count: int) -> List[Any]:
        futs = [make() for _ in range(count)]
        while gate.pending_count < count:
            await asyncio.sleep(0.005)
        return futs

    async def drain(futs: List[Any]) -> None:
        for r in gate.pending():
            gate.deny(r)
        await asyncio.gather(*futs)

    await drain(await fill(200))  # warm up caches and the allocator's small pools
    gc.collect()
    if trace:
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        futs = await fill(n)
        used = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
    else:
        before = rss_bytes()
        futs = await fill(n)
        used = rss_bytes() - before
    await drain(futs)
    gate.close()
    return used / n


def bench_memory(n: int) -> Dict[str, Any]:
    import subprocess

    out: Dict[str, Any] = {"pending": n}
    for mode in MEMORY_MODES:
        row = {}
        for trace in (False, True):
            cmd = [sys.executable, __file__, "--memory-child", mode, str(n), "1" if trace else "0"]
            row["python_bytes_per_pending" if trace else "rss_bytes_per_pending"] = float(
                subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip())
        out[mode] = row
    return out


def calibration() -> float:
    """Median round trip between the event loop and a plain Python thread on this machine (us):
    what one cross-thread wake-up costs here (scheduler load shows up in it)."""
    import queue
    import threading

    async def run() -> float:
        loop = asyncio.get_running_loop()
        q: "queue.SimpleQueue[Optional[asyncio.Future[int]]]" = queue.SimpleQueue()

        def worker() -> None:
            while True:
                f = q.get()
                if f is None:
                    return
                loop.call_soon_threadsafe(f.set_result, 1)

        t = threading.Thread(target=worker)
        t.start()
        xs = []
        for _ in range(2000):
            f: asyncio.Future[int] = loop.create_future()
            t0 = time.perf_counter_ns()
            q.put(f)
            await f
            xs.append((time.perf_counter_ns() - t0) / 1000)
        q.put(None)
        t.join()
        return statistics.median(xs)

    return asyncio.run(run())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer iterations (CI smoke run)")
    ap.add_argument("--uvloop", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--memory-child", nargs=3, metavar=("MODE", "N", "TRACE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.memory_child:
        mode, n, trace = a.memory_child
        print(asyncio.run(memory_child(mode, int(n), trace == "1")))
        return
    runner: Callable[[Coroutine[Any, Any, Any]], Any] = asyncio.run
    if a.uvloop:
        import uvloop

        runner = uvloop.run
    steps = 2000 if a.quick else 20000
    res: Dict[str, Any] = {
        "python": sys.version.split()[0],
        "signoff": signoff.__version__,
        "loop": "uvloop" if a.uvloop else "asyncio",
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "calibration_thread_round_trip_us": calibration(),
        "latency": runner(bench_latency(steps)),
        "throughput": runner(bench_throughput(1000, 3 if a.quick else 10)),
        "memory": bench_memory(2000 if a.quick else 20000),
    }
    if a.json:
        print(json.dumps(res, indent=2))
        return
    lat, t, m = res["latency"], res["throughput"], res["memory"]
    print(f"python {res['python']}, {res['loop']}, {res['cpus']} CPUs, load average "
          f"{', '.join(f'{x:.2f}' for x in res['load_average'])}")
    print(f"calibration: loop <-> Python thread round trip {res['calibration_thread_round_trip_us']:.1f} us")
    for k in lat["median_us"]:
        print(f"{k:28} median {lat['median_us'][k]:7.1f} us, p99 {lat['p99_us'][k]:7.1f} us")
    print(f"overhead per approval (execute, gated - ungated): sync handler {lat['overhead_per_approval_handler_us']:.1f} us,"
          f" event stream {lat['overhead_per_approval_stream_us']:.1f} us,"
          f" requests-only stream {lat['overhead_per_approval_request_stream_us']:.1f} us (median)")
    print(f"overhead per approval (confirm only): sync handler {lat['confirm_overhead_handler_us']:.1f} us,"
          f" event stream {lat['confirm_overhead_stream_us']:.1f} us,"
          f" requests-only stream {lat['confirm_overhead_request_stream_us']:.1f} us (median)")
    print(f"ungated execute over a plain await of the tool: {lat['ungated_over_plain_await_us']:.1f} us (median)")
    print(f"approvals/s with {t['pending']} pending: burst {t['burst_approvals_per_s_median']:,.0f}, "
          f"sustained {t['sustained_approvals_per_s']:,.0f}")
    for label in MEMORY_MODES:
        mm = m[label]
        print(f"memory per pending ({label}, {m['pending']} pending): python {mm['python_bytes_per_pending']:,.0f} B, "
              f"RSS {mm['rss_bytes_per_pending']:,.0f} B")


if __name__ == "__main__":
    main()
