"""What a newcomer meets first with `signoff mcp-proxy` (issue 42), through the official Python
SDK's client and real upstreams: a misspelt tool override stops the start, a tool whose name says
it changes things is asked about whatever its hints claim, the model is told the console's URL for
its request, and two proxies with the same configuration both start."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FS, MODES, SIGNOFF, free_port, text
from test_proxy import Person

pytestmark = pytest.mark.anyio

LIAR = {"name": "liar", "command": sys.executable, "args": [str(Path(__file__).with_name("liar_server.py"))]}


def test_a_misspelt_tool_override_stops_the_start(tmp_path, sandbox):
    """`fs__read_txt_file` matches no tool: exit 2 with the name it meant. It used to be a warning
    on stderr (which MCP clients do not show) while `fs__read_text_file` ran unconfigured."""
    if not (SIGNOFF and FS):
        pytest.skip("run through mcp/test.sh (SIGNOFF_BIN, SIGNOFF_MCP_FS)")
    config = tmp_path / "proxy.json"
    config.write_text(json.dumps({
        "upstreams": [{"name": "fs", "command": FS, "args": [str(sandbox)]}],
        "tools": {"fs__read_txt_file": {"approval": "required"}},
        "console": {},
    }))
    p = subprocess.run([SIGNOFF, "mcp-proxy", "--config", str(config)], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert 'tools: "fs__read_txt_file" names no tool an upstream offers (did you mean "fs__read_text_file"?)' \
        in p.stderr, p.stderr
    assert p.stdout == ""


@pytest.mark.parametrize("trusted", [False, True], ids=["hints-claimed", "hints-trusted"])
@pytest.mark.parametrize("mode", MODES)
async def test_a_read_only_hint_does_not_hide_a_dangerous_name(proxy, mode, trusted):
    """Every tool of liar_server.py claims `readOnlyHint: true`. The ones whose names say they
    delete, run, push or update are asked about all the same, trusted or not (and denied here, so
    they do not run); the ones whose names read run without asking. `frobnicate` says nothing by
    its name: its claim counts only from a server whose hints are trusted
    (`trust_annotations`)."""
    person = Person("deny")
    liar = {**LIAR, "trust_annotations": trusted}
    async with proxy(mode, person, upstreams=[liar]) as c:
        r = await c.call_tool("liar__frobnicate", {"target": "x"})
        assert (r.is_error, len(person.asked)) == ((False, 0) if trusted else (True, 1)), (text(r), person.asked)
        person.asked.clear()
        for name in ["delete_file", "bash", "git_push", "update_record"]:
            r = await c.call_tool(f"liar__{name}", {"target": "x"})
            assert r.is_error and f"ran {name}" not in text(r), text(r)
            assert len(person.asked) == 1 and f"liar__{name}" in person.asked[0], person.asked
            person.asked.clear()
        for name in ["read_notes", "list_issues"]:
            r = await c.call_tool(f"liar__{name}", {"target": "x"})
            assert not r.is_error and text(r) == f"ran {name}", text(r)
    assert person.asked == []


@pytest.mark.parametrize("mode", MODES)
async def test_two_proxies_with_one_console_port_both_serve(proxy, tmp_path, sandbox, mode):
    """Two editor windows start the same configuration: the second's console takes a free port
    (it used to exit 2 on `Address already in use`), and each model is told its own console's URL
    for the request."""
    port = free_port()
    console = {"console": {"bind": f"127.0.0.1:{port}"}}
    args = {"path": str(sandbox / "a.txt"), "content": "hello"}
    async with proxy(mode, extra=console) as first:
        one = await first.call_tool("fs__write_file", args)
        # The second proxy: the same configuration, its own file.
        proxy.config = tmp_path / "second.json"
        async with proxy(mode, extra=console) as second:
            two = await second.call_tool("fs__write_file", args)
    urls = []
    for r in (one, two):
        assert r.is_error and "pending elsewhere" in text(r), text(r)
        m = re.search(r"on the signoff console: (http://127\.0\.0\.1:(\d+)/)#request-([0-9a-f-]{36}) \(request \3\)",
                      text(r))
        assert m, text(r)
        urls.append(m)
    assert urls[0].group(2) == str(port)
    assert urls[1].group(2) != str(port)
    assert urls[0].group(3) != urls[1].group(3)
    assert not (sandbox / "a.txt").exists()


@pytest.mark.parametrize("mode", MODES)
async def test_the_form_says_why_it_asks_the_risk_and_the_deadline(proxy, sandbox, mode):
    """The form shows what the console's card shows: the real reason (server-filesystem's
    `write_file` is marked destructive; it used to say "the tool always requires approval" for
    every upstream tool), the risk shown with the request, and how long the person has."""
    person = Person("deny")
    async with proxy(mode, person, tools={"fs__create_directory": {"approval": "required"}}) as c:
        await c.call_tool("fs__write_file", {"path": str(sandbox / "a.txt"), "content": "hello"})
        await c.call_tool("fs__create_directory", {"path": str(sandbox / "d")})
    written, made = person.asked
    assert "Why: the tool is marked destructive." in written, written
    assert "always requires approval" not in written
    # write_file: destructive in a closed world, L3, shown one band lower under approval.
    assert "Risk: L2 (L0 harmless to L5 highest)." in written, written
    assert re.search(r"Answer within (19|20) s, or it is denied and does not run\.", written), written
    # Configured `approval: required`: that is the reason given.
    assert "Why: the tool always requires approval." in made, made
    assert not (sandbox / "a.txt").exists() and not (sandbox / "d").exists()
