"""A PostgreSQL store shared by many gates (``store_url``): requests made through one gate are
listed and answered through another, in this process or in another one; racing answers resolve a
request once; an owner that was killed recovers its requests; the calls that wait for the
database let other Python threads run.

Needs a real server: ``SIGNOFF_TEST_POSTGRES_URL`` (``scripts/with-postgres.sh`` sets it). Without
it these tests are skipped, unless ``SIGNOFF_REQUIRE_POSTGRES`` is set. Every test keeps its tables
in a schema of its own, so tests run in parallel and reruns never see old rows.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Coroutine, Iterator, List, Optional, Tuple

import pytest

import signoff
from conftest import Collector, wait_until
from helpers import PATH_SCHEMA, Recorder, read_line, wait_for

Run = Callable[[Coroutine[Any, Any, Any]], Any]

SECRET = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="


def _url() -> Optional[str]:
    url = os.environ.get("SIGNOFF_TEST_POSTGRES_URL")
    if url:
        return url
    if os.environ.get("SIGNOFF_REQUIRE_POSTGRES"):
        raise RuntimeError(
            "SIGNOFF_REQUIRE_POSTGRES is set but SIGNOFF_TEST_POSTGRES_URL is not "
            "(run under scripts/with-postgres.sh)"
        )
    return None


URL = _url()
pytestmark = pytest.mark.skipif(URL is None, reason="no SIGNOFF_TEST_POSTGRES_URL (run under scripts/with-postgres.sh)")


@pytest.fixture
def url() -> str:
    assert URL is not None
    return URL


@pytest.fixture
def schema() -> str:
    """A schema of this test's own."""
    return "t_" + uuid.uuid4().hex


def shared_gate(url: str, schema: str, executor: Optional[Recorder] = None, **options: Any) -> signoff.Gate:
    gate = signoff.Gate(store_url=url, store_schema=schema, **options)
    gate.register("delete_file", description="Deletes a file", parameters=PATH_SCHEMA, editable=True, executor=executor)
    return gate


async def listed(gate: signoff.Gate, n: int = 1, timeout: float = 10.0) -> List[signoff.ConfirmationRequest]:
    """The pending requests once `gate` lists at least `n` (made elsewhere)."""
    await wait_until(lambda: len(gate.pending()) >= n, timeout, f"{n} pending request(s) listed")
    return gate.pending()


# ---- two gates in one process -----------------------------------------------------------------


def test_a_call_made_through_one_gate_is_answered_through_another_and_runs_once(
    run: Run, url: str, schema: str
) -> None:
    runs = Recorder({"deleted": True})
    # No approver is attached to the agent's gate: with a shared store it waits all the same.
    agent = shared_gate(url, schema, runs)
    console = shared_gate(url, schema)

    async def main() -> None:
        call = asyncio.ensure_future(agent.execute("delete_file", {"path": "/tmp/x"}, call_id="c1"))
        [req] = await listed(console)
        assert (req.tool, req.arguments) == ("delete_file", {"path": "/tmp/x"})
        assert console.pending_count == 1 and agent.pending_count == 1
        assert console.pending_request(req.id) is not None
        page, more = console.pending_page(limit=10)
        assert [r.id for r in page] == [req.id] and more is None
        record = console.record(req)
        assert record is not None and record.state == "pending"

        started = time.monotonic()
        assert console.approve(req, responder="alice") == "approved"
        result = await asyncio.wait_for(call, 10)
        assert time.monotonic() - started < 3, "the waiting call woke late"
        assert (result.status, result.output) == ("executed", {"deleted": True})
        assert runs.calls == [{"path": "/tmp/x"}]

        await wait_until(lambda: (r := console.record(req)) is not None and r.state == "done", what="done")
        done = console.record(req.id)
        assert done is not None and done.responder == "alice"
        assert done.result["output"] == {"deleted": True}
        # A second answer, through either gate, is refused and changes nothing.
        with pytest.raises(signoff.AlreadyResolvedError):
            console.approve(req)
        with pytest.raises(signoff.AlreadyResolvedError):
            agent.deny(req.id)
        assert console.pending() == [] and console.pending_count == 0
        assert runs.calls == [{"path": "/tmp/x"}]

    try:
        run(main())
    finally:
        agent.close()
        console.close()


