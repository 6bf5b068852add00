"""JSON in and out of jobttl: orjson, which fails cleanly on hostile input.

API responses (list pages of 500 objects of ~10 KB each), CloudEvents and records all
pass through here. orjson is several times faster than the standard library on these
payloads, and it refuses what the standard library would choke on: nesting deeper than
1024 levels is a ValueError, not a RecursionError that escapes every handler, and lone
surrogates are refused instead of failing later inside the Redis client.
"""

from __future__ import annotations

from typing import Any

import orjson

# What a decode failure is: a ValueError (orjson.JSONDecodeError subclasses it).
DecodeError = orjson.JSONDecodeError
NESTING_LIMIT = 1024  # orjson's, on decode


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Decode JSON; raises DecodeError (a ValueError) naming the problem."""
    return orjson.loads(data)


def dumps(value: Any) -> bytes:
    """Encode JSON; raises TypeError for values that cannot be encoded (or nest over 254 levels)."""
    return orjson.dumps(value)


def dumps_str(value: Any) -> str:
    return orjson.dumps(value).decode()


def dumps_kept(value: Any, limit: int | None = None) -> str:
    """Encode what we keep about an object (a tombstone, an archived status), whatever it holds.

    An object may legitimately nest deeper than orjson encodes, or carry a huge status; what
    is kept then says so instead of failing the step that keeps it.
    """
    try:
        text = orjson.dumps(value).decode()
    except TypeError as exc:
        return orjson.dumps({"unkept": f"could not be encoded: {exc}"}).decode()
    if limit is not None and len(text) > limit:
        return orjson.dumps({"unkept": f"{len(text)} bytes, over the limit of {limit}"}).decode()
    return text
