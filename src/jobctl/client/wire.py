"""The client's side of the wire: JSON answers decoded and error bodies turned back into
the :mod:`jobctl.errors` classes the daemon raised.

Split from client/client.py so the request policy there reads on its own; everything
here is pure (bytes in, values or exceptions out) and is tested without a daemon.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from json import encoder as _json_encoder
from typing import Any

import orjson

from jobctl import errors

__all__ = ["dumps", "error_from", "loads", "not_utf8"]

#: Every code of :mod:`jobctl.errors` (the API's errors, each class its own code), read
#: from the module so a class added there comes back as itself without a second list.
_BY_CODE: dict[str, type[errors.JobctlError]] = {
    cls.code: cls
    for cls in vars(errors).values()
    if isinstance(cls, type) and issubclass(cls, errors.JobctlError) and "code" in vars(cls)
}


def not_utf8(exc: UnicodeEncodeError) -> errors.InvalidInput:
    """An argument with bytes that are not UTF-8 (a Latin-1 file name, say): Python holds
    them as lone surrogates, which neither JSON nor a URL can carry; the daemon answered
    "the body is not valid JSON", or the client failed with an internal error."""
    text = exc.object if isinstance(exc.object, str) else str(exc.object)
    start = text.rfind('"', 0, exc.start) + 1  # the JSON string it is in, if any
    end = text.find('"', exc.end)
    shown = text[start : end if end >= 0 else len(text)]
    raw = shown.encode("utf-8", "surrogateescape") if shown else b""
    return errors.InvalidInput(
        f"{raw!r} is not UTF-8 text: jobctl carries commands, names and values as JSON, "
        "which holds UTF-8 only"
    )


#: ``data.translate(_DIGIT)`` marks each ASCII digit 1 and every other byte 0.
_DIGIT = bytes(int(48 <= b <= 57) for b in range(256))
#: 19 digits in a row: the shortest number orjson might read otherwise than json (an
#: integer past 64 bits becomes a float there); 18 digits are below 2^63.
_LONG_NUMBER = b"\x01" * 19


def loads(data: bytes) -> Any:
    """A JSON answer exactly as :func:`json.loads` reads it, in about half the time.

    orjson reads a 500-job batch's answer in about half json's time, a millisecond and more
    of the client's CPU per batch. Where the two could differ, :mod:`json` reads it: an
    answer with 19 digits in a row (an integer past 64 bits is a float to orjson), and
    whatever orjson refuses (an escaped lone surrogate, a byte-order mark, ``NaN``), whose
    result or error is then json's.
    """
    if _LONG_NUMBER not in data.translate(_DIGIT):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


#: The circular-reference marks of :data:`_ENCODE`, emptied before each use (an encoding
#: that failed midway leaves its own behind), and who is using them.
_MARKERS: dict[int, Any] = {}
_ENCODING = threading.Lock()
#: The C encoder that :func:`json.dumps` builds anew for each call, built once with the
#: arguments of json's default encoder (what ``json.dumps(obj)`` uses).
_MAKE_ENCODER: Callable[..., Callable[[Any, int], tuple[str, ...]]] | None = getattr(
    _json_encoder, "c_make_encoder", None
)
_ENCODE = (
    None
    if _MAKE_ENCODER is None
    else _MAKE_ENCODER(
        _MARKERS,
        json.JSONEncoder().default,
        _json_encoder.encode_basestring_ascii,
        None,
        ": ",
        ", ",
        False,
        False,
        True,
    )
)


def dumps(obj: Any) -> bytes:
    """``json.dumps(obj).encode()``: the same bytes and the same errors, for less CPU.

    ``json.dumps`` builds a C encoder for each call, about a third of the time it takes to
    encode a job; this one is built once. While another thread (or a finalizer run
    midway) holds it, or where there is no C encoder (another Python), json encodes."""
    if _ENCODE is None or not _ENCODING.acquire(blocking=False):
        return json.dumps(obj).encode()
    try:
        _MARKERS.clear()
        return "".join(_ENCODE(obj, 0)).encode()
    finally:
        _ENCODING.release()


def error_from(status: int, data: bytes) -> errors.JobctlError:
    try:
        err = loads(data)["error"]
        code, message = str(err["code"]), str(err["message"])
    except (ValueError, KeyError, TypeError):
        text = data[:200].decode("utf-8", errors="replace")
        return errors.JobctlError(f"daemon answered HTTP {status}: {text}")
    cls = _BY_CODE.get(code, errors.JobctlError)
    details = {k: v for k, v in err.items() if k not in ("code", "message")}
    return cls(message, **details, http_status=status)