def test_a_denial_with_a_reason_from_another_gate_reaches_the_call(run: Run, url: str, schema: str) -> None:
    runs = Recorder()
    agent = shared_gate(url, schema, runs)
    console = shared_gate(url, schema)

    async def main() -> None:
        call = asyncio.ensure_future(agent.execute("delete_file", {"path": "/etc"}))
        [req] = await listed(console)
        assert console.respond(req.id, "deny", reason="not /etc", responder="bob") == "denied"
        result = await asyncio.wait_for(call, 10)
        assert result.status == "denied"
        assert result.decision is not None
        assert result.decision.reason == "not /etc" and result.decision.responder == "bob"
        assert "not /etc" in result.content
        assert runs.calls == []
        record = agent.record(req)
        assert record is not None and record.state == "denied"

        # confirm() too, answered with a token issued and used through the other gate.
        keyed_agent = shared_gate(url, schema, token_keys=f"k1:{SECRET}")
        keyed_console = shared_gate(url, schema, token_keys=f"k1:{SECRET}")
        try:
            asked = asyncio.ensure_future(keyed_agent.confirm("delete_file", {"path": "/tmp/t"}))
            [req] = await listed(keyed_console)
            token = keyed_console.issue_token(req, "dana")
            assert keyed_console.respond_token(token, "approve", approver="dana") == "approved"
            decision = await asyncio.wait_for(asked, 10)
            assert decision.approved and decision.arguments == {"path": "/tmp/t"} and decision.responder == "dana"
            with pytest.raises(signoff.AlreadyUsedError):
                keyed_agent.respond_token(token, "approve", approver="dana")
        finally:
            keyed_agent.close()
            keyed_console.close()

    try:
        run(main())
    finally:
        agent.close()
        console.close()


def test_racing_answers_from_several_gates_resolve_each_request_once(run: Run, url: str, schema: str) -> None:
    runs = Recorder()
    agent = shared_gate(url, schema, runs)
    consoles = [shared_gate(url, schema) for _ in range(2)]
    n = 5

    async def main() -> None:
        calls = [asyncio.ensure_future(agent.execute("delete_file", {"path": f"/tmp/{i}"})) for i in range(n)]
        reqs = await listed(consoles[0], n)
        answerers = [agent, *consoles]
        outcomes: List[List[Any]] = [[] for _ in reqs]
        barrier = threading.Barrier(len(answerers))

        def answer(k: int, gate: signoff.Gate) -> None:
            for i, req in enumerate(reqs):
                barrier.wait(10)
                try:
                    if k % 2 == 0:
                        outcomes[i].append(gate.approve(req, responder=f"g{k}"))
                    else:
                        outcomes[i].append(gate.deny(req, f"no from g{k}", responder=f"g{k}"))
                except signoff.SignoffError as e:
                    outcomes[i].append(e)

        # The agent's own gate answers from a thread too: its event loop must keep running.
        threads = [threading.Thread(target=answer, args=(k, g)) for k, g in enumerate(answerers)]
        for t in threads:
            t.start()
        await asyncio.get_running_loop().run_in_executor(None, lambda: [t.join(30) for t in threads])
        for out in outcomes:
            wins = [o for o in out if isinstance(o, str)]
            losses = [o for o in out if not isinstance(o, str)]
            assert len(wins) == 1, out
            assert len(losses) == len(answerers) - 1, out
            assert all(isinstance(e, signoff.AlreadyResolvedError) for e in losses), out
        results = await asyncio.wait_for(asyncio.gather(*calls), 10)
        approved = [r for r in results if r.status == "executed"]
        assert len(runs.calls) == len(approved), "each approved call ran once, no denied call ran"
        assert all(r.status in ("executed", "denied") for r in results)

    try:
        run(main())
    finally:
        for g in (agent, *consoles):
            g.close()


# ---- configuration and connection errors -------------------------------------------------------


def test_store_options_are_checked(url: str, schema: str, tmp_path: Path) -> None:
    with pytest.raises(signoff.ConfigError) as e:
        signoff.Gate(store_url=url, store_path=tmp_path / "x.db")
    assert "store_url" in str(e.value) and "store_path" in str(e.value)
    with pytest.raises(signoff.ConfigError, match="store_owner"):
        signoff.Gate(store_owner="agent-1")
    with pytest.raises(signoff.ConfigError, match="schema"):
        signoff.Gate(store_schema=schema)
    with pytest.raises(signoff.ConfigError, match="store_url"):
        signoff.Gate(store_url="")
    with pytest.raises(signoff.ConfigError, match="store_url"):
        signoff.Gate(store_url="postgres://[not a host")
    with pytest.raises(signoff.ConfigError, match="schema"):
        signoff.Gate(store_url=url, store_schema="no-dashes; drop table x")
    with pytest.raises(signoff.ConfigError, match="store_url"):
        signoff.Gate(store_url=42)  # type: ignore[typeddict-item]


