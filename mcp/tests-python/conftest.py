"""Shared pieces: a proxy configuration over server-filesystem in a fresh sandbox, and clients
(over the proxy's stdio, or over Streamable HTTP with the proxy started by `--http`)."""
import json
import os
import queue
import re
import socket
import subprocess
import threading

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


class Child:
    """A child process whose stderr (or stdout) is drained by a thread, line by line, so it never
    blocks; `wait_for` blocks until a line matches (no sleeps)."""

    def __init__(self, argv, env=None, stream="stderr", stdin=subprocess.DEVNULL):
        self.lines = []
        self._q = queue.Queue()
        out = {"stdout": subprocess.PIPE, "stderr": subprocess.DEVNULL} if stream == "stdout" else \
            {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
        self.p = subprocess.Popen(argv, stdin=stdin, env=env, text=True, **out)
        pipe = self.p.stdout if stream == "stdout" else self.p.stderr
        threading.Thread(target=self._drain, args=(pipe,), daemon=True).start()

    def _drain(self, pipe):
        for line in pipe:
            self.lines.append(line)
            self._q.put(line)
        self._q.put(None)

    def next_line(self, timeout=60):
        """The next line; None once the process closed the stream."""
        return self._q.get(timeout=timeout)

    def wait_for(self, pattern, timeout=60):
        """The first match of `pattern` in a line still to come; None if the process ended first."""
        while True:
            line = self.next_line(timeout)
            if line is None:
                return None
            m = re.search(pattern, line)
            if m:
                return m

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(10)


class RawClient:
    """An MCP client spoken by hand (JSON-RPC lines over the proxy's stdio), for what the SDK does
    not do: speak 2025-06-18, or go away in the middle of a call. Starts the proxy on `config` and
    initializes with elicitation declared."""

    def __init__(self, config, children, protocol="2025-06-18", name="raw-0618"):
        self.child = Child([SIGNOFF, "mcp-proxy", "--config", str(config)], stream="stdout", stdin=subprocess.PIPE)
        children.append(self.child)
        self.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": protocol, "capabilities": {"elicitation": {}},
            "clientInfo": {"name": name, "version": "0"}}})
        self.init = self.receive()
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.child.p.stdin.write(json.dumps(message) + "\n")
        self.child.p.stdin.flush()

    def receive(self, timeout=30):
        line = self.child.next_line(timeout)
        assert line is not None, "the proxy closed its stdout"
        return json.loads(line)

    def call_tool(self, rpc_id, name, arguments):
        self.send({"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call",
                   "params": {"name": name, "arguments": arguments}})

    def go_away(self, timeout=10):
        """Closes the proxy's stdin (the client is gone); returns the proxy's exit code."""
        self.child.p.stdin.close()
        return self.child.p.wait(timeout)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def children():
    """Child processes started by a test, stopped when it ends (whatever happened)."""
    started = []
    yield started
    for c in reversed(started):
        c.stop()


@pytest.fixture
def everything_http(children):
    """Starts server-everything in its streamableHttp mode on a free port; returns its URL and
    the child (to stop it)."""
    if not EVERYTHING:
        pytest.skip("run through mcp/test.sh (SIGNOFF_MCP_EVERYTHING)")

    def start():
        for _ in range(5):
            port = free_port()
            c = Child([EVERYTHING, "streamableHttp"], env={**os.environ, "PORT": str(port)})
            children.append(c)
            if c.wait_for(r"listening on port") is not None:
                return f"http://127.0.0.1:{port}/mcp", c
            c.stop()  # the port was taken between free_port() and listen(): try another
        raise RuntimeError("server-everything did not start: " + "".join(c.lines))

    return start


