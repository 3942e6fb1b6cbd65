"""The upstream servers' resources and prompts, passed through the gateway.

An agent reaches every server through the gateway alone, so what a tool hands back must work through it
too: a tool that answers with a `resource_link` expects the client to `resources/read` that URI. The
gateway lists each server's resources, resource templates and prompts (servers the agent's profile may
use, that are up and announce the capability), names namespaced like tools (`server__name`,
`qualified_name`), URIs unchanged: a URI is what a tool result and a template produce, so it must read
back as it is.

A read goes to the server that owns the URI: the one whose listing has it, then the one whose tool returned
it to the same spawn (remembered from its call results: one spawn's results never route another's reads),
then the one whose template matches it, the most specific first (a template that starts with a variable
claims nothing: it would match every server's URIs); then every other server the agent may use that is up,
in turn. A prompt's namespaced name maps back to its server and original name.
Upstream protocol stamps (`_meta` `io.modelcontextprotocol/*`) are taken off every result.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import mcp.types as types
from mcp import Client
from mcp.shared.exceptions import MCPError

from .._errors import OrchestratorError
from .._meta_tools import without_upstream_stamps
from ..protocols.mcp._normalization import qualified_name, sanitize_text, sanitize_title

if TYPE_CHECKING:
    from .views import Upstream

log = logging.getLogger(__name__)

__all__ = ["RESOURCE_NOT_FOUND", "UpstreamProxy", "resource_uris"]

T = TypeVar("T")

RESOURCE_NOT_FOUND = -32002
"""MCP's error code for a `resources/read` of a URI no server has (specification, Resources: Error Handling)."""
URI_MEMORY = 4096
"""Resource URIs remembered with the servers that handed them out (links in tool results, listings); the
oldest are forgotten past this many. A forgotten URI still reads: every allowed server is then tried."""
MAX_PAGES = 100
"""Most pages followed per server in one listing: a server whose cursor never ends cannot hang a list."""


class _NotOffered(Exception):
    """Internal: the server does not announce the capability a request needs."""


