"""A gate that is dropped without close() releases what it holds: the store's lock (the same
store_path reopens in the same process), the audit writer thread and its files, and lets the
process exit by itself. Run in a child interpreter so thread and descriptor counts are its own."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

CHILD = textwrap.dedent(
    """
    import asyncio, gc, os, sys
    import signoff

    store, audit = sys.argv[1], sys.argv[2]

    def counts():
        return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))

    async def cycle():
        gate = signoff.Gate(store_path=store, audit_path=audit)

        @gate.tool()
        def delete_file(path: str) -> str:
            return "deleted"

        gate.on_request(lambda request: request.approve())
        stream = gate.events()
        result = await gate.execute("delete_file", {"path": "/tmp/x"})
        assert result.status == "executed", result
        del stream, gate
        gc.collect()

    async def main():
        await cycle()
        await asyncio.sleep(0.05)
        before = counts()
        for _ in range(30):
            await cycle()
        await asyncio.sleep(0.2)
        gc.collect()
        after = counts()
        # Reopening the same store in this process works: the lock was released.
        again = signoff.Gate(store_path=store, audit_path=audit)
        again.close()
        print(before, after)
        assert after[0] <= before[0] + 2, (before, after)
        assert after[1] <= before[1] + 4, (before, after)

    asyncio.run(main())
    """
)


def test_a_gate_dropped_without_close_releases_its_store_threads_and_files(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "signoff.db"), str(tmp_path / "audit.jsonl")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = signoff_verify(tmp_path / "audit.jsonl")
    assert report, "the audit chain written by the dropped gates verifies"


def signoff_verify(path: Path) -> bool:
    import signoff

    return bool(signoff.verify_audit_chain(path).intact)


FORKED = textwrap.dedent(
    """
    import asyncio, os, sys
    import signoff

    async def main():
        gate = signoff.Gate()
        stream = gate.events(observe=True)
        # A call on this loop: its bridge is now the one this thread remembers.
        stream.__anext__().cancel()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            # The child inherits the thread and the loop object, but no loop runs here.
            try:
                stream.__anext__()
                os.write(w, b"no error: bound to a loop that does not run here")
            except RuntimeError:
                os.write(w, b"RuntimeError")
            except BaseException as e:
                os.write(w, repr(e).encode())
            os._exit(0)
        os.close(w)
        out = os.read(r, 500)
        os.waitpid(pid, 0)
        print(out.decode())
        # And the parent's loop is still found at once.
        stream.__anext__().cancel()
        stream.close()
        gate.close()

    asyncio.run(main())
    """
)


def test_a_forked_child_does_not_take_its_parents_loop_for_a_running_one() -> None:
    # The bridge to a loop is remembered per thread and found without asyncio's own lookup
    # (a getpid system call each time); a fork must still make the child ask asyncio, which
    # says no loop runs there.
    proc = subprocess.run([sys.executable, "-c", FORKED], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "RuntimeError", proc.stdout + proc.stderr


FORK_THEN_USE = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    import signoff

    def gate():
        g = signoff.Gate(default_timeout=0.3)
        g.register("read", approval="not_required", executor=lambda a: "read")
        g.register("pay", approval="required", executor=lambda a: "paid")
        return g

    # The parent uses the library first: its runtime's threads start.
    g = gate()
    assert g.execute_blocking("read").status == "executed"
    g.close()
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)  # a hang ends as SIGALRM, not as a stuck test
        child = gate()
        out = [child.execute_blocking("read").status]
        # A deadline must end a call in the child too (an observer keeps the request waiting).
        stream = child.events()
        async def timed_out():
            return (await child.execute("pay")).status
        out.append(asyncio.run(timed_out()))
        out.append(child.confirm_blocking("pay").outcome)
        stream.close()
        child.close()
        print(" ".join(out), flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))
    """
)


def test_a_forked_child_runs_tools_and_ends_calls_at_their_deadline() -> None:
    # A child made by os.fork() has none of its parent's threads: the runtime it inherited never
    # ran a task, so a sync tool never started and no deadline ended a call (it hung).
    proc = subprocess.run([sys.executable, "-c", FORK_THEN_USE], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"exit {proc.returncode}: " + proc.stdout + proc.stderr
    assert proc.stdout.split() == ["executed", "timed-out", "timed-out"], proc.stdout + proc.stderr
