"""Parsing harness logs in a worker process, for big ingests (``engram/ingest/ingestor.py``).

Adapters are pure Python; in a thread beside the indexing they hold the GIL, and every call of the
indexing thread that releases it (SQLite, the file system, numpy) then waits to get it back. A
second process parses instead, on the other core. Adapters are pure and deterministic, so what
comes back is what parsing in-process gives.

The worker runs ``engram.ingest.worker.main``, talking length-prefixed pickles over its stdin
and stdout (not ``multiprocessing``, which would import the caller's ``__main__`` again in the
child). It imports only the adapters, so it starts fast. Requests are answered in order; a
reader thread in the parent collects the answers so the worker never blocks on a full pipe.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import pickle
import subprocess
import sys
import threading
import traceback
from concurrent.futures import Future
from pathlib import Path

from engram import pipes
from engram.errors import WorkerGone
from engram.spill import PickledParts

_HEADER = 8


def parse(harness: str, path: str, mode: str) -> tuple:
    """``("ok", ParseOutput)``, ``("error", EngramError.to_dict())`` or ``("crash", message,
    traceback)`` — exceptions are returned as data, since not every one survives pickling. A log
    that cannot be read is an ``error`` (``E_UNREADABLE``, as the ingest reports it in-process)."""
    from engram import adapters
    from engram.errors import EngramError

    try:
        return ("ok", adapters.get(harness).parse_source(Path(path), mode=mode))
    except EngramError as e:
        return ("error", e.to_dict())
    except OSError as e:
        return ("error", {"error": {"code": "E_UNREADABLE", "path": path, "line": None,
                                    "message": f"cannot read: {e.strerror or e}"}})
    except Exception as e:  # noqa: BLE001 — an adapter bug: reported for this source
        return ("crash", f"{type(e).__name__}: {e}", traceback.format_exc())


def parse_many(items: list[tuple[str, str]], mode: str, compact: bool = False,
               tapes: tuple | None = None) -> list[tuple]:
    """``parse`` for each ``(harness, path)``; an ``ok`` result is ``("ok", ParseOutput,
    prepared, encoded)``: the block work of the indexing for its sessions (``store.prepare``, one
    batch for the group; None if that failed — the indexing then does it itself), and with
    ``compact`` (a big group: the ingest asks) each session's events as their canonical JSON
    (``encoded``, see ``_encoded``; None: the events are whole).

    ``tapes``: ``(root, taped, keep)``, ``taped[i]`` true for a source whose sessions are all to
    be sealed as new tapes: each session's tape is then compressed here into a temp file of its
    directory (``_taped``), and the result has a fifth item, one ``(TapeRef, temp file or None,
    {offset: line})`` per session, for the ingest to ``adopt`` — the lines those of the events
    the lineage pass reads (with ``keep``) — its events then cut to what the indexing reads."""
    res = [parse(h, p, mode) for h, p in items]
    oks = [r[1] for r in res if r[0] == "ok"]
    preps = _prepare([s.events for out in oks for s in out.sessions])
    if compact:
        release_freed_memory()  # what parsing and fingerprinting freed, before the encoding
    out, i = [], 0
    for j, r in enumerate(res):
        if r[0] != "ok":
            out.append(r)
            continue
        n = len(r[1].sessions)
        taped = _taped(r[1], tapes[0], preps is not None, tapes[2]) \
            if tapes is not None and tapes[1][j] else None
        if preps is None:
            out.append(("ok", r[1], None, None) if taped is None else ("ok", r[1], None, None, taped))
        elif taped is not None:
            out.append(("ok", r[1], preps[i:i + n], None, taped))
        else:
            out.append(("ok", r[1], preps[i:i + n], _encoded(r[1]) if compact else None))
        i += n
    return out


def _taped(out, root: str, light: bool, keep: bool) -> list[tuple] | None:
    """The tape of each session of ``out`` (a source to seal whole) compressed into a temp file of
    its directory (``tape_dir_for``) as ``writer.Streamed`` makes it — the same bytes, id and file
    as the ingest's own staging — with the lines of the events the lineage pass reads (with
    ``keep``); then, with ``light``, the events cut to what the indexing reads
    (``store.light_event``). None when a tape cannot be made here (too large, not writable, a
    value that cannot be encoded): the ingest then stages the source itself, and reports it."""
    from engram import paths
    from engram.index import store
    from engram.lineage.cache import wanted
    from engram.tape import writer

    done: list[tuple] = []
    try:
        for sess in out.sessions:
            events = sess.events
            directory = paths.private_dir(tape_dir_for(events[0], root))
            enc = writer.Streamed(directory)
            kept = {}
            try:
                for o in range(1, len(events)):
                    line = enc.add(events[o])
                    if keep and wanted(o, events[o]):
                        kept[o] = line
                enc.finish(events[0])
            except BaseException:
                enc.close()
                raise
            if keep and wanted(0, events[0]):
                kept[0] = writer.encode_event(events[0])
            ref, tmp = writer.write_streamed(enc, directory)
            done.append((ref, tmp, kept))
    except Exception:  # noqa: BLE001 — staged by the ingest instead, which reports what fails
        for _ref, tmp, _kept in done:
            if tmp is not None:
                os.unlink(tmp)
        return None
    if light:
        for sess in out.sessions:
            events = sess.events
            for o in range(1, len(events)):
                events[o] = store.light_event(events[o])
    return done


STREAM_CHUNK_EVENTS = 2048   # a streamed session's events prepared (fingerprinted) at a time


def tape_dir_for(meta: dict, root: str) -> Path:
    """Where a sealed session's tape goes: the repository's tape directory when it ran in the
    repository ``root``, else the user's."""
    from engram import paths

    cwd = meta.get("cwd")
    if isinstance(cwd, str) and cwd and paths.is_within(cwd, root) and os.path.isabs(cwd):
        return paths.repo_tapes_dir(Path(root))
    return paths.user_tapes_dir()


