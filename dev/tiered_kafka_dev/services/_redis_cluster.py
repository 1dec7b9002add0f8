"""A Redis Cluster (Debian's ``redis-server`` in cluster mode): three masters, each with one replica.

Six :class:`RedisServer` processes with ``--cluster-enabled yes`` on free 127.0.0.1 ports (and free
cluster-bus ports, not port + 10000), each in its own temporary directory, joined by
``redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes`` (redis-cli picks which node
replicates which master). Ready when every node reports ``cluster_state:ok`` with all 16384 slots
assigned and every replica's link to its master is up (a replica that never synced refuses to fail
over). Stopping ends exactly the six processes started here, by their ids.

Failover is made quick for tests: ``cluster-node-timeout`` is ``node_timeout_ms`` (1 s by default, 15 s
in Redis), and ``cluster-replica-validity-factor 0`` lets a replica take over however long ago it last
heard from its master::

    with RedisClusterServer() as cluster:
        client = tiered_kafka.registry.connect(cluster.url)      # redis+cluster://h:p,h:p,h:p
        killed = cluster.kill_master_of(b"some key")             # SIGKILL
        promoted = cluster.wait_for_failover(killed)              # its replica, now a master
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Self

from ._process import LOOPBACK, ServiceError, ServiceStartError, find_executable, free_ports
from ._redis import RedisServer

__all__ = ["ClusterNodeInfo", "RedisClusterNode", "RedisClusterServer"]

_SLOTS = 16384
_POLL_INTERVAL_S = 0.1


class RedisClusterNode(RedisServer):
    """One ``redis-server`` with cluster mode on; slots and roles come from ``redis-cli --cluster create``."""

    name: ClassVar[str] = "Redis Cluster node"

    def __init__(self, *, node_timeout_ms: int = 1000, executable: str | os.PathLike[str] | None = None) -> None:
        super().__init__(executable=executable)
        self.node_timeout_ms = node_timeout_ms
        self.bus_port: int = 0

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``."""
        return f"{self.host}:{self.port}"

    def _prepare(self, workdir: Path) -> list[str]:
        (self.bus_port,) = free_ports(1)  # not port + 10000, which may be taken or out of range
        return [
            *super()._prepare(workdir),
            "--cluster-enabled", "yes",
            "--cluster-port", str(self.bus_port),
            "--cluster-config-file", str(workdir / "nodes.conf"),
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--cluster-replica-validity-factor", "0",
            "--repl-diskless-sync-delay", "0",  # a new replica syncs at once (Redis waits 5 s for more)
        ]  # fmt: skip


@dataclass(frozen=True)
class ClusterNodeInfo:
    """One line of ``CLUSTER NODES``: ``<id> <ip:port@cport> <flags> <master> ... <slot ranges>``."""

    node_id: str
    address: str  # "ip:port"
    flags: frozenset[str]
    master_id: str | None  # the master a replica follows; None for a master
    slots: tuple[tuple[int, int], ...]

    @property
    def is_master(self) -> bool:
        return "master" in self.flags and "fail" not in self.flags

    @classmethod
    def parse(cls, line: str) -> ClusterNodeInfo:
        fields = line.split()
        slots = []
        for part in fields[8:]:
            if part.startswith("["):  # a slot being migrated or imported
                continue
            low, _, high = part.partition("-")
            slots.append((int(low), int(high or low)))
        return cls(fields[0], fields[1].split("@", 1)[0], frozenset(fields[2].split(",")), None if fields[3] == "-" else fields[3], tuple(slots))


