"""Original bytes of an encrypted KIP-405 segment, by a signed byte-range URL (``rsm_urls``).

The plan of an encrypted segment hands out these URLs instead of presigned S3 URLs. The answer is
what S3 would answer for a plain segment: 206 with ``Content-Range: bytes {start}-{end-1}/{size}``
(``size``: the original .log's), the original bytes as the body.

Every chunk of the range is fetched (one ranged GET of the covering chunks), decrypted, its GCM tag
verified (and decompressed) *before* the status line is sent: a wrong key, a tampered tag or a
truncated chunk anywhere in the range is a clean JSON 502 ``rsm_decryption_failed``, never a 206 cut
short. The whole range is therefore held in memory once, which its bound keeps finite: a range is
at most ``max_bytes_limit`` (the largest ``max_bytes`` a plan may be asked), or one whole batch when
a single batch is larger (``read_plan``: a plan holds at least one whole batch). A signed range
larger than both (a URL signed before ``max_bytes_limit`` was lowered) is refused with 422
``invalid_request`` naming the bound.

The route needs no token (the URL is the credential), so it must not tell which clusters exist: an
unknown cluster, a cluster that is not KIP-405, a gateway without ``rsm_url_secret`` and a signature
that does not match all answer one and the same 403 ``rsm_url_refused`` (``rsm_urls.refused``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Request, Response

from tiered_kafka_gateway import rsm_urls
from tiered_kafka_gateway.errors import ErrorCode, GatewayError
from tiered_kafka_gateway.models import ErrorResponse
from tiered_kafka_gateway.rsm_reader import RsmClusterReader

router = APIRouter(responses={s: {"model": ErrorResponse} for s in (401, 403, 404, 416, 422, 500, 502, 503)})  # type: ignore[arg-type]


@router.get(
    rsm_urls.PATH_PREFIX + "{cluster}/{key:path}",
    operation_id="readRsmRange",
    summary="Original bytes of an encrypted KIP-405 segment (a signed URL from a read plan; no token)",
    status_code=206,
    response_class=Response,
    responses={206: {"content": {"application/octet-stream": {}}, "description": "the original bytes [start, end), every chunk verified"}},
)
def read_rsm_range(
    request: Request,
    cluster: Annotated[str, Path(pattern=r"^[A-Za-z0-9._-]{1,128}$")],
    key: str,
    start: Annotated[int, Query(ge=0)],
    end: Annotated[int, Query(ge=1)],
    expires: Annotated[int, Query(ge=0)],
    signature: Annotated[str, Query(min_length=1, max_length=100)],
    range_header: Annotated[str | None, Header(alias="range")] = None,
) -> Response:
    reader = request.app.state.readers.get(cluster)
    settings = request.app.state.settings
    secret = settings.rsm_url_secret
    # the signature first, whatever the cluster: an unknown cluster, one of another kind and a bad
    # signature get one and the same answer (rsm_urls.refused), so that this route, which needs no
    # token, does not tell which clusters exist
    rsm_urls.verify(secret.get_secret_value().encode() if secret is not None else None, cluster, key, start, end, expires, signature)
    if not isinstance(reader, RsmClusterReader):  # only a gateway with another config signed it (same secret, other clusters)
        raise rsm_urls.refused()
    if range_header != f"bytes={start}-{end - 1}":
        raise GatewayError(ErrorCode.RSM_URL_REFUSED, f"the Range header must be bytes={start}-{end - 1}, the range the URL was signed for")
    size = reader.original_size(key)
    if end > size or start >= end:
        raise GatewayError(ErrorCode.OFFSET_OUT_OF_RANGE, f"bytes {start}..{end} are outside {key} ({size} bytes)")
    limit = settings.max_bytes_limit
    if end - start > limit and not reader.is_one_batch(key, size, start, end):
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            f"bytes {start}..{end} of {key}: {end - start} bytes is more than max_bytes_limit ({limit}) and not one batch: plan again",
        )
    data = reader.read_original(key, start, end)  # every chunk decrypted and verified before the status line
    return Response(
        data,
        status_code=206,
        media_type="application/octet-stream",
        headers={"Content-Range": f"bytes {start}-{end - 1}/{size}", "Cache-Control": "no-store"},
    )