def test_an_unreachable_server_is_a_store_error_not_a_hang() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(signoff.StoreError, match="connect"):
        signoff.Gate(store_url=f"postgres://signoff@127.0.0.1:{port}/signoff?connect_timeout=3")
    with pytest.raises(signoff.StoreError):
        signoff.Gate(store_url="postgres://signoff@127.0.0.1:1/signoff")
    assert time.monotonic() - started < 8


# ---- another process ---------------------------------------------------------------------------

AGENT = r"""
import asyncio, json, sys
import signoff

url, schema, owner, count = sys.argv[1:5]

def delete_file(args):
    with open(count, "a") as f:
        f.write(args["path"] + "\n")
    return {"deleted": args["path"]}

async def main():
    options = {"store_url": url, "store_schema": schema}
    if owner != "-":
        options["store_owner"] = owner
    gate = signoff.Gate(**options)
    schema_ = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    gate.register("delete_file", parameters=schema_, executor=delete_file)
    assert gate.recover().restored == []
    session = "child" if owner == "-" else owner
    call = asyncio.ensure_future(gate.execute("delete_file", {"path": "/tmp/child"}, session_id=session))
    # The schema is shared: other processes' requests are listed too.
    mine = []
    while not mine:
        await asyncio.sleep(0.005)
        mine = [r for r in gate.pending() if r.session_id == session]
    print("PENDING", mine[0].id, flush=True)
    result = await call
    print("RESULT", json.dumps(result.to_dict()), flush=True)
    gate.close()

asyncio.run(main())
"""


