"""Issue 29, fail closed: the gateway does not start open by accident, and its configuration errors
and reprs never show a token (``config.check_exposure``, ``GatewaySettings._auth_consistent``,
``AuthSettings._grants``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tiered_kafka.errors import ConfigError
from tiered_kafka_gateway import __main__ as gateway_main
from tiered_kafka_gateway.config import check_exposure, is_loopback, load_settings

TOKEN = "tok-5b0e2c9a7f3d41e8"
CLUSTERS = {"c1": {"redis_url": "redis://127.0.0.1:1/0", "s3": {"bucket": "b"}}}


@pytest.fixture(autouse=True)
def _no_config_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIERED_KAFKA_GATEWAY_CONFIG", raising=False)


def _start(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], host: str, **settings: Any) -> tuple[int, list[str], str]:
    """``tiered-kafka-gateway --config F --host host``: its exit status, the hosts uvicorn was asked to
    serve on (uvicorn.run recorded, not run: what is tested is the decision to start), stderr."""
    served: list[str] = []
    monkeypatch.setattr(gateway_main.uvicorn, "run", lambda *args, **kwargs: served.append(kwargs["host"]))
    monkeypatch.setenv("TIERED_KAFKA_GATEWAY_CONFIG", "")  # main sets it from --config: restored after the test
    config = tmp_path / "gateway.json"
    config.write_text(json.dumps({"clusters": CLUSTERS, **settings}))
    status = gateway_main.main(["--config", str(config), "--host", host])
    return status, served, capsys.readouterr().err


def test_beyond_loopback_without_authentication_the_gateway_refuses_to_start(monkeypatch, tmp_path, capsys) -> None:
    status, served, err = _start(monkeypatch, tmp_path, capsys, "0.0.0.0")  # the Docker image's --host
    assert (status, served) == (2, [])
    assert "refusing to listen on 0.0.0.0 without authentication" in err and "auth.allow_anonymous" in err and "auth.enabled" in err
    for host in ("::", "10.1.2.3", "gateway.internal"):
        with pytest.raises(ConfigError, match=f"refusing to listen on {host} "):
            check_exposure(load_settings(clusters=CLUSTERS), host)


def test_the_command_as_the_docker_image_runs_it_exits_2_without_serving(tmp_path: Path) -> None:
    """The real process (``python -m tiered_kafka_gateway --host 0.0.0.0``, the image's CMD): it ends by
    itself with the message; before issue 29 it served every caller (the timeout would expire)."""
    config = tmp_path / "gateway.json"
    config.write_text(json.dumps({"clusters": CLUSTERS}))
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_KAFKA_GATEWAY_")}
    done = subprocess.run([sys.executable, "-m", "tiered_kafka_gateway", "--config", str(config), "--host", "0.0.0.0", "--port", "0"],
                          env=environment, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "refusing to listen on 0.0.0.0 without authentication" in done.stderr, done.stderr


def test_loopback_an_explicit_anonymous_gateway_and_an_authenticated_one_start(monkeypatch, tmp_path, capsys) -> None:
    assert _start(monkeypatch, tmp_path, capsys, "127.0.0.1")[:2] == (0, ["127.0.0.1"])  # `make run`'s and the tests' address
    assert _start(monkeypatch, tmp_path, capsys, "0.0.0.0", auth={"allow_anonymous": True})[:2] == (0, ["0.0.0.0"])
    assert _start(monkeypatch, tmp_path, capsys, "0.0.0.0", auth={"enabled": True, "tokens": {TOKEN: ["t.*"]}})[:2] == (0, ["0.0.0.0"])
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.5.0.1", "::1", "[::1]", "localhost", "LOCALHOST"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.2", "example.com", ""))


def test_tokens_without_auth_enabled_and_anonymous_with_auth_are_refused_even_on_loopback(monkeypatch, tmp_path, capsys) -> None:
    status, served, err = _start(monkeypatch, tmp_path, capsys, "127.0.0.1", auth={"tokens": {TOKEN: ["t.*"]}})
    assert (status, served) == (2, [])
    assert "auth.tokens are set but auth.enabled is false" in err and TOKEN not in err
    with pytest.raises(ConfigError, match="auth.allow_anonymous is for a gateway without authentication"):
        load_settings(clusters=CLUSTERS, auth={"enabled": True, "allow_anonymous": True, "tokens": {TOKEN: ["t"]}})


@pytest.mark.parametrize(
    "grant",
    [
        "not a list",  # pydantic's location was auth.tokens.<the token>
        ["("],  # a pattern that does not compile
        [1, {"x": 2}],  # not strings
        {"topics": ["t"], "cluster": ["c1"]},  # a misspelt key
        {"topics": ["t"], "clusters": ["c1", "nowhere"]},  # a cluster that is not configured
    ],
)
def test_a_malformed_token_entry_is_named_by_its_position_never_by_the_token(grant: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(clusters=CLUSTERS, auth={"enabled": True, "tokens": {"x" * 16 + "-other-token": ["t"], TOKEN: grant}})
    message = str(caught.value)
    assert "auth.tokens" in message and "entry 2 of 2" in message, message
    assert TOKEN not in message and "other-token" not in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_tokens_stay_out_of_the_settings_reprs() -> None:
    settings = load_settings(clusters=CLUSTERS, auth={"enabled": True, "tokens": {TOKEN: ["t.*"]}})
    assert TOKEN not in repr(settings) and TOKEN not in str(settings) and TOKEN not in repr(settings.auth)
    assert settings.auth.tokens[TOKEN].topics == ["t.*"] and settings.auth.tokens[TOKEN].clusters is None  # a list: every cluster
    reloaded = load_settings(**settings.model_dump())  # tests/support/gateway_process.py writes the settings back this way
    assert reloaded.auth.tokens == settings.auth.tokens
