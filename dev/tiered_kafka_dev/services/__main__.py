"""Run local services until Ctrl-C or SIGTERM: ``python -m tiered_kafka_dev.services [redis] [zookeeper] [s3]``.

Prints how to reach each service, also as ``export`` lines for a shell, and stops them all on exit.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType

from ._process import LocalService, ServiceError
from ._redis import RedisServer
from ._s3 import S3Server
from ._zookeeper import ZooKeeperServer

__all__ = ["main"]

logger = logging.getLogger("tiered_kafka_dev.services")

LAUNCHERS: dict[str, Callable[[], LocalService]] = {
    "redis": RedisServer,
    "zookeeper": ZooKeeperServer,
    "s3": S3Server,
}


def describe(service: LocalService) -> tuple[list[str], dict[str, str]]:
    """Human-readable lines and environment variables for reaching ``service``."""
    if isinstance(service, RedisServer):
        return [f"Redis      {service.url}"], {"TIERED_KAFKA_REDIS_URL": service.url}
    if isinstance(service, ZooKeeperServer):
        return [f"ZooKeeper  {service.hosts}"], {"TIERED_KAFKA_ZOOKEEPER_HOSTS": service.hosts}
    if isinstance(service, S3Server):
        lines = [
            f"S3         {service.endpoint_url}  (SeaweedFS, region {service.region}, path-style, SigV4)",
            f"           access key {service.access_key}  secret key {service.secret_key}",
        ]
        env = {
            "TIERED_KAFKA_S3_ENDPOINT_URL": service.endpoint_url,
            "AWS_ACCESS_KEY_ID": service.access_key,
            "AWS_SECRET_ACCESS_KEY": service.secret_key,
            "AWS_DEFAULT_REGION": service.region,
        }
        return lines, env
    raise TypeError(f"no description for {type(service).__name__}")


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tiered_kafka_dev.services",
        description="Start local Redis, ZooKeeper and S3 (SeaweedFS) on 127.0.0.1 and run until Ctrl-C.",
    )
    parser.add_argument(
        "services",
        nargs="*",
        metavar="{" + ",".join(LAUNCHERS) + "}",
        help="services to start (default: all)",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (-v info, -vv debug)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.services if name not in LAUNCHERS]
    if unknown:
        parser.error(f"unknown service(s): {', '.join(unknown)} (choose from {', '.join(LAUNCHERS)})")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Start the chosen services, print how to reach them, wait for a signal, stop them. Returns the exit code."""
    args = _parse_args(argv)
    logging.basicConfig(
        level=(logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)],
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    names = list(dict.fromkeys(args.services)) or list(LAUNCHERS)

    stop_requested = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop_requested.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with contextlib.ExitStack() as stack:
            services: list[LocalService] = []
            for name in names:
                if stop_requested.is_set():
                    return 130
                print(f"starting {name} ...", file=sys.stderr, flush=True)
                services.append(stack.enter_context(LAUNCHERS[name]()))
            exports: dict[str, str] = {}
            for service in services:
                lines, env = describe(service)
                print("\n".join(lines))
                exports.update(env)
            print()
            for key, value in exports.items():
                print(f"export {key}={shlex.quote(value)}")
            print("\nRunning; press Ctrl-C to stop.", file=sys.stderr, flush=True)
            while not stop_requested.wait(0.5):
                dead = [service for service in services if not service.running]
                if dead:
                    for service in dead:
                        logger.error("%s exited unexpectedly; last log lines:\n%s", service.name, service.log_tail())
                    return 1
            print("stopping ...", file=sys.stderr, flush=True)
        return 0
    except ServiceError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
