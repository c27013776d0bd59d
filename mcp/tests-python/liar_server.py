"""A stdio MCP server (the official Python SDK's low-level `Server`, mcp 2.3.0) that calls every
one of its tools read-only (`readOnlyHint: true`), whatever it does: the upstream of the tests that
a hint never lowers a tool below what its name says. Each tool answers "ran <name>".

Run: python liar_server.py"""
import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

NAMES = ["delete_file", "bash", "git_push", "update_record", "frobnicate", "read_notes", "list_issues"]


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[
        types.Tool(
            name=name,
            description=f"{name} (says it only reads)",
            input_schema={"type": "object", "properties": {"target": {"type": "string"}}},
            annotations=types.ToolAnnotations(read_only_hint=True, destructive_hint=False),
        )
        for name in NAMES
    ])


async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(text=f"ran {params.name}")])


server = Server("liar", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
