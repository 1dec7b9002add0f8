"""Where ``tiered-kafka`` finds the gateway, the cluster, the token and Kafka: the command line, then the
environment, then a configuration file (the first that names a setting wins).

Each setting, its option, its environment variable and its key in the file (the file's keys are
``TieredConsumer``'s configuration names, as kcat's ``-F`` file holds librdkafka's)::

    setting            option               environment variable              file key
    gateway URL        --gateway            TIERED_KAFKA_GATEWAY_URL          tiered.gateway.url
    cluster            --cluster            TIERED_KAFKA_CLUSTER              tiered.cluster
    token              --token-file/--token TIERED_KAFKA_TOKEN                tiered.gateway.token
    bootstrap servers  --bootstrap-servers  TIERED_KAFKA_BOOTSTRAP_SERVERS    bootstrap.servers

The file: ``-F FILE`` (``--config``), else ``$TIERED_KAFKA_CONFIG``, else
``$XDG_CONFIG_HOME/tiered-kafka/config`` (``~/.config/tiered-kafka/config``) when it exists; Java
properties (``key=value``, ``#`` comments: ``tiered_kafka.properties``). A file named by ``-F`` or
``$TIERED_KAFKA_CONFIG`` must exist. Its other keys (``security.protocol``, ``sasl.*``, ...) go to the
consumer of ``cat`` and ``tail`` and to the Kafka client of ``topics`` and ``describe`` as they are.

Secrets: the token is never needed on the command line (``--token`` shows in ``ps`` to every local
user: it is taken, with a warning on stderr). A file that holds a secret (the configuration file
with ``tiered.gateway.token``, ``sasl.password`` or another of librdkafka's passwords and secrets:
``is_secret_property``; or ``--token-file``) and that other users may read or write (any of the mode bits 077, as OpenSSH checks
its private keys) gets a warning on stderr naming the file and ``chmod 600``. Decision: a warning,
not a refusal as ssh's: the token still works, and a file mounted from a secret store with mode 0644
in a container (where no other user exists) is common; the warning says what to fix.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tiered_kafka.errors import ConfigError
from tiered_kafka.properties import read_properties

#: setting -> (environment variable, key in the configuration file)
SETTINGS: dict[str, tuple[str, str]] = {
    "gateway": ("TIERED_KAFKA_GATEWAY_URL", "tiered.gateway.url"),
    "cluster": ("TIERED_KAFKA_CLUSTER", "tiered.cluster"),
    "token": ("TIERED_KAFKA_TOKEN", "tiered.gateway.token"),
    "bootstrap_servers": ("TIERED_KAFKA_BOOTSTRAP_SERVERS", "bootstrap.servers"),
}
CONFIG_ENV = "TIERED_KAFKA_CONFIG"
"""The configuration file's path when ``-F`` is not given."""


@dataclass(frozen=True)
class Connection:
    """Where to read: the resolved settings (None: given nowhere). ``kafka``: the file's other keys."""

    gateway: str | None = None
    cluster: str | None = None
    token: str | None = field(default=None, repr=False)
    bootstrap_servers: str | None = None
    kafka: Mapping[str, str] = field(default_factory=dict, repr=False)  # may hold sasl.password


def default_config_path(environ: Mapping[str, str]) -> Path:
    """``$XDG_CONFIG_HOME/tiered-kafka/config`` (XDG Base Directory: ``~/.config`` when unset or empty)."""
    base = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".config")
    return Path(base) / "tiered-kafka" / "config"


def resolve(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Connection:
    """The settings of ``args`` (the options of ``cli.args.add_connection_arguments``), completed from
    ``environ`` (default ``os.environ``) and then the configuration file (module doc). ``ConfigError``:
    a named file is missing or malformed, or ``--token-file`` cannot be read."""
    env = os.environ if environ is None else environ
    path, properties = _config_file(args.config, env)
    values: dict[str, str | None] = {}
    for name, (variable, key) in SETTINGS.items():
        values[name] = getattr(args, name, None) or env.get(variable) or properties.get(key) or None
    if getattr(args, "token_file", None) is not None:
        if args.token:
            raise ConfigError("give --token or --token-file, not both")
        values["token"] = _read_token_file(args.token_file)
    elif getattr(args, "token", None):
        print("tiered-kafka: warning: --token is visible to every local user (ps, /proc/PID/cmdline): prefer $TIERED_KAFKA_TOKEN, "
              "--token-file or tiered.gateway.token in the configuration file", file=sys.stderr)
    known = {key for _variable, key in SETTINGS.values()}
    kafka = {k: v for k, v in properties.items() if k not in known}
    held = sorted(k for k in properties if k == SETTINGS["token"][1] or is_secret_property(k))
    if path is not None and held:
        warn_if_readable_by_others(path, f"holds {', '.join(held)}")
    return Connection(values["gateway"], values["cluster"], values["token"], values["bootstrap_servers"], kafka)


def is_secret_property(key: str) -> bool:
    """Whether a configuration file's key holds a secret of librdkafka's (``sasl.password``,
    ``ssl.key.password``, ``ssl.keystore.password``, ``sasl.oauthbearer.client.secret``, ...):
    the file then gets the warning of ``warn_if_readable_by_others`` (module doc; issue 36)."""
    key = key.lower()
    return key.endswith((".password", ".secret", "ssl.key.pem", "ssl_key.pem")) or key in ("sasl.password", "ssl.key.pem")


def warn_if_readable_by_others(path: Path, what: str) -> None:
    """A warning on stderr when ``path`` grants its group or others any access (module doc)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        print(f"tiered-kafka: warning: {path} {what} and other users may read it (mode {stat.S_IMODE(mode):04o}): chmod 600 {path}", file=sys.stderr)


def _config_file(explicit: Path | None, env: Mapping[str, str]) -> tuple[Path | None, dict[str, str]]:
    """The configuration file and its properties ((None, {}) when no file is named and the default is absent)."""
    named = explicit if explicit is not None else (Path(env[CONFIG_ENV]) if env.get(CONFIG_ENV) else None)
    path = named if named is not None else default_config_path(env)
    if named is None and not path.exists():
        return None, {}
    if not path.is_file():
        raise ConfigError(f"configuration file {path} does not exist (named by {'-F' if explicit is not None else '$' + CONFIG_ENV})")
    return path, read_properties(path)


def _read_token_file(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except OSError as err:
        raise ConfigError(f"--token-file {path}: {err.strerror or err}") from err
    if not token or "\n" in token:
        raise ConfigError(f"--token-file {path}: expected the token alone on one line")
    warn_if_readable_by_others(path, "holds a token")
    return token
