"""The gateway's configuration: one typed source (environment, or a JSON file) per process.

Environment variables use the prefix ``TIERED_KAFKA_GATEWAY_`` and ``__`` for nesting; the
file (``TIERED_KAFKA_GATEWAY_CONFIG``, JSON) has the same structure, and the environment wins::

    clusters.{name}.redis_url                   that cluster's registry (required): redis://, rediss://, unix://, or a
                                                Redis Cluster as redis+cluster://host:port[,host:port...] (tiered_kafka.registry.connect)
    clusters.{name}.s3.bucket / prefix / entropy_bits / endpoint_url / region
    clusters.{name}.s3.access_key_id / secret_access_key   (default: boto3's credential chain)
    clusters.{name}.bootstrap_servers           Kafka, for broker offsets and proxied reads (optional)
    clusters.{name}.kafka_listener              a Kafka-protocol listener serving this cluster to any Kafka client
                                                (port, host, advertised_host, mode, ...: kafka_listener.settings)
    clusters.{name}.kafka_security              librdkafka's security settings for that Kafka, passed through as is:
                                                security.protocol, enable.ssl.certificate.verification, sasl.*, ssl.*
                                                (e.g. {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                                "sasl.username": "gw", "sasl.password": "..."}); every value is held as a
                                                secret (never in a repr, a log line or an error), any other key is refused
    clusters.{name}.kind                        "agent" (default: our agent's layout, Redis registry) or
                                                "kip405": Kafka's own tiered storage written by Aiven's
                                                RemoteStorageManager (no Redis; ``rsm_reader`` docstring)
    clusters.{name}.rsm.bucket / key_prefix / endpoint_url / region / access_key_id / secret_access_key
    clusters.{name}.rsm.key_ring                {key_id: PEM text or a path to a PEM file} of RSA private keys
                                                (the RSM's encryption.key.pair.id; optional: only encrypted segments need it)
    clusters.{name}.rsm.metadata_topic          "__remote_log_metadata" (read when bootstrap_servers is set)
    rsm_url_secret         (none)     HMAC key of the gateway's byte-range URLs for encrypted RSM segments
                                      (>= 32 characters; required when a kip405 cluster has a key ring;
                                      the same on every replica behind one address)
    rsm_url_ttl_s          60         lifetime of those URLs
    public_url             (none)     the gateway's base URL as clients reach it (a load balancer's, behind
                                      one): those URLs start with it; required with rsm_url_secret's case
    presign_ttl_s          300        lifetime of presigned URLs (max 3600)
    default_max_bytes      1 MiB      plan size when the request gives none
    max_bytes_limit        64 MiB     largest max_bytes a request may ask
    max_decoded_bytes      64 MiB     most record bytes one /records answer decodes (compressed batches
                                      counted inflated; ``records`` module doc)
    max_ranges_per_plan    1024       most presigned ranges in one plan (``remote`` module doc, "Bounds")
    range_bytes            8 MiB      preferred size of one presigned range
    cache.* (every cache is bounded by the bytes it holds; ``caches`` module docstring):
    cache.index_bytes      64 MiB     .index/.timeindex objects
    cache.header_bytes     64 MiB     batch headers read from segments without a batch index
    cache.batch_index_bytes 256 MiB   batch indexes
    cache.sparse_index_bytes 32 MiB   sparse plan indexes parsed from registry entries
    cache.segment_bytes    32 MiB     registry lookups remembered (segment entries; last entries)
    cache.listing_bytes    16 MiB     S3 listings of partitions, found or not (unknown partitions too)
    cache.txn_index_bytes  32 MiB     parsed .txnindex files (the records endpoint)
    cache.listing_ttl_s    30         S3 listings of unregistered (Pinterest-layout) partitions
    cache.segment_ttl_s    2          registry lookups remembered (0: ask Redis every time)
    auth.enabled           false      true: every path but the probes needs a token (``deps`` docstring)
    auth.tokens            {token: [topic regex, ...]} or {token: {"topics": [regex, ...], "clusters": [name, ...]}}:
                                      bearer tokens or API keys (X-API-Key), each with the topics it may read (full
                                      match) on the clusters it names (no "clusters": every cluster, as before);
                                      "metrics": true lets it read /metrics; "groups": [regex, ...] the consumer
                                      groups it may use through the Kafka listener (none unless named; ``tokens``)
    auth.allow_anonymous   false      serve without authentication on an address beyond loopback (``check_exposure``)
    auth.session_secret    (none)     HMAC key of the coverage pages' session cookies (>= 32 characters, the same
                                      on every replica); without it there is no browser login (``sessions``)
    auth.session_ttl_s     28800      lifetime of a session cookie (60 s .. 7 days)
    allowed_hosts          ["localhost"]  Host header names answered besides IP literals ("*.domain", "*";
                                      ``http_guards``: DNS rebinding)

Fail closed (``check_exposure``, ``GatewaySettings._auth_consistent``): tokens set while ``auth.enabled``
is false are refused (they would be ignored and every caller let in), as is ``allow_anonymous`` with
``enabled``; ``tiered-kafka-gateway`` refuses to listen beyond loopback without authentication unless
``auth.allow_anonymous`` is true, and the app itself answers a request arriving beyond loopback only
then (``http_guards``). Configuration errors never quote a token: a malformed ``auth.tokens``
entry is named by its position ("entry 2 of 3"), not by its key. Unknown keys are refused in every
section; a file holding secrets that others may read is warned about (``warn_if_secrets_readable``).
    kafka.max_concurrency  8          proxied Kafka reads at once; kafka.timeout_s 10
    timeouts.redis_s 2, timeouts.s3_s 5
"""

