"""``tiered-kafka-gateway``: run the gateway with uvicorn.

    tiered-kafka-gateway --config gateway.json --host 127.0.0.1 --port 8080 --workers 2

Settings: the JSON file (or $TIERED_KAFKA_GATEWAY_CONFIG) and TIERED_KAFKA_GATEWAY_* variables.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import uvicorn

from tiered_kafka.errors import ConfigError
from tiered_kafka_gateway.config import ENV_PREFIX, load_settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tiered-kafka-gateway", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("-v", "--verbose", action="count", default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)])
    if args.config:
        os.environ[f"{ENV_PREFIX}CONFIG"] = str(args.config)
    try:
        settings = load_settings()
    except ConfigError as err:
        print(f"tiered-kafka-gateway: {err}", file=sys.stderr)
        return 2
    logging.getLogger(__name__).info("serving clusters %s", sorted(settings.clusters))
    uvicorn.run("tiered_kafka_gateway.asgi:app", host=args.host, port=args.port, workers=args.workers, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