def stream(harness: str, path: str, mode: str, root: str, emit=None) -> tuple:
    """Parse, tape and prepare a source to be sealed, as a stream, a session at a time: the
    adapter gives an event at a time (``stream_source``; ``stream_sessions`` for an adapter whose
    sources hold several sessions: one stream per session, in order), each goes to the tape
    (``writer.Streamed``, the meta last) and, ``STREAM_CHUNK_EVENTS`` at a time, to
    ``store.Preparer``; what is kept of it is what the indexing reads (``store.light_event``) and
    the lines of the events the lineage pass reads (``lineage.cache.wanted``). Nothing holds a
    session whole, whatever its size, nor one session while the next is read.

    ``("ok", ParseOutput, [PreparedSpill], None, (TapeRef, temp file or None, {offset:
    line}))``: the output's session is the ``meta`` and the light events, its blocks prepared a
    part at a time into a temp file (``store.PreparedSpill``: the ingest indexes it a part at a
    time and removes it; a session of one part: its ``store.Prepared`` and its light events as
    a list, see ``_stream_session``), its tape compressed into a temp file of its directory
    (``tape_dir_for``) for the ingest to ``adopt``; with several sessions, one
    ``PreparedSpill`` and one such tuple per session (the fifth item a tuple of them); or
    ``parse``'s ``error`` / ``crash``; or ``("oserror", errno, strerror, filename)``, raised
    again by the ingest (a log that cannot be read; a tape that cannot be written, disk full:
    as in-process).

    ``emit`` (for an adapter with ``stream_sessions``): each session, once complete, is handed
    to ``emit((SessionLog, PreparedSpill or Prepared, (TapeRef, temp file or None, {offset:
    line})))``, whose files are then the caller's (``discard_part`` removes them), and not kept
    here: what a history of many sessions holds is one session's, whatever its number of
    sessions. The answer is then ``("ok", ParseOutput, [], None, None)``: the source's errors
    and end, no session. What ``emit`` raises is raised again here as it is (the source's parse
    stops; the session it was given is the caller's)."""
    from engram import adapters, paths
    from engram.errors import EngramError

    done: list[tuple] = []   # per session kept: (SessionLog, prepared, staged tape)
    try:
        ad = adapters.get(harness)
        work = paths.private_dir(paths.user_tapes_dir())
        many = getattr(ad, "stream_sessions", None)
        if many is not None:
            src = many(Path(path), mode=mode, keep_metas=emit is None)
            for st in src:
                _stream_session(st, work, root, done, emit is not None)
                if emit is not None and done:
                    item = done.pop()
                    try:
                        emit(item)
                    except BaseException as e:
                        raise _EmitFailed() from e
            out = src.output
        else:
            st = ad.stream_source(Path(path), mode=mode)
            _stream_session(st, work, root, done)
            out = st.output
        out.sessions = [d[0] for d in done]
        if not done:
            return ("ok", out, [], None, None)
        staged = done[0][2] if len(done) == 1 else tuple(d[2] for d in done)
        res = ("ok", out, [d[1] for d in done], None, staged)
        done = []   # the ingest's now (it removes the files)
        return res
    except _EmitFailed as e:   # the caller's own error, not the log's
        raise e.__cause__ from None
    except EngramError as e:
        return ("error", e.to_dict())
    except OSError as e:  # the log unreadable, or the tape's spill or file not written
        return ("oserror", e.errno, e.strerror or str(e), e.filename or path)
    except Exception as e:  # noqa: BLE001 — an adapter bug: reported for this source
        return ("crash", f"{type(e).__name__}: {e}", traceback.format_exc())
    finally:
        for item in done:
            discard_part(item)