class UpstreamProxy:
    """Resources and prompts of the manager's servers, for the gateway's handlers.

    Args:
        manager: the upstream manager (its `request(server, what, func)` runs `func` on a live client).
    """

    def __init__(self, manager: Upstream) -> None:
        self._manager = manager
        self._listed: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        """URI -> the servers whose listing has it."""
        self._linked: OrderedDict[tuple[str, str], tuple[str, ...]] = OrderedDict()
        """(spawn, URI) -> the servers whose tool handed the URI to that spawn."""
        self._templates: dict[str, list[tuple[int, re.Pattern[str]]]] = {}
        """Server -> its templates' patterns, each with the length of its literal start (how specific it is)."""
        self._prompts: dict[str, tuple[str, str]] = {}

    # ------------------------------------------------------------------ resources

    def remember(self, uris: Iterable[str], servers: Sequence[str], spawn: str = "") -> None:
        """Note that `servers` (in order of preference) handed these URIs to `spawn` in a tool result."""
        _remembered(self._linked, ((spawn, uri) for uri in uris), tuple(servers))

    async def list_resources(self, servers: Sequence[str], admits: Admits) -> types.ListResourcesResult:
        """The resources of `servers` whose namespaced names `admits`."""

        async def pages(client: Client) -> list[types.Resource]:
            _require(client, "resources")
            return await _all_pages(lambda cursor: client.list_resources(cursor=cursor), "resources")

        found: list[types.Resource] = []
        for server, resources in await self._each(servers, "resources/list", pages):
            _remembered(self._listed, (str(resource.uri) for resource in resources), (server,))
            found.extend(_namespaced(server, resources, admits))
        return types.ListResourcesResult(resources=found)

    async def list_resource_templates(
        self, servers: Sequence[str], admits: Admits
    ) -> types.ListResourceTemplatesResult:
        """The resource templates of `servers` whose namespaced names `admits`."""

        async def pages(client: Client) -> list[types.ResourceTemplate]:
            _require(client, "resources")
            return await _all_pages(lambda cursor: client.list_resource_templates(cursor=cursor), "resource_templates")

        found: list[types.ResourceTemplate] = []
        for server, templates in await self._each(servers, "resources/templates/list", pages):
            self._templates[server] = [
                (len(template.uri_template.split("{", 1)[0]), _template_pattern(template.uri_template))
                for template in templates
                if "{" not in template.uri_template[:1]  # one that starts with a variable claims every URI
            ]
            found.extend(_namespaced(server, templates, admits))
        return types.ListResourceTemplatesResult(resource_templates=found)

    async def read_resource(self, servers: Sequence[str], uri: str, spawn: str = "") -> types.ReadResourceResult:
        """Read `uri` from its owner among `servers` (see the module docstring for the order tried).

        Raises:
            MCPError: RESOURCE_NOT_FOUND when none of them has it (the last server's own error otherwise).
        """
        listed = [server for server in self._listed.get(uri, ()) if server in servers]
        linked = [server for server in self._linked.get((spawn, uri), ()) if server in servers]
        specific = {
            server: max((start for start, p in self._templates.get(server, ()) if p.fullmatch(uri)), default=-1)
            for server in (servers if len(uri) <= MATCHED_URI_CHARS else ())
        }
        # The most specific match first: `features://notes/{name}` before another server's `features://{+x}`.
        templated = sorted((server for server, start in specific.items() if start >= 0), key=lambda s: -specific[s])
        others = [server for server in servers if self._manager.is_ready(server)]  # never wait on a stranger
        order = list(dict.fromkeys([*listed, *linked, *templated, *others]))

        async def read(client: Client) -> types.ReadResourceResult:
            _require(client, "resources")
            return await client.read_resource(uri)

        failure: MCPError | None = None
        for server in order:
            try:
                result: types.ReadResourceResult = await self._manager.request(server, "resources/read", read)
            except _NotOffered:
                continue
            except MCPError as exc:  # this server does not have it: the next may
                failure = exc
                continue
            except OrchestratorError as exc:  # down or too slow: the next may have it
                log.debug("resources/read %s on %r: %s", uri, server, exc)
                continue
            self.remember([uri], [server], spawn)
            return without_upstream_stamps(result)
        if failure is not None and failure.code != RESOURCE_NOT_FOUND and (listed or linked):
            raise failure
        raise MCPError(RESOURCE_NOT_FOUND, f"resource {uri!r} not found on any server this agent may use")

    # ------------------------------------------------------------------ prompts

    async def list_prompts(self, servers: Sequence[str], admits: Admits) -> types.ListPromptsResult:
        """The prompts of `servers` whose namespaced names `admits`."""
        found: list[types.Prompt] = []
        for server, prompts in await self._prompt_lists(servers):
            found.extend(_namespaced(server, prompts, admits))
        return types.ListPromptsResult(prompts=found)

    async def get_prompt(
        self, servers: Sequence[str], admits: Admits, name: str, arguments: dict[str, str] | None
    ) -> types.GetPromptResult:
        """The prompt listed as `name`, from its server.

        Raises:
            MCPError: INVALID_PARAMS for a name no server the agent may use lists, or its profile denies.
        """
        target = self._prompts.get(name)
        if target is None or target[0] not in servers:
            await self._prompt_lists(servers)  # a name from an older listing, or none yet: list again
            target = self._prompts.get(name)
        if target is None or target[0] not in servers or not admits(name, *target):
            raise MCPError(types.INVALID_PARAMS, f"unknown prompt {name[:128]!r}: prompts/list gives the names")
        server, prompt = target
        result: types.GetPromptResult = await self._manager.request(
            server, "prompts/get", lambda client: client.get_prompt(prompt, arguments)
        )
        return without_upstream_stamps(result)

    async def _prompt_lists(self, servers: Sequence[str]) -> list[tuple[str, list[types.Prompt]]]:
        async def pages(client: Client) -> list[types.Prompt]:
            _require(client, "prompts")
            return await _all_pages(lambda cursor: client.list_prompts(cursor=cursor), "prompts")

        lists = await self._each(servers, "prompts/list", pages)
        for server, prompts in lists:
            for prompt in prompts:
                self._prompts[qualified_name(server, prompt.name)] = (server, prompt.name)
        return lists

    # ------------------------------------------------------------------ fan-out

    async def _each(
        self, servers: Sequence[str], what: str, func: Callable[[Client], Awaitable[T]]
    ) -> list[tuple[str, T]]:
        """`func` on every ready server at once; a server without the capability, down or failing is left
        out (logged), so one broken server never empties a listing."""
        results: dict[str, T] = {}

        async def one(server: str) -> None:
            try:
                results[server] = await self._manager.request(server, what, func)
            except _NotOffered:
                pass
            except (MCPError, OrchestratorError) as exc:  # boundary: the other servers' answers still count
                log.info("%s on %r failed: %s", what, server, exc)

        async with anyio.create_task_group() as tg:
            for server in servers:
                if self._manager.is_ready(server):
                    tg.start_soon(one, server)
        return [(server, results[server]) for server in servers if server in results]


