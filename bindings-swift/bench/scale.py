"""N confirmations pending at once through the Swift package's C ABI (default 1,000,000; `--n`),
nobody answering: the memory the library keeps per pending Swift `await gate.confirm(call)`.

Each call does what the Swift extension's `confirm(_:)` does over the C ABI: `confirmCancellable`
(the core's confirmation, started on the library's runtime) and `whenSettledToken` with the
process's one `SettledSink` (Swift: `Settlements`, which resumes the call's continuation by its
token). `--listener` instead gives each call a `SettledListener` object of its own (Swift: an
`OnSettled` per call, what the extension did before); `--wait` creates the `wait()` future and
polls it once with a continuation callback, as Swift's generated code does for an
`await pending.wait()`. No Python coroutine or asyncio future is made per call; the script keeps
the handles in a list made beforehand, and what Python holds per call (the handle ints, uniffi's
map entry for each lowering of a listener, and tracemalloc's record of each) is counted by
`tracemalloc` and subtracted from the RSS growth. Not counted: Swift's own objects per call (the
handle's Swift object, the continuation's entry in `Settlements`' table, and a task per `await` if
the application starts one per call); no Swift compiler here.

    bindings-swift/bench/scale.sh [--n 1000000] [--listener | --wait]
"""

import argparse
import ctypes
import gc
import json
import os
import sys
import time
import tracemalloc

sys.path.insert(0, os.environ["SIGNOFF_FFI_PY_DIR"])
import signoff_ffi as so  # noqa: E402

lib = so._UniffiLib


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--listener", action="store_true", help="a SettledListener object per call instead of a token")
    mode.add_argument("--wait", action="store_true", help="hold a polled wait() future per call instead of a token")
    a = ap.parse_args()
    n, use_wait, use_listener = a.n, a.wait, a.listener

    woken = [0]

    @so._UNIFFI_RUST_FUTURE_CONTINUATION_CALLBACK
    def continuation(_data, _code):  # Swift resumes its continuation here; nothing to resume
        woken[0] += 1

    class OnSettled(so.SettledListener):
        def settled(self):
            woken[0] += 1

    listener = OnSettled()

    class Sink(so.SettledSink):
        def settled(self, token):
            woken[0] += 1

    sink = so.register_settled_sink(Sink())

    gate = so.Gate.open(config=so.GateConfig(deny_when_unobserved=False, default_timeout_ms=24 * 3600_000))
    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    gate.register_tool(so.ToolSpec(name="delete_file", description="Deletes a file", parameters_json=json.dumps(schema)))

    def start(i: int) -> tuple[int, int]:
        call = so.ToolCall(tool="delete_file", arguments_json=json.dumps({"path": f"/home/user/file-{i:06}.txt"}), call_id=f"call_{i:06}")
        pending = gate.confirm_cancellable(call)
        handle = pending._uniffi_clone_handle()
        if use_listener:
            pending.when_settled(listener)
            return handle, 0
        if not use_wait:
            pending.when_settled_token(sink, i)
            return handle, 0
        future = lib.uniffi_signoff_ffi_fn_method_pendingconfirmation_wait(pending._uniffi_clone_handle())
        lib.ffi_signoff_ffi_rust_future_poll_rust_buffer(future, continuation, 0)
        return handle, future

    # Warm up: the runtime's threads, the gate's tables' first allocations.
    warm = [start(i) for i in range(1000)]
    gc.collect()
    tracemalloc.start()
    # Python's objects, and tracemalloc's own record of each (resident too).
    py0, rss0 = tracemalloc.get_traced_memory()[0] + tracemalloc.get_tracemalloc_memory(), rss()
    t = time.perf_counter()
    held = [(0, 0)] * n
    for i in range(n):
        held[i] = start(i)
        # Each call's first poll runs on the library's runtime: let them keep up, so that what
        # is measured is what the pending calls keep, not a queue of first polls.
        if i % 1000 == 999:
            while gate.pending_count() < i + 1 + 1000:
                time.sleep(0.0005)
    made = time.perf_counter() - t
    while gate.pending_count() < n + 1000:
        time.sleep(0.01)
    gc.collect()
    py1, rss1 = tracemalloc.get_traced_memory()[0] + tracemalloc.get_tracemalloc_memory(), rss()
    tracemalloc.stop()
    native = (rss1 - rss0) - (py1 - py0)
    print(f"{n:,} confirmations pending, {'a polled wait() future' if use_wait else 'a whenSettled listener' if use_listener else 'whenSettledToken'} each (made in {made:.1f} s)")
    print(f"rss: {rss1 / 2**20:,.0f} MiB ({rss0 / 2**20:,.0f} MiB before; growth {(rss1 - rss0) / n:,.0f} B per pending call)")
    print(f"of which Python's own (tracemalloc: the handles, uniffi's map entries, tracemalloc's record of each): {(py1 - py0) / n:,.0f} B")
    print(f"the library's, per pending call: {native / n:,.0f} B; for {n:,}: {native / 2**20:,.0f} MiB")

    gate.close()
    deadline = time.time() + 120
    while woken[0] < n + 1000 and time.time() < deadline:
        time.sleep(0.05)
    if woken[0] < n + 1000:
        sys.exit(f"only {woken[0]} of {n + 1000} waits were woken after close")
    for handle, future in warm + held:
        if future:
            lib.ffi_signoff_ffi_rust_future_free_rust_buffer(future)
        so._uniffi_rust_call(lib.uniffi_signoff_ffi_fn_free_pendingconfirmation, handle)
    print("closed: every wait was woken")


if __name__ == "__main__":
    main()