class _EmitFailed(Exception):
    """(``stream``) ``emit`` raised (its exception is the cause)."""


class Parts:
    """The sessions of a source streamed in the worker (``stream`` with ``emit``), as they
    arrive, for the ingest to take in order: the reader thread ``put``s each (waiting while
    ``MAX`` are waiting: the worker then waits on its pipe, and neither process holds more
    than a few sessions), ``end()`` once the request is answered (or failed); the ingest
    ``get``s them (None after the last) and ``abandon``s the rest when it stops early (their
    files removed, and those of any put later)."""

    MAX = 8

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._items: collections.deque = collections.deque()
        self._ended = self._abandoned = False

    def put(self, item) -> None:
        with self._cond:
            while len(self._items) >= self.MAX and not self._abandoned:
                self._cond.wait()
            if not self._abandoned:
                self._items.append(item)
                self._cond.notify_all()
                return
        discard_part(item)

    def end(self) -> None:
        with self._cond:
            self._ended = True
            self._cond.notify_all()

    def ready(self) -> bool:
        """Whether ``get`` would answer now."""
        with self._cond:
            return bool(self._items) or self._ended

    def get(self):
        with self._cond:
            while not self._items and not self._ended:
                self._cond.wait()
            if not self._items:
                return None
            item = self._items.popleft()
            self._cond.notify_all()
            return item

    def abandon(self) -> None:
        with self._cond:
            self._abandoned = True
            items, self._items = list(self._items), collections.deque()
            self._cond.notify_all()
        for item in items:
            discard_part(item)


def discard_part(item) -> None:
    """Remove the files of one streamed session (``stream``'s ``emit``) not taken in."""
    from engram.index import store

    sess, prepared, staged = item
    if isinstance(prepared, store.PreparedSpill):
        prepared.discard()
    discard_spilled(sess.events)
    if staged[1] is not None:
        with contextlib.suppress(OSError):
            os.unlink(staged[1])


def _stream_session(st, work: Path, root: str, done: list, hold: bool = False) -> None:
    """(``stream``) one session's stream drained: its tape staged, its blocks prepared, its light
    events kept; appended to ``done`` as ``(SessionLog, prepared, (TapeRef, temp file or None,
    {offset: line}))`` — nothing when it has no session (its files removed). A session of more
    than ``STREAM_CHUNK_EVENTS`` events has its prepared parts and light events spilled (a
    ``PreparedSpill``, its events a ``SpilledEvents``); with ``hold`` (a session of a history of
    many, handed on as it completes), a smaller one, all of it one part, is held instead (a
    ``store.Prepared``, a list of events: indexed as a parsed session is, with the other sessions
    of its batch, and no temp files)."""
    from engram.index import store
    from engram.lineage.cache import PackedLines, wanted
    from engram.tape import writer

    enc = writer.Streamed(work)
    spill = light = prep = None
    held: list[dict] | None = None   # (a small session) its light events after the meta
    try:
        # the lines the lineage pass reads, one after another in one buffer (``PackedLines``): a
        # few thousand long-lived buffers amid the parse's short-lived ones would strew the heap,
        # and handed to the ingest so (not a bytes object a line there either); in a temp file of
        # ``work`` until the session is read, then one buffer for the ingest
        kept = PackedLines.gather(work)
        chunk: list[dict] = []
        n = 1   # offset of the chunk's first event (the meta is offset 0)

        def flush(last: bool) -> None:
            nonlocal spill, light, prep, held, n
            if prep is None:
                if last and hold:   # the whole session is this part
                    prep, held = store.Preparer(wanted), []
                else:
                    spill = store.PreparedSpill.create(work, writer.temp_name("prepared"))
                    light = SpilledEvents.create(work, writer.temp_name("events"))
                    prep = store.Preparer(wanted, sink=spill.write)
            prep.add(chunk)
            part = []
            for ev in chunk:
                line = enc.add(ev)
                ofs = n + len(part)
                if wanted(ofs, ev):
                    kept.add(ofs, line)
                part.append(store.light_event(ev))
            n += len(part)
            if held is not None:
                held.extend(part)
            elif part:
                light.write(part)
            chunk.clear()
            if spill is not None:
                # what the part's texts took goes back to the system now: freed memory left in
                # glibc's heap between what is kept (the redaction memo's churn of long texts,
                # the parse's state) would otherwise add up with the session
                release_freed_memory()

        for ev in st:
            if _part_full(chunk, ev):
                flush(False)
            chunk.append(ev)
        flush(True)
        out = st.output
        if spill is not None:
            spill.close()
            light.close()
            prep = None   # (its parts are in ``spill``) let go before the kept lines are read back
        if not out.sessions:
            return
        sess = out.sessions[0]
        meta = sess.events[0]
        enc.finish(meta)
        ref, tmp = writer.write_streamed(enc, tape_dir_for(meta, root))
        if wanted(0, meta):
            kept.add(0, writer.encode_event(meta))
        lines = kept.packed()
        if held is not None:
            sess.events = [meta] + held
            done.append((sess, prep.result(), (ref, tmp, lines)))
            return
        light.meta = meta
        sess.events = light
        done.append((sess, spill, (ref, tmp, lines)))
        spill = light = None   # ``done``'s now
    finally:
        enc.close()
        if spill is not None:
            spill.discard()
        if light is not None:
            light.discard()


