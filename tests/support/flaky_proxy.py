"""A TCP proxy on 127.0.0.1 that breaks a fraction of connections, delays others, or refuses all.

Put in front of SeaweedFS to inject S3 failures: ``fail_ratio`` of new connections are reset
at once (the client sees a connection error), ``delay_s`` stalls every new connection before
it is forwarded, and ``down = True`` resets every connection (S3 unreachable) until cleared.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time


class FlakyProxy:
    def __init__(self, target_host: str, target_port: int, *, fail_ratio: float = 0.0, delay_s: float = 0.0, seed: int = 7) -> None:
        self.target = (target_host, target_port)
        self.fail_ratio = fail_ratio
        self.delay_s = delay_s
        self.down = False
        self.failed = 0
        self.forwarded = 0
        self._random = random.Random(seed)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._accept_thread = threading.Thread(target=self._accept, daemon=True, name="flaky-proxy")
        self._accept_thread.start()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._stop.set()
        self._server.close()
        self._accept_thread.join(5)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if self.down or self._random.random() < self.fail_ratio:
                self.failed += 1
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
                client.close()
                continue
            thread = threading.Thread(target=self._serve, args=(client,), daemon=True)
            thread.start()

    def _serve(self, client: socket.socket) -> None:
        if self.delay_s:
            time.sleep(self.delay_s)
        try:
            upstream = socket.create_connection(self.target, timeout=30)
        except OSError:
            client.close()
            return
        self.forwarded += 1
        done = threading.Event()

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while not done.is_set():
                    data = src.recv(65536)
                    if not data:
                        break
                    if self.down:
                        break
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                done.set()
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        other = threading.Thread(target=pump, args=(upstream, client), daemon=True)
        other.start()
        pump(client, upstream)
        other.join(30)
        client.close()
        upstream.close()
