"""Request parameters in, JSON-RPC errors out: the server's validation boundary.

Custom requests (``engram/*``) and command arguments are registered *untyped* on purpose: pygls
answers nothing at all when typed params fail to structure (the client hangs), so every handler
takes raw params, converts them with ``plain()`` and validates them here. A bad value raises
``InvalidParams`` (JSON-RPC -32602) with a message naming the field; an ``EngramError`` from the
engine becomes a server error (-32001) whose ``data`` carries the stable Engram ``code``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pygls.exceptions import JsonRpcInvalidParams, JsonRpcServerError
from pygls.uris import to_fs_path

from engram.errors import EngramError

ENGRAM_ERROR = -32001  # JSON-RPC server-error range: an EngramError with data.code
MAX_UINTEGER = 2**31 - 1  # LSP's uinteger: lines and characters


def _r(v: Any, n: int = 60) -> str:
    """``repr(v)``, cut to ``n`` characters: messages stay one short line whatever was sent."""
    text = repr(v)
    return text if len(text) <= n else text[: n - 1] + "…"


class InvalidParams(JsonRpcInvalidParams):
    """A request parameter is missing or has the wrong type."""


def engram_error(exc: EngramError) -> JsonRpcServerError:
    """Translate an engine error into a JSON-RPC error (message for people, data for programs)."""
    return JsonRpcServerError(str(exc), ENGRAM_ERROR, data=exc.to_dict()["error"])


def plain(obj: Any) -> Any:
    """pygls' untyped params (nested namedtuples) → plain dicts/lists (``InvalidParams`` when
    they are nested too deeply to convert)."""
    try:
        return _plain(obj)
    except RecursionError:
        raise InvalidParams("params are nested too deeply") from None


def _plain(obj: Any) -> Any:
    if hasattr(obj, "_asdict"):
        return {k: _plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def require_object(params: Any, what: str = "params") -> dict:
    params = plain(params)
    if not isinstance(params, dict):
        raise InvalidParams(f"{what} must be an object, got {type(params).__name__}")
    return params


def get_str(
    params: dict, key: str, *, required: bool = True, default: str | None = None
) -> str | None:
    v = params.get(key)
    if v is None:
        if required:
            raise InvalidParams(f"missing required parameter {key!r}")
        return default
    if not isinstance(v, str) or not v:
        raise InvalidParams(f"parameter {key!r} must be a non-empty string, got {_r(v)}")
    return v


def get_int(
    params: dict,
    key: str,
    default: int | None,
    *,
    lo: int = 0,
    hi: int = 1_000_000,
    required: bool = False,
) -> int | None:
    v = params.get(key)
    if v is None:
        if required:
            raise InvalidParams(f"missing required parameter {key!r}")
        return default
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float))
        or (isinstance(v, float) and not math.isfinite(v))
        or int(v) != v
    ):
        raise InvalidParams(f"parameter {key!r} must be an integer, got {_r(v)}")
    if not lo <= v <= hi:
        raise InvalidParams(f"parameter {key!r} must be in [{lo}, {hi}], got {_r(v)}")
    return int(v)


def get_float(
    params: dict, key: str, default: float | None, *, lo: float = 0.0, hi: float = 1.0
) -> float | None:
    v = params.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise InvalidParams(f"parameter {key!r} must be a number in [{lo}, {hi}], got {_r(v)}")
    return float(v)


def get_bool(params: dict, key: str, default: bool = False) -> bool:
    v = params.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise InvalidParams(f"parameter {key!r} must be true or false, got {_r(v)}")
    return v


def text_document_uri(params: dict) -> str:
    doc = params.get("textDocument")
    if not isinstance(doc, dict):
        raise InvalidParams("missing required parameter 'textDocument' ({uri})")
    uri = doc.get("uri")
    if not isinstance(uri, str) or not uri:
        raise InvalidParams("parameter 'textDocument.uri' must be a non-empty string")
    return uri


def _position(v: Any, what: str) -> tuple[int, int]:
    if not isinstance(v, dict):
        raise InvalidParams(f"{what} must be a position {{line, character}}, got {_r(v)}")
    line, char = v.get("line"), v.get("character", 0)
    for name, x in (("line", line), ("character", char)):
        if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x <= MAX_UINTEGER:
            raise InvalidParams(
                f"{what}.{name} must be an integer in [0, {MAX_UINTEGER}], got {_r(x)}"
            )
    return line, char


def line_range(v: Any, what: str = "range") -> tuple[int, int]:
    """An LSP range (0-based, end exclusive) → 1-based inclusive ``(start, end)`` lines.

    A range that ends at character 0 of a later line (a whole-line selection) stops on the line
    before it.
    """
    v = plain(v)
    if not isinstance(v, dict):
        raise InvalidParams(f"parameter {what!r} must be a range {{start, end}}, got {_r(v)}")
    (sl, _sc), (el, ec) = (
        _position(v.get("start"), f"{what}.start"),
        _position(v.get("end"), f"{what}.end"),
    )
    if el < sl:
        raise InvalidParams(f"{what}: end line {el} is before start line {sl}")
    if ec == 0 and el > sl:
        el -= 1
    return sl + 1, el + 1


def lsp_range(start: int, end: int) -> dict:
    """1-based inclusive lines → an LSP range dict covering whole lines."""
    return {"start": {"line": start - 1, "character": 0}, "end": {"line": end, "character": 0}}


def uri_to_path(uri: str) -> Path:
    if not isinstance(uri, str) or not uri.startswith("file:"):
        raise InvalidParams(f"only file: URIs are supported, got {_r(uri)}")
    try:
        path = to_fs_path(uri)
    except Exception:  # what the URI parser does not take
        path = None
    if not path or "\x00" in path:
        raise InvalidParams(f"cannot map URI to a file: {_r(uri)}")
    return Path(path)