class RedisClusterServer:
    """Three masters with one replica each, on 127.0.0.1. Use as a context manager, or ``start()``/``stop()``."""

    def __init__(self, *, masters: int = 3, node_timeout_ms: int = 1000, startup_timeout_s: float = 60.0) -> None:
        if masters < 3:
            raise ValueError(f"redis-cli --cluster create needs at least 3 masters, got {masters}")
        self.masters = masters
        self.node_timeout_ms = node_timeout_ms
        self.startup_timeout_s = startup_timeout_s
        self.nodes: list[RedisClusterNode] = []
        self._replicas_of: dict[str, set[str]] = {}  # killed master's address -> its replicas' addresses

    # -- addresses --------------------------------------------------------------------------
    @property
    def host(self) -> str:
        return LOOPBACK

    @property
    def url(self) -> str:
        """The registry's cluster URL (``tiered_kafka.registry.connect``): every node as a seed."""
        return "redis+cluster://" + ",".join(n.address for n in self.nodes if n.running)

    @property
    def pids(self) -> list[int]:
        return [n.pid for n in self.nodes if n.pid is not None]

    def node_at(self, address: str) -> RedisClusterNode:
        for node in self.nodes:
            if node.address == address:
                return node
        raise ServiceError(f"no node of this cluster listens on {address}")

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> Self:
        """Start the six processes, create the cluster and wait until it serves every slot."""
        if self.nodes:
            raise ServiceError("the Redis Cluster is already started")
        redis_cli = find_executable("Redis Cluster", "redis-cli")
        try:
            for _ in range(2 * self.masters):
                self.nodes.append(RedisClusterNode(node_timeout_ms=self.node_timeout_ms).start())
            command = [redis_cli, "--cluster", "create", *(n.address for n in self.nodes), "--cluster-replicas", "1", "--cluster-yes"]
            created = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=self.startup_timeout_s)
            if created.returncode != 0:
                raise ServiceStartError("Redis Cluster", f"redis-cli exited with code {created.returncode}", command, self.nodes[0].log_path or Path("."), created.stdout + created.stderr)
            self.wait_ready(self.startup_timeout_s, replicas_listed=False)
            self._advance_replication()
            self.wait_ready(self.startup_timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _advance_replication(self) -> None:
        """Write (and delete) one key on each master. Redis leaves a replica out of ``CLUSTER SLOTS``
        (the slot map clients read) while its replication offset is 0, i.e. until its master's first
        write; a client that read the map before then would not know the master has a replica."""
        from redis.crc import key_slot

        for info in self.cluster_nodes():
            if info.is_master and info.slots:
                low, high = info.slots[0]
                key = next(k for k in (f"tiered-kafka-dev:warm-up:{i}" for i in range(1_000_000)) if low <= key_slot(k.encode()) <= high)
                node = self.node_at(info.address)
                self.command(node, "SET", key, "1")
                self.command(node, "DEL", key)

    def stop(self) -> None:
        """End the processes started here (each by its own id) and remove their directories."""
        nodes, self.nodes = self.nodes, []
        for node in nodes:
            node.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # -- state ------------------------------------------------------------------------------
    def command(self, node: RedisClusterNode, *args: Any) -> Any:
        """One command to one node (a plain connection, no cluster redirection)."""
        import redis

        with redis.Redis(host=node.host, port=node.port, decode_responses=True, socket_timeout=5) as client:
            return client.execute_command(*args)

    def cluster_nodes(self) -> list[ClusterNodeInfo]:
        """``CLUSTER NODES`` as seen by the first live node."""
        for node in self.nodes:
            if node.running:
                with contextlib.suppress(Exception):
                    return [ClusterNodeInfo.parse(line) for line in self.command(node, "CLUSTER", "NODES").splitlines() if line.strip()]
        raise ServiceError("no node of the Redis Cluster answers")

    def _nodes_for_message(self) -> str:
        """``CLUSTER NODES`` for an error message; what went wrong asking, if it could not be had."""
        try:
            return repr(self.cluster_nodes())
        except Exception as err:  # the message is about a timeout: this must not hide it
            return f"(CLUSTER NODES unavailable: {err!r})"

    def master_nodes(self) -> list[RedisClusterNode]:
        """The running nodes that are masters now, by address."""
        return sorted((self.node_at(i.address) for i in self.cluster_nodes() if i.is_master and self.node_at(i.address).running), key=lambda n: n.address)

    def _ready(self, replicas_listed: bool = True) -> bool:
        masters = 0
        live = [n for n in self.nodes if n.running]
        masters_now = sum(1 for i in self.cluster_nodes() if i.is_master and self.node_at(i.address).running)
        for node in live:
            text = self.command(node, "CLUSTER", "INFO")
            info = dict(line.split(":", 1) for line in text.split() if ":" in line)
            if info.get("cluster_state") != "ok" or int(info.get("cluster_slots_assigned", 0)) != _SLOTS or int(info.get("cluster_slots_fail", 1)) != 0:
                return False
            replication = self.command(node, "INFO", "replication")  # a dict: redis-py parses INFO
            if replication.get("role") == "slave" and replication.get("master_link_status") != "up":
                return False
            masters += replication.get("role") == "master"
            # every master's replicas are in the slot map clients read (absent while their offset is 0)
            listed = sum(len(section) - 3 for section in self.command(node, "CLUSTER", "SLOTS"))
            if replicas_listed and listed != len(live) - masters_now:
                return False
        return masters == self.masters

    def wait_ready(self, timeout_s: float = 60.0, *, replicas_listed: bool = True) -> None:
        """Until every live node says the cluster is ok, all slots are served and every replica is in
        sync (and, with ``replicas_listed``, in every node's ``CLUSTER SLOTS``)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(Exception):
                if self._ready(replicas_listed):
                    return
            if time.monotonic() > deadline:
                raise ServiceError(f"the Redis Cluster was not ready within {timeout_s:g} s: {self._nodes_for_message()}")
            time.sleep(_POLL_INTERVAL_S)

    # -- failures ---------------------------------------------------------------------------
    def kill_master_of(self, key: str | bytes) -> RedisClusterNode:
        """SIGKILL the master serving ``key``'s slot now (a crash: no shutdown, no handover); the node killed."""
        from redis.crc import key_slot

        slot = key_slot(key.encode() if isinstance(key, str) else key)
        for info in self.cluster_nodes():
            if info.is_master and any(low <= slot <= high for low, high in info.slots):
                return self.kill(self.node_at(info.address))
        raise ServiceError(f"no master serves slot {slot}")

    def kill(self, node: RedisClusterNode) -> RedisClusterNode:
        """SIGKILL ``node`` (one of ours: ``LocalService.kill`` signals its group, then reaps it); its
        replicas are remembered for :meth:`wait_for_failover`."""
        if node not in self.nodes or node.pid is None:
            raise ServiceError(f"{node!r} is not a running node of this cluster")
        infos = self.cluster_nodes()
        node_id = next(i.node_id for i in infos if i.address == node.address)
        self._replicas_of[node.address] = {i.address for i in infos if i.master_id == node_id}
        node.kill()
        return node

    def wait_for_failover(self, killed: RedisClusterNode, timeout_s: float = 60.0) -> RedisClusterNode:
        """Until a former replica of the killed master serves slots as a master and the cluster is ok
        again (every slot served, ``masters`` live masters); that node."""
        replicas = self._replicas_of.get(killed.address)
        if not replicas:
            raise ServiceError(f"{killed.address} was not killed by kill() or had no replica")
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(Exception):
                promoted = [i for i in self.cluster_nodes() if i.address in replicas and i.is_master and i.slots]
                if promoted and self._ready():
                    return self.node_at(promoted[0].address)
            if time.monotonic() > deadline:
                raise ServiceError(f"no replica of {killed.address} took over within {timeout_s:g} s")
            time.sleep(_POLL_INTERVAL_S)
