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
