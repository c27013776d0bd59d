"""Small helpers shared by the tests."""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Any, Callable, Dict, List, Optional

import signoff

PATH_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
    "additionalProperties": False,
}


class Recorder:
    """An executor that records every call (thread-safe)."""

    def __init__(self, result: Any = "ok") -> None:
        self.calls: List[Any] = []
        self.result = result
        self._lock = threading.Lock()

    def __call__(self, args: Any) -> Any:
        with self._lock:
            self.calls.append(args)
        return self.result


def gate_with_tools(executor: Optional[Recorder] = None, **gate_options: Any) -> signoff.Gate:
    gate = signoff.Gate(**gate_options)
    gate.register(
        "delete_file",
        description="Deletes a file",
        parameters=PATH_SCHEMA,
        editable=True,
        executor=executor,
    )
    gate.register("read_file", description="Reads a file", parameters=PATH_SCHEMA, executor=executor)
    return gate


def spec_by_name(gate: signoff.Gate) -> Dict[str, Dict[str, Any]]:
    return {t["name"]: t for t in gate.tools()}


def read_line(proc: "subprocess.Popen[str]") -> str:
    """The next line a child process prints (failing with its stderr if it exited instead)."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(10)
        raise AssertionError(f"child exited {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
    return line.strip()


def wait_for(pred: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Polls ``pred`` (blocking) until it holds; fails naming ``what`` after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)
