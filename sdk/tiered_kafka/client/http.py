"""An httpx transport over the standard library's ``http.client``, for ``GatewayClient``'s presigned GETs
(TieredConsumer, the bulk API, Spark, the CLI).

Why: the prefetch threads GET tens of MiB per second of presigned ranges. httpx's own transport
(httpcore + h11) receives a body in 64 KiB reads, each parsed as an h11 event and copied twice
before ``Response.read`` joins the pieces: measured with bench/bench_sdk.py's data, ~0.1 CPU-second
of Python per 128 MiB, as much as decoding the records. ``http.client`` reads a body of known
length with one allocation filled by the socket directly (``BufferedReader.read(n)`` → ``readinto``),
so this transport hands httpx the whole body as one chunk (``b"".join`` of one bytes object is that
object: no further copy).

Presigned GETs (``GatewayClient.fetch``) go further (#38): ``StdlibTransport.get`` sends them without
building httpx's request and response (httpx validates every character of a presigned URL's query
and builds header models: ~1 ms of CPU per GET, more than receiving its 8 MiB), and
``_Body.read_pooled`` receives a body of known length straight into a ``_native.RecvBuffer``,
memory reused from earlier bodies (``format/_recv.c``): a new 8 MiB bytes object is new pages the
kernel must fault in and zero first. Measured on bench_sdk.py's data (67 MB in 8 MiB ranges, median
of 9 rounds, CPU-s per GB of the reading process): ``fetch`` 0.98 before, 0.39 after (bodies dropped
as read) and 0.50 (all kept), ``curl -K`` to /dev/null 0.15-0.22.

Scope (a decision): plain ``http://`` only. ``https://`` requests go to httpx's own transport, so
TLS verification, certificates and proxies behave exactly as httpx configures them. The
``GatewayClient`` above keeps every rule of the protocol (statuses, ``Content-Range``, retries);
this module only moves bytes, and raises httpx's exceptions (``ConnectError``, ``ReadTimeout``, ...)
so that the client's retries see what they would see with httpx's transport.

Connections: kept alive per (host, port), one request at a time each, reused once their response
was read to the end (``Response.close`` of a stream not read to the end closes the connection,
as a body left on the socket would be read as the next response).
"""

from __future__ import annotations

import contextlib
import http.client
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx

from tiered_kafka.format import record_batch

#: idle connections kept per (host, port); more are closed once used
MAX_IDLE_PER_HOST = 16
#: the response extension holding this transport's body (``_Body.read_pooled``)
BODY_EXTENSION = "tiered_kafka.body"


def read_body(response: httpx.Response) -> bytes | memoryview:
    """The body of a streamed ``response`` (``Client.stream``): through ``_Body.read_pooled`` when
    this transport answered it (no new memory per body), else httpx's ``Response.read``."""
    body = response.extensions.get(BODY_EXTENSION)
    return response.read() if body is None else body.read_pooled()


