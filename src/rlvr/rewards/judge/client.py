"""One POST to a judge's endpoint under a hard wall-clock deadline, its answer bounded in size.

    body = post(url, payload, headers, timeout_s=30, retries=1, max_bytes=MAX_ANSWER_BYTES)

Why not urllib's or http.client's `timeout`: that is a socket timeout, a bound on each read, so a
server that sends one byte a second (or one header line a second) never trips it and holds the
trainer for as long as it likes. Here the request runs in a daemon thread of its own and the
caller waits on it until the deadline; at the deadline the caller shuts the socket down (which
wakes the blocked read at once, so the thread ends too) and raises `JudgeTimeout`. Everything a
request does counts against the one deadline: name resolution, connecting, sending, the status
line and headers, the body, and the retries.

What else fails the request (each a `JudgeError`, the failure of the one completion it scores):
an HTTP status other than 200 (`JudgeHTTPError`; redirects are not followed), a body over
`max_bytes` (declared by Content-Length or streamed past it), a response that is no HTTP (the
standard library's parser refuses it, and its limits on header lines and header count hold).
Only a connection error before any answer (refused, reset, closed without a status line) is
retried, at most `retries` times, within the same deadline (`JudgeConnectionError` when they are
spent). Only the standard library is used.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Mapping
from urllib.parse import urlsplit

MAX_ANSWER_BYTES = 1 << 20  # a chat completion with a few thousand tokens is a few tens of kB
_CHUNK = 1 << 16
# what is retried: the connection failed before the server said anything
_RETRIED = (ConnectionRefusedError, ConnectionResetError, ConnectionAbortedError, BrokenPipeError)


class JudgeError(Exception):
    """The judge gave no usable answer for one completion (it scores 0, a counted failure)."""


class JudgeTimeout(JudgeError):
    """No complete answer within the request's time-out."""


class JudgeConnectionError(JudgeError):
    """The connection failed (refused, reset, closed before an answer), retries spent."""


class JudgeHTTPError(JudgeError):
    """The endpoint answered with an HTTP status other than 200, or with something that is not
    HTTP, or with a body over the size limit."""


def endpoint_label(url: str) -> str:
    """scheme://host:port of a URL, as failures name the judge (never a path or query)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


class _Exchange:
    """One HTTP request, run in its own thread; `abort` wakes it from any blocking call."""

    def __init__(
        self, url: str, payload: bytes, headers: Mapping[str, str], timeout_s: float, limit: int
    ) -> None:
        self.url, self.payload, self.headers = url, payload, dict(headers)
        self.timeout_s, self.limit = timeout_s, limit
        self.conn: http.client.HTTPConnection | None = None
        self.status: int | None = None
        self.body = b""
        self.error: BaseException | None = None
        self.aborted = False
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self._request()
        except BaseException as e:  # noqa: BLE001 - handed to the waiting caller
            self.error = e
        finally:
            if self.conn is not None:
                self.conn.close()
            self.done.set()

    def _request(self) -> None:
        parts = urlsplit(self.url)
        kind = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        # the socket timeout bounds each call of a thread nobody waits for any more
        self.conn = kind(parts.hostname or "", parts.port, timeout=self.timeout_s)
        self.conn.connect()
        if self.aborted:
            return
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        self.conn.request("POST", path or "/", body=self.payload, headers=self.headers)
        response = self.conn.getresponse()
        self.status = response.status
        declared = response.getheader("Content-Length")
        if declared is not None and declared.strip().isdigit() and int(declared) > self.limit:
            raise JudgeHTTPError(f"the answer declares {int(declared)} bytes (limit {self.limit})")
        chunks, size = [], 0
        while True:
            chunk = response.read(_CHUNK)
            if not chunk:
                break
            size += len(chunk)
            if size > self.limit:
                raise JudgeHTTPError(f"the answer is over {self.limit} bytes")
            chunks.append(chunk)
        self.body = b"".join(chunks)

    def abort(self) -> None:
        self.aborted = True
        conn = self.conn
        sock = conn.sock if conn is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed
                pass


def post(
    url: str,
    payload: bytes,
    headers: Mapping[str, str],
    *,
    timeout_s: float,
    retries: int = 0,
    max_bytes: int = MAX_ANSWER_BYTES,
) -> bytes:
    """The body of a 200 answer to POST `payload` to `url`, within `timeout_s` seconds of
    wall-clock time in all (the module docstring); raises a `JudgeError` otherwise."""
    who = endpoint_label(url)
    deadline = time.monotonic() + timeout_s
    attempt = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise JudgeTimeout(f"judge {who}: no complete answer within {timeout_s:g} s")
        exchange = _Exchange(url, payload, headers, left, max_bytes)
        threading.Thread(target=exchange.run, name="rlvr-judge-request", daemon=True).start()
        if not exchange.done.wait(left):
            exchange.abort()
            raise JudgeTimeout(f"judge {who}: no complete answer within {timeout_s:g} s")
        error = exchange.error
        if error is None:
            if exchange.status != 200:
                text = " ".join(exchange.body[:120].decode("utf-8", "replace").split())
                raise JudgeHTTPError(f"judge {who}: HTTP {exchange.status}: {text}")
            return exchange.body
        if isinstance(error, JudgeError):
            raise type(error)(f"judge {who}: {error}")
        if isinstance(error, _RETRIED) and exchange.status is None:
            if attempt < retries:
                attempt += 1
                time.sleep(min(0.05 * 2**attempt, max(0.0, deadline - time.monotonic())))
                continue
            tries = f" ({attempt + 1} attempts)" if attempt else ""
            raise JudgeConnectionError(f"judge {who}: {_describe(error)}{tries}") from None
        if isinstance(error, (TimeoutError, socket.timeout)):  # the thread's own socket bound
            raise JudgeTimeout(f"judge {who}: no complete answer within {timeout_s:g} s")
        if isinstance(error, http.client.HTTPException):  # not HTTP, too many headers, cut
            raise JudgeHTTPError(f"judge {who}: {_describe(error)}") from None
        if isinstance(error, OSError):  # name resolution, TLS, a reset in the middle
            raise JudgeConnectionError(f"judge {who}: {_describe(error)}") from None
        raise error


def _describe(e: BaseException) -> str:
    if isinstance(e, http.client.RemoteDisconnected):
        return "the connection closed without an answer"
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    text = " ".join(str(e).split())[:120]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