def _part_full(chunk: list[dict], ev: dict) -> bool:
    """Whether a streamed part (``chunk``) ends before ``ev``: at ``STREAM_CHUNK_EVENTS`` events,
    and between calls only (a call's output and the code events made of it stay together)."""
    return len(chunk) >= STREAM_CHUNK_EVENTS and (ev.get("call_id") is None
                                                  or ev.get("call_id") != chunk[-1].get("call_id"))


def prepare_tape(path: str, work: Path) -> tuple:
    """A big tape of a tape directory (a teammate's, pulled; a tape source's) made ready to index
    a part at a time, as a streamed log's session is (``_stream_session``), never held whole:
    ``(SpilledEvents, PreparedSpill, {offset: line})`` -- its events as the indexing reads them
    (``store.light_event``; the ``meta`` whole), its blocks prepared ``STREAM_CHUNK_EVENTS``
    events at a time (a part ends between calls) into temp files of ``work`` (the caller's, to
    index and remove: ``Batch.commit`` of a ``SessionRecord`` with them), and the lines the
    lineage pass reads (``lineage.cache.wanted``), as they are in the file.

    The tape is untrusted: it is read as a stream (``reader.stream_raw``) three times, never
    held. First ``reader.verify_stream`` checks all that ``reader.read_tape`` checks -- size,
    end and content hash against its name (hashed alone first, none of it held), every line a
    JSON object, every event of its documented shape -- and raises the ``CorruptTape`` that
    ``read_tape`` would, before anything is prepared; it also notes each call's read and edits
    (``store._Seen``) over the whole tape, so that a part leaves out the derived output that the
    whole-tape indexing (``store._Derived``) leaves out, wherever the tape puts a call's events.
    The last pass prepares (``_prepare_parts``); it checks the hash again (a file changed in
    between is refused: nothing of it is kept)."""
    from engram.index import store
    from engram.tape import reader

    class Whole(store._Seen):
        """Every call of the tape, seen in the first pass (not updated part by part)."""

        def update(self, events: list[dict]) -> None:
            pass

    seen = Whole()
    note = functools.partial(store._Seen.update, seen)
    with _heap_reused():
        n = reader.verify_stream(path, lambda ev: note((ev,)))
        return _prepare_parts(path, work, seen, n)


def _prepare_parts(path: str, work: Path, seen, n: int) -> tuple:
    """(``prepare_tape``) the second pass: the tape's parts prepared, given every call's read and
    edits (``seen``) and its number of events (``n``)."""
    from engram.index import store
    from engram.lineage.cache import PackedLines, wanted
    from engram.tape import reader, writer

    spill = light = None
    try:
        spill = store.PreparedSpill.create(work, writer.temp_name("prepared"))
        light = SpilledEvents.create(work, writer.temp_name("events"))
        prep = store.Preparer(wanted, sink=spill.write)
        prep.seen = seen
        kept = PackedLines.gather(work)   # (in a temp file until read back: ``_stream_session``)
        chunk: list[dict] = []
        meta = None
        ofs = 0

        def flush() -> None:
            prep.add(chunk)
            light.write([store.light_event(ev) for ev in chunk])
            chunk.clear()
            release_freed_memory()   # (as ``_stream_session``: the part's texts go back now)

        for ev, line in reader.stream_events(path, lines=True):
            if wanted(ofs, ev):
                kept.add(ofs, line)
            if meta is None:
                meta = ev
            else:
                if _part_full(chunk, ev):
                    flush()
                chunk.append(ev)
            ofs += 1
        if chunk:
            flush()
        spill.close()
        light.close()
        prep = None
        if ofs != n:   # (the hash matched both times: not expected)
            from engram.errors import CorruptTape

            raise CorruptTape("tape changed while it was read", path=str(path))
        light.meta = meta
        lines = kept.packed()
        res = (light, spill, lines)
        spill = light = None   # the caller's now
        return res
    finally:
        if spill is not None:
            spill.discard()
        if light is not None:
            light.discard()


