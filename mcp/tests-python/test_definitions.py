"""Pinned upstream definitions with a real upstream that changes: shifty_server.py (the official
Python SDK's server over stdio) changes `write_note`'s description when its `change` tool is called
and sends `notifications/tools/list_changed`. Approvals given for the old definition are void."""
import re
import sys
from pathlib import Path

import anyio
import pytest

from conftest import MODES, text
from test_proxy import APPROVE, Person, first_round, write

pytestmark = pytest.mark.anyio

# Its `change` says it only reads, which these tests take as a fact.
SHIFTY = {"name": "sh", "command": sys.executable, "args": [str(Path(__file__).with_name("shifty_server.py"))],
          "trust_annotations": True}
NOTE = "sh__write_note"


async def change(c):
    """Has the upstream change `write_note`, then waits until the proxy lists the new definition
    (it lists the upstream again once the upstream's list_changed has arrived)."""
    r = await c.call_tool("sh__change", {})
    assert not r.is_error and "version 2" in text(r), text(r)
    with anyio.fail_after(10):
        while True:
            tools = {t.name: t.description for t in (await c.list_tools()).tools}
            if "version 2" in tools[NOTE]:
                return
            await anyio.sleep(0.05)


def hashes(records):
    """The pinned hash of `write_note`, and the (old, new) hashes of each recorded change."""
    pinned = [re.search(r"sha256:\w+", r["reason"]).group(0)
              for r in records if r.get("decision") == "definition-pinned" and r.get("tool") == NOTE]
    changed = [tuple(re.findall(r"sha256:\w+", r["reason"]))
               for r in records if r.get("decision") == "definition-changed" and r.get("tool") == NOTE]
    return pinned, changed


@pytest.mark.parametrize("mode", MODES)
async def test_a_changed_definition_voids_a_session_grant(proxy, sandbox, mode):
    person = Person("approve_session")
    async with proxy(mode, person, upstreams=[SHIFTY]) as c:
        for name in ("a.txt", "b.txt"):
            r = await c.call_tool(NOTE, write(sandbox / name))
            assert not r.is_error and "version 1" in text(r), text(r)
        assert len(person.asked) == 1  # the session grant covered the second write
        await change(c)
        assert len(person.asked) == 1  # `change` is read-only: not asked
        r = await c.call_tool(NOTE, write(sandbox / "c.txt"))
        assert not r.is_error and "version 2" in text(r), text(r)
        assert len(person.asked) == 2, "the grant given for the old definition was used for the new one"
        assert "c.txt" in person.asked[1]
        # The new grant holds for the new definition.
        r = await c.call_tool(NOTE, write(sandbox / "d.txt"))
        assert not r.is_error, text(r)
    assert len(person.asked) == 2
    pinned, changed = hashes(proxy.records())
    assert len(pinned) == 1 and len(changed) == 1, proxy.records()
    old, new = changed[0]
    assert old == pinned[0] and new != old


async def test_a_request_state_from_before_a_change_does_not_open(proxy, sandbox):
    target = sandbox / "a.txt"
    person = Person("approve")
    async with proxy("2026-07-28", person, upstreams=[SHIFTY]) as c:
        state = await first_round(c, write(target), tool=NOTE)
        parked = await proxy.record_where(lambda r: r.get("kind") == "request" and r.get("tool") == NOTE)
        await change(c)
        # The call parked between the two rounds ends as cancelled once the proxy has listed the
        # change, not at its deadline (20 s).
        ended = await proxy.record_where(
            lambda r: r.get("request_id") == parked["request_id"] and r.get("kind") == "outcome", timeout=3)
        assert ended.get("decision") == "cancelled", ended
        r = await c.session.call_tool(
            NOTE, write(target), input_responses=APPROVE, request_state=state, allow_input_required=True
        )
        assert r.is_error and "refused" in text(r), text(r)
        assert not target.exists()
        # The call made afresh is asked about the new definition, and runs once approved.
        assert person.asked == []
        again = await c.call_tool(NOTE, write(target))
        assert not again.is_error and "version 2" in text(again), text(again)
    assert len(person.asked) == 1
    records = proxy.records()
    first = [r["request_id"] for r in records if r.get("kind") == "request" and r["tool"] == NOTE][0]
    assert first == parked["request_id"]
    decisions = [r.get("decision") for r in records if r.get("request_id") == first]
    assert "cancelled" in decisions and "approved" not in decisions and not [
        r for r in records if r.get("request_id") == first and r.get("kind") == "execution"], records
    pinned, changed = hashes(records)
    assert len(changed) == 1 and changed[0][0] == pinned[0] and changed[0][1] != pinned[0], records
