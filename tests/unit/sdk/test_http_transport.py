"""``http_transport.StdlibTransport`` against a real HTTP/1.1 server on a local socket: bodies,
keep-alive reuse, a kept-alive connection the server closed, a body left unread, and the httpx
exceptions the gateway client's retries expect; ``GatewayClient.fetch``'s direct GET through it (no
httpx models), its body in pooled memory (``_native.RecvBuffer``), and its answers other than 206."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tiered_kafka.client.gateway import GatewayClient, PlannedRange
from tiered_kafka.client.http import StdlibTransport
from tiered_kafka.errors import PresignedUrlError, RemoteReadError
from tiered_kafka.format import record_batch

BODY = bytes(range(256)) * 4096  # 1 MiB


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    connections: set[tuple[str, int]] = set()

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        Handler.connections.add(self.client_address)
        path = self.path.split("?", 1)[0]
        if path == "/close":  # answers, then closes the connection whatever the client wants
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"ok")
            self.close_connection = True
            return
        if path == "/gone":  # an expired presigned URL, as S3 answers it
            message = b"<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>"
            self.send_response(403)
            self.send_header("Content-Length", str(len(message)))
            self.end_headers()
            self.wfile.write(message)
            return
        if path == "/short":  # promises the range, sends less, closes
            self.send_response(206)
            self.send_header("Content-Length", "100")
            self.send_header("Content-Range", f"bytes 0-99/{len(BODY)}")
            self.end_headers()
            self.wfile.write(BODY[:10])
            self.close_connection = True
            return
        start, end = 0, len(BODY)
        if "Range" in self.headers and path != "/no-range":
            first, last = self.headers["Range"].removeprefix("bytes=").split("-")
            start, end = int(first), int(last) + 1
        ranged = "Range" in self.headers and path != "/no-range"
        self.send_response(206 if ranged else 200)
        self.send_header("Content-Length", str(end - start))
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(BODY)}")
        self.send_header("X-Echo", self.headers.get("X-Test", ""))
        self.end_headers()
        self.wfile.write(BODY[start:end])

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    Handler.connections = set()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_bodies_headers_and_keep_alive(server: str) -> None:
    with httpx.Client(transport=StdlibTransport(), timeout=5) as client:
        whole = client.get(f"{server}/o", headers={"X-Test": "yes"})
        assert (whole.status_code, whole.headers["x-echo"], whole.content) == (200, "yes", BODY)
        with client.stream("GET", f"{server}/o", headers={"Range": "bytes=10-1009"}) as part:
            assert part.status_code == 206
            assert part.read() == BODY[10:1010]
        for _ in range(5):
            assert client.get(f"{server}/o", headers={"Range": "bytes=0-0"}).content == BODY[:1]
    assert len(Handler.connections) == 1  # every request on the one kept-alive connection


def test_a_connection_the_server_closed_is_not_reused_and_a_body_left_unread_closes_it(server: str) -> None:
    with httpx.Client(transport=StdlibTransport(), timeout=5) as client:
        assert client.get(f"{server}/close").content == b"ok"
        assert client.get(f"{server}/o").content == BODY  # on a new connection
        with client.stream("GET", f"{server}/o") as unread:  # the caller refuses the body (e.g. a 200 for a ranged GET)
            assert unread.status_code == 200
        assert client.get(f"{server}/o", headers={"Range": "bytes=5-9"}).content == BODY[5:10]
    assert len(Handler.connections) == 3


def test_a_refused_connection_is_an_httpx_connect_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens there once closed
    with httpx.Client(transport=StdlibTransport(), timeout=5) as client, pytest.raises(httpx.ConnectError):
        client.get(f"http://127.0.0.1:{port}/o")


def test_a_silent_server_is_an_httpx_read_timeout() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)  # accepts (the kernel does) but never answers
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/o"
        with httpx.Client(transport=StdlibTransport(), timeout=0.3) as client, pytest.raises(httpx.ReadTimeout):
            client.get(url)


def _planned(server: str, path: str, start: int, end: int) -> PlannedRange:
    return PlannedRange(start, end, 0, 0, f"{server}{path}?X-Amz-Signature=abc", f"bytes={start}-{end - 1}")


def test_a_fetched_range_is_a_read_only_view_of_pooled_memory_reused_once_released(server: str) -> None:
    native = record_batch._native
    with GatewayClient(server, "c", retries=0) as client:
        data = client.fetch(_planned(server, "/o", 100, 300_100))
        if native is None:  # TIERED_KAFKA_PURE_PYTHON=1: bytes, as httpx reads them
            assert type(data) is bytes and data == BODY[100:300_100]
            return
        assert isinstance(data, memoryview) and data.readonly and isinstance(data.obj, native.RecvBuffer)
        assert data == BODY[100:300_100]
        spare = [native.RecvBuffer(2**20) for _ in range(2)]
        del spare  # idle 1 MiB blocks, as earlier reads leave them: a small body must not take one (it did)
        blocks, idle = native.recv_pool()
        del data  # the last reference: its memory goes back to the pool ...
        assert native.recv_pool() == (blocks + 1, idle + 2**20)
        again = client.fetch(_planned(server, "/o", 5, 400_005))  # ... and the next body of a size that fits takes it
        assert native.recv_pool() == (blocks, idle)
        assert again == BODY[5:400_005]
        small = client.fetch(_planned(server, "/o", 7, 1007))  # below 256 KiB: its own memory, never pooled
        assert small == BODY[7:1007] and native.recv_pool() == (blocks, idle)
        del small
        assert native.recv_pool() == (blocks, idle)
        with record_batch.reference_paths():  # the pure-Python reference: bytes, as httpx reads them
            assert client.fetch(_planned(server, "/o", 0, 10)) == BODY[:10]
            assert type(client.fetch(_planned(server, "/o", 0, 10))) is bytes
    assert len(Handler.connections) == 1  # every GET on the one kept-alive connection


def test_fetch_answers_other_than_206_keep_their_errors(server: str) -> None:
    with GatewayClient(server, "c", retries=0) as client:
        with pytest.raises(PresignedUrlError, match="Request has expired"):
            client.fetch(_planned(server, "/gone", 0, 10))
        with pytest.raises(RemoteReadError, match="ignored the Range header"):
            client.fetch(_planned(server, "/no-range", 0, 10))
        with pytest.raises(RemoteReadError, match="10 bytes"):
            client.fetch(_planned(server, "/short", 0, 100))
        with pytest.raises(RemoteReadError, match="Content-Range"):
            client.fetch(PlannedRange(0, 10, 0, 0, f"{server}/o", "bytes=1-10"))  # answered 206 for bytes 1-10, not 0-9
        assert client.fetch(_planned(server, "/o", 0, 10)) == BODY[:10]  # the connection pool still serves
