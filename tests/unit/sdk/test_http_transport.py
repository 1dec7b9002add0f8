"""``http_transport.StdlibTransport`` against a real HTTP/1.1 server on a local socket: bodies,
keep-alive reuse, a kept-alive connection the server closed, a body left unread, and the httpx
exceptions the gateway client's retries expect."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tiered_kafka.client.http import StdlibTransport

BODY = bytes(range(256)) * 4096  # 1 MiB


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    connections: set[tuple[str, int]] = set()

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        Handler.connections.add(self.client_address)
        if self.path == "/close":  # answers, then closes the connection whatever the client wants
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"ok")
            self.close_connection = True
            return
        start, end = 0, len(BODY)
        if "Range" in self.headers:
            first, last = self.headers["Range"].removeprefix("bytes=").split("-")
            start, end = int(first), int(last) + 1
        self.send_response(206 if "Range" in self.headers else 200)
        self.send_header("Content-Length", str(end - start))
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
