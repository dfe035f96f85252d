"""A real HTTP server on 127.0.0.1 that stands in for an upstream (GitHub, an OAuth provider).

Tests talk to it over real sockets, so what they check is what a provider would
see: the request line, the headers (Authorization above all) and the body.
Every request is recorded before it is answered, so once a client has its
response the record is already there; a test that expects no call asserts
`server.requests == []`.

    with LoopbackServer() as github:
        github.route("GET", "/user", json={"login": "octocat"})
        github.handle("GET", "/echo", lambda request: (200, {}, request.body))
        ...
        assert [r.path for r in github.requests] == ["/user"]

Each response carries `Connection: close`: one request per connection keeps the
record order obvious and leaves no idle sockets behind when a test ends.
"""

from __future__ import annotations

import json as jsonlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import MappingProxyType, TracebackType
from typing import Any
from urllib.parse import parse_qs

Answer = tuple[int, Mapping[str, str], bytes]


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as the server received it. Header names are lower-cased."""

    method: str
    target: str  # the raw request target of the request line, query string included
    path: str  # the target without its query string, exactly as sent (no decoding)
    query: str
    headers: Mapping[str, str]
    body: bytes
    client_port: int = field(default=0, compare=False)

    def json(self) -> Any:
        return jsonlib.loads(self.body)

    def query_params(self) -> dict[str, list[str]]:
        return parse_qs(self.query, keep_blank_values=True)


Handler = Callable[[RecordedRequest], Answer]


def json_answer(status: int, payload: Any, headers: Mapping[str, str] | None = None) -> Answer:
    """An answer with a JSON body, for callable handlers."""
    return status, {"Content-Type": "application/json", **(headers or {})}, jsonlib.dumps(payload).encode()


def redirect_answer(location: str, status: int = 302) -> Answer:
    return status, {"Location": location}, b""


class LoopbackServer:
    """`ThreadingHTTPServer` on an ephemeral loopback port, answering from a route table.

    Unknown routes answer 404 with a JSON body. A handler that raises answers
    500 (the exception is kept in `errors` for the test to look at).
    """

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._routes: dict[tuple[str, str], Handler] = {}
        self._requests: list[RecordedRequest] = []
        self._errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._httpd = _Server((host, 0), _make_request_handler(self))
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, name="loopback-http", daemon=True
        )
        self._thread.start()
        self._closed = False

    # --- configuration -----------------------------------------------------------

    def route(
        self,
        method: str,
        path: str,
        *,
        status: int = 200,
        json: Any = None,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """A fixed answer: `json` (serialised, with a JSON content type) or raw `body` bytes."""
        if json is not None and body is not None:
            raise ValueError("give json or body, not both")
        answer = json_answer(status, json, headers) if json is not None else (status, dict(headers or {}), body or b"")
        self.handle(method, path, lambda _request: answer)

    def handle(self, method: str, path: str, handler: Handler) -> None:
        """A dynamic answer: `handler(request) -> (status, headers, body_bytes)`."""
        with self._lock:
            self._routes[(method.upper(), path)] = handler

    # --- what happened -------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def errors(self) -> list[BaseException]:
        """Exceptions raised by handlers (each was answered with a 500)."""
        with self._lock:
            return list(self._errors)

    # --- lifecycle -------------------------------------------------------------------

    def close(self) -> None:
        """Stop accepting requests. Handlers still sleeping run on daemon threads and are abandoned."""
        if self._closed:
            return
        self._closed = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> LoopbackServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LoopbackServer({self.url!r})"

    # --- called from the server's threads ---------------------------------------------

    def _answer(self, request: RecordedRequest) -> Answer:
        with self._lock:
            self._requests.append(request)
            handler = self._routes.get((request.method, request.path))
        if handler is None:
            return json_answer(404, {"message": "Not Found"})
        try:
            return handler(request)
        except Exception as exc:
            with self._lock:
                self._errors.append(exc)
            return json_answer(500, {"message": "handler failed"})


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a sleeping handler must not hold up close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (timeout, size limit) leaves a broken pipe behind: expected here.
        return None


def _make_request_handler(server: LoopbackServer) -> type[BaseHTTPRequestHandler]:
    class RequestHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            target = self.path
            path, _, query = target.partition("?")
            request = RecordedRequest(
                method=self.command,
                target=target,
                path=path,
                query=query,
                headers=MappingProxyType(_lowercase_headers(self.headers.items())),
                body=self._read_body(),
                client_port=int(self.client_address[1]),
            )
            status, headers, body = server._answer(request)
            self.send_response(status)
            sent = {name.lower() for name in headers}
            for name, value in headers.items():
                self.send_header(name, value)
            if "content-length" not in sent:
                self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            if self.command != "HEAD":
                self.wfile.write(body)

        def _read_body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                return b"".join(_read_chunks(self.rfile))
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _serve

        def log_message(self, format: str, *args: Any) -> None:
            return None

    return RequestHandler


def _lowercase_headers(items: Iterable[tuple[str, str]]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in items:
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


def _read_chunks(stream: Any) -> Iterator[bytes]:
    while True:
        size = int(stream.readline().split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            stream.readline()  # the empty line after the last chunk (no trailers expected)
            return
        yield stream.read(size)
        stream.readline()
