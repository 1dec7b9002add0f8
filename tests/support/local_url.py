"""The base URL of the tests' ``TestClient``s: a Host header the gateway answers.

Starlette's default (``http://testserver``) names a host outside the gateway's ``allowed_hosts``
(default ``["localhost"]``; ``tiered_kafka_gateway.http_guards``: the DNS-rebinding guard), and a
request to it is 403 ``host_not_allowed``, as a browser's would be."""

LOCAL_URL = "http://localhost"
