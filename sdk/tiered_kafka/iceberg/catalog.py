"""Which Iceberg catalog a writer uses: PyIceberg's own catalog properties, under a name.

A catalog is named (default ``tiered_kafka``) and configured by PyIceberg's catalog properties:
its config file (``~/.pyiceberg.yaml``) and ``PYICEBERG_CATALOG__<NAME>__*`` variables, then the
properties given (``--catalog-property key=value``, ``properties=``), which win. Decision: with
neither ``type`` nor ``uri`` configured, the catalog is PyIceberg's SQL catalog on a SQLite file
(``DEFAULT_SQLITE`` in the working directory): the embedded default. REST (``uri=http…``) and
Glue (``type=glue``) are PyIceberg's own properties, passed as they are. A new table's files go
under ``warehouse`` (``s3://bucket/prefix`` for the user's bucket; ``s3.endpoint``,
``s3.access-key-id``, ``s3.secret-access-key``, ``s3.region`` for any S3, e.g. SeaweedFS or MinIO,
path-style unless ``s3.force-virtual-addressing`` is true). Property values are never logged.

Spark writes through the same PyIceberg catalog, opened by its driver only (``spark_writer``): no
Spark catalog is declared and no Iceberg jar is needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tiered_kafka.errors import ConfigError

DEFAULT_CATALOG = "tiered_kafka"
DEFAULT_SQLITE = "tiered-kafka-iceberg.db"


def parse_properties(items: Sequence[str]) -> dict[str, str]:
    """``key=value`` texts (``--catalog-property``) as a mapping; ConfigError naming a malformed one."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"a catalog property is key=value, got {item.split('=')[0]!r}")
        out[key.strip()] = value
    return out


def catalog_properties(name: str, given: Mapping[str, str] | None = None) -> dict[str, str]:
    """The catalog's properties: PyIceberg's configuration of ``name``, then ``given``; the SQLite default (module doc)."""
    from pyiceberg.utils.config import Config

    if not name or not name.replace("_", "a").isalnum():
        raise ConfigError(f"a catalog name is letters, digits and _, got {name!r}")
    configured = Config().get_catalog_config(name) or {}
    props = {str(k): str(v) for k, v in configured.items() if isinstance(v, str | int | float | bool)}
    props.update(given or {})
    if "type" not in props and "uri" not in props:
        props["type"] = "sql"
        props["uri"] = f"sqlite:///{Path(DEFAULT_SQLITE).resolve()}"
    return props


def load(name: str, given: Mapping[str, str] | None = None) -> Any:
    """The PyIceberg catalog (``pyiceberg.catalog.load_catalog``) of ``catalog_properties``."""
    from pyiceberg.catalog import load_catalog

    props = catalog_properties(name, given)
    try:
        return load_catalog(name, **props)
    except (ValueError, ImportError) as err:  # PyIceberg names the missing property or extra
        raise ConfigError(f"Iceberg catalog {name!r}: {err}") from err
