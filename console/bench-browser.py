"""The console's targets, measured in headless Chromium (figures go to BENCHMARKS.md):

1. Click to decision: from the click on "Approve once" (the page's clock) to the agent's waiting call
   returning with the decision (the agent's clock; the same machine), over loopback. Target: p95 <= 50 ms.
2. 1,000 pending requests: the page's first contentful paint and the time until all 1,000 cards are in the
   page after navigation starts (target: <= 1 s), and how responsive it stays: `j` key to selection moved,
   and a new request arriving to its card shown, with 1,000 pending.

Run it with `console/test-browser.sh --bench` (the same virtualenv and Chromium as the browser tests).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import threading
import time
from typing import Any, Dict, List

import signoff
from playwright.sync_api import sync_playwright


def pct(xs: List[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def summary(name: str, xs: List[float]) -> str:
    return (f"{name}: n={len(xs)} p50={statistics.median(xs):.1f} ms p95={pct(xs, 95):.1f} ms "
            f"max={max(xs):.1f} ms")


class Loop:
    """An asyncio loop on its own thread, where the agent's calls wait."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def submit(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)


def main() -> None:
    rounds = int(os.environ.get("SIGNOFF_BENCH_ROUNDS", "200"))
    loads = int(os.environ.get("SIGNOFF_BENCH_LOADS", "10"))
    many = int(os.environ.get("SIGNOFF_BENCH_PENDING", "1000"))
    gate = signoff.Gate(token_keys=signoff.TokenKeys("k1", signoff.Secret.generate()), default_timeout=600)
    gate.register("write_file", parameters={"type": "object", "properties": {"path": {"type": "string"}}},
                  approval="required", executor=lambda args: "ok")
    console = gate.serve_console()
    loop = Loop()
    returned: Dict[str, float] = {}

    async def call(path: str, session: str = "bench") -> None:
        r = await gate.execute("write_file", {"path": path}, session_id=session)
        returned[path] = time.time() * 1000
        assert r.status in ("executed", "cancelled"), r.status

    def wait_pending(n: int) -> List[str]:
        while len(gate.pending()) < n:
            time.sleep(0.001)
        return [str(r.id) for r in gate.pending()]

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=os.environ.get("SIGNOFF_CHROMIUM", "chromium"))
        # bypass_csp: the polling of wait_for_function evaluates strings, which the strict CSP forbids.
        page = browser.new_context(bypass_csp=True).new_page()
        page.goto(console.sign_in_link("alice"))
        page.wait_for_url(console.url)
        page.wait_for_selector("#conn:text('live')")

        # 1. Click to decision.
        latencies = []
        for i in range(rounds):
            path = f"/tmp/click{i}"
            fut = loop.submit(call(path))
            (rid,) = wait_pending(1)
            page.wait_for_selector(f'li.request[data-id="{rid}"] button[data-action="approve"]')
            clicked = page.evaluate(
                """id => { const b = document.querySelector(`li.request[data-id="${id}"] button[data-action="approve"]`);
                           const t = Date.now(); b.click(); return t; }""",
                rid,
            )
            fut.result(timeout=10)
            latencies.append(returned[path] - clicked)
            page.wait_for_selector(f'li.request[data-id="{rid}"]', state="detached")
        print(summary("click to decision (approve once, loopback)", latencies[10:]))

        # 2. Many pending: a burst arriving while the page is open, then page loads.
        t = time.time() * 1000
        futs = [loop.submit(call(f"/tmp/many{i}", session=f"agent-{i % 20}")) for i in range(many)]
        wait_pending(many)
        page.wait_for_function(f"document.querySelectorAll('#pending li.request').length >= {many}", polling=50)
        print(f"{many} requests made in a burst: all shown in the open page after {time.time() * 1000 - t:.0f} ms")
        paints, fills = [], []
        # The page is a shell; its cards come with the stream's first snapshot. When the last one
        # is in the page (since navigation start) is noted as it happens.
        page.add_init_script(
            f"""new MutationObserver((_, seen) => {{
                  const list = document.getElementById('pending');
                  if (list && list.children.length >= {many}) {{ window.__filled = performance.now(); seen.disconnect(); }}
                }}).observe(document, {{ childList: true, subtree: true }});"""
        )
        for _ in range(loads):
            page.goto(console.url)
            page.wait_for_function("window.__filled !== undefined")
            page.wait_for_function("performance.getEntriesByName('first-contentful-paint').length > 0")
            timing = page.evaluate(
                """() => ({fcp: performance.getEntriesByName('first-contentful-paint')[0].startTime,
                          filled: window.__filled})"""
            )
            paints.append(timing["fcp"])
            fills.append(timing["filled"])
        print(summary(f"{many} pending: first contentful paint (the page, before its cards)", paints))
        print(summary(f"{many} pending: all cards in the page (from the stream's snapshot)", fills))
        page.wait_for_selector("#conn:text('live')")
        keys = []
        for i in range(50):
            before = page.evaluate("document.querySelector('li.request.selected').dataset.id")
            t = page.evaluate("performance.now()")
            page.keyboard.press("j" if i % 2 == 0 else "k")
            page.wait_for_function("b => document.querySelector('li.request.selected').dataset.id !== b", arg=before)
            keys.append(page.evaluate("performance.now()") - t)
        print(summary(f"{many} pending: j/k to selection moved", keys))
        arrivals = []
        for i in range(20):
            t = time.time() * 1000
            extra = loop.submit(call(f"/tmp/arrive{i}", session="late"))
            page.wait_for_function(
                f"document.querySelectorAll('#pending li.request').length >= {many + i + 1}", polling="raf"
            )
            arrivals.append(time.time() * 1000 - t)
            futs.append(extra)
        print(summary(f"{many} pending: a new request to its card shown", arrivals))
        for r in gate.pending():
            gate.cancel_request(r)
        for f in futs:
            f.result(timeout=30)
        browser.close()
    console.close()
    gate.close()


if __name__ == "__main__":
    sys.exit(main())
