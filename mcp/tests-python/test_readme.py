"""mcp/README.md's "Use it" steps, run as written (issue 42): in a fresh home directory, each
command of its `sh` block but the build (`make test` built the binary) and the proxy itself, with
`target/release/signoff` standing for the binary under test. Then the proxy starts on the
`proxy.json` they made, as the official Python SDK's client starts it, over the same
server-filesystem release the example names (installed by mcp/test.sh instead of fetched by npx),
and the story the README tells happens: a client that cannot show a form is sent to the console's
page for its request, `me` signs in there with the key the steps made and approves, and the
model's identical retry writes the file, once; the audit the configuration names verifies."""
import json
import os
import re
import subprocess
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from conftest import FS, MODES, SIGNOFF, text
from test_url_mode import Page

pytestmark = pytest.mark.anyio

HERE = Path(__file__).resolve().parent
README = HERE.parent / "README.md"


# The two places the steps are written: mcp/README.md's "Use it", and the top-level README's MCP
# section (which also adds the proxy to Claude Code: a client this machine does not have).
READMES = [(README, "## Use it"), (HERE.parent.parent / "README.md", "## MCP: gate any MCP server's tools")]


def steps(readme, heading):
    """The commands of the first `sh` block under `heading` in `readme`, one per line."""
    m = re.search(re.escape(heading) + r"\n.*?```sh\n(.*?)```", readme.read_text(), re.S)
    assert m, f"no sh block under {heading!r} in {readme}"
    lines = [line.split("  #")[0].strip() for line in m.group(1).splitlines()]
    return [line for line in lines if line and not line.startswith("#") and not line.startswith("claude mcp add")]


class Me(Page):
    """The console as `me` signs in to it, with the key `signoff keygen --approver me` made."""

    def __init__(self, url, key):
        super().__init__(url)
        self.me_key = key

    def sign_in(self):
        status, cookies, body = self.call("POST", "/login", {"approver": "me", "key": self.me_key})
        assert status == 200, body
        self.cookie = cookies[0].split(";", 1)[0]
        self.key = json.loads(body)["key"]


@pytest.mark.parametrize("readme", READMES, ids=["mcp/README.md", "README.md"])
@pytest.mark.parametrize("mode", MODES)
async def test_the_readme_steps_work_as_written(tmp_path, mode, readme):
    if not (SIGNOFF and FS):
        pytest.skip("run through mcp/test.sh (SIGNOFF_BIN, SIGNOFF_MCP_FS)")
    home, work = tmp_path / "home", tmp_path / "repo"
    home.mkdir()
    (work / "mcp").mkdir(parents=True)
    (work / "mcp" / "proxy.example.json").write_text((HERE.parent / "proxy.example.json").read_text())
    env = {**os.environ, "HOME": str(home)}
    commands = steps(*readme)
    assert commands[0].startswith("cargo build --release -p signoff-cli"), commands
    proxy = [c for c in commands if " mcp-proxy " in c]
    assert [c.split("  ")[0] for c in proxy] == ["target/release/signoff mcp-proxy --config proxy.json"], commands
    for command in commands[1:]:
        if command in proxy:
            continue
        subprocess.run(["bash", "-ec", command.replace("target/release/signoff", SIGNOFF)], cwd=work, env=env,
                       check=True, timeout=60)
    config = json.loads((work / "proxy.json").read_text())
    # The README's server-filesystem release is the one mcp/test.sh installed; run that instead of npx.
    up = config["upstreams"][0]
    release = json.loads((HERE.parent / "package.json").read_text())["dependencies"]["@modelcontextprotocol/server-filesystem"]
    assert up["command"] == "npx" and up["args"][:2] == ["-y", f"@modelcontextprotocol/server-filesystem@{release}"], up
    notes = Path(up["args"][2])
    assert notes == home / "notes" and notes.is_dir()
    up.update(command=FS, args=[str(notes)])
    # Another test (or a person's proxy) may hold the README's console port: the proxy then
    # serves on a free one and says so, and the model is told that URL.
    (work / "proxy.json").write_text(json.dumps(config))
    key = (home / ".config/signoff/approvers.txt").read_text().strip().split(":", 1)[1]

    params = StdioServerParameters(command=SIGNOFF, args=["mcp-proxy", "--config", "proxy.json"], cwd=str(work))
    args = {"path": str(notes / "hello.txt"), "content": "hello"}
    async with Client(params, mode=mode) as c:
        r = await c.call_tool("fs__write_file", args)
        assert r.is_error and "pending elsewhere" in text(r), text(r)
        m = re.search(r"on the signoff console: (http://127\.0\.0\.1:\d+/#request-[0-9a-f-]+)", text(r))
        assert m, text(r)
        me = Me(m.group(1), key)
        await anyio.to_thread.run_sync(lambda: me.decide("approve"))
        assert not (notes / "hello.txt").exists(), "approval alone runs nothing"
        again = await c.call_tool("fs__write_file", args)
        assert not again.is_error, text(again)
    assert (notes / "hello.txt").read_text() == "hello"
    audit = Path(config["gate"]["audit_path"])
    assert audit == home / ".local/state/signoff/mcp-audit.jsonl"
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert any(r.get("kind") == "outcome" and r.get("decision") == "approved" and r.get("responder") == "me"
               for r in records), records
    v = subprocess.run([SIGNOFF, "audit", "verify", str(audit)], capture_output=True, text=True)
    assert v.returncode == 0, v.stdout + v.stderr
