"""Pinned tool definitions: what a server may change only with a person's approval.

The first listing of a configured server pins each tool's definition (name, title, description, input and
output schema, annotations) by hash in the store, shared by every replica: the user trusts what they added
to bernstein.yaml as it was when they added it. From then on the manager offers a tool only while it
matches its pin; a changed tool, or a new tool of a pinned server, is held back: absent from every plan,
directory, search and listing, and refused by expand_tools and calls with the change named, until
`orchestrator tools approve` pins it. The detector (`_poisoning.py`) reads every tool that is not pinned as
it is; a flagged tool is held back too. Per server, `on_change: accept` and `on_flag: accept` offer such
tools anyway (pinned, logged and counted).

    store key       pins/<server>   {"pinned_at": t, "tools": {name: {"digest", "definition", "at", "by"}}}
                    pins/_epoch     changes with every approval, so running managers reload the pins

`ToolGuard.offered` is what `MCPManager.tool_lists` returns for a server; everything downstream reads that.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..._store import NAME_CHARS
from ._normalization import kept_alone, one_line, qualified_name

if TYPE_CHECKING:
    from ..._config import ServerConfig
    from ..._store import Store
    from ..._telemetry import Telemetry
    from ._poisoning import Finding

__all__ = ["PINNED_FIELDS", "HeldKind", "HeldTool", "PinBook", "ToolGuard", "definition_of", "tool_digest"]

log = logging.getLogger(__name__)

NAMESPACE = "pins"
EPOCH_KEY = f"{NAMESPACE}/_epoch"
PINNED_FIELDS = (
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
    "input_schema",
    "output_schema",
)
"""What a pin covers: everything a server says about a tool that reaches a model or decides a call (the
catalog reads the schemas of a raw definition under snake_case keys too, when camelCase ones are absent;
absent fields are left out of the digest, so the last two change no camelCase tool's digest)."""
DIGEST_CHARS = 32
"""Hex digits of the sha256 kept per definition (128 bits)."""
HeldKind = Literal["changed", "new", "flagged"]
HELD_BY = "held"
"""A pin's `by` for a tool flagged on its server's first listing: its definition is recorded (so a later
listing knows it is not new) but not approved."""


def definition_of(tool: Mapping[str, Any]) -> dict[str, Any]:
    """The pinned part of a tools/list entry (absent fields left out)."""
    return {key: tool[key] for key in PINNED_FIELDS if key in tool}


def tool_digest(tool: Mapping[str, Any]) -> str:
    """Hash of `definition_of(tool)`: key order and whitespace do not matter, every value does."""
    text = json.dumps(definition_of(tool), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]


@dataclass(frozen=True)
class HeldTool:
    """A tool held back (or, with `held` False, offered although flagged: `on_flag: accept`)."""

    server: str
    tool: str
    """Its name on the server."""
    name: str
    """Its qualified name (`server__tool`), as agents and commands name it."""
    kind: HeldKind
    reason: str
    """One line: what changed, or what the detector found."""
    digest: str
    """Hash of the definition that is held (what `approve` pins)."""
    findings: tuple[Finding, ...] = ()
    held: bool = True
    definition: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for `tools audit --json`, `servers --json` and `/health`."""
        return {
            "name": self.name,
            "server": self.server,
            "tool": self.tool,
            "kind": self.kind,
            "held": self.held,
            "reason": self.reason,
            "digest": self.digest,
            "findings": [finding.as_dict() for finding in self.findings],
        }


class PinBook:
    """The pins in the store: one record per server (read and written whole; approvals are rare)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def load(self, server: str) -> dict[str, Any] | None:
        """The server's record, or None when it has none. A damaged record (not a record, or pins that are
        not pins) is not taken for no record, which would trust the next listing as a first one: what it
        still holds is kept, and every other tool is held as new until approved."""
        stored = self.store.get(f"{NAMESPACE}/{_key(server)}")
        if stored is None:
            return None
        record: dict[str, Any] = stored if isinstance(stored, dict) else {}
        tools = record.get("tools")
        if isinstance(tools, dict) and all(isinstance(pin, dict) for pin in tools.values()):
            return record
        log.error("server %r: its pin record in the store is damaged; tools it does not pin are held back", server)
        kept = {name: pin for name, pin in tools.items() if isinstance(pin, dict)} if isinstance(tools, dict) else {}
        return {"server": server, "pinned_at": None, "tools": kept}

    def pin(self, server: str, tools: Iterable[Mapping[str, Any]], *, by: str) -> dict[str, Any]:
        """Pin these definitions of `server` (creating its record) and return the record."""
        record = self.load(server) or {"server": server, "pinned_at": time.time(), "tools": {}}
        record["tools"].update(_pins(tools, by))
        self.store.put(f"{NAMESPACE}/{_key(server)}", record)
        return record

    def create(self, server: str, groups: Mapping[str, Iterable[Mapping[str, Any]]]) -> dict[str, Any] | None:
        """The record of `server`'s first listing, pinning each group of definitions with its reason; None
        when the server has a record already (another replica's first listing won: one record, not the
        last writer's, so every replica judges later listings against the same pins)."""
        record: dict[str, Any] = {"server": server, "pinned_at": time.time(), "tools": {}}
        for by, tools in groups.items():
            record["tools"].update(_pins(tools, by))
        return record if self.store.put_new(f"{NAMESPACE}/{_key(server)}", record) else None

    def epoch(self) -> Any:
        return self.store.get(EPOCH_KEY)

    def bump_epoch(self) -> None:
        """Tell running managers (every replica) to reload the pins."""
        self.store.put(EPOCH_KEY, secrets.token_hex(8))


class ToolGuard:
    """Which tools of each listing are offered, and which are held back and why.

    Args:
        configs: the servers' settings (`on_change`, `on_flag`).
        store: where pins live (shared by replicas: files or Redis; memory for one process).
        telemetry: where held tools and accepted changes are counted (None: not counted).
        record: pin first listings and accepted changes (False: only judge, as `tools audit --catalog` does).
    """

    def __init__(
        self,
        configs: Mapping[str, ServerConfig],
        store: Store,
        telemetry: Telemetry | None = None,
        *,
        record: bool = True,
    ) -> None:
        self._configs = configs
        self._record_pins = record
        self.book = PinBook(store)
        self._telemetry = telemetry
        self._lock = threading.RLock()
        self._records: dict[str, dict[str, Any] | None] = {}
        self._decisions: dict[str, tuple[Sequence[Mapping[str, Any]], list[dict[str, Any]], list[HeldTool]]] = {}
        self._epoch: Any = None
        self._epoch_read = False
        self._reported: set[tuple[str, str, str]] = set()

    # ------------------------------------------------------------------ decisions

    def offered(self, server: str, tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The tools of `server`'s listing that agents may see: pinned as they are, or accepted by its
        settings. Decided once per listing (a new list object) and per change of the pins."""
        with self._lock:
            cached = self._decisions.get(server)
            if cached is not None and cached[0] is tools:
                return cached[1]
            offered, held = self._decide(server, tools)
            self._decisions[server] = (tools, offered, held)
            self._count(server, held)
            return offered

    def held(self, server: str | None = None) -> list[HeldTool]:
        """Held-back and flagged tools of the listings decided so far (of one server, or all), by name."""
        with self._lock:
            found = [tool for name, (_, _, held) in self._decisions.items() if server in (None, name) for tool in held]
        return sorted(found, key=lambda tool: tool.name)

    def held_reason(self, server: str, tool: str) -> str | None:
        """Why `tool` of `server` is held back, or None when it is not."""
        for each in self.held(server):
            if each.tool == tool and each.held:
                return each.reason
        return None

    def forget(self, server: str) -> None:
        """Drop the decision about a server's listing (it is no longer offered)."""
        with self._lock:
            self._decisions.pop(server, None)

    def _decide(self, server: str, listed: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[HeldTool]]:
        # What normalization shows of a name listed twice is its first definition: that one is judged and
        # pinned (a later one, never shown, must not overwrite its pin).
        tools = [definition for _, definition in kept_alone(listed)]
        config = self._configs.get(server)
        on_change = getattr(config, "on_change", "hold")
        on_flag = getattr(config, "on_flag", "hold")
        record = self._record(server)
        first = record is None
        pins: dict[str, Any] = {} if record is None else record["tools"]
        digests = [tool_digest(tool) for tool in tools]
        findings = _scan(tools) if _needs_scan(tools, digests, pins) else [() for _ in tools]
        offered: list[dict[str, Any]] = []
        held: list[HeldTool] = []
        accepted: list[tuple[Mapping[str, Any], str]] = []
        flagged_first: list[Mapping[str, Any]] = []
        for tool, digest, found in zip(tools, digests, findings, strict=True):
            name = str(tool.get("name"))
            pin = pins.get(name)
            same = pin is not None and pin.get("digest") == digest
            change: HeldKind | None = None
            if not first and not same:
                change = "new" if pin is None else "changed"
            flagged = bool(found) and not (same and pin is not None and pin.get("by") == "approve")
            if same and pin is not None and pin.get("by") == HELD_BY and not found:
                same = False  # recorded while flagged, no longer flagged (the rules changed): offered, pinned now
            hold = (change is not None and on_change == "hold") or (flagged and on_flag == "hold")
            if flagged or (change is not None and hold):
                kind: HeldKind = (
                    "flagged" if flagged and (change is None or on_change == "accept") else change or "flagged"
                )
                reason = self._reason(kind, pin, record, tool, found if flagged else ())
                held.append(
                    HeldTool(server, name, qualified_name(server, name), kind, reason, digest, found, hold, dict(tool))
                )
            if hold:
                if first:
                    flagged_first.append(tool)
                continue
            offered.append(dict(tool))
            if not same or (pin is not None and pin.get("by") == HELD_BY):
                accepted.append((tool, "first listing" if first else f"on_{'flag' if flagged else 'change'}: accept"))
        if flagged_first:
            accepted.extend((tool, HELD_BY) for tool in flagged_first)
        if not self._pin_accepted(server, accepted, first):
            return self._decide(server, listed)
        return offered, held

    def _pin_accepted(self, server: str, accepted: list[tuple[Mapping[str, Any], str]], first: bool) -> bool:
        """Pin what was accepted; False when this was taken for a first listing but another replica's
        first listing of the server was pinned meanwhile (the listing is then decided again against it)."""
        if not self._record_pins or (not accepted and not first):
            return True
        by_reason: dict[str, list[Mapping[str, Any]]] = {}
        for tool, by in accepted:
            by_reason.setdefault(by, []).append(tool)
            if by not in ("first listing", HELD_BY):
                log.warning("server %r: tool %r changed and was accepted (%s)", server, tool.get("name"), by)
                if self._telemetry is not None:
                    self._telemetry.record_tool_change(server, "accepted")
        if first:
            created = self.book.create(server, by_reason)
            if created is None:  # another replica pinned this server's first listing first: judge against it
                self._records[server] = self.book.load(server)
                return self._records[server] is None
            self._records[server] = created
            return True
        record = self._records.get(server)
        for by, group in by_reason.items():
            record = self.book.pin(server, group, by=by)
        self._records[server] = record
        return True

    def _reason(
        self,
        kind: HeldKind,
        pin: Mapping[str, Any] | None,
        record: Mapping[str, Any] | None,
        tool: Mapping[str, Any],
        found: Sequence[Finding],
    ) -> str:
        if kind == "changed" and pin is not None:
            stored = pin.get("definition")
            before: dict[str, Any] = stored if isinstance(stored, dict) else {}
            now = definition_of(tool)
            fields = [key for key in PINNED_FIELDS if before.get(key) != now.get(key)]
            text = f"its {', '.join(fields) or 'definition'} changed since it was pinned {_when(pin.get('at'))}"
        elif kind == "new" and record is not None:
            text = f"new since its server was pinned {_when(record.get('pinned_at'))}"
        else:
            text = ""
        if found:
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            flag = f"flagged: {found[0]}{more}"
            text = f"{text}; {flag}" if text else flag
        return one_line(text, 400)

    def _count(self, server: str, held: list[HeldTool]) -> None:
        """Log and count each held definition once (a re-listing decides it again), and set the gauge."""
        for tool in held:
            if tool.held and (server, tool.tool, tool.digest) not in self._reported:
                self._reported.add((server, tool.tool, tool.digest))
                log.warning("server %r: tool %r held back: %s", server, tool.tool, tool.reason)
                if self._telemetry is not None:
                    self._telemetry.record_tool_change(server, "held")
        if self._telemetry is not None:
            counts = {
                kind: sum(1 for tool in held if tool.kind == kind and tool.held)
                for kind in ("changed", "new", "flagged")
            }
            self._telemetry.record_held(server, counts)

    # ------------------------------------------------------------------ the store

    def _record(self, server: str) -> dict[str, Any] | None:
        if server not in self._records:
            self._records[server] = self.book.load(server)
        return self._records[server]

    def approve(self, tools: Iterable[HeldTool]) -> list[HeldTool]:
        """Pin these held or flagged definitions as reviewed (every replica sees it); returns them."""
        approved = list(tools)
        with self._lock:
            by_server: dict[str, list[dict[str, Any]]] = {}
            for tool in approved:
                by_server.setdefault(tool.server, []).append(tool.definition)
            for server, definitions in by_server.items():
                self._records[server] = self.book.pin(server, definitions, by="approve")
                self._decisions.pop(server, None)
            if approved:
                self.book.bump_epoch()
        return approved

    def pinned(self, server: str) -> dict[str, Any] | None:
        """The server's pin record as the store has it now."""
        return self.book.load(server)

    def refresh(self) -> bool:
        """Reload the pins when an approval happened elsewhere (another process or replica); True when the
        decisions were dropped and the listings must be decided again."""
        epoch = self.book.epoch()
        with self._lock:
            if self._epoch_read and epoch == self._epoch:
                return False
            changed = self._epoch_read
            self._epoch, self._epoch_read = epoch, True
            if changed:
                self._records.clear()
                self._decisions.clear()
            return changed

    def has_held(self) -> bool:
        return any(tool.held for tool in self.held())


def _pins(tools: Iterable[Mapping[str, Any]], by: str) -> dict[str, dict[str, Any]]:
    """Pins of these definitions, by tool name, with why they were pinned (`by`)."""
    now = time.time()
    return {
        str(tool.get("name")): {"digest": tool_digest(tool), "definition": definition_of(tool), "at": now, "by": by}
        for tool in tools
    }


def _needs_scan(tools: Sequence[Mapping[str, Any]], digests: Sequence[str], pins: Mapping[str, Any]) -> bool:
    """Whether any tool must be read by the detector: one without a pin of this definition, or pinned only
    as held or as accepted although flagged. A listing of pinned tools costs a hash per tool, no scan."""
    for tool, digest in zip(tools, digests, strict=True):
        pin = pins.get(str(tool.get("name")))
        if pin is None or pin.get("by") in (HELD_BY, "on_flag: accept") or pin.get("digest") != digest:
            return True
    return False


def _scan(tools: Sequence[Mapping[str, Any]]) -> list[tuple[Finding, ...]]:
    """The detector's findings; imported on first use, because compiling its rules costs about 0.2 s of CPU
    that a process whose listings all match their pins (a gateway's warm start) never needs."""
    from ._poisoning import scan_tools

    return scan_tools(tools)


def _key(server: str) -> str:
    """The store name of a server's record: the name itself when FileStore keeps it as it is ([A-Za-z0-9_-],
    at most NAME_CHARS characters) and it is not the epoch's; else a safe prefix and a hash of the name, so
    two servers never share a record (the form names with other characters always had)."""
    safe = "".join(char if char.isalnum() or char in "-_" else "_" for char in server)
    if safe == server and len(server) <= NAME_CHARS and f"{NAMESPACE}/{server}" != EPOCH_KEY:
        return server
    return f"{safe[: NAME_CHARS - 9]}-{hashlib.sha256(server.encode()).hexdigest()[:8]}"


def _when(at: Any) -> str:
    """When a pin was made, for a held tool's reason; "earlier" for a time the record should not hold (the
    store is shared: NaN, 1e300 or a huge integer must not fail the listing that reads it)."""
    if isinstance(at, bool) or not isinstance(at, int | float):
        return "earlier"
    try:
        return time.strftime("on %Y-%m-%d at %H:%M UTC", time.gmtime(at))
    except (OverflowError, ValueError, OSError):
        return "earlier"
