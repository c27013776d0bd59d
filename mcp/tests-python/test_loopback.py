"""Loopback de-duplication: an agent whose own signoff gate already had a call approved sends an
approval marker in the call's `_meta`; the proxy (same token keys) runs it without asking again,
once. A missing, forged, reused or mismatched marker means the person is asked as usual."""

import anyio
import pytest

import signoff
from conftest import MODES, text
from test_proxy import Person, write

pytestmark = pytest.mark.anyio

KEYS = f"k1:{'A' * 43}="
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}


class Agent:
    """An in-process agent gate that a person (alice) answers, and that knows the proxy's tools."""

    def __init__(self, keys=KEYS):
        self.gate = signoff.Gate(default_timeout=30, token_keys=keys)
        self.gate.register("fs__write_file", parameters=SCHEMA, approval="required")
        self.asked = 0

    def approve(self, request):
        self.asked += 1
        request.approve(responder="alice")

    async def marker(self, args):
        with self.gate.on_request(self.approve):
            decision = await self.gate.confirm("fs__write_file", args)
        assert decision.approved
        return self.gate.approval_marker("fs__write_file", decision)

    def close(self):
        self.gate.close()


@pytest.fixture
def agent():
    a = Agent()
    yield a
    a.close()


def meta(marker):
    return {signoff.MARKER_META_KEY: marker}


@pytest.mark.parametrize("mode", MODES)
async def test_a_call_approved_in_process_is_not_asked_again(proxy, sandbox, agent, mode):
    args = write(sandbox / "a.txt")
    marker = await agent.marker(args)
    person = Person("deny")
    async with proxy(mode, person, token_keys=KEYS) as c:
        r = await c.call_tool("fs__write_file", args, meta=meta(marker))
    assert not r.is_error, text(r)
    assert (sandbox / "a.txt").read_text() == "hello"
    assert agent.asked == 1 and person.asked == []
    records = proxy.records()
    assert any(r.get("decision") == "marker-accepted" and r.get("responder") == "alice" for r in records)
    approved = [r for r in records if r.get("kind") == "outcome" and r.get("decision") == "approved"]
    assert approved and approved[0]["responder"] == "alice", records


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_that_cannot_be_asked_runs_a_marked_call(proxy, sandbox, agent, mode):
    args = write(sandbox / "a.txt")
    async with proxy(mode, token_keys=KEYS, extra={"console": {}}) as c:
        r = await c.call_tool("fs__write_file", args, meta=meta(await agent.marker(args)))
        unmarked = await c.call_tool("fs__write_file", write(sandbox / "b.txt"))
    assert not r.is_error, text(r)
    assert (sandbox / "a.txt").exists()
    # Without a marker the client is told approval is pending elsewhere, as always.
    assert unmarked.is_error and "pending elsewhere" in text(unmarked)
    assert not (sandbox / "b.txt").exists()


@pytest.mark.parametrize("mode", MODES)
async def test_a_reused_marker_means_ask(proxy, sandbox, agent, mode):
    args = write(sandbox / "a.txt")
    marker = await agent.marker(args)
    person = Person("deny", reason="once was enough")
    async with proxy(mode, person, token_keys=KEYS) as c:
        first = await c.call_tool("fs__write_file", args, meta=meta(marker))
        (sandbox / "a.txt").unlink()
        second = await c.call_tool("fs__write_file", args, meta=meta(marker))
    assert not first.is_error, text(first)
    assert second.is_error and "once was enough" in text(second)
    assert len(person.asked) == 1
    assert not (sandbox / "a.txt").exists()


@pytest.mark.parametrize("mode", MODES)
async def test_two_racing_calls_with_one_marker_run_once_and_ask_once(proxy, sandbox, agent, mode):
    args = write(sandbox / "a.txt")
    marker = await agent.marker(args)
    person = Person("deny", reason="already done")
    results = []
    async with proxy(mode, person, token_keys=KEYS) as c:

        async def call():
            results.append(await c.call_tool("fs__write_file", args, meta=meta(marker)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            tg.start_soon(call)
    assert sorted(r.is_error for r in results) == [False, True], [text(r) for r in results]
    assert len(person.asked) == 1
    records = proxy.records()
    executed = [r for r in records if r.get("kind") == "execution" and r.get("tool") == "fs__write_file"]
    assert len(executed) == 1, records


@pytest.mark.parametrize("mode", MODES)
async def test_forged_or_mismatched_markers_mean_ask(proxy, sandbox, agent, mode):
    args = write(sandbox / "a.txt")
    stranger = Agent(keys=signoff.TokenKeys("k1", signoff.Secret.generate()))
    try:
        forged = await stranger.marker(args)
    finally:
        stranger.close()
    other_args = await agent.marker(write(sandbox / "other.txt"))
    person = Person("deny", reason="asked")
    async with proxy(mode, person, token_keys=KEYS) as c:
        for m in (forged, other_args, "so1m.k1.e30.AAAA", 42):
            r = await c.call_tool("fs__write_file", args, meta=meta(m))
            assert r.is_error and "asked" in text(r), text(r)
    assert len(person.asked) == 4
    assert not (sandbox / "a.txt").exists()


async def test_a_marker_replayed_to_a_restarted_proxy_with_a_store_means_ask(proxy, sandbox, agent, tmp_path):
    args = write(sandbox / "a.txt")
    marker = await agent.marker(args)
    person = Person("deny", reason="not twice")
    gate = {"store_path": str(tmp_path / "proxy.db")}
    async with proxy("2026-07-28", person, token_keys=KEYS, gate=gate) as c:
        first = await c.call_tool("fs__write_file", args, meta=meta(marker))
    assert not first.is_error, text(first)
    (sandbox / "a.txt").unlink()
    # A new proxy process on the same database, within the marker's minute: the replay is refused.
    async with proxy("2026-07-28", person, token_keys=KEYS, gate=gate) as c:
        again = await c.call_tool("fs__write_file", args, meta=meta(marker))
    assert again.is_error and "not twice" in text(again), text(again)
    assert len(person.asked) == 1
    assert not (sandbox / "a.txt").exists()
    refused = [r for r in proxy.records() if r.get("kind") == "response-rejected" and "approval marker" in (r.get("reason") or "")]
    assert refused and "already" in refused[0]["reason"], refused


async def test_a_marker_signed_with_other_keys_says_the_keys_differ(proxy, sandbox, agent, tmp_path):
    """The agent's gate and the proxy were given different token keys: the person is asked as for
    any refused marker, and the proxy's stderr says what is most likely wrong (issue 42), for a
    key the proxy lacks and for one of the same id with another secret."""
    args = write(sandbox / "a.txt")
    markers = []
    for keys in (signoff.TokenKeys("k2", signoff.Secret.generate()), signoff.TokenKeys("k1", signoff.Secret.generate())):
        other = Agent(keys=keys)
        try:
            markers.append(await other.marker(args))
        finally:
            other.close()
    person = Person("deny", reason="asked")
    with open(tmp_path / "stderr.txt", "w") as errlog:
        async with proxy("2026-07-28", person, token_keys=KEYS, errlog=errlog) as c:
            for m in markers:
                r = await c.call_tool("fs__write_file", args, meta=meta(m))
                assert r.is_error and "asked" in text(r), text(r)
    said = [line for line in (tmp_path / "stderr.txt").read_text().splitlines() if "approval marker not accepted" in line]
    assert any('unknown key id "k2"' in line for line in said), said
    assert any("signature" in line for line in said), said
    for line in said:
        assert "the agent's gate and this proxy must share token keys" in line, line
    assert not (sandbox / "a.txt").exists()
