#!/usr/bin/env python3
"""An agent that gates its own MCP tool calls with signoff and makes them through
`signoff mcp-proxy`, in front of @modelcontextprotocol/server-filesystem. The person is asked once,
by the agent's gate; each approved call carries a signed approval marker in `_meta`, so the proxy
runs it without asking again. Without a marker the proxy would ask on its own (this client cannot
be asked, so it would say "pending elsewhere").

    python examples/python/mcp_agent.py --signoff target/debug/signoff \\
        --server mcp/node_modules/.bin/mcp-server-filesystem              # answer in the terminal
    ... --auto approve                                                     # CI: approve everything
    ... --auto deny                                                        # CI: deny everything

Needs the `signoff` and `mcp` Python packages (`make test-mcp` installs both into
bindings-python/.venv). The proxy and the agent's gate share token keys made for this run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from typing import Any, Dict, List, Optional, Tuple

from mcp import Client, StdioServerParameters

import signoff

# The "model": the calls it makes, in order (scripted: no network, no API key).
PLAN: List[Tuple[str, Dict[str, Any]]] = [
    ("fs__list_allowed_directories", {}),
    ("fs__write_file", {"path": "{box}/notes.txt", "content": "signed off"}),
    ("fs__read_text_file", {"path": "{box}/notes.txt"}),
]


def ask_in_terminal(request: signoff.PendingRequest) -> Tuple[bool, Optional[str]]:
    print(f"\n{request.prompt}\n{request.display_arguments}")
    answer = input("approve? [a]pprove / [d]eny: ").strip().lower()
    if answer.startswith("a"):
        return True, None
    return False, input("reason (told to the model): ").strip() or None


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--signoff", required=True, help="the signoff program (cargo build -p signoff-cli)")
    parser.add_argument("--server", required=True, help="mcp-server-filesystem (npm)")
    parser.add_argument("--auto", choices=["approve", "deny"], help="answer every request without asking")
    args = parser.parse_args()

    box = tempfile.mkdtemp(prefix="signoff-mcp-agent-")
    keys = f"k1:{signoff.Secret.generate().to_base64()}"
    audit = os.path.join(box, "proxy-audit.jsonl")
    config = {
        "upstreams": [{"name": "fs", "command": args.server, "args": [box]}],
        "token_keys": keys,
        "gate": {"audit_path": audit},
    }
    config_path = os.path.join(box, "proxy.json")
    with open(config_path, "w") as f:
        json.dump(config, f)

    def answer(request: signoff.PendingRequest) -> None:
        if args.auto:
            ok, reason = args.auto == "approve", "denied by --auto deny" if args.auto == "deny" else None
        else:
            ok, reason = ask_in_terminal(request)
        if ok:
            request.approve(responder=os.environ.get("USER", "you"))
        else:
            request.deny(reason, responder=os.environ.get("USER", "you"))

    proxy = StdioServerParameters(command=args.signoff, args=["mcp-proxy", "--config", config_path])
    async with signoff.Gate(token_keys=keys, default_timeout=120) as gate, Client(proxy) as client:
        # The agent's gate knows the proxy's tools: read-only ones run, the rest ask.
        for tool in (await client.list_tools()).tools:
            read_only = bool(tool.annotations and tool.annotations.read_only_hint)
            gate.register(
                tool.name,
                description=tool.description or "",
                parameters=tool.input_schema,
                approval="not_required" if read_only else "required",
                read_only=read_only,
            )
        # Answers off the event loop (a terminal prompt blocks); keep the registration while asking.
        registration = gate.on_request(lambda request: asyncio.get_running_loop().run_in_executor(None, answer, request))

        for name, template in PLAN:
            arguments = json.loads(json.dumps(template).replace("{box}", box))
            decision = await gate.confirm(name, arguments)
            if not decision.approved:
                print(f"{name}: not run ({decision.outcome}: {decision.reason})")
                continue
            meta = None
            if decision.by in ("person", "session-grant"):
                marker = gate.approval_marker(name, decision)
                meta = {signoff.MARKER_META_KEY: marker}
            result = await client.call_tool(name, decision.arguments, meta=meta)
            text = " ".join(getattr(c, "text", "") for c in result.content)
            print(f"{name}: {'error: ' if result.is_error else ''}{text}")
        registration.stop()

    with open(audit) as f:
        records = [json.loads(line) for line in f]
    accepted = sum(1 for r in records if r.get("decision") == "marker-accepted")
    print(f"the proxy accepted {accepted} approval marker(s); its audit: {audit}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
