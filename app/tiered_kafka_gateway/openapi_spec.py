"""Generate or check the checked-in OpenAPI description, ``openapi/openapi.json``.

    python -m tiered_kafka_gateway.openapi_spec            # (re)write openapi/openapi.json
    python -m tiered_kafka_gateway.openapi_spec --check    # exit 1 if the file is stale
    make openapi                                           # the same as the first line

The description is ``create_app(settings).openapi()`` for fixed placeholder settings (one cluster,
``example``, with fake endpoints), so it reflects exactly the routes the app has and does not
depend on the environment. Building the app contacts no server: the boto3 and Redis clients of
``ClusterReader`` connect lazily, on first use. The file is JSON with sorted keys, two-space
indentation and a trailing newline, so that a diff shows only real changes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tiered_kafka_gateway.app import create_app
from tiered_kafka_gateway.config import ENV_PREFIX, GatewaySettings

# app/tiered_kafka_gateway/openapi_spec.py -> the repository root
REPO_ROOT = Path(__file__).resolve().parents[2]
SPEC_PATH = REPO_ROOT / "openapi" / "openapi.json"
PLACEHOLDER_CLUSTER = "example"


@contextlib.contextmanager
def _without_gateway_environment() -> Iterator[None]:
    """The settings read TIERED_KAFKA_GATEWAY_* variables; the spec must not depend on them."""
    saved = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
    for key in saved:
        del os.environ[key]
    try:
        yield
    finally:
        os.environ.update(saved)


def placeholder_settings() -> GatewaySettings:
    """Settings for generating the spec: never used to connect anywhere."""
    with _without_gateway_environment():
        return GatewaySettings(
            clusters={
                PLACEHOLDER_CLUSTER: {
                    "redis_url": "redis://redis.invalid:6379/0",
                    "s3": {
                        "bucket": "example-bucket",
                        "endpoint_url": "http://s3.invalid:8333",
                        "access_key_id": "placeholder",
                        "secret_access_key": "placeholder",
                    },
                }
            }
        )


def openapi_document() -> dict[str, Any]:
    return create_app(placeholder_settings()).openapi()


def render(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tiered_kafka_gateway.openapi_spec", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs from the app's description")
    parser.add_argument("--output", type=Path, default=SPEC_PATH, help=f"default: {SPEC_PATH}")
    args = parser.parse_args(argv)
    text = render(openapi_document())
    shown = os.path.relpath(args.output)
    if args.check:
        current = args.output.read_text() if args.output.exists() else None
        if current != text:
            reason = "is missing" if current is None else "is stale"
            print(f"{shown} {reason}; run make openapi", file=sys.stderr)
            return 1
        print(f"{shown} is up to date")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    if args.output.exists() and args.output.read_text() == text:
        print(f"{shown} is up to date")
    else:
        args.output.write_text(text)
        print(f"wrote {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
