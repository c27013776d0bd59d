"""Many pending requests: memory per pending request and what listing them costs.

    bindings-python/.venv/bin/python bindings-python/bench/scale.py [--n 1000000] [--facade]

Holds N confirmations pending (the awaited native future per call, or with --facade an asyncio
Task running the facade's `gate.confirm` coroutine, as an application would), then prints the RSS
growth per pending request, the time of one `pending_page(limit=1000)`, of the next page, and of
one full `pending()`. Every call is then resolved (the gate closes) and checked.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import time
from typing import Any, List

import signoff


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def main(n: int, facade: bool) -> None:
    gate = signoff.Gate(deny_when_unobserved=False, default_timeout=3600)
    gate.register("delete_file", parameters={"type": "object", "properties": {"path": {"type": "string"}}})
    gc.collect()
    before = rss()
    calls: List[Any] = []
    for i in range(n):
        args = {"path": f"/home/user/file-{i:07}.txt"}
        calls.append(asyncio.ensure_future(gate.confirm("delete_file", args)) if facade
                     else gate._native.confirm("delete_file", args, None, None, None))
        if i % 50_000 == 49_999:
            await asyncio.sleep(0)
    while gate.pending_count < n:
        await asyncio.sleep(0.05)
    total = rss()
    grown = total - before
    t = time.perf_counter()
    page, nxt = gate.pending_page(limit=1000)
    first = time.perf_counter() - t
    t = time.perf_counter()
    gate.pending_page(after=nxt, limit=1000)
    second = time.perf_counter() - t
    t = time.perf_counter()
    everything = gate.pending()
    whole = time.perf_counter() - t
    assert len(everything) == n and len(page) == 1000
    del everything
    print(f"pending: {n:,} ({'asyncio Task per call' if facade else 'native future per call'})")
    print(f"RSS growth: {grown / 2**20:,.0f} MiB, {grown / n:,.0f} B per pending request (the process: {total / 2**20:,.0f} MiB)")
    print(f"pending_page(limit=1000): {first * 1e3:.2f} ms; next page: {second * 1e3:.2f} ms; pending() of all: {whole:.2f} s")
    gate.close()
    outcomes = {d.outcome for d in await asyncio.gather(*calls)}
    assert outcomes == {"cancelled"}, outcomes


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--facade", action="store_true")
    a = ap.parse_args()
    asyncio.run(main(a.n, a.facade))
