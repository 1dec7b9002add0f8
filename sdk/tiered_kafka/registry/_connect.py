"""The one way a process connects to the registry's Redis from configuration: :func:`connect`.

URL forms (the agent's ``redis.url``, the gateway's ``clusters.{name}.redis_url``, ``--redis-url``)::

    redis://[[user]:password@]host[:port][/db][?option=value...]        one Redis (redis-py's URL)
    rediss://...                                                          the same over TLS
    unix://[[user]:password@]/path/to/socket[?db=N...]                    one Redis on a Unix socket
    redis+cluster://[[user]:password@]host:port[,host:port...][/0][?option=value...]
    rediss+cluster://...                                                  a Redis Cluster over TLS

A user or password holding ``/``, ``?`` or ``#`` must be percent-encoded (``%2F``, ``%3F``, ``%23``;
redis-py decodes them): unencoded, the URL's host part would end inside the password. Such a URL (an
``@`` after the first ``/``, ``?`` or ``#`` of the part after ``://``) is refused, naming the problem
and not the password; so is a literal ``@`` in a socket path or an option value (``%40``). An unencoded ``@`` in the
password itself is fine: the host part starts after the last ``@``.

The cluster form lists seed nodes, any of the cluster's nodes (masters or replicas): the client asks
the first reachable one for the slot map (``CLUSTER SHARDS``/``SLOTS``) and from then on follows the
cluster's own view, so one seed is enough and several only survive a seed being down at startup. The
database is 0 (a cluster has no other). Query options are redis-py's connection options, as for
``redis://`` (``?client_name=agent-1``, ``?ssl_cert_reqs=none``), applied to every node's connections.

Both kinds of client connect lazily, at their first command: a single ``redis.Redis`` by itself, a
cluster client through :class:`LazyRedisCluster`, which builds the ``redis.RedisCluster`` (reading
the slot map) at its first use and again at the next use while that fails. So a process starts while
its registry is down (the agent retries, the gateway answers 503) and an unreachable cluster is a
redis-py ``ConnectionError`` at that command, which the registry reports as
:class:`RegistryUnavailableError` (retriable). A malformed URL or option is a
:class:`RegistryValueError` from :func:`connect` itself.

A cluster client (``redis.RedisCluster``) keeps working through a failover: a command that meets a
dead master (a connection error or timeout) makes it re-read the slot map and retry (redis-py's
``Retry``, 10 attempts, 10 ms to 1 s backoff); a ``MOVED`` reply moves the slot. While a replica is
being promoted (``cluster-node-timeout`` plus an election, ~15 s with Redis's defaults) the slots
of the dead master answer nothing; what the registry cannot reach then is a
:class:`RegistryUnavailableError` (retriable), and every registry write is idempotent, so callers
retry it (the agent's ``RetryPolicy``; the gateway answers 503 and the SDK retries).

A password never appears in an error or a log line of this module: URLs are shown by
:func:`describe_url` (everything before the last ``@`` masked but the user, the query and fragment
left out); seeds and redis-py's URL parsing errors (which quote what they could not parse, possibly
a password) are never quoted.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Final, NamedTuple
from urllib.parse import parse_qs, unquote, urlsplit

from tiered_kafka.registry._client import RedisClient
from tiered_kafka.registry._errors import RegistryValueError

__all__ = ["CLUSTER_SCHEMES", "SINGLE_SCHEMES", "LazyRedisCluster", "check_url", "connect", "describe_url", "is_cluster_url"]

SINGLE_SCHEMES: Final = ("redis", "rediss", "unix")
CLUSTER_SCHEMES: Final = {"redis+cluster": "redis", "rediss+cluster": "rediss"}  # -> the scheme of each node
_CLUSTER_REFUSED_OPTIONS: Final = ("db", "retry")  # redis.RedisCluster refuses them (retries are the cluster client's)
_HOST_PORT: Final = re.compile(r"(\[[0-9A-Fa-f:.]*\]|[^:\[\]]*)(:[0-9]*)?")  # what describe_url shows of a host part
_REDIS_PY_OPTION_ERROR: Final = re.compile(r"Invalid value for '[A-Za-z_]+' in connection URL\.")  # names the option only


class _Parts(NamedTuple):
    """A Redis URL cut the way redis-py (``urllib.parse``) cuts a well-formed one; the host part
    starts after the *last* ``@``, so no part but ``userinfo`` holds a password."""

    scheme: str
    userinfo: str | None  # None without an "@"
    hosts: str  # "host[:port]" or, for a cluster, "host:port,host:port..."
    path: str  # from the first "/" after the host part ("/0"), "" without one
    query: str  # after "?", "" without one (the fragment is dropped)


def _split(url: str) -> _Parts | None:
    scheme, sep, rest = url.partition("://")
    if not sep:
        return None
    userinfo, at, after = rest.rpartition("@")
    after = after.partition("#")[0]
    before_query, _, query = after.partition("?")
    hosts, slash, path = before_query.partition("/")
    return _Parts(scheme.lower(), userinfo if at else None, hosts, slash + path, query)


def describe_url(url: str) -> str:
    """``url`` for messages: only the user is shown of what precedes the last ``@`` (the rest, the
    password whatever characters it holds, is ``***``); the query (which may carry a password) and
    the fragment are left out; a host part that is not ``host[:port]`` is ``***`` too (a password
    put there by a missing ``@``: ``redis://user:password``). A ``?`` or ``#`` before the last ``@``
    leaves no telling a password from a query (``?password=a@b``): then only the scheme is shown.

    >>> describe_url("redis+cluster://app:s3cr3t@h1:7000,h2:7000/0?ssl_cert_reqs=none")
    'redis+cluster://app:***@h1:7000,h2:7000/0'
    >>> describe_url("redis://default:ab/cd+ef@host:6379/0"), describe_url("redis://default:ab?cd@host:6379/0")
    ('redis://default:***@host:6379/0', 'redis://***')
    """
    parts = _split(url)
    if parts is None:
        return "(not a URL)"
    if parts.userinfo is not None and re.search(r"[?#]", parts.userinfo):  # that "@" may be in the query or fragment
        return f"{url.partition('://')[0]}://***"
    shown = ""
    if parts.userinfo is not None:
        user, colon, _password = parts.userinfo.partition(":")
        shown = f"{user}:***@" if colon and not re.search(r"[/?#]", user) else "***@"
    hosts = ",".join(host if _HOST_PORT.fullmatch(host) else "***" for host in parts.hosts.split(","))
    return f"{url.partition('://')[0]}://{shown}{hosts}{parts.path}"


def is_cluster_url(url: str) -> bool:
    """Whether ``url`` names a Redis Cluster (``redis+cluster://`` or ``rediss+cluster://``)."""
    return url.partition("://")[0].lower() in CLUSTER_SCHEMES


def check_url(url: str) -> str:
    """``url`` if it has one of the forms of the module docstring, else :class:`RegistryValueError`
    (a ValueError; the message shows no password). Connects to nothing (configuration validators)."""
    if not isinstance(url, str):
        raise RegistryValueError(f"a Redis URL must be a str, got {type(url).__name__}")
    parts = _split(url)
    if parts is None or (parts.scheme not in CLUSTER_SCHEMES and parts.scheme not in SINGLE_SCHEMES):
        raise RegistryValueError(
            f"a Redis URL must start with redis://, rediss://, unix://, redis+cluster:// or rediss+cluster://, got {describe_url(url)}"
        )
    if parts.userinfo is not None and re.search(r"[/?#]", parts.userinfo):
        raise RegistryValueError(
            "a Redis URL's user or password holding '/', '?' or '#' (or a socket path or option value holding '@') "
            f"must be percent-encoded (%2F, %3F, %23, %40): as written, its host part ends inside it (in {describe_url(url)})"
        )
    if parts.scheme in CLUSTER_SCHEMES:
        _cluster_seeds(url, CLUSTER_SCHEMES[parts.scheme])
    elif parts.scheme != "unix":
        _port(parts.hosts, url, "the Redis URL")
    return url


def connect(url: str, **options: Any) -> RedisClient | LazyRedisCluster:
    """A redis-py client for ``url`` (module docstring): ``redis.Redis``, or a :class:`LazyRedisCluster`
    standing for a ``redis.RedisCluster``.

    ``options`` are redis-py connection options (``socket_timeout``, ``socket_connect_timeout``,
    ``max_connections``, ``decode_responses``, ...); the URL's query options win over them. Connects
    to nothing: both kinds connect at their first command (module docstring). A malformed URL, or an
    option a cluster client refuses (``db``, ``retry``), raises :class:`RegistryValueError`.
    """
    import redis

    scheme = check_url(url).partition("://")[0].lower()
    if scheme in SINGLE_SCHEMES:
        try:
            return redis.Redis.from_url(url, **options)
        except ValueError as err:  # urllib's text quotes what it could not parse: only the option-naming ones are shown
            reason = str(err) if _REDIS_PY_OPTION_ERROR.fullmatch(str(err)) else "redis-py cannot parse it"
            raise RegistryValueError(f"invalid Redis URL {describe_url(url)}: {reason}") from None
    refused = sorted(set(options) & set(_CLUSTER_REFUSED_OPTIONS))
    if refused:
        raise RegistryValueError(f"a Redis Cluster client takes no {', '.join(refused)} option (database 0 only; retries are the cluster client's)")
    return LazyRedisCluster(url, options)


class LazyRedisCluster:
    """A ``redis.RedisCluster`` for a cluster URL, built at its first use (module docstring).

    Every attribute but the few below is the built client's (``execute_command``, ``pipeline``,
    ``get_node_from_key``, ...), so it stands for one wherever the registry uses a client. Building
    reads the slot map; while no seed answers, each use raises redis-py's ``ConnectionError`` (the
    seeds described without password) and the next use tries again. Thread-safe: one build at a time.
    """

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        self._url = url
        self._options = options
        self._client: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LazyRedisCluster({describe_url(self._url)}, {'built' if self._client is not None else 'not built yet'})"

    def cluster_client(self) -> Any:
        """The ``redis.RedisCluster``, built now if it was not (redis-py ``ConnectionError`` if it cannot be)."""
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._build()
                client = self._client
        return client

    def _build(self) -> Any:
        import redis
        from redis.cluster import ClusterNode

        seeds, first_url = _cluster_seeds(self._url, CLUSTER_SCHEMES[self._url.partition("://")[0].lower()])
        try:
            return redis.RedisCluster(url=first_url, startup_nodes=[ClusterNode(h, p) for h, p in seeds[1:]], **self._options)
        except redis.exceptions.RedisClusterException as err:  # options are checked before: only "cannot be connected" is left
            raise redis.exceptions.ConnectionError(f"Redis Cluster at {describe_url(self._url)} cannot be reached: {err}") from err

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # never build for a private or special lookup (copy, pickle, __del__ probes)
            raise AttributeError(name)
        value = getattr(self.cluster_client(), name)
        if callable(value):  # the built client is kept for good: its methods are looked up here once
            self.__dict__[name] = value
        return value

    def register_script(self, script: str) -> Any:
        """A redis-py ``Script`` bound to this client: the Registry registers its scripts without connecting."""
        from redis.commands.core import Script

        return Script(self, script)

    def get_encoder(self) -> Any:
        """The encoder ``Script`` hashes the script text with (the options' encoding)."""
        from redis.connection import Encoder

        return Encoder(self._options.get("encoding", "utf-8"), self._options.get("encoding_errors", "strict"), bool(self._options.get("decode_responses", False)))

    def close(self) -> None:
        """Close the built client's connections; nothing to do if it was never built."""
        with self._lock:
            if self._client is not None:
                self._client.close()

    def __enter__(self) -> LazyRedisCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _port(host_port: str, url: str, which: str) -> int | None:
    """The port of ``host[:port]`` (None without one); :class:`RegistryValueError` naming ``which``
    one, never quoting it (a mistyped URL can put a password there: ``redis://user:password``)."""
    try:
        return urlsplit(f"//{host_port}").port
    except ValueError:
        raise RegistryValueError(f"the port of {which} is not a number from 0 to 65535 (in {describe_url(url)})") from None


def _cluster_seeds(url: str, node_scheme: str) -> tuple[list[tuple[str, int]], str]:
    """The seed (host, port) pairs of a cluster URL, and a redis-py URL for the first seed carrying
    the user information, database and query (redis-py applies them to every node)."""
    parts = _split(url)
    assert parts is not None  # check_url has seen "://"
    listed = parts.hosts.split(",")
    seeds = []
    for number, seed in enumerate(listed, 1):
        which = f"seed {number} of {len(listed)}"
        port, host = _port(seed, url, f"{which} of the Redis Cluster URL"), urlsplit(f"//{seed}").hostname
        if not host or port is None:  # quoted never: see _port
            raise RegistryValueError(f"a Redis Cluster URL lists host:port seeds separated by commas; {which} is not one (in {describe_url(url)})")
        seeds.append((unquote(host), port))
    if parts.path not in ("", "/", "/0"):
        raise RegistryValueError(f"a Redis Cluster has only database 0, the URL names another (in {describe_url(url)})")
    if any(value != "0" for value in parse_qs(parts.query).get("db", [])):
        raise RegistryValueError(f"a Redis Cluster has only database 0, the URL's db option names another (in {describe_url(url)})")
    first_host, first_port = seeds[0]
    host = f"[{first_host}]" if ":" in first_host else first_host
    userinfo = "" if parts.userinfo is None else f"{parts.userinfo}@"
    query = f"?{parts.query}" if parts.query else ""
    return seeds, f"{node_scheme}://{userinfo}{host}:{first_port}/{parts.path.lstrip('/')}{query}"
