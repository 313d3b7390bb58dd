"""UTC timestamps as the project writes them: ISO 8601 with a ``Z``, to the second
(``2025-01-02T03:04:05Z``: when an ingest or an embedding pass ran) or to the millisecond
(``2025-01-02T03:04:05.678Z``: event times, as the tapes carry them)."""

from __future__ import annotations

import time
from datetime import datetime, timezone


def utc_iso(ts: float | None = None, *, millis: bool = False) -> str:
    """``ts`` (seconds since the epoch; now when None) in UTC, ISO 8601 with a ``Z``."""
    if not millis:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
    dt = datetime.fromtimestamp(time.time() if ts is None else ts, tz=timezone.utc)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")
