"""The MCP server: :mod:`ragstep.entry.mcp.tools` on the official MCP SDK's low-level server, for both transports.

The SDK speaks the protocol (both eras: the ``initialize`` handshake of the 2025 revisions and the per-request
envelope of 2026-07-28); ragstep supplies the tools, the knowledge bases as resources, one prompt, and who is calling
(``resolve``: a fixed local caller over stdio, the API key's over HTTP). Tools run on a worker thread: every use
case is synchronous (the pipelines, the stores), and the event loop must keep serving other requests meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel.server import Server

from ragstep import __version__
from ragstep.entry.mcp.errors import one_line_params_errors
from ragstep.entry.mcp.tools import Caller, ToolOutput, available_kbs, call_tool, tools_for

log = logging.getLogger("ragstep.mcp")

INSTRUCTIONS = (
    "ragstep searches the user's knowledge bases. Call list_knowledge_bases to see which exist, search to find "
    "passages, answer for a grounded answer with numbered sources, read_passage to read around a hit. Cite sources "
    "by file name."
)
#: Knowledge bases as resources: ``ragstep://knowledge-bases/<name>`` reads as the list of its documents.
RESOURCE_PREFIX = "ragstep://knowledge-bases/"
PROMPT = "answer_with_citations"

#: Who calls, from the SDK's request context (its ``request`` is the HTTP request over HTTP, None over stdio).
Resolver = Callable[[Any], Caller]


def _result(output: ToolOutput) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=output.text)],
        structured_content=output.data or None,
        is_error=output.is_error,
    )


def _run_tool(name: str, arguments: dict[str, Any] | None, caller: Caller) -> ToolOutput:
    try:
        return call_tool(name, arguments, caller)
    except Exception:  # a bug or a store failure: the model gets one line, the log the traceback
        log.exception("MCP tool %s failed", name)
        return ToolOutput(f"internal error in {name}; the server's log has the details", is_error=True)


def build_server(resolve: Resolver) -> Server[Any]:
    """The MCP server whose callers ``resolve`` decides."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        caller = resolve(ctx)
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=tool.name,
                    title=tool.title,
                    description=tool.description,
                    input_schema=tool.schema,
                    annotations=types.ToolAnnotations(
                        title=tool.title,
                        read_only_hint=tool.read_only,
                        destructive_hint=False,
                        idempotent_hint=tool.read_only,
                    ),
                )
                for tool in tools_for(caller.scopes)
            ]
        )

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        caller = resolve(ctx)
        output = await anyio.to_thread.run_sync(_run_tool, params.name, params.arguments, caller)
        return _result(output)

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        caller = resolve(ctx)
        if "search" not in caller.scopes:
            return types.ListResourcesResult(resources=[])
        names = await anyio.to_thread.run_sync(available_kbs, caller.context)
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=RESOURCE_PREFIX + name,
                    name=name,
                    description=f"knowledge base {name}: its documents",
                    mime_type="text/markdown",
                )
                for name in names
            ]
        )

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        caller = resolve(ctx)
        uri = str(params.uri)
        name = uri.removeprefix(RESOURCE_PREFIX) if uri.startswith(RESOURCE_PREFIX) else ""
        output = await anyio.to_thread.run_sync(_run_tool, "list_documents", {"knowledge_base": name}, caller)
        text = output.text if not output.is_error else f"cannot read {uri}: {output.text}"
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type="text/markdown", text=f"# {name}\n\n{text}")]
        )

    async def list_prompts(ctx: Any, params: Any) -> types.ListPromptsResult:
        return types.ListPromptsResult(
            prompts=[
                types.Prompt(
                    name=PROMPT,
                    title="Answer from my knowledge base, with citations",
                    description="Search the named knowledge bases and answer only from what they say, citing files.",
                    arguments=[
                        types.PromptArgument(name="question", description="the question", required=True),
                        types.PromptArgument(
                            name="knowledge_bases", description="comma-separated names (default: all)", required=False
                        ),
                    ],
                )
            ]
        )

    async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        args = params.arguments or {}
        kbs = args.get("knowledge_bases") or "every knowledge base list_knowledge_bases shows"
        text = (
            f"Answer this question using only the knowledge bases {kbs}: {args.get('question', '')}\n\n"
            "First call search (or answer) on them. Quote or paraphrase only what the passages say, cite each "
            "claim with its source file in brackets, and say plainly when the passages do not answer."
        )
        return types.GetPromptResult(
            description="grounded answer with citations",
            messages=[types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))],
        )

    server: Server[Any] = Server(
        "ragstep",
        version=__version__,
        title="ragstep knowledge bases",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )
    server.middleware.append(one_line_params_errors)
    return server