class SpilledEvents(PickledParts):
    """A streamed session's events as the indexing reads them (``store.light_event``; the
    ``meta`` first, whole), held in a temp file of a tape directory a part at a time rather than
    as a list: neither the parse worker nor the ingest holds one dict per event of the session.
    Named as a tape's temp file of its writer (``writer.sweep_temp`` removes it once that process
    is gone); pickled as its path. A sequence read in order: ``len``, iteration, ``[i]`` (the
    part holding ``i`` is read, from the start again when ``i`` lies before it); ``discard()``
    removes the file."""

    def __init__(self, path: str, meta: dict | None = None, n: int = 0):
        super().__init__(path)
        self.meta, self.n = meta, n   # n: events after the meta
        self._r = None
        self._part: list[dict] = []
        self._lo = 0   # offset (after the meta) of ``_part``'s first event

    def write(self, events: list[dict]) -> None:
        """The next part's events (after the meta), in order."""
        super().write(events)
        self.n += len(events)

    def close(self) -> None:
        super().close()
        if self._r is not None:
            self._r.close()
        self._r = None
        self._part, self._lo = [], 0

    def __getstate__(self) -> dict:
        return {"path": self.path, "meta": self.meta, "n": self.n}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"], state["meta"], state["n"])

    def __len__(self) -> int:
        return self.n + 1

    def __iter__(self):
        yield self.meta
        with open(self.path, "rb") as f:
            for _ in _parts(f, self.n):
                yield from _

    def __getitem__(self, i: int) -> dict:
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        if i == 0:
            return self.meta
        j = i - 1
        if self._r is None or j < self._lo:
            if self._r is not None:
                self._r.close()
            self._r = open(self.path, "rb")
            self._part, self._lo = pickle.load(self._r), 0
        while j >= self._lo + len(self._part):
            self._lo += len(self._part)
            self._part = pickle.load(self._r)
        return self._part[j - self._lo]


def _parts(f, n: int):
    """The pickled parts of ``f`` holding ``n`` events in all."""
    got = 0
    while got < n:
        part = pickle.load(f)
        got += len(part)
        yield part


def discard_spilled(events) -> None:
    """Remove a streamed session's events file (``SpilledEvents``); nothing for a list."""
    if isinstance(events, SpilledEvents):
        events.discard()


def _encoded(out) -> list[list[bytes]] | None:
    """Each session's events as the tape encodes them (``writer.encode_event``), the events
    themselves cut down to what the indexing reads of prepared events (``store.light_event``;
    the ``meta`` event stays whole): a big session then exists once, compactly, in each process —
    not as dicts here, pickled bytes in between and dicts again in the indexing. The ingest writes
    the tape from these bytes (``orjson.Fragment``: the same bytes, the same tape). None (the
    events stay whole) when this orjson has no ``Fragment``."""
    import orjson

    from engram.index import store
    from engram.tape import writer

    if not hasattr(orjson, "Fragment"):
        return None
    encoded = []
    for sess in out.sessions:
        events = sess.events
        lines = []
        for i, ev in enumerate(events):  # one event at a time: its texts freed as it is encoded
            lines.append(writer.encode_event(ev))
            if i:
                events[i] = store.light_event(ev)
        encoded.append(lines)
    return encoded


def _prepare(sessions: list[list[dict]]) -> list | None:
    from engram.index import store
    from engram.lineage.cache import wanted

    try:
        return store.prepare(sessions, wanted)
    except Exception:  # noqa: BLE001 — only an optimisation: the indexing does it then
        return None


def release_freed_memory() -> None:
    """Give the memory freed so far back to the system (glibc's ``malloc_trim``; elsewhere
    nothing). After a big session the heap keeps what its texts and arrays took; the next phase
    (the lineage pass, the next group) allocates large arrays afresh, on top of it, so the peak
    would be both. A few milliseconds."""
    from engram import glibc

    glibc.malloc_trim()


def drop_parse_memos() -> None:
    """Let go of what the parse memoises (the redaction results of long and of short texts seen)
    before the continuation pass, which redacts nothing, and give it back to the system: up to
    the long-text memo's 32 MB and the short texts' ``lru_cache`` (an Aider history's parse held
    ~100 MB of them through the pass when the memo was bounded in characters), on top of the
    pass's own tables, which grow with the history's sessions. A later parse fills them again."""
    from engram.adapters import redact

    redact.clear_memos()
    release_freed_memory()


M_MMAP_THRESHOLD = -3              # glibc's ``mallopt`` parameter
HEAP_MMAP_THRESHOLD = 128 << 10    # allocations from here up are mapped apart (``bound_heap``):
#                                    at 256 KiB, the lineage pass's arrays of a few hundred KB
#                                    came from the heap, and its free space grew with the log
#                                    (the 1.5 GB steady session: +8 MB of it, +14 MB of heap, over
#                                    the 400 MB one). Not in the parse worker: there its many texts
#                                    and arrays of 128 KB-1 MB each mapped apart took page faults
#                                    (+25% of the ingest's CPU; +10% at 1 MiB, for 8 MB less heap)


