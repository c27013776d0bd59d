"""The example agent loop: non-interactive modes, and the terminal approver's keys through a pty."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "python" / "agent_loop.py"


@pytest.mark.parametrize("mode", ["approve", "deny"])
def test_auto_modes(mode: str) -> None:
    out = subprocess.run([sys.executable, str(EXAMPLE), "--auto", mode], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "result: ok" in out.stdout


def test_refuses_to_guess_without_a_terminal() -> None:
    out = subprocess.run([sys.executable, str(EXAMPLE)], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "--auto" in out.stderr


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pty")
def test_terminal_approver_keys() -> None:
    master, slave = os.openpty()
    proc = subprocess.Popen([sys.executable, str(EXAMPLE)], stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    buf = b""
    transcript = b""

    def expect(text: str, timeout: float = 30) -> None:
        nonlocal buf, transcript
        end = time.monotonic() + timeout
        while text.encode() not in buf:
            if time.monotonic() > end:
                raise AssertionError(f"waited for {text!r}; got:\n{buf.decode(errors='replace')}")
            r, _, _ = select.select([master], [], [], 0.2)
            if r:
                try:
                    chunk = os.read(master, 4096)
                    buf += chunk
                    transcript += chunk
                except OSError:
                    break
        buf = buf[buf.index(text.encode()) + len(text):]

    def send(line: str) -> None:
        os.write(master, (line + "\n").encode())

    def answer_call_2() -> None:  # edit: invalid JSON, then a schema violation, then a good edit
        send("e")
        expect("new arguments (JSON): ")
        send("{oops")
        expect("not JSON")
        expect("> ")
        send("e")
        expect("new arguments (JSON): ")
        send('{"path": 5}')
        expect("refused")
        expect("> ")
        send("e")
        expect("new arguments (JSON): ")
        send('{"path": "/tmp/report.txt"}')

    def answer_call_3() -> None:
        send("d")
        expect("reason (for the model): ")
        send("keep my notes")

    plan = {"call_2": answer_call_2, "call_3": answer_call_3, "call_4": lambda: send("s")}
    try:
        for _ in range(3):
            expect("(call ")
            call = buf[: buf.index(b")")].decode()
            expect("> ")
            plan.pop(call)()
        assert not plan
        expect("result: ok")
        output = transcript.decode(errors="replace")
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert proc.returncode == 0
    assert 'call_3: The user declined this call to `delete_file`, so the tool did not run. Their reason: "keep my notes"' in output
    assert "the user changed the arguments before approving" in output
