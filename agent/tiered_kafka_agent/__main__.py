"""``tiered-kafka-agent``: run the broker sidecar, or rebuild a cluster's registry from S3.

    tiered-kafka-agent run --config agent.properties
    tiered-kafka-agent rebuild-registry --config agent.properties

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
from tiered_kafka_agent.config import load_settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tiered-kafka-agent", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["run", "rebuild-registry"])
    parser.add_argument("--config", type=Path, help="a .properties file (also reads TIERED_KAFKA_AGENT_* variables)")
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

    from tiered_kafka_agent.agent import Agent

    agent = Agent(settings)
    if args.command == "rebuild-registry":
        from tiered_kafka_agent.rebuild import rebuild_registry

        report = rebuild_registry(agent.store, agent.registry)
        print(json.dumps(report.__dict__))
        return 0

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    agent.start()
    print(f"tiered-kafka-agent running for broker {settings.broker_id} of cluster {settings.cluster}", flush=True)
    stop.wait()
    agent.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