def bound_heap() -> bool:
    """For a one-shot ingest process (``engram ingest``): allocations of ``HEAP_MMAP_THRESHOLD``
    bytes or more (numpy arrays, SQLite's blobs) are mapped apart and unmapped when freed, which
    glibc otherwise stops doing once it has freed a mapped one (its threshold then rises to that
    size, up to 32 MB): the big arrays of one phase then come from the heap, whose free space
    between long-lived allocations stays in the process, and the next phase's arrays are taken on
    top of it — the peak of one huge session's ingest grew with its log. Not for a long-running
    process that tunes its heap itself (the language server). Only on glibc, and not when the user
    set any ``MALLOC_*`` variable (glibc's own way to tune it). True when it was applied."""
    from engram import glibc

    global _heap_bounded
    mallopt = glibc.mallopt()
    _heap_bounded = mallopt is not None and mallopt(M_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD) == 1
    return _heap_bounded


_heap_bounded = False   # ``bound_heap`` applied in this process
PREPARE_MMAP_THRESHOLD = 4 << 20   # (``_heap_reused``) while a big tape's parts are prepared


@contextlib.contextmanager
def _heap_reused():
    """(``prepare_tape``, in a process whose heap is bounded: ``bound_heap``) while a big tape is
    read and its parts prepared, allocations under ``PREPARE_MMAP_THRESHOLD`` come from the heap again,
    reused part after part, rather than each mapped and unmapped: the fingerprint arrays of every
    sub-batch of every part took fresh pages, a page fault each (the 400 MB session's tape: 2.8
    times the system CPU of the whole-tape path, whose big heap served them). The bound comes
    back after, the heap's free memory given back."""
    from engram import glibc

    mallopt = glibc.mallopt() if _heap_bounded else None
    if mallopt is None or mallopt(M_MMAP_THRESHOLD, PREPARE_MMAP_THRESHOLD) != 1:
        yield
        return
    try:
        yield
    finally:
        mallopt(M_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD)
        release_freed_memory()


class ParseProcess:
    """One worker process; ``submit()`` returns a ``Future`` of ``parse()``'s tuple."""

    def __init__(self) -> None:
        # the worker imports this engram: its root goes first on the path (``python -m`` would
        # put the working directory first, and with it any other engram checkout there)
        root = str(Path(__file__).resolve().parents[2])
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ("import sys; sys.path.insert(0, sys.argv[1]); "
                                    "from engram.ingest.worker import main; "
                                    "main(int(sys.argv[2]))"), root, str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        # (``pipes.widen``) the reader thread needs the GIL after every read, and gets it only
        # at switch intervals while the indexing runs Python code: with a small pipe, a worker
        # writing megabytes of results mostly waits; requests are small, but many at once would
        # block the indexing until the worker reads them
        pipes.widen(self.proc.stdin)
        pipes.widen(self.proc.stdout)
        self.pending: collections.deque[Future] = collections.deque()
        self._lock = threading.Lock()        # pending, _gone
        self._write_lock = threading.Lock()  # one request written at a time, in pending's order
        self._gone = False
        self.reader = threading.Thread(target=self._read, name="engram-parse-reader", daemon=True)
        self.reader.start()

    def submit(self, items: list[tuple[str, str]], mode: str, compact: bool = False,
               tapes: tuple | None = None) -> Future:
        """``parse_many(items, mode, compact, tapes)`` in the worker; ``result()`` gives its
        list."""
        return self._send(("parse", items, mode, compact, tapes))

    def submit_stream(self, harness: str, path: str, mode: str, root: str,
                      parts: bool = False) -> Future:
        """``stream(harness, path, mode, root)`` in the worker; ``result()`` gives its tuple.
        With ``parts`` (an adapter with ``stream_sessions``), each session comes as soon as it
        is complete (``stream``'s ``emit``), taken from the future's ``engram_parts``
        (``Parts``)."""
        if not parts:
            return self._send(("stream", harness, path, mode, root))
        box = Parts()
        return self._send(("stream", harness, path, mode, root, True), box)

    def submit_continuations(self, db_path: str, tape_rows: list[int], kept=None) -> Future:
        """``continuations.compute_remote(db_path, tape_rows, kept)`` in the worker."""
        return self._send(("continuations", db_path, tape_rows, kept))

    def _send(self, request: tuple, parts: Parts | None = None) -> Future:
        fut: Future = Future()
        if parts is not None:
            fut.engram_parts = parts
            fut.add_done_callback(lambda _f: parts.end())
        data = pickle.dumps(request)
        with self._write_lock:
            with self._lock:
                if self._gone:
                    fut.set_exception(WorkerGone("parse worker exited"))
                    return fut
                self.pending.append(fut)
            # written without ``_lock``: a full pipe waits for the worker, which may first have to
            # write an answer, which the reader thread takes only once it has that lock
            try:
                self.proc.stdin.write(len(data).to_bytes(_HEADER, "little") + data)
                self.proc.stdin.flush()
            except OSError:
                with self._lock:
                    self._fail()
        return fut

    def _read(self) -> None:
        """Unpickle each answer straight from the pipe as it arrives (``_Frames``: no copy of
        the pickled bytes is ever held whole) and hand it to the oldest pending request."""
        out = self.proc.stdout
        try:
            while True:
                val = _read_answer(out)
                if val is _END:
                    break
                if type(val) is tuple and val and val[0] == "part":   # one session of a stream
                    with self._lock:
                        fut = self.pending[0]
                    fut.engram_parts.put(val[1])   # (waits while the ingest is behind)
                    del val, fut
                    continue
                with self._lock:
                    fut = self.pending.popleft()
                fut.engram_value = val
                fut.set_result(None)
                del val, fut  # held here until the next answer, they would outlive their use
        except Exception:  # noqa: BLE001 — a worker gone mid-answer: its requests fail
            pass
        with self._lock:
            self._fail()

    def _fail(self) -> None:
        """(lock held) every unanswered request fails."""
        self._gone = True
        while self.pending:
            fut = self.pending.popleft()
            if not fut.done():
                fut.set_exception(WorkerGone("parse worker exited"))

    @staticmethod
    def answered(items: list[tuple[str, str]], mode: str, compact: bool = False,
                 tapes: tuple | None = None) -> Future:
        """``parse_many(items, mode, compact, tapes)`` run here, as a request already answered
        (``result`` gives it like the worker's)."""
        fut: Future = Future()
        fut.engram_value = parse_many(items, mode, compact, tapes)
        fut.set_result(None)
        return fut

    @staticmethod
    def result(fut: Future) -> list:
        """The answer to a request (unpickled by the reader thread as it arrived)."""
        fut.result()  # raises ``WorkerGone`` for a request the worker never answered
        return fut.engram_value

    def close(self) -> None:
        with self._lock:   # a stream no one will take any more: its sessions are not waited for
            boxes = [f.engram_parts for f in self.pending if hasattr(f, "engram_parts")]
        for box in boxes:
            box.abandon()
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=10)


