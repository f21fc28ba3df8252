"""``GET /v1/metrics``: the daemon's Prometheus metrics on its Unix socket.

The same bytes the optional TCP listener (``metrics_listen``) serves; on the socket they
need no open port, so ``jobctl metrics`` and a node-exporter textfile cron job work on
hosts where nothing may listen on the network.
"""

from __future__ import annotations

from fastapi import APIRouter, Response

from jobctl.api.app import Ctx
from jobctl.metrics import CONTENT_TYPE

router = APIRouter(prefix="/v1")


@router.get(
    "/metrics",
    response_class=Response,
    summary="Prometheus metrics in the text exposition format",
    responses={200: {"content": {"text/plain": {}}}},
)
async def metrics(ctx: Ctx) -> Response:
    return Response(await ctx.metrics.scrape(ctx.store), media_type=CONTENT_TYPE)
