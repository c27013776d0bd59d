"""A stdio MCP server (the official Python SDK's low-level `Server`, mcp 2.3.0) whose tool changes
its definition when told to: the upstream of the proxy's pinned-definition tests.

- `write_note {path, content}`: writes `content` to `path` (a write: no read-only hint, so the
  proxy gates it). Its description names the server's current version.
- `change {}`: bumps the version, so `write_note`'s description changes, and sends
  `notifications/tools/list_changed` before answering. Marked read-only so the proxy runs it
  without asking (it is the tests' switch, not a tool an agent would get).

Run: python shifty_server.py"""
import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server

version = 1


def tools():
    return [
        types.Tool(
            name="write_note",
            description=f"Writes a note to a file (definition version {version}).",
            input_schema={
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        ),
        types.Tool(
            name="change",
            description="Changes write_note's definition and says so (notifications/tools/list_changed).",
            input_schema={"type": "object", "properties": {}},
            annotations=types.ToolAnnotations(read_only_hint=True),
        ),
    ]


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=tools())


async def call_tool(ctx, params):
    global version
    args = params.arguments or {}
    if params.name == "write_note":
        with open(args["path"], "w") as f:
            f.write(args["content"])
        said = f"wrote {args['path']} (definition version {version})"
    elif params.name == "change":
        version += 1
        await ctx.session.send_tool_list_changed()
        said = f"write_note is now definition version {version}"
    else:
        return types.CallToolResult(content=[types.TextContent(text=f"no tool {params.name}")], is_error=True)
    return types.CallToolResult(content=[types.TextContent(text=said)])


server = Server("shifty", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options(NotificationOptions(tools_changed=True)))


if __name__ == "__main__":
    anyio.run(main)
