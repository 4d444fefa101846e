"""A small OpenAI-compatible HTTP server on 127.0.0.1, the base of the replay server.

``ChatServer`` listens on a free port of 127.0.0.1 in a daemon thread and hands each
``POST`` (path and parsed JSON body) to ``respond``, which a subclass writes; ``url`` is
the ``/v1`` base for litellm's ``api_base``. ``completion`` builds the body of a chat
completion as the OpenAI API returns it (``choices[0].message.content``, ``usage``).
The test suite's scripted server is a ``ChatServer`` too.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread
from typing import Any, Self


@dataclass
class Response:
    """What the server sends: an HTTP status, a JSON body and extra headers."""

    body: dict[str, Any]
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


def completion(content: str, *, model: str, usage: dict[str, int], finish_reason: str = "stop") -> dict[str, Any]:
    """The JSON body of one chat completion whose message is ``content``."""
    return {
        "id": "chatcmpl-local",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}],
        "usage": usage,
    }


class ChatServer:
    """An HTTP server on 127.0.0.1 (a free port) that answers every POST with ``respond``.

    Use it as a context manager or call ``start`` and ``stop``; requests are served in
    threads, so ``respond`` must guard any shared state it changes.
    """

    def __init__(self) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length") or 0)
                payload = json.loads(self.rfile.read(length) or b"{}")
                response = server.respond(self.path, payload, dict(self.headers))
                raw = json.dumps(response.body).encode()
                try:
                    self.send_response(response.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(raw)))
                    for name, value in response.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout it asked for)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = Thread(target=self._server.serve_forever, daemon=True)

    def respond(self, path: str, payload: dict[str, Any], headers: dict[str, str]) -> Response:
        """The response to a POST of ``payload`` (parsed JSON) to ``path``."""
        raise NotImplementedError

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