@pytest.fixture
def proxy(tmp_path, sandbox, children):
    """Returns a function making a Client for the proxy (mode, elicitation callback, extra
    config). With `http=True` the proxy is started with `--http 127.0.0.1:0` and the client
    connects to the URL it prints (`make.url`)."""
    if not (SIGNOFF and FS):
        pytest.skip("run through mcp/test.sh (SIGNOFF_BIN, SIGNOFF_MCP_FS)")
    audit = tmp_path / "audit.jsonl"

    def make(mode, callback=None, tools=None, timeout_ms=20000, everything=False, gate=None, http=False,
             upstreams=None, http_config=None, client_name=None, headers=None, token_keys=None, extra=None,
             errlog=None):
        ups = [{"name": "fs", "command": FS, "args": [str(sandbox)]}] + (upstreams or [])
        if everything:
            if not EVERYTHING:
                pytest.skip("run through mcp/test.sh (SIGNOFF_MCP_EVERYTHING)")
            ups.append({"name": "ev", "command": EVERYTHING, "args": ["stdio"]})
        config = {
            "upstreams": ups,
            "tools": tools or {},
            "default_timeout_ms": timeout_ms,
            "gate": {"audit_path": str(audit), **(gate or {})},
        }
        if http_config:
            config["http"] = http_config
        if token_keys:
            config["token_keys"] = token_keys
        config.update(extra or {})
        path = make.config
        path.write_text(json.dumps(config))
        kw = {"elicitation_callback": callback} if callback else {}
        if client_name:
            import mcp_types as types

            kw["client_info"] = types.Implementation(name=client_name, version="0")
        if not http:
            params = StdioServerParameters(command=SIGNOFF, args=["mcp-proxy", "--config", str(path)])
            if errlog is not None:  # the proxy's stderr to this file
                from mcp.client.stdio import stdio_client

                return Client(stdio_client(params, errlog=errlog), mode=mode, **kw)
            return Client(params, mode=mode, **kw)
        if make.url is None:
            c = Child([SIGNOFF, "mcp-proxy", "--config", str(path), "--http", "127.0.0.1:0"])
            children.append(c)
            m = c.wait_for(r"listening on (http://\S+)")
            assert m is not None, "the proxy did not start: " + "".join(c.lines)
            make.url, make.child = m.group(1), c
        if headers:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            transport = streamable_http_client(make.url, http_client=create_mcp_http_client(headers=headers))
            return Client(transport, mode=mode, **kw)
        return Client(make.url, mode=mode, **kw)

    async def record_where(predicate, timeout=15):
        """The first audit record `predicate` accepts, polling the audit (written as it goes) until
        one is there."""
        import anyio

        with anyio.fail_after(timeout):
            while True:
                try:
                    found = [r for r in audit_records(audit) if predicate(r)]
                except json.JSONDecodeError:  # a line being written
                    found = []
                if found:
                    return found[0]
                await anyio.sleep(0.05)

    def upstream_pid(command):
        """The PID of the proxy's upstream child started from `command` (the proxy is the process
        running on this configuration; its children are read from /proc)."""
        proxies = [pid for pid in pids() if {"mcp-proxy", str(make.config)} <= set(cmdline(pid))]
        assert len(proxies) == 1, proxies
        ups = [pid for pid in children_of(proxies[0]) if command in cmdline(pid)]
        assert len(ups) == 1, (ups, [cmdline(p) for p in children_of(proxies[0])])
        return ups[0]

    make.audit = audit
    make.config = tmp_path / "proxy.json"
    make.records = lambda: audit_records(audit)
    make.record_where = record_where
    make.upstream_pid = upstream_pid
    make.url = None
    make.child = None
    return make


def pids():
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def cmdline(pid):
    """A process's arguments (empty once it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def children_of(pid):
    """The direct children of a process (/proc/<pid>/task/*/children, every thread's)."""
    kids = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            kids += [int(k) for k in f.read().split()]
    return kids


def audit_records(path):
    """The audit's records, oldest first (an audit not written yet has none)."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def text(result):
    return " ".join(getattr(c, "text", "") for c in result.content)


@pytest.fixture
def anyio_backend():
    return "asyncio"
