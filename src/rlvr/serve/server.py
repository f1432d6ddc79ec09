"""The HTTP side of `rlvr serve`: OpenAI's endpoints on the standard library's
`ThreadingHTTPServer` (no web framework to install).

    POST /v1/chat/completions   GET /v1/models
    POST /v1/completions        GET /health

One thread per connection parses and writes; the model answers one request at a time
(`ServedModel.respond`, under its lock). Python:

    with Server(ServeConfig()) as server:       # or Server(ServedModel(...)), port=0: a free one
        client = openai.OpenAI(base_url=server.url, api_key="x")

Errors are OpenAI's body, {"error": {"message", "type", "param", "code"}}: 400 for a request
the server refuses (`RequestError`), 404 for an unknown path, 500 (type "server_error") for a
failure while generating, after which the server goes on answering.
"""

from __future__ import annotations

import json
import threading
import traceback
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rlvr.serve.config import ServeConfig
from rlvr.serve.model import ServedModel
from rlvr.serve.protocol import RequestError, parse_chat, parse_completion, stream_chunks

MAX_BODY_BYTES = 64 * 2**20  # a request body larger than this is refused (413)


class Server:
    """`rlvr serve` in this process: `start()` listens on `host:port` (port 0 = a free one) in a
    background thread and returns the base URL of the OpenAI endpoints
    (http://HOST:PORT/v1, also `url`); `close()` stops it. A context manager does both.

    served: a ServedModel, or a ServeConfig whose model is loaded when the server is made
    (None: the default config, the embedded model on the fast engine).
    log: one line per request answered (method, path, status), e.g. `print`; None: silent.
    """

    def __init__(
        self,
        served: ServedModel | ServeConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log: Callable[[str], None] | None = None,
    ) -> None:
        if not isinstance(served, ServedModel):
            served = ServedModel.from_config(served or ServeConfig())
        self.served = served
        self.host, self.port = host, port
        self.log = log
        self.url = ""
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        """Listen and answer in a background thread; the base URL of the endpoints."""
        if self._httpd is None:
            self._httpd = ThreadingHTTPServer((self.host, self.port), _handler(self))
            self._httpd.daemon_threads = True
            host, port = self._httpd.server_address[:2]
            self.url = f"http://{_url_host(str(host))}:{port}/v1"
            self._thread = threading.Thread(
                target=self._httpd.serve_forever, name="rlvr-serve", daemon=True
            )
            self._thread.start()
        return self.url

    def serve_forever(self) -> None:
        """Answer in this thread until interrupted (the CLI); `start()` must have been called."""
        if self._thread is not None:
            self._thread.join()

    def close(self) -> None:
        """Stop listening and wait for the serving thread (a request being generated finishes
        first)."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            if self._thread is not None:
                self._thread.join()
            self._httpd = self._thread = None

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        """(status, JSON value, or a list of chunk objects for a stream) of one request."""
        path = path.split("?", 1)[0].rstrip("/") or "/"
        routes = {
            ("GET", "/health"): lambda: {"status": "ok", "model": self.served.name},
            ("GET", "/v1/models"): lambda: {"object": "list", "data": [self.served.describe()]},
            ("POST", "/v1/chat/completions"): lambda: self._generate(parse_chat, body),
            ("POST", "/v1/completions"): lambda: self._generate(parse_completion, body),
        }
        route = routes.get((method, path))
        if route is None:
            known = {p for _, p in routes}
            status = HTTPStatus.METHOD_NOT_ALLOWED if path in known else HTTPStatus.NOT_FOUND
            error = RequestError(f"{method} {path}: no such endpoint", status=status)
            return error.status, error.body()
        try:
            return HTTPStatus.OK, route()
        except RequestError as e:
            return e.status, e.body()
        except Exception as e:  # a failure while generating answers this request only
            if self.log is not None:
                self.log(traceback.format_exc().rstrip())
            error = RequestError(f"{type(e).__name__}: {e}", status=500, kind="server_error")
            return error.status, error.body()

    def _generate(self, parse: Callable[[Any, int], Any], body: bytes) -> Any:
        try:
            value = json.loads(body)
        except ValueError as e:
            raise RequestError(f"the request body is not JSON: {e}") from None
        except RecursionError:
            raise RequestError(
                "the request body is not JSON this server reads: nested too deeply"
            ) from None
        request = parse(value, self.served.max_n)
        response = self.served.respond(request)
        return stream_chunks(response, request.include_usage) if request.stream else response


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: every response has a Content-Length
        server_version = "rlvr-serve"

        def do_GET(self) -> None:
            self._answer("GET")

        def do_POST(self) -> None:
            self._answer("POST")

        def _answer(self, method: str) -> None:
            raw = (self.headers.get("Content-Length") or "0").strip()
            length = int(raw) if raw.isdigit() else -1  # digits only: no sign, no spaces
            if length < 0:
                error = RequestError(
                    f"Content-Length: expected a byte count, got {raw[:40]!r}", status=400
                )
                self.close_connection = True  # where the body ends is unknown
                self._send(error.status, error.body())
                return
            if length > MAX_BODY_BYTES:
                error = RequestError(f"request body over {MAX_BODY_BYTES} bytes", status=413)
                self.close_connection = True  # the body is left unread
                self._send(error.status, error.body())
                return
            body = self.rfile.read(length) if length else b""
            status, value = server.handle(method, self.path, body)
            if isinstance(value, list):
                self._send_events(value)
            else:
                self._send(status, value)

        def _send(self, status: int, value: Any) -> None:
            data = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:  # the client is told, not left waiting on keep-alive
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)

        def _send_events(self, chunks: list[Any]) -> None:
            """Server-sent events: each chunk, then [DONE], in one body of known length."""
            data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Content-Length", str(len(data.encode())))
            self.end_headers()
            self.wfile.write(data.encode())

        def log_message(self, format: str, *args: Any) -> None:
            if server.log is not None:
                server.log(f"{self.address_string()} {format % args}")

    return Handler