Named = TypeVar("Named", types.Resource, types.ResourceTemplate, types.Prompt)
Admits = Callable[[str, str, str], bool]
"""`ProfileFilter.admits`: (qualified name, server, the server's own name) -> whether the profile may use it."""


def _namespaced(server: str, items: Iterable[Named], admits: Admits) -> list[Named]:
    """A server's resources, templates or prompts named like tools (`server__name`), those `admits` only,
    their descriptions and titles sanitized as tools' are (they reach the model's context the same way)."""
    named = (
        (item.model_copy(update={"name": qualified_name(server, item.name), **_cleaned(item)}), item.name)
        for item in items
    )
    return [item for item, own in named if admits(item.name, server, own)]


def _cleaned(item: Any) -> dict[str, Any]:
    """The item's description and title (a prompt's argument descriptions too) through `sanitize_text`."""
    update: dict[str, Any] = {}
    for field in ("description", "title"):
        text = getattr(item, field, None)
        if isinstance(text, str):
            update[field] = sanitize_text(text) if field == "description" else sanitize_title(text)
    arguments = getattr(item, "arguments", None)
    if arguments:
        update["arguments"] = [argument.model_copy(update=_cleaned(argument)) for argument in arguments]
    return update


def resource_uris(result: types.CallToolResult) -> list[str]:
    """URIs a tool result hands out: its `resource_link` blocks and embedded resources."""
    uris: list[str] = []
    for block in result.content:
        if isinstance(block, types.ResourceLink):
            uris.append(str(block.uri))
        elif isinstance(block, types.EmbeddedResource):
            uris.append(str(block.resource.uri))
    return uris


def _require(client: Client, capability: str) -> None:
    capabilities = client.server_capabilities
    if capabilities is None or getattr(capabilities, capability, None) is None:
        raise _NotOffered(capability)


async def _all_pages(fetch: Callable[[str | None], Awaitable[Any]], field: str) -> list[Any]:
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await fetch(cursor)
        items.extend(getattr(page, field))
        cursor = page.next_cursor
        if not cursor:
            break
    return items


MATCHED_URI_CHARS = 1024
"""URIs longer than this are not matched against templates (they are read from the servers in order): a
template's regex backtracks, and one 131 KB URI held the event loop, and every spawn, for 31 s."""
_TEMPLATE_PART = re.compile(r"\{([+#./;?&]?)[^}]*\}")


def _remembered(memory: OrderedDict[Any, tuple[str, ...]], keys: Iterable[Any], servers: tuple[str, ...]) -> None:
    """Each key now maps to `servers`, the newest last; the oldest are forgotten past URI_MEMORY."""
    for key in keys:
        memory[key] = servers
        memory.move_to_end(key)
        while len(memory) > URI_MEMORY:
            memory.popitem(last=False)


def _template_pattern(template: str) -> re.Pattern[str]:
    """A regex matching the URIs an RFC 6570 template expands to: `{x}` one path segment, `{+x}` anything.
    Variables side by side match as one (`{+a}{+b}{+c}` as `.+`): their regex backtracked in cubic time."""
    parts: list[str] = []
    last = 0
    for match in _TEMPLATE_PART.finditer(template):
        literal = template[last : match.start()]
        variable = ".+" if match.group(1) in ("+", "#") else "[^/]+" if not match.group(1) else ".*"
        if literal or not parts or parts[-1] not in (".+", "[^/]+", ".*"):
            parts.append(re.escape(literal))
            parts.append(variable)
        elif parts[-1] != variable:
            parts[-1] = ".*" if ".*" in (parts[-1], variable) else ".+"  # the wider of the two
        last = match.end()
    parts.append(re.escape(template[last:]))
    return re.compile("".join(parts))