from __future__ import annotations

import functools
import ipaddress
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_serializer, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from tiered_kafka.errors import ConfigError
from tiered_kafka.registry import check_url, describe_url
from tiered_kafka_gateway.kafka_listener.settings import KafkaListenerSettings
from tiered_kafka_service.support import EnvironmentFirstSettings, S3Location, build_settings, check_regexes, describe_validation_error

log = logging.getLogger(__name__)
ENV_PREFIX = "TIERED_KAFKA_GATEWAY_"
MIB = 1024 * 1024
CLUSTER_NAME = r"[A-Za-z0-9._-]{1,128}"
#: librdkafka's security settings a cluster's ``kafka_security`` may pass to the gateway's consumers:
#: every ``sasl.*`` and ``ssl.*`` property of librdkafka 2.x (its CONFIGURATION.md) that a file can set
#: (callbacks left out). Exact names, not prefixes, so that a typo (``sasl.usrname``) stops startup
#: rather than a consumer's first request (issue 36); tests/unit/gateway/test_review_findings.py checks
#: that the installed librdkafka knows each one.
KAFKA_SECURITY_KEYS = frozenset({
    "security.protocol", "enable.ssl.certificate.verification",
    "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password", "sasl.jaas.config",
    "sasl.kerberos.service.name", "sasl.kerberos.principal", "sasl.kerberos.kinit.cmd", "sasl.kerberos.keytab",
    "sasl.kerberos.min.time.before.relogin",
    "sasl.oauthbearer.config", "sasl.oauthbearer.method", "sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.scope", "sasl.oauthbearer.extensions", "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.grant.type", "sasl.oauthbearer.sub.claim.name", "sasl.oauthbearer.metadata.authentication.type",
    "sasl.oauthbearer.client.credentials.client.id", "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.assertion.algorithm", "sasl.oauthbearer.assertion.private.key.file",
    "sasl.oauthbearer.assertion.private.key.passphrase", "sasl.oauthbearer.assertion.private.key.pem",
    "sasl.oauthbearer.assertion.file", "sasl.oauthbearer.assertion.claim.aud", "sasl.oauthbearer.assertion.claim.exp.seconds",
    "sasl.oauthbearer.assertion.claim.iss", "sasl.oauthbearer.assertion.claim.jti.include",
    "sasl.oauthbearer.assertion.claim.nbf.seconds", "sasl.oauthbearer.assertion.claim.sub",
    "sasl.oauthbearer.assertion.jwt.template.file",
    "ssl.cipher.suites", "ssl.curves.list", "ssl.sigalgs.list", "ssl.key.location", "ssl.key.password", "ssl.key.pem",
    "ssl.certificate.location", "ssl.certificate.pem", "ssl.ca.location", "ssl.ca.pem", "ssl.ca.certificate.stores",
    "ssl.crl.location", "ssl.keystore.location", "ssl.keystore.password", "ssl.providers", "ssl.engine.location",
    "ssl.engine.id", "ssl.endpoint.identification.algorithm", "ssl.truststore.location",
})


