"""A small OpenAI-compatible HTTP server on 127.0.0.1 that tests script.

It answers ``POST /v1/chat/completions`` and ``POST /v1/embeddings``. Each test puts
replies in the script (a queue; the last reply repeats when the queue runs dry) or
sets ``handler`` to a function of the parsed request. Every request is recorded in
``requests``. Replies:
- ``verdict(actions, reasoning)``: a normal answer whose content is the JSON verdict;
- ``text(content, finish_reason="stop")``: any content (malformed or cut-off JSON);
- ``error(status, headers=..., body=...)``: an HTTP error, e.g. 429 with retry-after;
- ``hang(seconds)``: sleep before answering (a timeout on the client side).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    content: str = ""
    finish_reason: str = "stop"
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    delay: float = 0.0


def verdict(actions: list[dict[str, Any]] | None = None, reasoning: str = "scripted") -> Reply:
    return Reply(content=json.dumps({"actions": actions or [], "reasoning": reasoning}))


def text(content: str, finish_reason: str = "stop") -> Reply:
    return Reply(content=content, finish_reason=finish_reason)


def error(status: int, *, headers: dict[str, str] | None = None, message: str = "scripted error") -> Reply:
    return Reply(status=status, headers=headers or {}, body={"error": {"message": message, "type": "scripted", "code": status}})


def hang(seconds: float, then: Reply | None = None) -> Reply:
    reply = then or verdict()
    reply.delay = seconds
    return reply


class StubLLMServer:
    """The server; ``url`` is its ``/v1`` base for litellm's ``api_base``."""

    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.handler: Callable[[dict[str, Any]], Reply] | None = None
        self.requests: list[dict[str, Any]] = []
        self.embedding_dimensions = 384
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length") or 0)
                payload = json.loads(self.rfile.read(length) or b"{}")
                with stub._lock:
                    stub.requests.append({"path": self.path, "json": payload, "headers": dict(self.headers)})
                if self.path.endswith("/embeddings"):
                    return self._embeddings(payload)
                reply = stub._next(payload)
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.status != 200:
                    return self._send(reply.status, reply.body or {}, reply.headers)
                body = {
                    "id": "chatcmpl-stub",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": payload.get("model", "stub"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": reply.content},
                            "finish_reason": reply.finish_reason,
                        }
                    ],
                    "usage": {"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70},
                }
                self._send(200, body, reply.headers)

            def _embeddings(self, payload: dict[str, Any]) -> None:
                inputs = payload.get("input") or []
                if isinstance(inputs, str):
                    inputs = [inputs]
                dims = stub.embedding_dimensions
                data = []
                for i, item in enumerate(inputs):
                    vector = [0.0] * dims
                    vector[hash(item) % dims] = 1.0
                    data.append({"object": "embedding", "index": i, "embedding": vector})
                self._send(200, {"object": "list", "data": data, "model": payload.get("model"), "usage": {"prompt_tokens": 1, "total_tokens": 1}}, {})

            def _send(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
                raw = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(raw)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _next(self, payload: dict[str, Any]) -> Reply:
        if self.handler is not None:
            return self.handler(payload)
        with self._lock:
            if not self.script:
                return verdict()
            return self.script.pop(0) if len(self.script) > 1 else self.script[0]

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def chat_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"].endswith("/chat/completions")]

    @staticmethod
    def truths_of(request: dict[str, Any]) -> list[dict[str, Any]]:
        """The ``truths`` list of a recorded chat request (the wire contract)."""
        content = request["json"]["messages"][-1]["content"]
        start, end = content.index("{"), content.rindex("}") + 1
        return json.loads(content[start:end])["truths"]

    def start(self) -> StubLLMServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
