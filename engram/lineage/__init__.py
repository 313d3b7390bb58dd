"""Lineage at ingest time (it writes): edges, tombstones and continuations between the events and
tapes of the index. ``rules.py`` holds the thresholds and shared helpers, ``derive.py`` the pass an
ingest runs, ``edges.py`` and ``continuations.py`` the work, ``cache.py`` what one ingest run keeps
for it. The walk that follows these rows at query time is ``engram/query/walk.py``."""
