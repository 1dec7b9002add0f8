"""The development broker's network server: connections, request dispatch, background tasks.

Kafka's request handling rules followed here:
- a connection's requests are answered in order, one at a time (Kafka mutes a channel until
  its response is sent), so a long-polling Fetch holds only its own connection;
- a Produce with acks=0 gets no response at all;
- a request size <= 0 or above ``socket.request.max.bytes``, an unknown API key, an
  unsupported version (except ApiVersions) or a malformed body closes the connection;
- ApiVersions at an unsupported version is answered at v0 with UNSUPPORTED_VERSION and the
  supported ranges (KIP-511), so that the client can retry at a version both know.

A handler error that is not a Kafka error closes the connection and is logged; it never stops
the broker.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from tiered_kafka.format.producer_state import AppendOrigin

from tiered_kafka_dev.broker import handlers_admin, handlers_data, handlers_groups, handlers_txn
from tiered_kafka_dev.broker.config import BrokerConfig
from tiered_kafka_dev.broker.groups import GroupCoordinator
from tiered_kafka_dev.broker.offset_store import OffsetStore
from tiered_kafka_dev.broker.protocol import (
    SIZE,
    ProtocolError,
    RequestContext,
    encode_response,
    parse_request,
    peek_header,
)
from tiered_kafka_dev.broker.storage import LogManager
from tiered_kafka_dev.broker.transactions import TRANSACTIONS_FILE, TransactionCoordinator

log = logging.getLogger(__name__)

Handler = Callable[["Broker", RequestContext, Any], Awaitable[dict[str, Any] | None]]
API_VERSIONS_KEY = 18
OFFSETS_FILE = "dev-broker-consumer-offsets.json"

#: api key -> (min version, max version, handler). Versions are the ones whose kio schemas exist
#: and whose fields the handlers fill; Fetch stops at v12 and Metadata at v12 (topic ids only
#: beyond), Produce at v9. The transaction APIs stop before KIP-890 (AddPartitionsToTxn v4+ is
#: broker-to-broker; v5 of InitProducerId, v4 of AddOffsetsToTxn, EndTxn and TxnOffsetCommit bring
#: TRANSACTION_ABORTABLE and epoch bumps per transaction); librdkafka 2.x sends InitProducerId
#: v0-4, AddPartitionsToTxn and AddOffsetsToTxn v0, EndTxn v0-1, TxnOffsetCommit v0-3 and
#: FindCoordinator v0-2.
APIS: dict[int, tuple[int, int, Handler]] = {
    0: (3, 9, handlers_data.produce),
    1: (4, 12, handlers_data.fetch),
    2: (1, 7, handlers_data.list_offsets),
    3: (1, 12, handlers_admin.metadata),
    8: (2, 8, handlers_groups.offset_commit),
    9: (1, 8, handlers_groups.offset_fetch),
    10: (0, 4, handlers_groups.find_coordinator),
    11: (0, 7, handlers_groups.join_group),
    12: (0, 4, handlers_groups.heartbeat),
    13: (0, 4, handlers_groups.leave_group),
    14: (0, 5, handlers_groups.sync_group),
    15: (0, 5, handlers_groups.describe_groups),
    16: (0, 4, handlers_groups.list_groups),
    18: (0, 3, handlers_admin.api_versions),
    19: (2, 7, handlers_admin.create_topics),
    20: (1, 6, handlers_admin.delete_topics),
    21: (0, 2, handlers_data.delete_records),
    22: (0, 4, handlers_txn.init_producer_id),
    24: (0, 3, handlers_txn.add_partitions_to_txn),
    25: (0, 3, handlers_txn.add_offsets_to_txn),
    26: (0, 3, handlers_txn.end_txn),
    28: (0, 3, handlers_txn.txn_offset_commit),
    32: (1, 4, handlers_admin.describe_configs),
    37: (0, 3, handlers_admin.create_partitions),
}


class Broker:
    """One development broker: ``await start()`` then ``await stop()``, or ``run_in_thread()``."""

    def __init__(self, config: BrokerConfig) -> None:
        config.validate()
        self.config = config
        self.logs = LogManager(config.log_dir, config.node_id, config.log_defaults, config.cluster_id)
        self.groups = GroupCoordinator(
            OffsetStore(config.log_dir / OFFSETS_FILE),
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
        )
        self.transactions = TransactionCoordinator(
            config.log_dir / TRANSACTIONS_FILE,
            write_marker=self._write_marker,
            commit_offsets=self.groups.commit_transactional_offsets,
            min_producer_id=1 + max((pid for plog in self.logs.logs.values() for pid in plog.producers.entries), default=0),
            max_timeout_ms=config.transaction_max_timeout_ms,
        )
        self.port = config.port
        self._server: asyncio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._connections: set[asyncio.Task[None]] = set()
        self.zookeeper: Any = None  # set when registered (tiered_kafka_dev.broker.zookeeper)
        #: record bytes served by Fetch, per (topic, partition): lets tests prove a client never fetched
        self.fetched_bytes: collections.Counter[tuple[str, int]] = collections.Counter()

    @property
    def host(self) -> str:
        return self.config.host

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.config.host}:{self.port}"

    @property
    def cluster_id(self) -> str:
        return self.logs.cluster_id

    @property
    def node_id(self) -> int:
        return self.config.node_id

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Listen, start the background tasks and register in ZooKeeper; on failure, undo it all."""
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        # transactions left in a Prepare state get their markers before any client can read or write
        self.transactions.recover()
        await self.groups.start()
        self._server = await asyncio.start_server(self._serve_connection, self.config.host, self.config.port)
        self.port = self._server.sockets[0].getsockname()[1]
        self._tasks = [
            asyncio.create_task(self._every(self.config.transaction_abort_interval_ms, self._transaction_upkeep)),
            asyncio.create_task(self._every(self.config.retention_check_interval_ms, self.logs.apply_retention)),
            asyncio.create_task(self._every(self.config.checkpoint_interval_ms, self.logs.write_checkpoints)),
        ]
        if self.config.zookeeper_connect:
            from tiered_kafka_dev.broker.zookeeper import ZooKeeperRegistration

            self.zookeeper = ZooKeeperRegistration(self, self.config.zookeeper_connect)
            await asyncio.to_thread(self.zookeeper.register)
        log.info("development broker %d listening on %s", self.node_id, self.bootstrap_servers)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in [*self._tasks, *self._connections]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        await self.groups.close()
        if self.zookeeper is not None:
            await asyncio.to_thread(self.zookeeper.close)
        self.logs.close()
        log.info("development broker %d stopped", self.node_id)

    async def _every(self, interval_ms: int, action: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                action()
            except Exception:
                log.exception("periodic task %s failed", getattr(action, "__name__", action))

    def _write_marker(self, topic: str, partition: int, marker: bytes) -> bool:
        """A transaction marker appended by the coordinator (Kafka's WriteTxnMarkers)."""
        plog = self.logs.partition(topic, partition)
        if plog is None:
            return False
        plog.append(marker, leader_epoch=handlers_data.LEADER_EPOCH, origin=AppendOrigin.COORDINATOR)
        return True

    def _transaction_upkeep(self) -> None:
        """The coordinator's periodic work: retry the markers of transactions still in a Prepare
        state (Kafka's marker channel retries), then abort timed-out ones."""
        retried = self.transactions.retry_markers()
        aborted = self.transactions.abort_timed_out()
        if retried or aborted:
            self.logs.notify_appended()

    # -- connections -----------------------------------------------------------------------
    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        client_host = peer[0] if peer else "unknown"
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                size = SIZE.unpack(await reader.readexactly(SIZE.size))[0]
                if size <= 0 or size > self.config.socket_request_max_bytes:
                    log.warning("closing connection from %s: request size %d out of bounds", client_host, size)
                    return
                payload = await reader.readexactly(size)
                response = await self._handle(payload, client_host)
                if response is not None:
                    writer.write(response)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except ProtocolError as err:
            log.warning("closing connection from %s: %s", client_host, err)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("closing connection from %s after an internal error", client_host)
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _handle(self, payload: bytes, client_host: str) -> bytes | None:
        api_key, api_version, correlation_id = peek_header(payload)
        entry = APIS.get(api_key)
        if entry is None:
            raise ProtocolError(f"unsupported API key {api_key}")
        min_version, max_version, handler = entry
        if not min_version <= api_version <= max_version:
            if api_key == API_VERSIONS_KEY:
                return encode_response(API_VERSIONS_KEY, 0, correlation_id, handlers_admin.api_versions_body(ErrorCode.unsupported_version))
            raise ProtocolError(f"unsupported version {api_version} of API {api_key}")
        header, request = parse_request(payload, api_key, api_version)
        ctx = RequestContext(api_key, api_version, correlation_id, getattr(header, "client_id", None), client_host)
        values = await handler(self, ctx, request)
        if values is None:
            return None
        return encode_response(api_key, api_version, correlation_id, values)

    # -- running outside an event loop -----------------------------------------------------
    def run_in_thread(self) -> BrokerThread:
        """Start on a private event loop in a daemon thread (for tests and synchronous callers)."""
        return BrokerThread(self)


class BrokerThread:
    """A broker running on its own event loop thread; ``stop()`` shuts it down cleanly."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=f"dev-broker-{broker.node_id}", daemon=True)
        self._thread.start()
        try:
            self.call(broker.start())
        except BaseException:
            self._shutdown_loop()
            raise

    def call(self, coro: Awaitable[Any], timeout: float = 60) -> Any:
        """Run a coroutine on the broker's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def stop(self) -> None:
        if not self.loop.is_running():
            return
        try:
            self.call(self.broker.stop())
        finally:
            self._shutdown_loop()

    def _shutdown_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()
