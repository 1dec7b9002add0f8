"""Issue 29, scopes: a token sees only the clusters it names (``deps``), and the unauthenticated
rsm-ranges route answers an unknown cluster as it answers any URL it did not sign (``rsm_urls.refused``).

The app is the real one (``create_app``) over configured clusters whose Redis and S3 are never
contacted (nothing listens on port 1); the readable cluster's source is the fake-backed reader of
``fakes.transactional_cluster``, so that an allowed read answers 200 without any service."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.support.local_url import LOCAL_URL
from tests.unit.gateway.fakes import TOPIC, transactional_cluster
from tiered_kafka_gateway import rsm_urls
from tiered_kafka_gateway.app import create_app
from tiered_kafka_gateway.config import load_settings

SCOPED = "scoped-token-3e1f0a9c"  # c1 only
WIDE = "wide-token-77d2b4e618"  # a list, as before clusters could be named: every cluster
UNREACHABLE = {"redis_url": "redis://127.0.0.1:1/0", "s3": {"bucket": "b", "endpoint_url": "http://127.0.0.1:1"}}
SECRET = "u" * 32


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.delenv("TIERED_KAFKA_GATEWAY_CONFIG", raising=False)
    settings = load_settings(
        clusters={"c1": UNREACHABLE, "hidden-c2": UNREACHABLE, "rsm": {"kind": "kip405", "rsm": {"bucket": "r", "endpoint_url": "http://127.0.0.1:1"}}},
        auth={"enabled": True, "tokens": {SCOPED: {"topics": [TOPIC], "clusters": ["c1"]}, WIDE: [TOPIC]}},
        rsm_url_secret=SECRET,
    )
    app = create_app(settings)
    unreachable = app.state.readers["c1"]
    app.state.readers["c1"] = transactional_cluster(tmp_path).reader  # c1's data, from fakes
    unreachable.close()
    with TestClient(app, base_url=LOCAL_URL) as test_client:  # the lifespan closes the readers
        yield test_client


def _get(client: TestClient, path: str, token: str) -> tuple[int, dict]:
    answer = client.get(path, headers={"Authorization": f"Bearer {token}"})
    return answer.status_code, answer.json()


def test_a_token_lists_and_reads_only_the_clusters_it_names(client: TestClient) -> None:
    assert _get(client, "/v1/clusters", SCOPED) == (200, {"clusters": ["c1"]})
    assert _get(client, "/v1/clusters", WIDE) == (200, {"clusters": ["c1", "hidden-c2", "rsm"]})
    status, body = _get(client, f"/v1/clusters/c1/topics/{TOPIC}/partitions/0", SCOPED)
    assert status == 200 and body["remote"]["latest_offset"] == 21, body
    index = client.get("/ui/", headers={"X-API-Key": SCOPED})
    assert index.status_code == 200 and "c1" in index.text and "hidden-c2" not in index.text and "rsm" not in index.text


@pytest.mark.parametrize("suffix", ["/topics", f"/topics/{TOPIC}/partitions/0", f"/topics/{TOPIC}/partitions/0/plan?offset=0"])
def test_a_cluster_the_token_may_not_see_answers_exactly_as_an_unknown_one(client: TestClient, suffix: str) -> None:
    hidden = _get(client, f"/v1/clusters/hidden-c2{suffix}", SCOPED)
    unknown = _get(client, f"/v1/clusters/nowhere-c2{suffix}", SCOPED)
    assert hidden[0] == unknown[0] == 404 and hidden[1]["error"]["code"] == "unknown_cluster"
    assert repr(hidden[1]).replace("hidden-c2", "X") == repr(unknown[1]).replace("nowhere-c2", "X")
    ui_hidden = client.get("/ui/clusters/hidden-c2", headers={"X-API-Key": SCOPED})
    ui_unknown = client.get("/ui/clusters/nowhere-c2", headers={"X-API-Key": SCOPED})
    assert ui_hidden.status_code == ui_unknown.status_code == 404
    assert ui_hidden.text.replace("hidden-c2", "X") == ui_unknown.text.replace("nowhere-c2", "X")


def test_rsm_ranges_answers_one_message_for_an_unknown_cluster_another_kind_and_a_bad_signature(client: TestClient) -> None:
    """No token: the route must not tell which clusters exist, nor which are KIP-405."""
    expires = int(time.time()) + 60
    query = f"?start=0&end=10&expires={expires}&signature=" + "A" * 43
    answers = {}
    for cluster in ("rsm", "c1", "hidden-c2", "nowhere"):  # KIP-405 (bad signature), agent kinds, unknown
        answer = client.get(f"{rsm_urls.PATH_PREFIX}{cluster}/p/t-0/00000000000000000000.log{query}", headers={"Range": "bytes=0-9"})
        answers[cluster] = (answer.status_code, answer.json())
    assert len(set(map(repr, answers.values()))) == 1, answers
    assert answers["nowhere"] == (403, {"error": {"code": "rsm_url_refused", "message": rsm_urls.REFUSED_MESSAGE}})
    # a correctly signed URL naming a cluster of another kind (only a gateway with the same secret could sign it): the same answer
    signed = rsm_urls.signed_url(LOCAL_URL, SECRET.encode(), "c1", "p/t-0/0.log", 0, 10, 60)
    answer = client.get(signed, headers={"Range": "bytes=0-9"})
    assert (answer.status_code, answer.json()) == answers["nowhere"]
