"""Where ``tiered-kafka`` finds the gateway, cluster, token and Kafka (``cli_config``, pure logic over
files in tmp_path): the command line wins over the environment, which wins over the configuration file;
the token is never needed on argv; a token file others may read is warned about."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tiered_kafka.cli import _parse
from tiered_kafka.cli.settings import default_config_path
from tiered_kafka.errors import ConfigError

TOKEN = "s3cr3t-token-value-0123"


def config_file(path: Path, mode: int = 0o600, **keys: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# tiered-kafka\n" + "".join(f"{k.replace('_', '.')}={v}\n" for k, v in keys.items()))
    os.chmod(path, mode)
    return path


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """An environment with none of our variables and an empty $XDG_CONFIG_HOME (tmp_path/xdg)."""
    for name in list(os.environ):
        if name.startswith("TIERED_KAFKA_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return {}


def test_the_exports_of_make_run_are_enough_for_cat(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: `cat demo 0` with TIERED_KAFKA_GATEWAY_URL set failed for want of --gateway."""
    monkeypatch.setenv("TIERED_KAFKA_GATEWAY_URL", "http://gw:8080")
    monkeypatch.setenv("TIERED_KAFKA_CLUSTER", "local")
    monkeypatch.setenv("TIERED_KAFKA_TOKEN", TOKEN)
    monkeypatch.setenv("TIERED_KAFKA_BOOTSTRAP_SERVERS", "k:9092")
    args, connection = _parse(["cat", "demo", "0"])
    assert (args.gateway, args.cluster, args.token, args.bootstrap_servers) == ("http://gw:8080", "local", TOKEN, "k:9092")
    assert args.mode == "REMOTE_PREFERRED"  # bootstrap servers from the environment count as given
    assert TOKEN not in repr(connection)


def test_the_command_line_wins_over_the_environment_over_the_file(env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = config_file(tmp_path / "tk.properties", tiered_gateway_url="http://file:1", tiered_cluster="file", bootstrap_servers="file:9092")
    monkeypatch.setenv("TIERED_KAFKA_CLUSTER", "env")
    args, _ = _parse(["describe", "t", "-F", str(path), "--gateway", "http://argv:2"])
    assert (args.gateway, args.cluster) == ("http://argv:2", "env")
    args, connection = _parse(["topics", "-F", str(path)])
    assert (args.gateway, args.cluster, connection.bootstrap_servers) == ("http://file:1", "env", "file:9092")


def test_the_default_file_is_read_from_xdg_config_home(env: dict[str, str], tmp_path: Path) -> None:
    assert default_config_path({"XDG_CONFIG_HOME": str(tmp_path / "xdg")}) == tmp_path / "xdg" / "tiered-kafka" / "config"
    assert default_config_path({"HOME": "/home/u"}) == Path("/home/u/.config/tiered-kafka/config")
    config_file(tmp_path / "xdg" / "tiered-kafka" / "config", tiered_gateway_url="http://xdg:1", tiered_cluster="c", tiered_gateway_token=TOKEN)
    args, _ = _parse(["cat", "t", "0"])
    assert (args.gateway, args.cluster, args.token, args.mode) == ("http://xdg:1", "c", TOKEN, "REMOTE_ONLY")


def test_tiered_kafka_config_names_the_file_and_other_keys_go_to_kafka(env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = config_file(tmp_path / "other", tiered_gateway_url="http://x:1", tiered_cluster="c", security_protocol="SASL_SSL")
    monkeypatch.setenv("TIERED_KAFKA_CONFIG", str(path))
    _, connection = _parse(["topics"])
    assert connection.kafka == {"security.protocol": "SASL_SSL"}


@pytest.mark.parametrize("how", [pytest.param("-F", id="option"), pytest.param("env", id="TIERED_KAFKA_CONFIG")])
def test_a_named_configuration_file_that_is_missing_is_an_error(env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    argv = ["topics", "--gateway", "http://x:1", "--cluster", "c"]
    if how == "-F":
        argv += ["-F", str(tmp_path / "nope")]
    else:
        monkeypatch.setenv("TIERED_KAFKA_CONFIG", str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match=r"nope does not exist"):
        _parse(argv)


def test_a_token_file_is_read_and_warned_about_when_others_may_read_it(env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    args, _ = _parse(["cat", "t", "0", "--gateway", "http://x:1", "--cluster", "c", "--token-file", str(token_file)])
    assert args.token == TOKEN and capsys.readouterr().err == ""
    token_file.chmod(0o644)
    _parse(["cat", "t", "0", "--gateway", "http://x:1", "--cluster", "c", "--token-file", str(token_file)])
    err = capsys.readouterr().err
    assert f"warning: {token_file} holds a token and other users may read it (mode 0644): chmod 600" in err and TOKEN not in err
    with pytest.raises(ConfigError, match="not both"):
        _parse(["cat", "t", "0", "--gateway", "http://x:1", "--cluster", "c", "--token-file", str(token_file), "--token", "x"])


def test_a_configuration_file_holding_a_token_is_warned_about_when_others_may_read_it(env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = config_file(tmp_path / "conf", mode=0o640, tiered_gateway_url="http://x:1", tiered_cluster="c", tiered_gateway_token=TOKEN)
    args, _ = _parse(["topics", "-F", str(path)])
    assert args.token == TOKEN
    assert "holds tiered.gateway.token and other users may read it (mode 0640)" in capsys.readouterr().err
    _parse(["topics", "-F", str(path), "--token", "from-argv"])  # the file still holds a token others may read; --token shows in ps
    err = capsys.readouterr().err
    assert "holds tiered.gateway.token and other users may read it" in err and "--token is visible to every local user" in err and "from-argv" not in err
    config_file(path, mode=0o644, tiered_gateway_url="http://x:1", tiered_cluster="c")  # no token in it: nothing to warn about
    _parse(["topics", "-F", str(path)])
    assert capsys.readouterr().err == ""
    # a SASL password is as secret as the token (issue 36): its file gets the same warning, never the value
    path.write_text(path.read_text() + "security.protocol=SASL_SSL\nsasl.password=hunter2-secret\n")
    _parse(["topics", "-F", str(path)])
    err = capsys.readouterr().err
    assert "holds sasl.password and other users may read it (mode 0644)" in err and "hunter2" not in err, err
    path.chmod(0o600)
    _parse(["topics", "-F", str(path)])
    assert capsys.readouterr().err == ""


def test_without_a_gateway_anywhere_the_error_names_the_variables(env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _parse(["cat", "t", "0"])
    assert exited.value.code == 2
    assert "TIERED_KAFKA_GATEWAY_URL" in capsys.readouterr().err


def test_the_backfills_token_on_the_command_line_is_warned_about_and_the_environment_is_read(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from tiered_kafka.spark.backfill import parse_args

    base = ["--gateway-url", "http://x:1", "--cluster", "c", "--topic", "t", "--output", "out", "--redis-url", "redis://127.0.0.1:1/0"]
    monkeypatch.delenv("TIERED_KAFKA_TOKEN", raising=False)
    assert parse_args([*base, "--token", TOKEN]).token == TOKEN
    err = capsys.readouterr().err
    assert "--token is visible to every local user" in err and TOKEN not in err
    monkeypatch.setenv("TIERED_KAFKA_TOKEN", TOKEN)
    assert parse_args(base).token == TOKEN and capsys.readouterr().err == ""
