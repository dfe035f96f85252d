"""HTTP/1.1 on the wire, without I/O: the request head we write and the answer llhttp parses for us.

Why a parser of our own at all: bench/http_clients.py measures, in one run,
this module's pools against httpcore2 (httpx2's core, which the MCP SDK
brings) and urllib3 on one warm loopback keep-alive connection: httpcore2's
async pool on anyio costs about 8x the CPU per request of `AsyncPool`, its
sync pool and urllib3 about 7x `BlockingPool`'s (docs/performance.md has the
lines). Both hot paths (the gateway's plain-JSON `tools/call` POSTs and the
runner's HTTP capability) are one small request on a warm connection, so
that is the cost that counts.

What is here is shared by both pools (runner/http1/_async_pool.py and the
blocking one generated from it): `encode_request` writes the head (validated
as h11 validated it: nothing caller-given can add a header or a request), and
`Exchange` feeds llhttp (httptools, uvicorn's parser) and decides when an
answer is complete and whether the connection may be reused.

Framing is refused rather than guessed (a connection another caller reuses
must never carry an answer to a request it did not send): Content-Length
and Transfer-Encoding together, a Content-Length given twice (even with one
value) or not a number, a coding other than chunked, a repeated Content-Type,
Location or MCP session header with two different values, a second answer or
bytes after the answer. `Answer.headers` joins the repeats of the other
fields with ", " (RFC 9110 §5.3), never keeping only the last one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypeVar

import httptools

# A response's status line and headers together; more is an upstream we do not want to parse.
MAX_HEAD_BYTES = 64 * 1024
DEFAULT_PORTS = {"http": 80, "https": 443}

Headers = Sequence[tuple[bytes, bytes]]


class ResponseTooLarge(Exception):
    """The answer went past the response cap (nothing of it is kept)."""


class ConnectionClosed(ConnectionError):
    """The upstream closed the connection before answering completely (its cause: the socket's error, if any)."""


class MalformedAnswer(Exception):
    """The upstream's bytes are not HTTP/1.1 (llhttp or our checks refused them)."""


class ConnectFailed(Exception):
    """Opening a connection failed (its cause: the OSError, ssl.SSLError or TimeoutError); nothing was sent."""


class PoolFull(ConnectFailed):
    """Every connection the pool may open is in use, and none came free in time (its cause: TimeoutError)."""


class Origin(NamedTuple):
    """Where a pool's connections go: the address connected to, and the name TLS sends and verifies."""

    address: str
    port: int
    tls: bool
    server_name: str


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    reason: bytes
    raw_headers: Headers  # as received, names lower-cased (as h11 gave them), repeats kept
    body: bytes

    @property
    def headers(self) -> dict[str, str]:
        """Names lower-cased; a repeated field's values joined with ", " (RFC 9110 §5.3), none dropped.

        The fields whose repeats would be ambiguous (SINGLE_FIELDS) were refused while parsing.
        """
        joined: dict[str, str] = {}
        for name, value in self.raw_headers:
            key, text = name.decode("latin-1"), value.decode("latin-1")
            joined[key] = f"{joined[key]}, {text}" if key in joined else text
        return joined


class UnsendableRequest(ValueError):
    """A request we will not write: a method, target or header that is not HTTP/1.1 (nothing was sent).

    Header names and values are partly the caller's (an MCP tool's `Mcp-Param-*`
    comes from its arguments): a CR, LF, NUL or other control byte would let them
    write a header or a request of their own, so they are refused here, as h11 refused them.
    """


class RequestHead(NamedTuple):
    """A request's line and headers, as sent: names and values as given (lower-case names, as httpx gives them)."""

    method: bytes
    target: bytes
    headers: Headers


class TooManyRedirects(Exception):
    """More redirects than the plan allows; the last answer was a redirect too."""


Result_co = TypeVar("Result_co", covariant=True)


class Hops(Protocol[Result_co]):
    """A request without I/O, hop by hop: what goes out next, and what an answer means.

    `answered` gives the final result, or None when it followed a redirect (the
    next `request` is the redirect's); runner/http1/_async_fetch.py drives it.
    """

    max_redirects: int

    def request(self) -> tuple[Origin, RequestHead, bytes]: ...

    def answered(self, answer: Answer) -> Result_co | None: ...


# The request grammar (RFC 9110 §5.1, §5.5, RFC 9112 §3.2), as h11 validates it before sending.
_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
_TARGET = re.compile(rb"[\x21-\x7e]+")
# Visible bytes (and obs-text), spaces and tabs only between them: no control byte, no edge whitespace.
_FIELD_VALUE = re.compile(rb"(?:[\x21-\x7e\x80-\xff]+(?:[ \t]+[\x21-\x7e\x80-\xff]+)*)?")
_DIGITS = re.compile(rb"[0-9]{1,20}")


def encode_request(head: RequestHead, body: bytes) -> bytes:
    """The request's bytes, `host` first (as h11 writes them); UnsendableRequest: a request we will not send.

    The body is framed by the head's Content-Length (absent: none) or, with
    `Transfer-Encoding: chunked`, as one chunk and the last one, as h11 framed it.
    """
    if not _TOKEN.fullmatch(head.method):
        raise UnsendableRequest("Illegal method characters")
    if not _TARGET.fullmatch(head.target):
        raise UnsendableRequest("Illegal target characters")
    host, fields, length, chunked = _fields(head.headers)
    wire = b"%s %s HTTP/1.1\r\n%s%s\r\n" % (head.method, head.target, host, fields)
    if chunked:
        return wire + (b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n")
    if len(body) != int(length or b"0"):
        raise UnsendableRequest("the body's length is not the declared Content-Length")
    return wire + body


def _fields(headers: Headers) -> tuple[bytes, bytes, bytes | None, bool]:
    """The Host line, the other lines, the Content-Length and whether chunked; UnsendableRequest if not HTTP."""
    host = b""
    lines = []
    length: bytes | None = None
    chunked = False
    for name, value in headers:
        if not _TOKEN.fullmatch(name):
            raise UnsendableRequest(f"Illegal header name {name!r}")
        if not _FIELD_VALUE.fullmatch(value):
            raise UnsendableRequest(f"Illegal header value {value!r}")
        line = b"%s: %s\r\n" % (name, value)
        lower = name.lower()
        if lower == b"host":
            if host:
                raise UnsendableRequest("Found multiple Host: headers")
            host = line
            continue
        if lower == b"content-length":
            if length is not None or not _DIGITS.fullmatch(value):
                raise UnsendableRequest("bad Content-Length")
            length = value
        elif lower == b"transfer-encoding":
            if chunked or value.lower() != b"chunked":
                raise UnsendableRequest("Only Transfer-Encoding: chunked is supported")
            chunked, line = True, b"%s: chunked\r\n" % name  # lower-cased, as h11 wrote it
        lines.append(line)
    if not host:
        raise UnsendableRequest("Missing mandatory Host: header")
    if chunked and length is not None:  # RFC 9112 §6.1: never both (a smuggling vector)
        raise UnsendableRequest("both Content-Length and Transfer-Encoding")
    return host, b"".join(lines), length, chunked


class _Stop(Exception):
    """Raised in a parser callback to stop it once the answer is complete (a HEAD answer's head; a second answer)."""


class Exchange:
    """One request/answer cycle of a client connection: what the async and the blocking connections share.

    `start` encodes a request (one write); `feed` takes the bytes that arrived
    and returns the whole answer once it is complete (None: more is needed),
    or raises ResponseTooLarge, ConnectionClosed or MalformedAnswer.

    Why httptools: h11's pure-Python state machine was about 0.4 ms of CPU per
    proxied call here; httptools runs llhttp (Node's parser, uvicorn's) in C and
    calls back once per status line, header, body piece and end of message. A
    fresh parser per exchange: nothing of one answer carries into the next.
    What h11 did and llhttp does not, done here: a response head capped at
    MAX_HEAD_BYTES, a Transfer-Encoding other than chunked refused, 1xx answers
    skipped, a HEAD answer ended at its head, a body delimited by the connection's
    close ended at EOF, and reuse only for a complete HTTP/1.1 keep-alive answer
    with nothing after it.
    """

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._head_only = False
        self._max_response_bytes = 0
        self._head_size = 0  # the head's status line and fields, as parsed
        self._head_fed = 0  # bytes fed while the head was still incomplete
        self._status = 0  # of the final answer, once its head is complete; 0 before (or in a 1xx)
        self._reason = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._received = 0
        self._until_eof = False  # the body has no length: it ends when the upstream closes
        self._answer: Answer | None = None
        self._reusable = False

    def start(self, head: RequestHead, body: bytes, max_response_bytes: int) -> bytes:
        """The request's bytes (UnsendableRequest: a request we will not send)."""
        wire = encode_request(head, body)
        self._parser = httptools.HttpResponseParser(self)
        self._head_only = head.method == b"HEAD"
        self._max_response_bytes = max_response_bytes
        self._head_size, self._head_fed, self._status, self._reason, self._headers = 0, 0, 0, b"", []
        self._body, self._received, self._until_eof = [], 0, False
        self._answer, self._reusable = None, False
        return wire

    def feed(self, data: bytes) -> Answer | None:
        """`data` received (b"": the upstream closed its side); the answer once whole."""
        if not data:
            if self._until_eof and self._answer is None:
                self._complete()
            if self._answer is None:
                raise ConnectionClosed("the connection to the upstream closed")
            return self._answer
        if self._answer is not None:  # more bytes after the answer: not a connection to keep
            self._reusable = False
            return self._answer
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, (ResponseTooLarge, MalformedAnswer)):
                raise exc.__context__ from None
            if self._answer is None:
                raise MalformedAnswer("the upstream's answer is not HTTP/1.1") from exc
            self._reusable = False  # _Stop: the answer is a HEAD answer's head, or a second answer began
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            if self._answer is None:
                raise MalformedAnswer("the upstream's answer is not HTTP/1.1") from None
            self._reusable = False  # bytes after the answer that are not HTTP
        if self._status == 0:  # the head is still incomplete: llhttp would buffer it without end
            self._head_fed += len(data)
            if self._head_fed > MAX_HEAD_BYTES:
                raise MalformedAnswer("the upstream's answer head is too large")
        return self._answer

    def reusable(self) -> bool:
        """The answer was complete, HTTP/1.1 keep-alive, and nothing came after it: start the next one."""
        return self._reusable

    # httptools' callbacks, in the order it calls them

    def on_message_begin(self) -> None:
        if self._answer is not None:  # a second answer to our one request
            raise _Stop

    def on_status(self, reason: bytes) -> None:
        self._count_head(len(reason) + 15)
        self._reason = reason

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._status:  # a chunked body's trailer fields: dropped, as h11 dropped them, but counted
            self._count_body(len(name) + len(value) + 4)  # as body bytes, or they would be a stream without cap
            return
        self._count_head(len(name) + len(value) + 4)
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if status == 101:
            raise MalformedAnswer("the upstream switched protocols")
        if status < 200:  # an informational answer: wait for the final one
            self._reason, self._headers = b"", []
            return
        self._status = status
        length, coding = answer_framing(self._headers)  # llhttp reads an unknown coding to EOF; h11 refused it
        if self._head_only:
            self._complete()
            raise _Stop
        self._until_eof = length is None and coding is None and status not in (204, 304)

    def on_body(self, data: bytes) -> None:
        self._count_body(len(data))
        self._body.append(data)

    def _count_body(self, size: int) -> None:
        self._received += size
        if self._received > self._max_response_bytes:
            raise ResponseTooLarge

    def on_message_complete(self) -> None:
        if not self._status:  # the end of an informational answer
            return
        self._complete()
        self._reusable = self._parser.should_keep_alive() and self._parser.get_http_version() == "1.1"

    def _count_head(self, size: int) -> None:
        self._head_size += size
        if self._head_size > MAX_HEAD_BYTES:
            raise MalformedAnswer("the upstream's answer head is too large")

    def _complete(self) -> None:
        self._answer = Answer(self._status, self._reason, self._headers, b"".join(self._body))


# Fields an answer may carry once: two different values would let each reader pick its own.
SINGLE_FIELDS = frozenset({b"content-type", b"location", b"mcp-session-id", b"mcp-protocol-version"})


def answer_framing(headers: Headers) -> tuple[bytes | None, bytes | None]:
    """An answer's Content-Length and Transfer-Encoding, or MalformedAnswer.

    Refused: a coding other than chunked, both framings, a Content-Length that
    is repeated (even with the same value, even as "2, 2") or not digits, and a
    SINGLE_FIELDS field repeated with another value. Names are lower-case.
    """
    length = coding = None
    single: dict[bytes, bytes] = {}
    for name, value in headers:
        if name == b"content-length":
            if length is not None or not _DIGITS.fullmatch(value):
                raise MalformedAnswer("an answer with a repeated or malformed Content-Length")
            length = value
        elif name == b"transfer-encoding":
            if coding is not None or value.lower() != b"chunked":
                raise MalformedAnswer("only Transfer-Encoding: chunked is understood")
            coding = value
        elif name in SINGLE_FIELDS and single.setdefault(name, value) != value:
            raise MalformedAnswer(f"an answer with conflicting {name.decode()} fields")
    if length is not None and coding is not None:
        raise MalformedAnswer("an answer with both Content-Length and Transfer-Encoding")
    return length, coding