# Answers travel as a pickle cut into frames: an 8-byte little-endian length, then that many
# bytes; a frame of length 0 ends the answer, one of length ``_ABORT`` drops it (the pickler
# failed half-way: the answer that follows replaces it). The pickle is written and read as it is
# made (``pickle.dump`` / ``pickle.load`` on ``_Frames``): a big session is never also held as
# one bytes object on either side.
FRAME_BYTES = 1 << 20
_ABORT = (1 << 64) - 1
_END = object()


class _Aborted(Exception):
    pass


class _Frames:
    """A file-like over the frames of one answer: ``write`` (the worker) or ``read`` (the
    ingest's reader thread)."""

    def __init__(self, f):
        self.f = f
        self.buf = bytearray()
        self.pos = 0
        self.done = False

    # -- writing --------------------------------------------------------------------------------
    def write(self, b) -> int:
        b = memoryview(b).cast("B")  # bytes, a bytearray, a pickle.PickleBuffer (numpy data)
        n = len(b)
        if len(self.buf) + n < FRAME_BYTES:
            self.buf += b
            return n
        self._emit(self.buf)
        self.buf = bytearray()
        self._emit(b)
        return n

    def _emit(self, b) -> None:
        if len(b):
            self.f.write(len(b).to_bytes(_HEADER, "little"))
            self.f.write(b)

    def end(self, abort: bool = False) -> None:
        if abort:
            self.buf = bytearray()
        else:
            self._emit(self.buf)
            self.buf = bytearray()
        self.f.write((_ABORT if abort else 0).to_bytes(_HEADER, "little"))
        self.f.flush()

    # -- reading --------------------------------------------------------------------------------
    def _fill(self) -> bool:
        """The next frame into ``buf``; False at the end of the answer."""
        if self.done:
            return False
        head = self.f.read(_HEADER)
        if len(head) < _HEADER:
            raise EOFError("worker gone")
        n = int.from_bytes(head, "little")
        if n == 0:
            self.done = True
            return False
        if n == _ABORT:
            raise _Aborted()
        data = self.f.read(n)
        if len(data) < n:
            raise EOFError("worker gone")
        self.buf, self.pos = data, 0
        return True

    def read(self, n: int = -1) -> bytes:
        out = bytearray()
        while n < 0 or len(out) < n:
            if self.pos >= len(self.buf) and not self._fill():
                break
            take = len(self.buf) - self.pos if n < 0 else min(n - len(out), len(self.buf) - self.pos)
            out += self.buf[self.pos:self.pos + take]
            self.pos += take
        return bytes(out)

    def readinto(self, b) -> int:
        view = memoryview(b).cast("B")
        got = 0
        while got < len(view):
            if self.pos >= len(self.buf) and not self._fill():
                break
            take = min(len(view) - got, len(self.buf) - self.pos)
            view[got:got + take] = self.buf[self.pos:self.pos + take]
            self.pos += take
            got += take
        return got

    def readline(self) -> bytes:
        out = bytearray()
        while True:
            if self.pos >= len(self.buf) and not self._fill():
                return bytes(out)
            nl = self.buf.find(b"\n", self.pos)
            end = len(self.buf) if nl < 0 else nl + 1
            out += self.buf[self.pos:end]
            self.pos = end
            if nl >= 0:
                return bytes(out)

    def finish(self) -> None:
        while self._fill():
            pass


