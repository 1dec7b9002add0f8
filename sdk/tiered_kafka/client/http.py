"""An httpx transport over the standard library's ``http.client``, for ``GatewayClient``'s presigned GETs
(TieredConsumer, the bulk API, Spark, the CLI).

Why: the prefetch threads GET tens of MiB per second of presigned ranges. httpx's own transport
(httpcore + h11) receives a body in 64 KiB reads, each parsed as an h11 event and copied twice
before ``Response.read`` joins the pieces: measured with bench/bench_sdk.py's data, ~0.1 CPU-second
of Python per 128 MiB, as much as decoding the records. ``http.client`` reads a body of known
length with one allocation filled by the socket directly (``BufferedReader.read(n)`` → ``readinto``),
so this transport hands httpx the whole body as one chunk (``b"".join`` of one bytes object is that
object: no further copy).

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

import http.client
import threading
from collections.abc import Iterator
from typing import Any

import httpx

#: idle connections kept per (host, port); more are closed once used
MAX_IDLE_PER_HOST = 16


class _Body(httpx.SyncByteStream):
    """A response body: read whole on first iteration (one chunk), then the connection is reused."""

    def __init__(self, transport: StdlibTransport, key: tuple[str, int], conn: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
        self._transport = transport
        self._key = key
        self._conn: http.client.HTTPConnection | None = conn
        self._response = response

    def __iter__(self) -> Iterator[bytes]:
        try:
            data = self._response.read()
        except TimeoutError as err:
            self._drop()
            raise httpx.ReadTimeout(str(err) or "timed out reading the response body") from err
        except (OSError, http.client.HTTPException) as err:
            self._drop()
            raise httpx.ReadError(f"reading the response body: {err!r}") from err
        if data:
            yield data

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
        target = url.raw_path.decode("ascii")
        body = request.read()
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in request.headers.raw}
        headers.pop("Host", None)
        headers.pop("host", None)
        for attempt in (0, 1):  # a kept-alive connection the server closed meanwhile: once more on a new one
            conn, reused = self._take(key)
            where = f"{request.method} {url.host}:{key[1]}"
            if conn.sock is None:
                conn.timeout = timeouts.get("connect")
                try:
                    conn.connect()
                except TimeoutError as err:
                    conn.close()
                    raise httpx.ConnectTimeout(f"{where}: {err!r}") from err
                except OSError as err:
                    conn.close()
                    raise httpx.ConnectError(f"{where}: {err!r}") from err
            try:
                conn.sock.settimeout(timeouts.get("read"))
                conn.putrequest(request.method, target, skip_accept_encoding=True)
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
            return httpx.Response(
                response.status,
                headers=response.getheaders(),
                stream=_Body(self, key, conn, response),
                extensions={"http_version": b"HTTP/1.1", "reason_phrase": response.reason.encode("latin-1")},
            )
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
