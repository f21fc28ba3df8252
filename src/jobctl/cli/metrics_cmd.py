"""``jobctl metrics``: print what a Prometheus scrape of the daemon would get."""

from __future__ import annotations

import sys

from jobctl.cli.options import SocketOpt, client


def metrics(socket: SocketOpt = None) -> None:
    """Print the daemon's metrics in the Prometheus text format (GET /v1/metrics).

    The same text the metrics_listen TCP listener serves; this needs no open port. Every metric is described in docs/metrics.md.
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    with client(socket) as c:
        text = c.request("GET", "/v1/metrics")
    sys.stdout.write(text if isinstance(text, str) else str(text))
