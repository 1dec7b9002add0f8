"""The agent's configuration: one typed source, from a file and the environment.

Precedence: environment variables > the config file > defaults. Every setting has a dotted
name (used in the file) and an environment variable (``TIERED_KAFKA_AGENT_`` + the dotted name
upper-cased with ``.`` → ``__``)::

    name                                 environment variable                           default
    cluster                              TIERED_KAFKA_AGENT_CLUSTER                     (required)
    broker_id                            TIERED_KAFKA_AGENT_BROKER_ID                   (required)
    log_dirs                             TIERED_KAFKA_AGENT_LOG_DIRS (comma-separated)  (required)
    s3.bucket                            TIERED_KAFKA_AGENT_S3__BUCKET                  (required)
    s3.prefix                            TIERED_KAFKA_AGENT_S3__PREFIX                  ""
    s3.entropy_bits                      TIERED_KAFKA_AGENT_S3__ENTROPY_BITS            0
    s3.endpoint_url                      TIERED_KAFKA_AGENT_S3__ENDPOINT_URL            AWS
    s3.region                            TIERED_KAFKA_AGENT_S3__REGION                  us-east-1
    s3.access_key_id / secret_access_key TIERED_KAFKA_AGENT_S3__ACCESS_KEY_ID, ...      boto3's chain
    s3.multipart_threshold_bytes         ...S3__MULTIPART_THRESHOLD_BYTES               8 MiB
    s3.multipart_chunk_bytes             ...S3__MULTIPART_CHUNK_BYTES                   8 MiB
    s3.part_concurrency                  ...S3__PART_CONCURRENCY                        4
    redis.url                            TIERED_KAFKA_AGENT_REDIS__URL                  (required)
        redis://[user:password@]host:port/db, rediss://, unix://, or a Redis Cluster's seed nodes:
        redis+cluster://[user:password@]host:port[,host:port...] (rediss+cluster:// with TLS);
        a password holding '/', '?' or '#' percent-encoded (%2F, %3F, %23)
    leadership.mode                      ...LEADERSHIP__MODE      zookeeper | kraft | static (required)
    leadership.zookeeper_connect         ...LEADERSHIP__ZOOKEEPER_CONNECT               (zookeeper mode)
    leadership.bootstrap_servers         ...LEADERSHIP__BOOTSTRAP_SERVERS               (kraft mode)
    leadership.poll_interval_s           ...LEADERSHIP__POLL_INTERVAL_S                 10
    topics.include / topics.exclude      ...TOPICS__INCLUDE (comma-separated regexes)   .* / (none)
    upload.max_concurrent_segments       ...UPLOAD__MAX_CONCURRENT_SEGMENTS             4
    upload.max_attempts                  ...UPLOAD__MAX_ATTEMPTS                        8
    upload.backoff_base_s / backoff_max_s                                               0.2 / 30
    upload.rescan_interval_s             ...UPLOAD__RESCAN_INTERVAL_S                   30
    remote_retention.ms / .bytes         ...REMOTE_RETENTION__MS, ...__BYTES            -1 (keep all)
    remote_retention.topics.{topic}.ms / .bytes   per-topic overrides (file only)
    remote_retention.interval_s          ...REMOTE_RETENTION__INTERVAL_S                3600
    metrics.host / metrics.port          ...METRICS__PORT (0: no HTTP endpoint)         127.0.0.1 / 9400

The file is a Java-style ``.properties`` file, like Pinterest's uploader config, and accepts
Pinterest's ``ts.segment.uploader.*`` names where the meaning is the same (see
``PINTEREST_NAMES``; retention seconds are converted to milliseconds, max retries to attempts).
A name no section knows is refused, in every section (``upload.max_concurent_segments`` is an
error naming it, not a default silently kept; issue 36).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from tiered_kafka.errors import ConfigError
from tiered_kafka.properties import read_properties
from tiered_kafka.registry import check_url, describe_url
from tiered_kafka_service.support import EnvironmentFirstSettings, S3Location, build_settings, check_regexes

ENV_PREFIX = "TIERED_KAFKA_AGENT_"

#: Pinterest ts.segment.uploader name -> (our dotted name, converter)
PINTEREST_NAMES: dict[str, tuple[str, Any]] = {
    "ts.segment.uploader.kafka.topics.include": ("topics.include", str),
    "ts.segment.uploader.kafka.topics.exclude": ("topics.exclude", str),
    "ts.segment.uploader.upload.thread.count": ("upload.max_concurrent_segments", int),
    "ts.segment.uploader.upload.max.retries": ("upload.max_attempts", lambda v: int(v) + 1),
    "ts.segment.uploader.upload.timeout.ms": ("upload.timeout_s", lambda v: int(v) / 1000),
    "ts.segment.uploader.leadership.watcher.poll.interval.seconds": ("leadership.poll_interval_s", float),
    "ts.segment.uploader.s3.prefix.entropy.bits": ("s3.entropy_bits", lambda v: max(int(v), 0)),
    "ts.segment.uploader.manager.gc.interval.seconds": ("remote_retention.interval_s", float),
    "ts.segment.uploader.manager.gc.retention.seconds": ("remote_retention.ms", lambda v: int(v) * 1000),
}
_PINTEREST_TOPIC_RETENTION = re.compile(r"^ts\.segment\.uploader\.manager\.gc\.(?P<topic>.+)\.retention\.seconds$")


class S3Settings(S3Location):
    multipart_threshold_bytes: int = Field(8 * 1024 * 1024, ge=5 * 1024 * 1024)
    multipart_chunk_bytes: int = Field(8 * 1024 * 1024, ge=5 * 1024 * 1024)
    part_concurrency: int = Field(4, ge=1, le=64)


class RedisSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo in any section is refused, not ignored (issue 36)
    url: str

    @field_validator("url")
    @classmethod
    def _redis_scheme(cls, value: str) -> str:
        return check_url(value)  # the registry's URL forms (tiered_kafka.registry.connect); no password in its message


class LeadershipSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo in any section is refused, not ignored (issue 36)
    mode: Literal["zookeeper", "kraft", "static"]  # required: uploading followers' segments would be wrong
    zookeeper_connect: str | None = None
    bootstrap_servers: str | None = None
    poll_interval_s: float = Field(10.0, gt=0)

    @model_validator(mode="after")
    def _mode_needs_its_address(self) -> LeadershipSettings:
        if self.mode == "zookeeper" and not self.zookeeper_connect:
            raise ValueError("leadership.zookeeper_connect is required in zookeeper mode")
        if self.mode == "kraft" and not self.bootstrap_servers:
            raise ValueError("leadership.bootstrap_servers is required in kraft mode")
        return self


class TopicSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo in any section is refused, not ignored (issue 36)
    include: list[str] = [".*"]
    exclude: list[str] = []

    @field_validator("include", "exclude", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [p.strip() for p in value.split(",") if p.strip()]
        return value

    @field_validator("include", "exclude")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        check_regexes(patterns)
        return patterns


class UploadSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo in any section is refused, not ignored (issue 36)
    max_concurrent_segments: int = Field(4, ge=1, le=256)
    max_attempts: int = Field(8, ge=1)
    backoff_base_s: float = Field(0.2, gt=0)
    backoff_max_s: float = Field(30.0, gt=0)
    timeout_s: float = Field(300.0, gt=0)
    rescan_interval_s: float = Field(30.0, gt=0)


class RetentionLimits(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo in any section is refused, not ignored (issue 36)
    ms: int = Field(-1, ge=-1)
    bytes: int = Field(-1, ge=-1)


class RemoteRetentionSettings(RetentionLimits):
    topics: dict[str, RetentionLimits] = {}
    interval_s: float = Field(3600.0, gt=0)

    def for_topic(self, topic: str) -> RetentionLimits:
        return self.topics.get(topic, RetentionLimits(ms=self.ms, bytes=self.bytes))


class MetricsSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo in any section is refused, not ignored (issue 36)
    host: str = "127.0.0.1"
    port: int = Field(9400, ge=0, le=65535)


class AgentSettings(EnvironmentFirstSettings):
    """Everything one agent process needs; see the module docstring for the names."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid")

    cluster: str
    broker_id: int = Field(ge=0)
    log_dirs: list[Path]
    s3: S3Settings
    redis: RedisSettings
    leadership: LeadershipSettings
    topics: TopicSettings = TopicSettings()
    upload: UploadSettings = UploadSettings()
    remote_retention: RemoteRetentionSettings = RemoteRetentionSettings()
    metrics: MetricsSettings = MetricsSettings()

    @field_validator("log_dirs", mode="before")
    @classmethod
    def _split_dirs(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [Path(p.strip()) for p in value.split(",") if p.strip()]
        return value

    @field_validator("cluster")
    @classmethod
    def _cluster_name(cls, value: str) -> str:
        if not value or "/" in value:
            raise ValueError("must be non-empty and contain no '/'")
        return value

    def redacted(self) -> dict[str, Any]:
        """The settings for logging, secrets masked: the S3 secret key (a SecretStr) and the Redis
        URL as ``tiered_kafka.registry.describe_url`` shows it (password masked, query left out)."""
        data = self.model_dump(mode="json")
        data["redis"]["url"] = describe_url(self.redis.url)
        return data


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for dotted, value in flat.items():
        parts = dotted.split(".")
        node = nested
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{dotted}: {'.'.join(parts[:-1])} is a value, not a section")
        node[parts[-1]] = value
    return nested


def translate_pinterest_names(flat: dict[str, str]) -> dict[str, Any]:
    """Map Pinterest's ``ts.segment.uploader.*`` names onto ours; other names pass through."""
    result: dict[str, Any] = {}
    for key, value in flat.items():
        if key in PINTEREST_NAMES:
            ours, convert = PINTEREST_NAMES[key]
            try:
                result[ours] = convert(value)
            except ValueError:
                raise ConfigError(f"{key}: invalid value {value!r}") from None
        elif (match := _PINTEREST_TOPIC_RETENTION.match(key)) is not None:
            result[f"remote_retention.topics.{match['topic']}.ms"] = int(value) * 1000
        elif key.startswith("ts.segment.uploader."):
            raise ConfigError(f"{key}: this Pinterest setting has no equivalent here (see tiered_kafka_agent.config)")
        else:
            result[key] = value
    return result


def load_settings(path: Path | None = None, **overrides: Any) -> AgentSettings:
    """Settings from ``path`` (a .properties file), the environment, then ``overrides``.

    Raises ConfigError naming every invalid or missing setting.
    """
    values: dict[str, Any] = {}
    if path is not None:
        values = _nest(translate_pinterest_names(read_properties(path)))
    return build_settings(AgentSettings, _merge(values, overrides), "agent")



def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged
