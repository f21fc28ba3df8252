"""A webhook's URL (domain/http.py): what sending needs of it, parsed once (``url_parts``),
IPv6 literals in brackets included, and the URLs refused before they are stored."""

from __future__ import annotations

import ipaddress

import pytest

from jobctl.domain.http import HttpRequest, url_parts
from jobctl.domain.netguard import NetGuard
from jobctl.engine.httpclient import request_bytes
from jobctl.errors import InvalidInput


def test_a_global_ipv6_literal_is_parsed_and_allowed() -> None:
    url = url_parts("https://[2606:4700:4700::1111]:8443/run?x=1")
    assert (url.scheme, url.host, url.port) == ("https", "2606:4700:4700::1111", 8443)
    assert url.literal == ipaddress.IPv6Address("2606:4700:4700::1111")
    assert url.host_header == "[2606:4700:4700::1111]:8443" and url.target == "/run?x=1"
    assert NetGuard().refusal(url.literal, url.port) is None
    head = request_bytes("POST", url.target, url.host_header, {}, b"{}")
    assert head.startswith(b"POST /run?x=1 HTTP/1.1\r\nhost: [2606:4700:4700::1111]:8443\r\n")
    assert url_parts("http://[2606:4700::1]/").port == 80


def test_a_host_name_keeps_its_spelling_for_host_and_resolves_later() -> None:
    url = url_parts("http://Hooks.Example:8080")
    assert (url.host, url.host_header, url.target, url.literal) == (
        "hooks.example", "Hooks.Example:8080", "/", None
    )  # fmt: skip
    assert url_parts("https://bücher.example/x").host_header == "xn--bcher-kva.example"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://[::1/", "invalid url"),
        ("http://[zz::1]/", "invalid url"),
        ("http://[fe80::1%25eth0]:80/", "zone"),
        ("http://[::1]:99999/", "invalid url"),
    ],
)
def test_a_bad_ipv6_url_is_refused(url: str, why: str) -> None:
    with pytest.raises(InvalidInput, match=why):
        HttpRequest("POST", url)
