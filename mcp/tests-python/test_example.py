"""The MCP example agent (examples/python/mcp_agent.py) runs, unattended, against the real proxy
and server-filesystem: approved once in the agent's own gate, the proxy does not ask again."""
import os
import subprocess
import sys

import pytest

from conftest import FS, SIGNOFF

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python", "mcp_agent.py")


def run(auto):
    if not (SIGNOFF and FS):
        pytest.skip("run through mcp/test.sh (SIGNOFF_BIN, SIGNOFF_MCP_FS)")
    r = subprocess.run(
        [sys.executable, EXAMPLE, "--signoff", SIGNOFF, "--server", FS, "--auto", auto],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_approved_in_the_agent_the_proxy_runs_it_without_asking():
    out = run("approve")
    assert "fs__write_file: Successfully wrote to" in out, out
    assert "fs__read_text_file: signed off" in out, out
    assert "the proxy accepted 1 approval marker(s)" in out, out


def test_denied_in_the_agent_nothing_reaches_the_server():
    out = run("deny")
    assert "fs__write_file: not run (denied: denied by --auto deny)" in out, out
    assert "signed off" not in out
    assert "the proxy accepted 0 approval marker(s)" in out, out
