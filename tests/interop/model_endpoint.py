"""A scripted model endpoint on 127.0.0.1 for driving real agent CLIs without a model API (issue 15).

    with ScriptedModel(SEARCH_SCRIPT) as model:        # model.url: http://127.0.0.1:<port>
        ...run `claude -p` with ANTHROPIC_BASE_URL=model.url, or `codex exec` with a provider at model.url/v1...
        model.first_tools()                             # the tools the CLI offered the model on its first turn

It speaks just enough of three wire formats: Anthropic Messages (`POST /v1/messages`, streamed or not, and
`/v1/messages/count_tokens`), OpenAI Responses (`POST /v1/responses`, streamed) and OpenAI Chat Completions
(`POST /v1/chat/completions`). Every request is recorded. A request whose tools include the script's first
tool is an agent turn: the endpoint answers with the script's next tool call, chosen by how many tool
results the conversation already holds, then with a final text once the script is done. Any other request
(a CLI's side requests: titles, summaries, quota probes) gets a short text answer.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["PROVIDER_NAME_PATTERN", "Recorded", "ScriptedModel", "Step", "flat_name", "offered", "tool_names"]

PROVIDER_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""Anthropic's and OpenAI's rule for a tool name: what every name a CLI sends must satisfy."""
FINAL_TEXT = "Done: the scripted calls are finished."
SIDE_TEXT = "ok"


@dataclass(frozen=True)
class Step:
    """One scripted tool call: the tool (matched against the offered names by suffix) and its arguments."""

    tool: str
    arguments: dict[str, Any]


@dataclass
class Recorded:
    """One request a CLI sent."""

    method: str
    path: str
    body: Any
    headers: dict[str, str]
    scripted: bool = False
    """True when it was an agent turn (its tools included the script's first tool)."""
    answer: str = ""
    """What the endpoint answered: a tool call `name(arguments)` or a text."""


def offered(body: Any) -> list[tuple[str | None, str]]:
    """(namespace, name) of every function tool in an Anthropic, Responses or Chat Completions request body.

    Codex sends an MCP server's tools inside one Responses `namespace` tool (`mcp__<server>`); the model
    calls them by `name` with that `namespace`. Other clients send flat names (namespace None).
    """
    found: list[tuple[str | None, str]] = []
    for tool in (body or {}).get("tools") or [] if isinstance(body, dict) else []:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace":
            for inner in tool.get("tools") or []:
                if isinstance(inner, dict) and isinstance(inner.get("name"), str):
                    found.append((tool.get("name"), inner["name"]))
            continue
        name = tool.get("name")
        if name is None and isinstance(tool.get("function"), dict):
            name = tool["function"].get("name")
        if isinstance(name, str):
            found.append((None, name))
    return found


def flat_name(namespace: str | None, name: str) -> str:
    """The name as one string: `mcp__orchestrator` + `tool_search` -> `mcp__orchestrator__tool_search`."""
    if namespace is None:
        return name
    return f"{namespace}{name}" if namespace.endswith("__") else f"{namespace}__{name}"


def tool_names(body: Any) -> list[str]:
    """Every function tool's name in a request body, namespaced ones flattened (`flat_name`)."""
    return [flat_name(namespace, name) for namespace, name in offered(body)]


def _tool_results(path: str, body: dict[str, Any]) -> list[str]:
    """The tool results the conversation holds, as text, oldest first."""
    results: list[str] = []
    if path.endswith("/messages"):
        for message in body.get("messages") or []:
            content = message.get("content")
            if message.get("role") != "user" or not isinstance(content, list):
                continue
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    results.append(json.dumps(block.get("content"), ensure_ascii=False))
    elif path.endswith("/responses"):
        for item in body.get("input") or []:
            if isinstance(item, dict) and item.get("type", "").endswith("call_output"):
                results.append(json.dumps(item.get("output"), ensure_ascii=False))
    else:
        for message in body.get("messages") or []:
            if message.get("role") == "tool":
                results.append(json.dumps(message.get("content"), ensure_ascii=False))
    return results


