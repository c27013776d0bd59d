"""Shared pieces: a proxy configuration over server-filesystem in a fresh sandbox, and clients."""
import json
import os

import pytest
from mcp import Client, StdioServerParameters

SIGNOFF = os.environ.get("SIGNOFF_BIN", "")
FS = os.environ.get("SIGNOFF_MCP_FS", "")
EVERYTHING = os.environ.get("SIGNOFF_MCP_EVERYTHING", "")
MODES = ["legacy", "2026-07-28"]


@pytest.fixture
def sandbox(tmp_path):
    box = tmp_path / "box"
    box.mkdir()
    return box


@pytest.fixture
def proxy(tmp_path, sandbox):
    """Returns a function making a Client for the proxy (mode, elicitation callback, extra config)."""
    if not (SIGNOFF and FS):
        pytest.skip("run through mcp/test.sh (SIGNOFF_BIN, SIGNOFF_MCP_FS)")
    audit = tmp_path / "audit.jsonl"

    def make(mode, callback=None, tools=None, timeout_ms=20000, everything=False, gate=None, token_keys=None, extra=None):
        upstreams = [{"name": "fs", "command": FS, "args": [str(sandbox)]}]
        if everything:
            if not EVERYTHING:
                pytest.skip("run through mcp/test.sh (SIGNOFF_MCP_EVERYTHING)")
            upstreams.append({"name": "ev", "command": EVERYTHING, "args": ["stdio"]})
        config = {
            "upstreams": upstreams,
            "tools": tools or {},
            "default_timeout_ms": timeout_ms,
            "gate": {"audit_path": str(audit), **(gate or {})},
        }
        if token_keys:
            config["token_keys"] = token_keys
        config.update(extra or {})
        path = tmp_path / "proxy.json"
        path.write_text(json.dumps(config))
        params = StdioServerParameters(command=SIGNOFF, args=["mcp-proxy", "--config", str(path)])
        kw = {"elicitation_callback": callback} if callback else {}
        return Client(params, mode=mode, **kw)

    make.audit = audit
    return make


def text(result):
    return " ".join(getattr(c, "text", "") for c in result.content)


@pytest.fixture
def anyio_backend():
    return "asyncio"
