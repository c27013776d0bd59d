"""The example agent loop's terminal approver never blocks on a stale prompt.

The example runs as a subprocess with its stdin on a pseudo-terminal (it refuses to answer from a
pipe) and its stdout on a pipe read as it comes, with the time each chunk arrived.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List, Tuple

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "python" / "agent_loop.py"

pytestmark = pytest.mark.skipif(not hasattr(os, "openpty") or sys.platform == "win32", reason="needs a pty")


class Run:
    """The example with stdin on a pty (echo off) and stdout read by a thread."""

    def __init__(self, *args: str) -> None:
        import termios

        self.master, slave = os.openpty()
        attrs = termios.tcgetattr(slave)
        attrs[3] &= ~termios.ECHO  # lflag: what the helper types is not echoed back
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, str(EXAMPLE), *args],
            stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, close_fds=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        os.close(slave)
        self.chunks: List[Tuple[float, str]] = []  # (seconds since start, text)
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            chunk = os.read(fd, 4096)
            if not chunk:
                return
            with self.lock:
                self.chunks.append((time.monotonic() - self.started, chunk.decode(errors="replace")))

    def output(self) -> str:
        with self.lock:
            return "".join(text for _, text in self.chunks)

    def wait_for(self, text: str, timeout: float = 10) -> None:
        end = time.monotonic() + timeout
        while text not in self.output():
            if time.monotonic() > end or self.proc.poll() is not None:
                raise AssertionError(f"waited for {text!r}; got:\n{self.output()}")
            time.sleep(0.02)

    def type(self, data: bytes) -> None:
        os.write(self.master, data)

    def finish(self, timeout: float) -> str:
        """Waits for the example to exit (kills it after ``timeout``) and returns its output."""
        try:
            self.proc.wait(timeout)
        finally:
            self.close()
        return self.output()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.master >= 0:
            os.close(self.master)
            self.master = -1
        self.reader.join(5)


def test_an_unanswered_request_expires_and_the_next_one_is_shown() -> None:
    run = Run("--timeout", "2")
    try:
        run.wait_for("(call call_")  # the first request is on screen
        time.sleep(3.0)  # nobody answers: call_2 and call_3 (one batch) expire at ~2 s, call_4 comes up
        before = run.output()
        run.type(b"a\n")  # typed after the expiry: for the request on screen now
        time.sleep(0.5)
        run.type(b"\x04")  # then the terminal closes (EOF): anything left is denied
        out = run.finish(10)
    finally:
        run.close()

    # The first request shown (call_2 or call_3: they are published concurrently) was withdrawn
    # as expired, and neither delete ran.
    first = before.index("(call call_")
    assert "expired: nobody answered in time; the tool did not run" in before[first:], before
    assert "[call_2] delete_file: timed-out" in before and "[call_3] delete_file: timed-out" in before, before
    # The next request (call_4) came up on its own, before anything was typed, with its real
    # time left taken from its deadline.
    assert "(call call_4)" in before, before
    shown = before[before.index("(call call_4)"):]
    assert "answer within 2 s" in shown or "answer within 1 s" in shown, shown
    # The answer typed after the expiry applied to call_4, which ran; nothing was answered twice.
    after = out[len(before):]
    assert "-> approved" in after and "too late" not in out, out
    assert "[call_4] send_email: executed" in after, out
    assert "- call_4: sent to boss@example.com" in out, out
    assert "result: ok" in out, out
    assert run.proc.returncode == 0, out


def test_stdin_closed_at_once_denies_everything_and_exits_cleanly() -> None:
    run = Run()  # the default timeout (120 s): denial must not wait for it
    try:
        run.type(b"\x04")  # EOF before the first request
        out = run.finish(10)
    finally:
        run.close()
    assert "stdin closed" in out, out
    for call, tool in (("call_2", "delete_file"), ("call_3", "delete_file"), ("call_4", "send_email")):
        assert f"[{call}] {tool}: denied" in out, out
    assert "[call_1] read_file: executed" in out, out
    assert "sent to" not in out and "Traceback" not in out, out
    assert "result: ok" in out, out
    assert run.proc.returncode == 0, out