class ScriptedModel:
    """The endpoint: a threaded HTTP server on 127.0.0.1 answering with the script, recording every request.

    Args:
        script: the tool calls to make, in order; each is made once the previous one has its result.
    """

    def __init__(self, script: Sequence[Step]) -> None:
        self.script = list(script)
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="scripted-model", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> ScriptedModel:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # ------------------------------------------------------------------ what was sent

    def turns(self) -> list[Recorded]:
        """The agent turns (requests carrying the script's tools), in order."""
        with self._lock:
            return [request for request in self.requests if request.scripted]

    def first_tools(self) -> list[dict[str, Any]]:
        """The tools of the first request that carried any (the model's first view of its tools)."""
        with self._lock:
            for request in self.requests:
                if isinstance(request.body, dict) and request.body.get("tools"):
                    return list(request.body["tools"])
        return []

    def tool_results(self) -> list[str]:
        """Every tool result the CLI sent back in its last agent turn (the whole conversation so far)."""
        turns = self.turns()
        return _tool_results(turns[-1].path, turns[-1].body) if turns else []

    # ------------------------------------------------------------------ answering

    def answer(self, path: str, body: Any) -> tuple[bool, Step | None]:
        """(is this an agent turn, the call to make now or None for the final text)."""
        if not isinstance(body, dict) or not self.script:
            return False, None
        if _resolve(self.script[0].tool, body) is None:
            return False, None
        done = len(_tool_results(path, body))
        return True, self.script[done] if done < len(self.script) else None

    def record(self, request: Recorded) -> None:
        with self._lock:
            self.requests.append(request)


def _resolve(tool: str, body: Any) -> tuple[str | None, str] | None:
    """The offered (namespace, name) for `tool`: itself, or the one whose flat name ends in `__tool` (a client's
    prefix, e.g. Claude Code's `mcp__orchestrator__`, or Codex's `mcp__orchestrator` namespace)."""
    tools = offered(body)
    for namespace, name in tools:
        if name == tool and namespace is None:
            return namespace, name
    for namespace, name in tools:
        if name == tool or flat_name(namespace, name).endswith("__" + tool):
            return namespace, name
    return None


