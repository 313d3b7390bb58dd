"""Events of indexed tapes: sealed ones read from their files (verified, cached), live ones from
the index. What the transcript windows, the lineage pass and ``engram show`` read through.

A sealed tape that cannot be read (missing, unreadable, corrupt, not matching its name) raises
``CorruptTape`` naming the file; never another exception."""

from __future__ import annotations

import apsw
import orjson

from engram.errors import CorruptTape
from engram.index import queries, schema
from engram.tape import reader


class TapeAccess:
    """Reads events of indexed tapes: sealed ones from their files, live ones from the index."""

    def __init__(self, conn: apsw.Connection):
        self.conn = conn
        self._last: tuple[str, tuple[bytes, ...]] | None = None  # the sealed tape read last

    def _lines(self, tape: queries.TapeRow) -> tuple[bytes, ...]:
        """The sealed tape's lines (the reader's LRU checks the file once per tape in a row: a
        window and the request before it, and a session's windows, read one tape)."""
        if not tape.path:
            raise CorruptTape("tape has no file", path=tape.tape_id)
        last = self._last
        if last is None or last[0] != tape.path:
            last = self._last = (tape.path, reader.raw_lines_cached(tape.path))
        return last[1]

    def read(self, tape: queries.TapeRow, offsets: range) -> list[tuple[int, dict]]:
        if tape.live:
            rows = queries.tape_events_in_range(self.conn, tape.id, offsets.start, offsets.stop - 1)
            bodies = queries.live_bodies(self.conn, [r.id for r in rows])
            return [(r.ofs, orjson.loads(bodies[r.id])) for r in rows if r.id in bodies]
        return reader.events_at(self._lines(tape), offsets, tape.path)

    def length(self, tape: queries.TapeRow) -> int:
        return tape.n_events

    def last_request(self, tape: queries.TapeRow, anchor: int, lookback: int) -> tuple[int, dict] | None:
        """The nearest user request at or before ``anchor``: tapes are canonical JSON, so a line
        is only parsed when its bytes say it is a ``msg.in`` (cheap on long tapes)."""
        lo = max(1, anchor - lookback)
        if tape.live:  # only the user messages' bodies are read (a live body is a whole event)
            found = self.conn.execute(
                "SELECT id, ofs FROM events WHERE tape = ? AND ofs BETWEEN ? AND ? AND kind = ?"
                " ORDER BY ofs DESC", (tape.id, lo, anchor, _MSG_IN)).fetchall()
            for i in range(0, len(found), 16):
                part = found[i:i + 16]
                bodies = queries.live_bodies(self.conn, [eid for eid, _ofs in part])
                for eid, ofs in part:
                    if eid in bodies and _is_request(ev := orjson.loads(bodies[eid])):
                        return ofs, ev
            return None
        lines = self._lines(tape)
        for ofs in range(min(anchor, len(lines) - 1), lo - 1, -1):
            raw = lines[ofs]
            if b'"k":"msg.in"' not in raw:
                continue
            try:
                ev = orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise CorruptTape("bad JSON in tape", path=tape.path, line=ofs + 1) from None
            if _is_request(ev):
                return ofs, ev
        return None


_MSG_IN = schema.KIND_CODE["msg.in"]


def _is_request(ev: dict) -> bool:
    return (ev.get("k") == "msg.in" and not ev.get("compaction") and not ev.get("meta")
            and not ev.get("boilerplate") and isinstance(ev.get("text"), str))
