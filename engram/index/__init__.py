"""The evidence index: a derived SQLite database (apsw) under ``.engram-cache/``."""

from engram.index.db import SCHEMA_VERSION, connect

__all__ = ["SCHEMA_VERSION", "connect"]
