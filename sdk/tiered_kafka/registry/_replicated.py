"""Registry writes acknowledged by a replica on a Redis Cluster: the script, then ``WAIT 1``, on one connection.

Redis replicates asynchronously: a master can acknowledge a write script and die before its replica
has the write; the replica, promoted, then lacks a segment the agent believes registered (its
``offset.wm`` has moved past it, and nothing would register it again), a recorded gap or coverage
start, or has ``expired_until`` moved back. So every write script of ``Registry`` runs here
(``Registry._write``: one rule); the ``partitions`` SET's SADD does not (every registration repeats
it). ``WAIT numreplicas timeout`` blocks until that many replicas have acknowledged every write
*this connection* made, so it must follow the script on the same connection; redis-py's cluster client picks a pooled connection per command and
routes a keyless ``WAIT`` to every master. So the two go in one pipeline on the master's own client
(``get_node_from_key`` / ``get_redis_connection``, public ``RedisCluster`` methods).

- Bulk writes (``Registry.register_many``, ``clear_partitions``: rebuild, adoption, migration) pipeline
  their scripts per master on its own connection and end each pipeline with one ``WAIT 1``: the batch
  is acknowledged as a whole (``Registry._pipelined``).
- Only for ``redis.RedisCluster`` clients whose slot has a replica (after a failover the promoted
  master has none until one is added: nothing to wait for). A plain ``redis.Redis`` runs the script
  alone.
- ``WAIT`` answers how many replicas acknowledged within ``wait_ms``; none is logged (a warning:
  the write is on the master only) and the write stands: the cluster stays writable with a
  slow replica, as Redis itself does.
- A connection error, timeout, ``MOVED``/``ASK``, ``TRYAGAIN`` or ``CLUSTERDOWN`` on that pipeline
  (the master died, or the slot moved) hands the write to the cluster client, which re-reads
  the slot map and retries. Running a script twice is safe: every registry script is idempotent (a second
  register finds the very segment and changes nothing, the "noop" reply), so a write whose reply was
  lost is kept once.
- Limit: such a retried write is not acknowledged again (a no-op writes nothing, so ``WAIT``
  has nothing to wait for). It can still be lost if the new master, too, dies within the replication
  delay; ``tiered-kafka-agent rebuild-registry`` restores it from S3.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final

log = logging.getLogger(__name__)

REPLICA_WAIT_MS: Final = 1000
"""How long a write script waits for a replica's acknowledgement (``WAIT 1 1000``)."""


def run_acknowledged(client: Any, script: Any, keys: Sequence[str], args: Sequence[str], wait_ms: int = REPLICA_WAIT_MS) -> Any:
    """``script(keys, args)``; on a Redis Cluster with a replica for the slot, acknowledged by one
    replica (module docstring). Returns the script's reply; redis-py errors propagate."""
    node_of = getattr(client, "get_node_from_key", None)
    if node_of is None or wait_ms <= 0 or node_of(keys[0], replica=True) is None:
        return script(keys=keys, args=args)
    import redis.exceptions as rx

    master = node_of(keys[0])
    node = client.get_redis_connection(master)
    for _ in range(2):
        pipe = node.pipeline(transaction=False)
        pipe.evalsha(script.sha, len(keys), *keys, *args)  # not script(client=pipe): that asks SCRIPT EXISTS first, every time
        pipe.execute_command("WAIT", 1, wait_ms)
        try:
            reply, acknowledged = pipe.execute()
        except rx.NoScriptError:  # a node that never ran it (or restarted): load it, then again
            node.script_load(script.script)
            continue
        except (rx.ConnectionError, rx.TimeoutError, rx.MovedError, rx.AskError, rx.TryAgainError, rx.ClusterDownError) as err:
            log.info("registry write on %s failed (%s); handing it to the cluster client, which follows the slot", master.name, type(err).__name__)
            break
        if int(acknowledged) < 1:
            log.warning("no replica of %s acknowledged a registry write within %d ms: it is on the master only", master.name, wait_ms)
        return reply
    return script(keys=keys, args=args)
