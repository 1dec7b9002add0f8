"""``tiered-kafka-agent``: run the broker sidecar, rebuild a cluster's registry from S3, or audit it.

    tiered-kafka-agent run --config agent.properties
    tiered-kafka-agent rebuild-registry --config agent.properties   (a progress bar on stderr)
    tiered-kafka-agent migrate-registry --config agent.properties   (to the registry's layout 2 in place, resumable:
        ``tiered_kafka.registry``; a progress bar on stderr)
    tiered-kafka-agent audit --config agent.properties [--topic T ...] [--json] [--bootstrap-servers HOST:PORT]
    tiered-kafka-agent backfill-batch-index --config agent.properties [--topic T ...]   (``tiered_kafka_agent.backfill``; exit 1 if one failed)
    tiered-kafka-agent adopt --config agent.properties [--topic T ...] [--dry-run]   (``tiered_kafka_agent.adopt``: register the segments
        Pinterest's uploader wrote in the same keyspace; ``--dry-run`` prints a line per segment it would register and writes nothing)

``adopt`` exit codes (a command asked for data that finds none exits non-zero):

    0  segments of theirs were found and none failed: adopted by this run (``--dry-run``: would be), left to
       the agent after a hole this broker still holds, or registered already: a re-run after a completed one is
       an idempotent success, and says "nothing left to adopt"
    1  one failed (corrupt, or refused by the registry: the output names it), or no ``.log`` without ``tk-*``
       metadata was found at all under the keyspace's prefixes (the message names the bucket, the prefixes and
       the topics searched: the settings are not their keyspace's)
    2  a configuration error

``audit`` (``tiered_kafka_agent.audit``) checks that every offset at or after each partition's
coverage start is remote, still in Kafka, or in a recorded gap. The broker is reached at
``--bootstrap-servers``, else ``leadership.bootstrap_servers``. Exit codes:

    0  every offset is accounted for
    1  some are not (the report names them), or a ``--topic`` is known to neither side
    2  a configuration error
    3  Kafka could not be asked (no client, metadata or offsets)
    4  the registry could not be read (Redis unreachable or its data malformed)

Settings come from the file and from ``TIERED_KAFKA_AGENT_*`` environment variables (see
``tiered_kafka_agent.config``). ``run`` stops cleanly on SIGINT/SIGTERM, finishing the segments
in flight.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path

from tiered_kafka.errors import ConfigError
from tiered_kafka.registry import RegistryError
from tiered_kafka_agent.config import AgentSettings, load_settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tiered-kafka-agent", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["run", "rebuild-registry", "migrate-registry", "audit", "backfill-batch-index", "adopt"])
    parser.add_argument("--config", type=Path, help="a .properties file (also reads TIERED_KAFKA_AGENT_* variables)")
    parser.add_argument("--topic", action="append", help="audit, backfill-batch-index, adopt: a topic (repeatable; default: every topic)")
    parser.add_argument("--json", action="store_true", help="audit: print JSON")
    parser.add_argument("--dry-run", action="store_true", help="adopt: print what would be registered, a line per segment, and write nothing")
    parser.add_argument("--bootstrap-servers", help="audit: the Kafka cluster (default: leadership.bootstrap_servers)")
    parser.add_argument("-v", "--verbose", action="count", default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        format="%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s",
    )
    try:
        settings = load_settings(args.config)
    except ConfigError as err:
        print(f"tiered-kafka-agent: {err}", file=sys.stderr)
        return 2

    if args.command == "audit":
        return _audit(settings, args)

    from tiered_kafka_agent.agent import Agent

    agent = Agent(settings)
    if args.command == "rebuild-registry":
        from tiered_kafka_agent.rebuild import rebuild_registry

        from tiered_kafka_agent.progress import Progress

        report = rebuild_registry(agent.store, agent.registry, Progress("rebuild: .log objects", unit="segments"))
        print(json.dumps(report.__dict__))
        return 0
    if args.command == "migrate-registry":
        from tiered_kafka_agent.progress import Progress

        bar = Progress("migrate-registry: partitions", unit="partitions")
        migrated = agent.registry.migrate(progress=bar.update)
        bar.close()
        print(migrated)
        return 0
    if args.command == "adopt":
        from tiered_kafka_agent.adopt import adopt_segments

        from tiered_kafka_agent.progress import Progress

        bar = Progress("adopt: segments", unit="segments")
        adopted = adopt_segments(agent.store, agent.registry, sys.stdout, log_dirs=settings.log_dirs, topics=args.topic, dry_run=args.dry_run, progress=bar)
        if adopted.segments == 0:  # asked for their segments and found none: exit 1 (docstring)
            prefixes = agent.store.keyspace.cluster_prefixes()
            searched = prefixes[0] if len(prefixes) == 1 else f"{prefixes[0]} .. {prefixes[-1]} ({len(prefixes)} prefixes)"
            print(
                f"tiered-kafka-agent: no segment without tk-* metadata under s3://{agent.store.bucket}/{searched} for cluster {settings.cluster} "
                f"(s3.prefix {settings.s3.prefix!r}, {settings.s3.entropy_bits} entropy bits"
                f"{', topics ' + ', '.join(args.topic) if args.topic else ''}): nothing to adopt; the keyspace settings must be the previous uploader's",
                file=sys.stderr,
            )
            return 1
        return 0 if adopted.ok else 1
    if args.command == "backfill-batch-index":
        from tiered_kafka_agent.backfill import backfill_batch_indexes

        return 0 if backfill_batch_indexes(agent.store, agent.registry, sys.stdout, args.topic).ok else 1

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        agent.start()
    except ConfigError as err:  # e.g. a store that ignores conditional writes (remote_store)
        print(f"tiered-kafka-agent: {err}", file=sys.stderr)
        return 2
    print(f"tiered-kafka-agent running for broker {settings.broker_id} of cluster {settings.cluster}", flush=True)
    stop.wait()
    agent.stop()
    return 0


def _audit(settings: AgentSettings, args: argparse.Namespace) -> int:
    from tiered_kafka.registry import Registry, connect
    from tiered_kafka_agent.audit import AuditError, KafkaOffsets, report, run_audit

    bootstrap = args.bootstrap_servers or settings.leadership.bootstrap_servers
    if not bootstrap:
        print("tiered-kafka-agent: audit needs the Kafka cluster: --bootstrap-servers or leadership.bootstrap_servers", file=sys.stderr)
        return 2
    client = connect(settings.redis.url, socket_timeout=10)
    kafka: KafkaOffsets | None = None
    try:
        kafka = KafkaOffsets(bootstrap)
        results = run_audit(Registry(client, settings.cluster), kafka, args.topic)
    except AuditError as err:
        print(f"tiered-kafka-agent: audit failed: Kafka could not be asked: {err}", file=sys.stderr)
        return 3
    except RegistryError as err:
        print(f"tiered-kafka-agent: audit failed: the registry could not be read: {err}", file=sys.stderr)
        return 4
    finally:
        if kafka is not None:
            kafka.close()
        client.close()
    print(report(results, as_json=args.json))
    if not results and args.topic:
        print(f"tiered-kafka-agent: no partition of {', '.join(args.topic)} is known to the registry or to Kafka", file=sys.stderr)
        return 1
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