def start_agent(url: str, schema: str, count: Path, owner: str = "-") -> "subprocess.Popen[str]":
    return subprocess.Popen(
        [sys.executable, "-c", AGENT, url, schema, owner, str(count)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_call_in_another_process_is_listed_and_approved_here(url: str, schema: str, tmp_path: Path) -> None:
    count = tmp_path / "runs.txt"
    child = start_agent(url, schema, count)
    console = shared_gate(url, schema)
    try:
        kind, rid = read_line(child).split()
        assert kind == "PENDING"
        [req] = console.pending()
        assert (req.id, req.tool, req.arguments, req.session_id) == (rid, "delete_file", {"path": "/tmp/child"}, "child")
        assert console.approve(req, responder="alice") == "approved"
        kind, result = read_line(child).split(" ", 1)
        assert kind == "RESULT"
        out = json.loads(result)
        assert out["status"] == "executed" and out["output"] == {"deleted": "/tmp/child"}
        assert child.wait(10) == 0
        assert count.read_text().splitlines() == ["/tmp/child"]
        record = console.record(rid)
        assert record is not None and (record.state, record.responder) == ("done", "alice")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        console.close()


def test_a_killed_owner_recovers_its_pending_request_and_it_runs_once(url: str, schema: str, tmp_path: Path) -> None:
    count = tmp_path / "runs.txt"
    child = start_agent(url, schema, count, owner="agent-x")
    other = start_agent(url, schema, count, owner="agent-y")
    try:
        kind, rid = read_line(child).split()
        assert kind == "PENDING"
        kind, other_rid = read_line(other).split()
    finally:
        child.kill()  # SIGKILL: no atexit, no close(), nothing cleaned up
        child.wait(10)
    assert child.returncode != 0
    try:
        runs = Recorder({"recovered": True})
        gate = shared_gate(url, schema, runs, store_owner="agent-x", deny_when_unobserved=False)
        recovery = gate.recover()
        # Only this owner's request: agent-y's is still waited for by its own (live) process.
        assert [r.id for r in recovery.restored] == [rid], recovery.to_dict()
        assert recovery.timed_out == [] and recovery.interrupted == [] and recovery.not_restored == []
        assert {r.id for r in gate.pending()} == {rid, other_rid}

        console = shared_gate(url, schema)
        try:
            assert console.approve(rid, responder="carol") == "approved"
        finally:
            console.close()
        wait_for(lambda: (r := gate.record(rid)) is not None and r.state == "done", "the restored call to run")
        assert runs.calls == [{"path": "/tmp/child"}]
        assert not count.exists(), "the killed process never ran it"
        with pytest.raises(signoff.AlreadyResolvedError):
            gate.approve(rid)
        gate.close()
    finally:
        other.kill()
        other.wait(10)


def test_closing_the_last_stream_does_not_cancel_a_shared_request(run: Run, url: str, schema: str) -> None:
    agent = shared_gate(url, schema)  # deny_when_unobserved: the default

    async def main() -> None:
        stream = agent.events()
        call = asyncio.ensure_future(agent.confirm("delete_file", {"path": "/a"}))
        [req] = await listed(agent)
        stream.close()
        await asyncio.sleep(0.1)
        record = agent.record(req)
        assert record is not None and record.state == "pending", record
        call.cancel()

    try:
        run(main())
    finally:
        agent.close()


def test_recover_restores_a_shared_request_with_no_approver_attached(url: str, schema: str, tmp_path: Path) -> None:
    child = start_agent(url, schema, tmp_path / "runs.txt", owner="agent-z")
    try:
        _, rid = read_line(child).split()
    finally:
        child.kill()
        child.wait(10)
    gate = shared_gate(url, schema, Recorder(), store_owner="agent-z")  # deny_when_unobserved: the default
    try:
        assert [r.id for r in gate.recover().restored] == [rid]
        record = gate.record(rid)
        assert record is not None and record.state == "pending", record
    finally:
        gate.close()


# ---- the GIL ------------------------------------------------------------------------------------


class Proxy:
    """A TCP relay to the server, run by Python threads: a call that waited for the database while
    holding the GIL would stop the relay, so it could never get its answer."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.relayed = 0
        self.stopped = False
        self.sockets: List[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self.sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                self.relayed += 1
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.stopped = True
        self.listener.close()
        for s in self.sockets:
            s.close()


def through(url: str, proxy_port: int) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{proxy_port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))


@pytest.fixture
def proxied(url: str) -> Iterator[Tuple[str, Proxy]]:
    from urllib.parse import urlsplit

    if not url.startswith(("postgres://", "postgresql://")):
        pytest.skip("the relay needs a postgres:// URL")
    parts = urlsplit(url)
    proxy = Proxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    try:
        yield through(url, proxy.port), proxy
    finally:
        proxy.close()


def test_calls_that_wait_for_the_database_release_the_gil(
    run: Run, url: str, schema: str, proxied: Tuple[str, Proxy]
) -> None:
    relayed_url, proxy = proxied
    runs = Recorder()
    # Every connection of these gates goes through the Python relay.
    agent = shared_gate(relayed_url, schema, runs, token_keys=f"k1:{SECRET}")
    console = shared_gate(relayed_url, schema, token_keys=f"k1:{SECRET}")
    assert proxy.relayed > 0

    def timed(what: str, f: Callable[[], Any]) -> Any:
        started = time.monotonic()
        out = f()
        assert time.monotonic() - started < 5, f"{what} waited for the relay: it held the GIL"
        return out

    async def main() -> None:
        # execute() polls the core without the GIL: its insert goes through the relay too.
        published = Collector(agent.events(observe=True))
        calls = [asyncio.ensure_future(agent.execute("delete_file", {"path": f"/{i}"})) for i in range(3)]
        # Answered once the agent's gate has published them. (Answered earlier, while the relay
        # still holds the agent's insert reply, the core cancels the approved row when the reply
        # arrives: `Gate::inserted` finds the waiter claimed by the adopted approval. Reported.)
        await wait_until(lambda: len(published.of_type("confirmation-request")) == 3, what="3 published")
        await published.close()
        assert timed("pending_count", lambda: console.pending_count) == 3
        by_path = {r.arguments["path"]: r for r in timed("pending", console.pending)}
        reqs = [by_path["/0"], by_path["/1"], by_path["/2"]]
        timed("pending_page", lambda: console.pending_page(limit=2))
        timed("pending_request", lambda: console.pending_request(reqs[0].id))
        timed("record", lambda: console.record(reqs[0]))
        timed("repr", lambda: repr(console))
        token = timed("issue_token", lambda: console.issue_token(reqs[0], "dana"))
        assert timed("respond_token", lambda: console.respond_token(token, "approve", approver="dana")) == "approved"
        assert timed("respond", lambda: console.respond(reqs[1].id, "deny", reason="no")) == "denied"
        assert timed("cancel_request", lambda: agent.cancel_request(reqs[2])) is True
        results = await asyncio.wait_for(asyncio.gather(*calls), 10)
        assert [r.status for r in results] == ["executed", "denied", "cancelled"]
        assert runs.calls == [{"path": "/0"}]

    try:
        run(main())
    finally:
        timed("close", agent.close)
        timed("close", console.close)