def _read_answer(f):
    """The next answer from the worker's pipe; ``_END`` when the pipe closed between answers."""
    while True:
        if not f.peek(1):
            return _END
        frames = _Frames(f)
        try:
            val = pickle.load(frames)
            frames.finish()
            return val
        except _Aborted:
            continue  # the replacement answer follows


def _write_answer(f, res, fallback) -> None:
    """``res`` pickled into frames on ``f``; if it cannot be pickled, ``fallback()``'s value."""
    frames = _Frames(f)
    try:
        pickle.dump(res, frames, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 — an unpicklable result
        frames.end(abort=True)
        frames = _Frames(f)
        pickle.dump(fallback(), frames, protocol=pickle.HIGHEST_PROTOCOL)
    frames.end()


def _write_part(f, item) -> None:
    """(``stream``'s ``emit`` in the worker) one session of a stream, answered ahead of the
    request's own answer as ``("part", item)``; one that cannot be pickled stops the stream."""
    frames = _Frames(f)
    try:
        pickle.dump(("part", item), frames, protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException:
        frames.end(abort=True)
        raise
    frames.end()


def _crashes(n: int) -> list[tuple]:
    """An unpicklable parse result, reported as a crash of each of its ``n`` sources."""
    return [("crash", "unpicklable parse result", traceback.format_exc())] * n


PARENT_POLL_S = 0.5


def _exit_with_parent(parent: int) -> None:
    """End this worker as soon as the ingest that started it (``parent``) is gone, killed even
    before the worker got here: the requests it sent ahead would otherwise be parsed for nobody.
    A daemon thread watches for the worker being handed to another parent. What a killed worker
    leaves half-written are temp files that the next ingest sweeps (``writer.sweep_temp``), as
    after a kill of the ingest itself."""
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(3)

    threading.Thread(target=watch, name="engram-parse-parent", daemon=True).start()


def main(parent: int | None = None) -> None:
    """The worker: answer requests from stdin on a private copy of stdout (anything printed
    goes to stderr) until stdin closes, or until ``parent`` (the ingest's pid) is gone."""
    _exit_with_parent(os.getppid() if parent is None else parent)
    reply = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    while True:
        head = requests.read(_HEADER)
        if len(head) < _HEADER:
            return
        request = pickle.loads(requests.read(int.from_bytes(head, "little")))
        if request[0] == "stream":
            if len(request) > 5:   # each session answered as it is complete (``Parts``)
                try:
                    res = stream(*request[1:5], functools.partial(_write_part, reply))
                except Exception as e:  # noqa: BLE001 — a session that could not be answered
                    res = ("crash", f"{type(e).__name__}: {e}", traceback.format_exc())
            else:
                res = stream(*request[1:])
            _write_answer(reply, res, lambda: ("crash", "unpicklable parse result", ""))
            del res
            release_freed_memory()
        elif request[0] == "continuations":
            # what the ingest kept for the pass (``kept``: heads, postings) is let go with the
            # pass, not held by the request while its answer is written
            args = request[1:]
            del request
            drop_parse_memos()
            try:
                from engram.lineage import continuations, derive
                from engram.tape import reader
                with reader.capped(derive.TAPE_CACHE_BYTES):   # as the pass in the ingest
                    res = continuations.compute_remote(*args)
            except Exception as e:  # noqa: BLE001 — the ingest computes them itself then
                res = ("crash", f"{type(e).__name__}: {e}", traceback.format_exc())
            del args
            _write_answer(reply, res, lambda: ("crash", "unpicklable answer", ""))
            del res
            release_freed_memory()
        else:
            _kind, items, mode, compact, tapes = request
            res = parse_many(items, mode, compact, tapes)

            _write_answer(reply, res, functools.partial(_crashes, len(items)))
            del res
            if compact:
                release_freed_memory()


if __name__ == "__main__":
    main()
