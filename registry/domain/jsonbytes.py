"""JSON bytes that are kept in memory.

orjson returns its output buffer as the bytes object, capacity included: at least 4 KB however short
the document, several times its length for a few KB (orjson 3.13). For a response sent at once that
does not matter; for encodings kept per instance (the payload builder's instance bodies, the
warm-restart rows) it would multiply what each instance holds per copy. A copy of the exact length
costs one memcpy.
"""

from __future__ import annotations

from typing import Any

import orjson


def dumps_to_keep(value: Any) -> bytes:
    """``orjson.dumps(value)`` in a bytes object of exactly its length."""
    return bytes(memoryview(orjson.dumps(value)))
