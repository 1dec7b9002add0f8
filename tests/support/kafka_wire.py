"""A minimal Kafka wire client for tests: one request at a time over a plain socket, kio types.

Used where confluent-kafka hides what a test must see (exact response fields) or cannot send
what a test needs (malformed or oversized frames).
"""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.index import load_response_schema
from kio.serial import entity_reader, entity_writer


class WireClient:
    def __init__(self, bootstrap: str, timeout: float = 10) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def receive_frame(self) -> bytes:
        size = struct.unpack(">i", self._read(4))[0]
        return self._read(size)

    def _read(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = self.sock.recv(n - len(chunks))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks += chunk
        return bytes(chunks)

    def is_closed_by_peer(self) -> bool:
        """True when the broker closed the connection (recv returns EOF or a reset)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionError:
            return True

    def request(self, body: Any, *, api_version: int | None = None) -> Any:
        """Send a kio request entity; return the decoded response entity."""
        version = body.__version__ if api_version is None else api_version
        self.correlation_id += 1
        header_type = body.__header_schema__
        buffer = io.BytesIO()
        entity_writer(header_type)(
            buffer,
            header_type(
                request_api_key=body.__api_key__,
                request_api_version=version,
                correlation_id=self.correlation_id,
                client_id="wire-test",
            ),
        )
        entity_writer(type(body))(buffer, body)
        payload = buffer.getvalue()
        self.send_raw(struct.pack(">i", len(payload)) + payload)
        frame = self.receive_frame()
        response_type = load_response_schema(body.__api_key__, version)
        header, header_size = entity_reader(response_type.__header_schema__)(frame, 0)
        if header.correlation_id != self.correlation_id:
            raise AssertionError(f"correlation id {header.correlation_id} != {self.correlation_id}")
        response, _ = entity_reader(response_type)(frame, header_size)
        return response