class RsmSettings(BaseModel):
    """Where a KIP-405 cluster's RemoteStorageManager writes (Aiven's ``storage.s3.*`` and
    ``key.prefix``), and the private keys of its ``encryption.key.pair.id``s."""

    model_config = ConfigDict(extra="forbid")  # unknown keys refused in every section (module doc)

    bucket: str
    key_prefix: str = ""
    endpoint_url: str | None = None
    region: str = "us-east-1"
    access_key_id: str | None = None
    secret_access_key: SecretStr | None = None
    key_ring: dict[str, SecretStr] = {}
    metadata_topic: str = "__remote_log_metadata"

    @field_validator("key_ring")
    @classmethod
    def _pem_or_path(cls, ring: dict[str, SecretStr]) -> dict[str, SecretStr]:
        """Each value is PEM text or a readable file holding it; read here, so a bad ring stops startup."""
        loaded = {}
        for key_id, value in ring.items():
            text = value.get_secret_value()
            if "-----BEGIN" not in text:
                try:
                    text = Path(text).read_text()
                except OSError as err:
                    raise ValueError(f"key {key_id!r}: not PEM text, and not a readable file ({err.strerror})") from None
                if "-----BEGIN" not in text:
                    raise ValueError(f"key {key_id!r}: the file holds no PEM block")
            loaded[key_id] = SecretStr(text)
        return loaded

    def s3_location(self) -> S3Location:
        return S3Location(
            bucket=self.bucket, endpoint_url=self.endpoint_url, region=self.region,
            access_key_id=self.access_key_id, secret_access_key=self.secret_access_key,
        )


class ClusterSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["agent", "kip405"] = "agent"
    redis_url: str | None = None
    s3: S3Location | None = None
    rsm: RsmSettings | None = None
    bootstrap_servers: str | None = None
    kafka_security: dict[str, SecretStr] = {}
    kafka_listener: KafkaListenerSettings | None = None  # a Kafka-protocol listener for this cluster (kafka_listener.settings)

    @field_validator("kafka_security", mode="before")
    @classmethod
    def _security_keys(cls, values: Any) -> Any:
        """Only librdkafka's security settings (the gateway owns the rest of its consumers' config);
        booleans and numbers as librdkafka's strings. The message names keys, never values."""
        if not isinstance(values, dict):
            return values  # pydantic names the type error (without the input: describe_validation_error)
        other = sorted(str(k) for k in values if k not in KAFKA_SECURITY_KEYS)
        if other:
            raise ValueError(f"only librdkafka's security properties (security.protocol, sasl.*, ssl.*; names as in its "
                             f"CONFIGURATION.md) may be set, not {', '.join(other)}")
        return {k: (str(v).lower() if isinstance(v, bool) else str(v) if isinstance(v, int | float) else v) for k, v in values.items()}

    def __repr_args__(self) -> Any:
        """The fields as pydantic shows them, ``redis_url`` without its password (``describe_url``; issue 36)."""
        for name, value in super().__repr_args__():
            yield name, (describe_url(value) if name == "redis_url" and isinstance(value, str) else value)

    def kafka_client_config(self) -> dict[str, str]:
        """``kafka_security`` with its secrets revealed: for a librdkafka client's configuration only."""
        return {key: value.get_secret_value() for key, value in self.kafka_security.items()}

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        return None if value is None else check_url(value)  # the registry's URL forms; no password in its message

    @model_validator(mode="after")
    def _sections_of_kind(self) -> ClusterSettings:
        if self.kind == "agent":
            if self.redis_url is None or self.s3 is None:
                raise ValueError('a cluster of kind "agent" needs redis_url and s3')
            if self.rsm is not None:
                raise ValueError('rsm is only for a cluster of kind "kip405"')
        else:
            if self.rsm is None:
                raise ValueError('a cluster of kind "kip405" needs an rsm section (bucket, key_prefix, ...)')
            if self.redis_url is not None or self.s3 is not None:
                raise ValueError('a cluster of kind "kip405" has no registry: drop redis_url and s3 (its bucket is rsm.bucket)')
        return self


class CacheSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index_bytes: int = Field(64 * MIB, ge=4096)
    header_bytes: int = Field(64 * MIB, ge=4096)
    batch_index_bytes: int = Field(256 * MIB, ge=4096)
    sparse_index_bytes: int = Field(32 * MIB, ge=4096)
    segment_bytes: int = Field(32 * MIB, ge=4096)
    listing_bytes: int = Field(16 * MIB, ge=4096)
    txn_index_bytes: int = Field(32 * MIB, ge=4096)
    rsm_chunk_bytes: int = Field(64 * MIB, ge=4096)  # de-transformed chunks of KIP-405 segments (rsm_reader.read_original)
    listing_ttl_s: float = Field(30.0, ge=0)
    segment_ttl_s: float = Field(2.0, ge=0, le=60)


class TokenGrant(BaseModel):
    """What one token may read: ``topics`` (regexes, full match) on ``clusters`` (None: every cluster);
    ``groups``: the consumer group ids (regexes, full match) it may use through the Kafka listener (none
    unless named: ``tokens`` module doc)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    topics: list[str]
    clusters: list[str] | None = None
    metrics: bool = False  # may read /metrics (``tokens`` module doc: the decision)
    groups: list[str] = []

    @field_validator("topics")
    @classmethod
    def _patterns_compile(cls, topics: list[str]) -> list[str]:
        check_regexes(topics, "topic pattern")
        return topics

    @field_validator("groups")
    @classmethod
    def _group_patterns_compile(cls, groups: list[str]) -> list[str]:
        check_regexes(groups, "group pattern")
        return groups


class AuthSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    allow_anonymous: bool = False
    # the keys are the secrets themselves: out of every repr (repr=False), of every error (_grants)
    # and of model_dump (_dump_tokens: a list of entries whose "token" is a SecretStr)
    tokens: dict[str, TokenGrant] = Field({}, repr=False)
    session_secret: SecretStr | None = None  # HMAC key of the coverage pages' session cookies (``sessions``)
    session_ttl_s: int = Field(8 * 3600, ge=60, le=7 * 86400)

    @field_validator("session_secret")
    @classmethod
    def _long_enough(cls, secret: SecretStr | None) -> SecretStr | None:
        if secret is not None and len(secret.get_secret_value()) < 32:
            raise ValueError("must be at least 32 characters (the same on every replica behind one address)")
        return secret

    @field_serializer("tokens")
    def _dump_tokens(self, tokens: dict[str, TokenGrant]) -> list[dict[str, Any]]:
        """``[{"token": SecretStr, "topics": ..., "clusters": ..., "metrics": ...}, ...]``: no token as a
        plain key of a dump (issue 36); ``_grants`` reads this form back."""
        return [{"token": SecretStr(token), **grant.model_dump()} for token, grant in tokens.items()]

    @field_validator("tokens", mode="before")
    @classmethod
    def _grants(cls, tokens: Any) -> dict[str, TokenGrant]:
        """Each entry as a ``TokenGrant`` (a list is its topics, on every cluster). Validated here
        rather than by pydantic's dict validation, whose error location is the key: the token."""
        if isinstance(tokens, list):  # the dump's form (_dump_tokens): entries naming their token
            entries = {}
            for number, entry in enumerate(tokens, 1):
                if not isinstance(entry, dict) or "token" not in entry:
                    raise ValueError(f"entry {number} of {len(tokens)}: expected {{token: ..., topics: [...]}}")
                token = entry["token"].get_secret_value() if isinstance(entry["token"], SecretStr) else entry["token"]
                entries[token] = {k: v for k, v in entry.items() if k != "token"}
            tokens = entries
        if not isinstance(tokens, dict):
            raise ValueError("must map each token to its topic patterns, or to {topics: [...], clusters: [...]}")
        grants = {}
        for number, (token, grant) in enumerate(tokens.items(), 1):
            where = f"entry {number} of {len(tokens)}"  # never the token
            if not isinstance(token, str) or len(token) < 16:
                raise ValueError(f"{where}: tokens must be at least 16 characters")
            if isinstance(grant, TokenGrant):
                grants[token] = grant
                continue
            if not isinstance(grant, list | dict):
                raise ValueError(f"{where}: expected a list of topic patterns, or {{topics: [...], clusters: [...]}}")
            try:
                grants[token] = TokenGrant.model_validate({"topics": grant} if isinstance(grant, list) else grant)
            except ValidationError as err:
                raise ValueError(f"{where}: {describe_validation_error(err)}") from None
        return grants


class KafkaProxySettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_concurrency: int = Field(8, ge=1, le=256)
    timeout_s: float = Field(10.0, gt=0, le=120)


class TimeoutSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    redis_s: float = Field(2.0, gt=0)
    s3_s: float = Field(5.0, gt=0)


class GatewaySettings(EnvironmentFirstSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid")

    clusters: dict[str, ClusterSettings]
    presign_ttl_s: int = Field(300, ge=1, le=3600)
    default_max_bytes: int = Field(MIB, ge=1)
    max_bytes_limit: int = Field(64 * MIB, ge=1)
    max_decoded_bytes: int = Field(64 * MIB, ge=MIB)
    max_ranges_per_plan: int = Field(1024, ge=1)
    range_bytes: int = Field(8 * MIB, ge=4096)
    cache: CacheSettings = CacheSettings()
    auth: AuthSettings = AuthSettings()
    kafka: KafkaProxySettings = KafkaProxySettings()
    timeouts: TimeoutSettings = TimeoutSettings()
    rsm_url_secret: SecretStr | None = None
    rsm_url_ttl_s: int = Field(60, ge=1, le=3600)
    public_url: str | None = Field(None, pattern=r"^https?://[^?#]+$")
    allowed_hosts: list[str] = ["localhost"]  # Host header names answered, besides IP literals (http_guards)

    @field_validator("allowed_hosts")
    @classmethod
    def _host_names(cls, hosts: list[str]) -> list[str]:
        for host in hosts:
            if host != "*" and not re.fullmatch(r"(\*\.)?[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?", host):
                raise ValueError(f"{host!r} is not a host name, *.domain, or *")
        return [h.lower() for h in hosts]

    @model_validator(mode="after")
    def _rsm_secret(self) -> GatewaySettings:
        if any(c.rsm is not None and c.rsm.key_ring for c in self.clusters.values()):
            secret = self.rsm_url_secret
            if secret is None or len(secret.get_secret_value()) < 32:
                raise ValueError("rsm_url_secret (at least 32 characters) is required when a kip405 cluster has a key_ring")
            if self.public_url is None:
                raise ValueError("public_url (the gateway's base URL as clients reach it) is required when a kip405 cluster has a key_ring")
        return self

    def kafka_client_config(self, cluster: str) -> dict[str, str]:
        """The named cluster's ``kafka_security``, revealed, for its librdkafka clients ({} when none)."""
        configured = self.clusters.get(cluster)
        return configured.kafka_client_config() if configured is not None else {}

    @model_validator(mode="after")
    def _auth_consistent(self) -> GatewaySettings:
        """Fail closed (module docstring): no setting that reads as protection while there is none."""
        auth = self.auth
        if auth.tokens and not auth.enabled:
            raise ValueError(
                "auth.tokens are set but auth.enabled is false: the tokens would be ignored and every caller let in; "
                "set auth.enabled to true (or remove auth.tokens)"
            )
        if auth.enabled and auth.allow_anonymous:
            raise ValueError("auth.allow_anonymous is for a gateway without authentication: it contradicts auth.enabled; drop one of them")
        for number, grant in enumerate(auth.tokens.values(), 1):
            unknown = sorted(set(grant.clusters or ()) - set(self.clusters))
            if unknown:
                raise ValueError(f"auth.tokens entry {number} of {len(auth.tokens)} names cluster(s) {', '.join(unknown)}, not configured here")
        return self

    @field_validator("clusters")
    @classmethod
    def _at_least_one(cls, clusters: dict[str, ClusterSettings]) -> dict[str, ClusterSettings]:
        if not clusters:
            raise ValueError("at least one cluster is required")
        for name in clusters:
            if not re.fullmatch(CLUSTER_NAME, name):
                raise ValueError(f"cluster name {name!r} must be 1-128 of [A-Za-z0-9._-]")
        return clusters


def load_settings(path: Path | None = None, **overrides: Any) -> GatewaySettings:
    """Settings from a JSON file (``path`` or $TIERED_KAFKA_GATEWAY_CONFIG), the environment, ``overrides``."""
    path = path or (Path(os.environ[f"{ENV_PREFIX}CONFIG"]) if os.environ.get(f"{ENV_PREFIX}CONFIG") else None)
    values: dict[str, Any] = {}
    if path is not None:
        try:
            values = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise ConfigError(f"cannot read gateway config {path}: {err}") from err
        warn_if_secrets_readable(path, values)
    values.update(overrides)
    return build_settings(GatewaySettings, values, "gateway")


SECRET_KEYS = frozenset({"tokens", "session_secret", "rsm_url_secret", "kafka_security", "secret_access_key", "key_ring"})


def _holds_secrets(value: Any) -> list[str]:
    """The keys of ``value`` (a config file's JSON) that hold a secret (SECRET_KEYS, a Redis URL with a password)."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, inner in value.items():
            if (key in SECRET_KEYS and inner) or (key == "redis_url" and isinstance(inner, str) and "@" in inner):
                found.append(str(key))
            else:
                found += _holds_secrets(inner)
    return found


def warn_if_secrets_readable(path: Path, values: Any) -> None:
    """A WARNING when the gateway's config file holds secrets (tokens, sasl.password in kafka_security,
    keys, a Redis password) and grants its group or others any access (issue 36; as ssh checks its
    keys, a warning rather than a refusal: a secret mounted 0644 in a container is common)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    held = sorted(set(_holds_secrets(values)))
    if held and mode & 0o077:
        log.warning("%s holds secrets (%s) and other users may read it (mode %04o): chmod 600 %s", path, ", ".join(held), mode & 0o7777, path)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (uvicorn's ``--host``) listens on loopback only: ``localhost`` or a loopback
    address; anything else (``0.0.0.0``, ``::``, a name, an interface's address) counts as beyond."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(settings: GatewaySettings, host: str) -> None:
    """ConfigError unless serving on ``host`` is authenticated, loopback-only, or explicitly anonymous
    (``auth.allow_anonymous``): a gateway reachable from the network does not start open by default."""
    if settings.auth.enabled or settings.auth.allow_anonymous or is_loopback(host):
        return
    raise ConfigError(
        f"refusing to listen on {host} without authentication: set auth.enabled to true with auth.tokens, "
        "or auth.allow_anonymous to true to serve every caller on purpose, or listen on 127.0.0.1"
    )


@functools.cache
def cached_settings() -> GatewaySettings:
    """The process's settings, built once on first use (not at import)."""
    return load_settings()
