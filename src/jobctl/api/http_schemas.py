"""The wire model of an http job's request (a webhook job): URL, method, headers, body
and signing secret, with the URL and header rules spelled as patterns for the OpenAPI
document."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Field,
)

from jobctl.api.wiretypes import NUMBER, STRICT
from jobctl.domain import http as web
from jobctl.domain import limits


def _ci(name: str) -> str:
    """A regex of ``name`` in any case, without flags (JSON Schema's regexes have none)."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in name)


_H16 = "[0-9A-Fa-f]{1,4}"
_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
#: An IPv6 address in any of its written forms (RFC 4291 2.2: full, "::"-compressed, or
#: IPv4-mapped), no zone.
IPV6_PATTERN = "|".join(
    (
        f"({_H16}:){{7}}{_H16}",
        f"({_H16}:){{1,7}}:",
        f"({_H16}:){{1,6}}:{_H16}",
        *(f"({_H16}:){{1,{n}}}(:{_H16}){{1,{7 - n}}}" for n in range(5, 0, -1)),
        f":((:{_H16}){{1,7}}|:)",
        rf"::[fF]{{4}}:({_OCTET}\.){{3}}{_OCTET}",
    )
)
#: A URL the API takes: http(s), a host name, an IPv4 address or an IPv6 one in brackets,
#: a port up to 65535, then printable ASCII (what jobctl.domain.http accepts, written so the
#: document says it).
URL_PATTERN = (
    rf"^https?://([A-Za-z0-9.-]+|\[({IPV6_PATTERN})\])"
    r"(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4}))?"
    r"([/?#][!-~]*)?$"
)
_RESERVED = "^(" + "|".join(_ci(n) for n in sorted(web.RESERVED_HEADERS)) + ")$"
HeaderValue = Annotated[str, Field(max_length=web.MAX_HEADER_VALUE, pattern=r"^[^\r\n\x00]*$")]


def _headers_schema(schema: dict[str, Any]) -> None:
    """``headers`` in the OpenAPI document: token names, not the daemon's own."""
    schema["propertyNames"] = {"pattern": web.HEADER_NAME.pattern, "not": {"pattern": _RESERVED}}


class HttpIn(BaseModel):
    """An http job's request (docs/webhooks.md): sent, signed, instead of a command."""

    model_config = STRICT
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    url: Annotated[str, Field(min_length=1, max_length=web.MAX_URL, pattern=URL_PATTERN)]
    headers: Annotated[
        dict[str, HeaderValue],
        Field(max_length=web.MAX_HEADERS, json_schema_extra=_headers_schema),
    ] = Field(default_factory=dict)
    body: Annotated[
        str, Field(max_length=limits.MAX_PAYLOAD_BYTES, pattern=limits.TEXT_PATTERN)
    ] = ""
    #: 4xx statuses retried (by default a 4xx but 429 is dead at once; 410 always is).
    retry_on: list[
        Annotated[int, Field(ge=400, le=499, json_schema_extra={"not": {"const": 410}}), NUMBER]
    ] = Field(default_factory=list)
    #: The owner's signing secret (jobctl secrets); unset: "default" if it exists.
    secret: Annotated[str, Field(pattern=web.SECRET_NAME.pattern)] | None = None

    def to_request(self) -> web.HttpRequest:
        """The checked request (InvalidInput, a 422, for what the field rules let pass)."""
        return web.HttpRequest(
            method=self.method,
            url=self.url,
            headers=tuple(sorted(self.headers.items())),
            body=self.body,
            retry_on=tuple(sorted(set(self.retry_on))),
            secret=self.secret,
        )