def _handler(model: ScriptedModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the test reads the record instead
            return

        def do_GET(self) -> None:
            model.record(Recorded("GET", self.path, None, dict(self.headers)))
            if self.path.rstrip("/").endswith("/models"):
                self._json({"object": "list", "data": [{"id": "scripted", "object": "model"}], "models": []})
            else:
                self._json({"error": {"type": "not_found", "message": f"no {self.path}"}}, status=404)

        def do_HEAD(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            path = self.path.split("?", 1)[0]
            recorded = Recorded("POST", path, body, dict(self.headers))
            model.record(recorded)
            if path.endswith("/count_tokens"):
                self._json({"input_tokens": len(raw) // 4})
                return
            scripted, step = model.answer(path, body)
            recorded.scripted = scripted
            call = None
            if step is not None:
                target = _resolve(step.tool, body)
                call = (target, step.arguments) if target is not None else None
            recorded.answer = (
                f"{flat_name(*call[0])}({json.dumps(call[1])})" if call else (FINAL_TEXT if scripted else SIDE_TEXT)
            )
            text = FINAL_TEXT if scripted else SIDE_TEXT
            stream = isinstance(body, dict) and bool(body.get("stream"))
            number = len(model.requests)
            if path.endswith("/messages"):
                self._anthropic(call, text, stream, number, body)
            elif path.endswith("/responses"):
                self._responses(call, text, number)
            elif path.endswith("/chat/completions"):
                self._chat(call, text, stream, number)
            else:
                self._json({"error": {"type": "not_found", "message": f"no {path}"}}, status=404)

        # -------------------------------------------------------------- Anthropic Messages

        def _anthropic(
            self,
            call: tuple[tuple[str | None, str], dict[str, Any]] | None,
            text: str,
            stream: bool,
            number: int,
            body: Any,
        ) -> None:
            model_name = body.get("model", "scripted") if isinstance(body, dict) else "scripted"
            block: dict[str, Any]
            if call is not None:
                block = {"type": "tool_use", "id": f"toolu_{number:04d}", "name": flat_name(*call[0]), "input": call[1]}
                stop = "tool_use"
            else:
                block = {"type": "text", "text": text}
                stop = "end_turn"
            usage = {"input_tokens": 10, "output_tokens": 5}
            message = {
                "id": f"msg_{number:04d}",
                "type": "message",
                "role": "assistant",
                "model": model_name,
                "content": [block],
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": usage,
            }
            if not stream:
                self._json(message)
                return
            start = {**message, "content": [], "stop_reason": None, "usage": {"input_tokens": 10, "output_tokens": 1}}
            events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
            if call is not None:
                empty = {**block, "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(call[1])}
            else:
                empty = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": text}
            events += [
                ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": empty}),
                ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                (
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": stop, "stop_sequence": None},
                        "usage": {"output_tokens": 5},
                    },
                ),
                ("message_stop", {"type": "message_stop"}),
            ]
            self._sse(events)

        # -------------------------------------------------------------- OpenAI Responses

        def _responses(
            self, call: tuple[tuple[str | None, str], dict[str, Any]] | None, text: str, number: int
        ) -> None:
            response_id = f"resp_{number:04d}"
            if call is not None:
                namespace, name = call[0]
                item = {
                    "type": "function_call",
                    "id": f"fc_{number:04d}",
                    "call_id": f"call_{number:04d}",
                    "name": name,
                    **({"namespace": namespace} if namespace is not None else {}),
                    "arguments": json.dumps(call[1]),
                    "status": "completed",
                }
            else:
                item = {
                    "type": "message",
                    "role": "assistant",
                    "id": f"msg_{number:04d}",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            usage = {
                "input_tokens": 10,
                "input_tokens_details": None,
                "output_tokens": 5,
                "output_tokens_details": None,
                "total_tokens": 15,
            }
            self._sse(
                [
                    ("response.created", {"type": "response.created", "response": {"id": response_id}}),
                    (
                        "response.output_item.added",
                        {"type": "response.output_item.added", "output_index": 0, "item": item},
                    ),
                    (
                        "response.output_item.done",
                        {"type": "response.output_item.done", "output_index": 0, "item": item},
                    ),
                    (
                        "response.completed",
                        {
                            "type": "response.completed",
                            "response": {"id": response_id, "output": [item], "usage": usage},
                        },
                    ),
                ]
            )

        # -------------------------------------------------------------- OpenAI Chat Completions

        def _chat(
            self, call: tuple[tuple[str | None, str], dict[str, Any]] | None, text: str, stream: bool, number: int
        ) -> None:
            message: dict[str, Any] = {"role": "assistant", "content": None if call else text}
            if call is not None:
                message["tool_calls"] = [
                    {
                        "id": f"call_{number:04d}",
                        "type": "function",
                        "function": {"name": flat_name(*call[0]), "arguments": json.dumps(call[1])},
                    }
                ]
            finish = "tool_calls" if call else "stop"
            base = {"id": f"chatcmpl_{number:04d}", "created": 0, "model": "scripted"}
            if not stream:
                self._json(
                    {
                        **base,
                        "object": "chat.completion",
                        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    }
                )
                return
            delta = dict(message)
            if call is not None:
                delta["tool_calls"] = [{"index": 0, **message["tool_calls"][0]}]
            chunks = [
                {
                    **base,
                    "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
                },
                {
                    **base,
                    "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                },
            ]
            payload = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"
            self._raw(payload.encode(), "text/event-stream")

        # -------------------------------------------------------------- plumbing

        def _sse(self, events: list[tuple[str, dict[str, Any]]]) -> None:
            payload = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)
            self._raw(payload.encode(), "text/event-stream")

        def _json(self, payload: Any, status: int = 200) -> None:
            self._raw(json.dumps(payload).encode(), "application/json", status)

        def _raw(self, data: bytes, content_type: str, status: int = 200) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
