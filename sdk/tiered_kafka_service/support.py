"""Pieces shared by the agent and the gateway processes (not part of the client SDK).

Importing this module needs the ``agent`` or ``gateway`` extra (pydantic-settings, boto3); the
SDK core never imports it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from tiered_kafka.errors import ConfigError

SettingsT = TypeVar("SettingsT", bound=BaseSettings)


class S3Location(BaseModel):
    """Where a cluster's segments live in S3, and how to reach it (agent and gateway settings)."""

    model_config = ConfigDict(extra="forbid")  # a misspelt key is refused, not ignored (issue 36)

    bucket: str
    prefix: str = ""
    entropy_bits: int = Field(0, ge=0, le=32)
    endpoint_url: str | None = None
    region: str = "us-east-1"
    access_key_id: str | None = None
    secret_access_key: SecretStr | None = None


class EnvironmentFirstSettings(BaseSettings):
    """Settings whose environment variables beat the values loaded from a file.

    The file's values arrive as keyword arguments (``init_settings``), which pydantic-settings
    would otherwise rank first."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return env_settings, init_settings


def s3_client(location: S3Location, *, connect_timeout_s: float, read_timeout_s: float, max_pool_connections: int) -> Any:
    """A boto3 S3 client as both processes need it: SigV4 (presigned URLs verify), path-style
    addressing (S3-compatible servers), bounded timeouts and pool, botocore's standard retries."""
    secret = location.secret_access_key
    return boto3.client(
        "s3",
        endpoint_url=location.endpoint_url,
        region_name=location.region,
        aws_access_key_id=location.access_key_id,
        aws_secret_access_key=secret.get_secret_value() if secret else None,
        config=Config(
            signature_version="s3v4",
            s3={"addressing_style": "path"},
            retries={"max_attempts": 2, "mode": "standard"},
            connect_timeout=connect_timeout_s,
            read_timeout=read_timeout_s,
            max_pool_connections=max_pool_connections,
        ),
    )


def check_regexes(patterns: Iterable[str], what: str = "regex") -> None:
    """Raise ValueError (a pydantic validation error in settings) naming the first invalid pattern."""
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as err:
            raise ValueError(f"invalid {what} {pattern!r}: {err}") from None


def describe_validation_error(err: ValidationError) -> str:
    """Every problem of ``err`` as ``dotted.name: message``, without the input values.

    pydantic's own text quotes each invalid input (``input_value=...``), which can be a secret:
    a Redis URL with its password, or a whole ``s3`` section with its secret key when a field
    beside it is missing. The messages of our own validators never quote a secret
    (``tiered_kafka.registry.describe_url``). ``build_settings`` raises its ConfigError ``from None``,
    so pydantic's text stays out of tracebacks too.
    """
    problems = []
    for error in err.errors(include_url=False, include_input=False, include_context=False):
        where = ".".join(str(part) for part in error["loc"]) or "(settings)"
        problems.append(f"{where}: {error['msg']}")
    return f"{len(problems)} problem(s): " + "; ".join(problems)


def build_settings(settings_cls: type[SettingsT], values: Mapping[str, Any], process: str) -> SettingsT:
    """``settings_cls`` from ``values`` (a file's, then the caller's overrides; the environment
    beats both: ``EnvironmentFirstSettings``). Invalid or missing settings raise one ConfigError
    naming every problem, "invalid {process} configuration: ...", without the inputs
    (``describe_validation_error``): the one way the agent and the gateway turn values into settings."""
    try:
        return settings_cls(**values)
    except ValidationError as err:  # pydantic's own text would quote the inputs, secrets included
        raise ConfigError(f"invalid {process} configuration: {describe_validation_error(err)}") from None
