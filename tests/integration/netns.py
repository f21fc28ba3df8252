"""A network that drops packets silently, for one test's server only: a network namespace
joined to the host by a veth pair. The server listens on the namespace's end; taking that
end down makes every packet to it vanish with no reset and no error, as a firewall that
forgot the flow or an unplugged host does (a TCP proxy cannot: its kernel acknowledges
what it receives). Other tests' traffic (127.0.0.1, the shared server) never crosses it.

Needs root and ``ip`` (iproute2); :func:`silent_link` skips the test otherwise.
"""

from __future__ import annotations

import os
import random
import secrets
import shutil
import subprocess
from collections.abc import Iterator

import pytest


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


class SilentLink:
    """The namespace ``name`` at ``address``, reached from the host over a veth pair."""

    def __init__(self) -> None:
        tag = secrets.token_hex(3)
        self.name = f"jobctl-{tag}"
        self._host_end, self._ns_end = f"jh{tag}", f"jn{tag}"
        net = f"10.231.{random.randrange(256)}"
        self.address = f"{net}.2"
        _ip("netns", "add", self.name)
        try:
            _ip("link", "add", self._host_end, "type", "veth", "peer", "name", self._ns_end)
            _ip("link", "set", self._ns_end, "netns", self.name)
            _ip("addr", "add", f"{net}.1/30", "dev", self._host_end)
            _ip("link", "set", self._host_end, "up")
            self._in_ns("addr", "add", f"{self.address}/30", "dev", self._ns_end)
            self._in_ns("link", "set", "lo", "up")
            self.mend()
        except BaseException:
            self.close()
            raise

    def _in_ns(self, *args: str) -> None:
        _ip("netns", "exec", self.name, "ip", *args)

    def drop(self) -> None:
        """From now on every packet to the server vanishes (its end of the link is down)."""
        self._in_ns("link", "set", self._ns_end, "down")

    def mend(self) -> None:
        self._in_ns("link", "set", self._ns_end, "up")

    def close(self) -> None:
        subprocess.run(["ip", "link", "del", self._host_end], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30)


def silent_link() -> Iterator[SilentLink]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("a network namespace needs root and iproute2's ip")
    try:
        link = SilentLink()
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"no network namespace here: {exc.stderr.strip()}")
    try:
        yield link
    finally:
        link.close()