class _Body(httpx.SyncByteStream):
    """A response body: read whole on first iteration (one chunk), then the connection is reused."""

    def __init__(self, transport: StdlibTransport, key: tuple[str, int], conn: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
        self._transport = transport
        self._key = key
        self._conn: http.client.HTTPConnection | None = conn
        self._response = response

    def __iter__(self) -> Iterator[bytes]:
        with self._receiving():
            data = self._response.read()
        if data:
            yield data

    @contextlib.contextmanager
    def _receiving(self) -> Iterator[None]:
        """A failure while the body is received is httpx's (the client's retries know those), and
        the connection is dropped (what is left of the body is unknown)."""
        try:
            yield
        except TimeoutError as err:
            self._drop()
            raise httpx.ReadTimeout(str(err) or "timed out reading the response body") from err
        except (OSError, http.client.HTTPException) as err:
            self._drop()
            raise httpx.ReadError(f"reading the response body: {err!r}") from err

    def read_pooled(self) -> bytes | memoryview:
        """The whole body, read once (for ``GatewayClient.fetch``): a body of known length goes straight
        from the socket into a ``_native.RecvBuffer`` (memory reused from earlier bodies: module doc),
        returned as a read-only memoryview of it; without the extension, or without a length, bytes."""
        response = self._response
        length = response.length
        native = record_batch._native
        if native is None or length is None or response.chunked:
            return b"".join(self)
        view = memoryview(native.RecvBuffer(length))
        got = 0
        with self._receiving():
            while got < length:
                n = response.readinto(view[got:])
                if not n:
                    break  # a short body: the caller compares the length with what it asked
                got += n
        return view[:got].toreadonly()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._response.isclosed() and not self._response.will_close:
            self._transport.give_back(self._key, conn)
        else:
            self._response.close()
            conn.close()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class StdlibTransport(httpx.BaseTransport):
    """``http://`` through ``http.client`` with kept-alive connections; the rest through ``fallback``."""

    def __init__(self, fallback: httpx.BaseTransport | None = None) -> None:
        self._fallback = fallback if fallback is not None else httpx.HTTPTransport()
        self._idle: dict[tuple[str, int], list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http":
            return self._fallback.handle_request(request)
        key = (url.host, url.port or 80)
        timeouts: dict[str, Any] = request.extensions.get("timeout", {})
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in request.headers.raw}
        headers.pop("Host", None)
        headers.pop("host", None)
        response, body = self._exchange(request.method, key, url.raw_path.decode("ascii"), headers, request.read(), timeouts.get("connect"), timeouts.get("read"))
        return httpx.Response(
            response.status,
            headers=response.getheaders(),
            stream=body,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": response.reason.encode("latin-1"), BODY_EXTENSION: body},
        )

    def get(self, url: str, headers: dict[str, str], timeout_s: float | None) -> tuple[http.client.HTTPResponse, _Body] | None:
        """GET ``url`` (``http://`` only: None for any other scheme) with ``headers`` and no others but
        ``Host``, without building httpx's request and response (``GatewayClient.fetch``'s presigned
        GETs: httpx's URL validation and header models cost more CPU than receiving 8 MiB). The answer's
        status and headers (``http.client``'s), and its body, whose ``close`` must be called."""
        return self.send("GET", url, headers, timeout_s)

    def send(self, method: str, url: str, headers: dict[str, str], timeout_s: float | None) -> tuple[http.client.HTTPResponse, _Body] | None:
        """:meth:`get` for any method without a request body (``tiered_kafka_service.s3_direct``'s HEAD)."""
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            return None
        target = (parts.path or "/") + ("?" + parts.query if parts.query else "")
        return self._exchange(method, (parts.hostname, parts.port or 80), target, headers, b"", timeout_s, timeout_s)

    def _exchange(
        self, method: str, key: tuple[str, int], target: str, headers: dict[str, str], body: bytes, connect_s: float | None, read_s: float | None
    ) -> tuple[http.client.HTTPResponse, _Body]:
        """Send one request on a kept-alive connection to ``key`` (or a new one), its response's status
        line and headers read; failures as httpx's exceptions (module doc)."""
        for attempt in (0, 1):  # a kept-alive connection the server closed meanwhile: once more on a new one
            conn, reused = self._take(key)
            where = f"{method} {key[0]}:{key[1]}"
            if conn.sock is None:
                conn.timeout = connect_s
                try:
                    conn.connect()
                except TimeoutError as err:
                    conn.close()
                    raise httpx.ConnectTimeout(f"{where}: {err!r}") from err
                except OSError as err:
                    conn.close()
                    raise httpx.ConnectError(f"{where}: {err!r}") from err
            try:
                conn.sock.settimeout(read_s)
                conn.putrequest(method, target, skip_accept_encoding=True)
                for name, value in headers.items():
                    conn.putheader(name, value)
                conn.endheaders(body or None)
                response = conn.getresponse()
            except TimeoutError as err:
                conn.close()
                raise httpx.ReadTimeout(f"{where}: {err!r}") from err
            except (ConnectionError, http.client.HTTPException) as err:
                conn.close()
                if reused and attempt == 0:
                    continue
                raise httpx.RemoteProtocolError(f"{where}: {err!r}") from err
            except OSError as err:
                conn.close()
                raise httpx.ReadError(f"{where}: {err!r}") from err
            return response, _Body(self, key, conn, response)
        raise AssertionError("unreachable")

    def _take(self, key: tuple[str, int]) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection to ``key`` (True), or a new one not connected yet (False)."""
        with self._lock:
            idle = self._idle.get(key)
            if idle:
                return idle.pop(), True
        return http.client.HTTPConnection(key[0], key[1]), False

    def give_back(self, key: tuple[str, int], conn: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if not self._closed and len(idle) < MAX_IDLE_PER_HOST:
                idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for conn in conns:
            conn.close()
        self._fallback.close()
