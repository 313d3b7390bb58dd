"""Ingest: harness logs → tapes (truth) → index (derived), incrementally.

For every enabled harness, each configured (or default) location is asked for its sources; a source
whose size and mtime match its cursor is skipped without being opened. A changed source is parsed
again (adapters are pure and prefix-stable, and content-addressed blocks make re-indexing cheap).

Each session in a source is either

* **live** — the source changed less than ``seal_after`` seconds ago: its events are indexed as
  provisional rows under a stable ``live-…`` tape id and replaced on every change; or
* **sealed** — quiet (or ``--seal``): written as one immutable tape and indexed from it; the
  cursor remembers how many events were sealed, and events appended later become a new tape whose
  ``meta.continues`` names the earlier one. A tape file already there under the right name that
  the index does not know yet (every tape after ``--rebuild``) is verified against its name and
  written again from the log when it is corrupt.

Tape directories (the repo's ``.engram/tapes``, ``$ENGRAM_HOME/tapes``, configured ``sources``) are
indexed too, so deleting ``.engram-cache/`` and ingesting again rebuilds the same index.

Nothing outside the configured locations is read: a source that is a symbolic link (or lies under
one) resolving outside every configured harness location is not read, and is reported. A source
that cannot be read, and a directory under a location that cannot be listed, are reported too
(one error naming the path, no traceback). Everything a source contributes — its rows, its errors,
its cursor — commits in one transaction (``store.Batch.commit``), and whatever goes wrong with one
source (a value that cannot be written included) is that source's error: the others go on. The
exception is a history of many sessions streamed a session at a time (``_ingest_parts``): its
sessions commit as they complete, a few hundred at most together, and its errors and cursor last;
a source that fails part of the way keeps the sessions committed, and no cursor (the next run
streams it again, and finds those sessions already indexed under their tape ids).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import stat
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import apsw
import orjson
import xxhash

from engram import adapters, paths
from engram.adapters.base import Adapter, ParseOutput
from engram.config import Config
from engram.errors import CorruptTape, EngramError, WorkerGone
from engram.index import store
from engram.ingest import worker as parse_worker
from engram.tape import reader, writer
from engram.timestamps import utc_iso

log = logging.getLogger(__name__)

BATCH_EVENTS = 50_000
BATCH_BYTES = 64 << 20          # ... or this many bytes of source logs: a commit per batch
TAIL_MIN_BYTES = 4 << 20        # ... or, once what is left to index is less than the batch, at
#                                 least this many: the last batches shrink by half, so the last
#                                 commit (the worker has nothing left to parse) is a short one
PARSE_AHEAD = 4
PROCESS_MIN_BYTES = 16 << 20    # this much to parse: in a worker process (``worker.py``)
PROCESS_AHEAD_BYTES = 16 << 20  # source bytes sent to the worker ahead of the indexing (the rest
#                                 stays queued: this process parses from it while it would wait)
PROCESS_AHEAD = 1024            # ... and sources: enough for the worker to go on during a commit
AHEAD_BYTES = 64 << 20          # at most this many source bytes parsed or being parsed ahead in all
STEAL_MAX_BYTES = 16 << 20      # a bigger source is left to the worker (parsed here, it and its
#                                 events would be held by this process too)
COMPACT_MIN_BYTES = 16 << 20    # a group this big comes back from the worker compact: its events
#                                 cut to what the index reads, and their canonical JSON for the
#                                 tape (``worker._encoded``): a big session held once, not twice
GROUP_SOURCES, GROUP_BYTES = 32, 2 << 20  # sources sent to the worker at a time
STREAM_MIN_BYTES = 32 << 20     # a log this big, of one session to be sealed, is parsed, taped and
#                                 prepared as a stream (``worker.stream``): never held whole
STREAM_COMMIT_SESSIONS = 256    # sessions of a streamed history (``_ingest_parts``) committed
STREAM_COMMIT_EVENTS = 8192     # together, at most (a commit has its fixed costs: the tapes
#                                 synced, the boilerplate counts, SQLite's commit — a few tens of
#                                 ms, as much as a small session's indexing); a big session (its
#                                 parts spilled) is committed with those before it at once
_WRITE_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)  # a write failed, not a read
WALK_DEPTH = 8                  # directory levels under a location checked for unreadable ones
Progress = Callable[[int, int, str], None]

#: error codes of what discovery finds (refreshed by every full run)
E_UNREADABLE = "E_UNREADABLE"          # a log or directory that cannot be read
E_LINK_OUTSIDE = "E_LINK_OUTSIDE"      # a symbolic link out of the configured locations
_DISCOVERY_CODES = (E_UNREADABLE + "_DIR", E_LINK_OUTSIDE)


@dataclasses.dataclass
class Source:
    adapter: Adapter
    path: Path


def live_tape_id(source: str, key: str) -> str:
    return "live-" + xxhash.xxh3_64_hexdigest(f"{source}\0{key}".encode("utf-8", "surrogatepass"))


def _stat_key(p: Path) -> tuple[int, int]:
    """(size, mtime_ns) of a file, or of the newest file in a directory store."""
    try:
        st = os.stat(p)
        if stat.S_ISDIR(st.st_mode):
            size, mtime = 0, 0
            for f in p.rglob("*"):
                if f.is_file():
                    st = f.stat()
                    size += st.st_size
                    mtime = max(mtime, st.st_mtime_ns)
            return size, mtime
        mtime = st.st_mtime_ns
        try:   # SQLite stores change through their WAL
            sst = os.stat(f"{p}-wal")
        except FileNotFoundError:
            return st.st_size, mtime
        return st.st_size + sst.st_size, max(mtime, sst.st_mtime_ns)
    except OSError:
        return -1, -1


def _error(path, code: str, message: str, line: int | None = None) -> dict:
    return {"error": {"code": code, "path": str(path), "line": line, "message": message}}


@dataclasses.dataclass
class _Run:
    """What one ``Ingestor.run`` carries from source to source."""

    seal: bool
    now: float
    summary: dict
    cursors: dict
    procs: parse_worker.ParseProcess | None = None
    #: statements committed with the next batch (cursors and errors of its sources)
    pending: list = dataclasses.field(default_factory=list)


class Ingestor:
    #: run the lineage pass after indexing (``bench/accuracy.py --no-lineage`` turns it off)
    lineage: bool = True

    def __init__(self, root: Path, config: Config, conn: apsw.Connection):
        self.root = Path(root)
        self.config = config
        self.conn = conn
        self.cache = None
        self.live_ids: set[str] = set()   # the index's live tapes when the run started
        self.discovery_errors: list[dict] = []   # of the last ``sources()``

    # -- discovery ---------------------------------------------------------------------------
    def harness_roots(self) -> list[tuple[Adapter, Path]]:
        out = []
        for name in adapters.available():
            ad = adapters.get(name)
            for p in self.config.harness_paths(name, ad.default_paths() + ad.repo_paths(self.root)):
                out.append((ad, p))
        return out

    def sources(self, only: Iterable[Path] | None = None) -> list[Source]:
        """The sources under every harness location (``only``: those among these paths).
        ``discovery_errors`` gets what cannot be read and the links that leave the locations."""
        only_set = {os.path.abspath(p) for p in only} if only is not None else None
        out: list[Source] = []
        seen: set[tuple[str, str]] = set()
        self.discovery_errors = errors = []
        roots = self.harness_roots()
        inside = _real_locations(roots)
        resolve = _Resolver()
        for ad, root in roots:
            if not root.exists() or self.config.is_excluded(root):
                continue
            if only_set is None:
                errors.extend(_unreadable_dirs(root))
            try:
                found = list(ad.discover(root))
            except OSError as e:
                errors.append(_error(root, E_UNREADABLE + "_DIR",
                                     f"cannot list: {e.strerror or e}"))
                continue
            for src in found:
                key = (ad.name, str(src))
                if key in seen or self.config.is_excluded(src):
                    continue
                if only_set is not None and not _matches(src, only_set):
                    continue
                seen.add(key)
                outside = _leaves(src, inside, resolve)
                if outside is not None:
                    errors.append(_error(src, E_LINK_OUTSIDE, "a symbolic link to "
                                         f"{outside}, outside the configured harness locations: "
                                         "not read"))
                    continue
                out.append(Source(ad, src))
        return out

    def tape_dirs(self) -> list[Path]:
        # ``$ENGRAM_HOME/pulled``: the verified tapes ``engram pull`` unpacked (engram/share/pull.py)
        dirs = [paths.repo_tapes_dir(self.root), paths.user_tapes_dir(), paths.user_dir() / "pulled",
                *self.config.source_dirs()]
        out = []
        for d in dirs:
            if d not in out:
                out.append(d)
        return out

    # -- the run -----------------------------------------------------------------------------
    def run(self, *, seal: bool = False, paths_: Iterable[Path] | None = None,
            progress: Progress | None = None, now: float | None = None) -> dict:
        t0 = time.perf_counter()
        run = _Run(seal, time.time() if now is None else now, _new_summary(), self._cursors())
        srcs = self.sources(paths_)
        run.summary["sources"] = len(srcs)
        self._report_discovery(run, full=paths_ is None)
        todo = self._changed(srcs, run)
        total_bytes = sum(max(sk[0], 0) for _, sk in todo)
        # the provisional tapes a sealed session replaces (a session is live or sealed once a run)
        self.live_ids = {r[0] for r in self.conn.execute("SELECT tape_id FROM tapes WHERE live=1")}
        self.cache = _ingest_cache() if self.lineage else None
        self.stager = writer.TapeStager()
        run.procs = self._parse_processes(todo, total_bytes)
        try:
            self._ingest_sources(todo, total_bytes, run, progress)
            self._index_tape_dirs(run.summary, progress)
            parse_worker.release_freed_memory()  # the lineage pass then starts from what is held
            if self.cache is not None:
                self.cache.worker = run.procs  # idle now: it computes continuations meanwhile
            self._post_index(run.summary)
        finally:
            if run.procs is not None:
                run.procs.close()
        if progress:
            progress(total_bytes, total_bytes, "done")
        summary = run.summary
        summary["elapsed_s"] = round(time.perf_counter() - t0, 3)
        summary["errors"] = summary["errors"][:50]
        summary["nothing_to_do"] = (summary["parsed"] == 0 and summary["tapes_indexed"] == 0)
        return summary

    def _cursors(self) -> dict[str, tuple]:
        return {r[0]: r for r in self.conn.execute(
            "SELECT source, adapter, size, mtime_ns, end_offset, state, live FROM cursors")}

    def _changed(self, srcs: list[Source], run: _Run) -> list[tuple[Source, tuple[int, int]]]:
        """The sources to parse: changed since their cursor, or live and due to be sealed."""
        todo = []
        for s in srcs:
            sk = _stat_key(s.path)
            cur = run.cursors.get(str(s.path))
            if cur is not None and (cur[2], cur[3]) == sk:
                quiet = (run.now - sk[1] / 1e9) >= self.config.seal_after
                if not cur[6] or not (run.seal or quiet):
                    run.summary["skipped"] += 1
                    continue
            todo.append((s, sk))
        return todo

    def _report_discovery(self, run: _Run, full: bool) -> None:
        """Discovery's errors into the summary, and into the index with the first batch (a full
        run replaces the ones an earlier run recorded)."""
        if full:
            run.pending.append(("DELETE FROM errors WHERE code IN (?, ?)", _DISCOVERY_CODES))
        for e in self.discovery_errors:
            log.warning("%s: %s", e["error"]["path"], e["error"]["message"])
            self._record_errors(e["error"]["path"], [e], run.summary, run.pending)

    def _ingest_sources(self, todo: list, total_bytes: int, run: _Run,
                        progress: Progress | None) -> None:
        """Parse (ahead, ``_ParseQueue``) and index every source of ``todo``, in order, one
        transaction per batch; on any exception the staged tapes are discarded."""
        summary = run.summary
        batch = store.Batch(self.conn, self.cache)
        batch_bytes = done_bytes = 0
        parses = _ParseQueue(self, todo, run)
        try:
            for (s, sk), ticket in parses:
                if progress:
                    progress(done_bytes, total_bytes, str(s.path))
                streamed = isinstance(ticket, tuple) and ticket[1] is None
                if streamed and len(batch):  # a streamed session is indexed in a batch alone
                    self._commit(batch, run.pending, summary)
                    batch, run.pending, batch_bytes = store.Batch(self.conn, self.cache), [], 0
                self._ingest_one(s, sk, ticket, batch, run)
                del ticket  # its parse result: the batch holds what the index needs of it
                size = max(sk[0], 0)
                done_bytes += size
                batch_bytes += size
                summary["bytes"] += size
                summary["parsed"] += 1
                if streamed or batch.n_events >= BATCH_EVENTS or batch_bytes >= BATCH_BYTES or (
                        run.procs is not None
                        and batch_bytes >= max(TAIL_MIN_BYTES, total_bytes - done_bytes)):
                    self._commit(batch, run.pending, summary)
                    batch, run.pending, batch_bytes = store.Batch(self.conn, self.cache), [], 0
            self._commit(batch, run.pending, summary)
            run.pending = []
        except BaseException:
            if run.procs is not None:
                run.procs.close()
            self.stager.discard()
            raise
        finally:
            parses.close()

    def _ingest_one(self, s: Source, sk, ticket, batch: store.Batch, run: _Run) -> None:
        """One source, within its error boundary: whatever fails is this source's error (its
        sessions are then not indexed, its cursor not moved: the next run tries again)."""
        src = str(s.path)
        try:
            if _in_parts(ticket):
                self._ingest_parts(s, sk, ticket, run)
                return
            parsed, prepared, encoded, staged = self._parsed(s, ticket, run.procs)
            taped = staged if isinstance(staged, list) else None  # tapes made by the parse
            if taped is not None:
                staged = None
            if staged is not None:
                added = False
                try:
                    added = self._ingest_streamed(s, sk, run.cursors.get(src), batch, run,
                                                  parsed, prepared, staged)
                finally:
                    if not added:  # (added: the batch's commit removes them)
                        for sp in prepared or ():
                            if isinstance(sp, store.PreparedSpill):
                                sp.discard()
                        for sess in parsed.sessions:
                            parse_worker.discard_spilled(sess.events)
                if added:
                    return
                parsed = prepared = encoded = None  # its tape was corrupt: parsed again here
            try:
                if not self._ingest_source(s, sk, run.cursors.get(src), run.seal, run.now, batch,
                                           run.pending, run.summary, parsed=parsed,
                                           prepared=prepared, encoded=encoded, taped=taped):
                    # a tape already there under its name was corrupt (removed): the source is
                    # parsed again here, its tapes written afresh
                    self._ingest_source(s, sk, run.cursors.get(src), run.seal, run.now, batch,
                                        run.pending, run.summary)
            finally:
                for _ref, tmp, _kept in taped or ():  # temp files not adopted (the source failed)
                    if tmp is not None and os.path.exists(tmp):
                        os.unlink(tmp)
                for lines in encoded or ():  # staged (or failed): the canonical JSON is not
                    lines.clear()            # held through the batch's commit
        except EngramError as e:
            self._record_errors(src, [e.to_dict()], run.summary, run.pending)
        except OSError as e:  # unreadable (permissions, vanished, not a file): said, not traced
            if e.errno in _WRITE_ERRNOS:  # writing a big tape (its spill): the run's error,
                raise                     # reported as any failed tape write is
            log.warning("%s: cannot read: %s", src, e.strerror or e)
            err = _error(src, E_UNREADABLE, f"cannot read: {e.strerror or e}")
            self._record_errors(src, [err], run.summary, run.pending)
        except Exception as e:  # an adapter bug must not stop the other sources
            if isinstance(e, _WorkerCrash):
                log.error("adapter %s failed on %s\n%s", s.adapter.name, s.path, e.trace)
            else:
                log.exception("adapter %s failed on %s", s.adapter.name, s.path)
            msg = e.message if isinstance(e, _WorkerCrash) else f"{type(e).__name__}: {e}"
            self._record_errors(src, [_error(src, "E_ADAPTER_CRASH", msg)], run.summary,
                                run.pending)

    def _post_index(self, summary: dict) -> None:
        """Derived structure computed after rows land (lineage, continuations)."""
        if self.lineage:
            from engram.lineage import derive

            summary["lineage"] = derive.after_ingest(self.conn, cache=self.cache)
        self.cache = None

    def _parse(self, s: Source) -> ParseOutput:
        return s.adapter.parse_source(s.path, mode=self.config.mode)

    def _parse_processes(self, todo: list, total_bytes: int) -> parse_worker.ParseProcess | None:
        """A worker process when there is enough to parse, a second core, and every adapter is
        the registered one (the worker looks adapters up by name); ``ENGRAM_PARSE_PROCESS=0``
        turns it off."""
        if (total_bytes < PROCESS_MIN_BYTES or (os.cpu_count() or 1) < 2 or not sys.executable
                or os.environ.get("ENGRAM_PARSE_PROCESS") == "0"):
            return None
        try:
            if any(adapters.get(s.adapter.name) is not s.adapter for s, _sk in todo):
                return None
            return parse_worker.ParseProcess()
        except (KeyError, OSError, ValueError):
            return None

    def _parsed(self, s: Source, fut, procs: parse_worker.ParseProcess | None
                ) -> tuple[ParseOutput, list | None, list | None, tuple | None]:
        """The result of a parse submitted to the thread or the worker process (a worker that
        died: parsed here instead), the block work the worker did ahead, the events'
        canonical JSON (``worker.parse_many``), if any, and for a streamed source
        (``worker.stream``) its tape staged."""
        if isinstance(fut, tuple) and fut[1] is None:  # a streamed source
            try:
                res = fut[0].result()
                res = getattr(fut[0], "engram_value", res)
            except WorkerGone:
                log.warning("parse worker exited; parsing %s in-process", s.path)
                res = parse_worker.stream(s.adapter.name, str(s.path), self.config.mode,
                                          str(self.root))
        elif procs is None:
            return fut.result(), None, None, None
        else:
            try:
                res = procs.result(fut[0])[fut[1]]
            except WorkerGone:
                log.warning("parse worker exited; parsing %s in-process", s.path)
                return self._parse(s), None, None, None
        if res[0] == "ok":  # (a fifth item: a streamed source's tape, or the tapes made)
            return res[1], res[2], res[3], (res[4] if len(res) > 4 else None)
        if res[0] == "error":
            raise _WorkerError(res[1])
        if res[0] == "oserror":
            raise OSError(res[1], res[2], res[3])
        raise _WorkerCrash(res[1], res[2])

    def _streamable(self, s: Source, sk, run: _Run) -> bool:
        """Whether a source is parsed as a stream (``worker.stream``): a big log of an adapter
        that streams, to be sealed now, none of whose sessions was sealed before (a continued
        session's tape starts at its first new event, under a meta of its own)."""
        if sk[0] < STREAM_MIN_BYTES or not s.adapter.streams_source(s.path):
            return False
        if not (run.seal or (run.now - sk[1] / 1e9) >= self.config.seal_after):
            return False
        cur = run.cursors.get(str(s.path))
        if cur is None:
            return True
        try:
            state = json.loads(cur[5]) if cur[5] else {}
        except ValueError:
            return False
        return all(int(st.get("sealed", 0)) == 0 for st in state.values())

    def _ingest_streamed(self, s: Source, sk, cur, batch: store.Batch, run: _Run,
                         out: ParseOutput, prepared: list, staged: tuple) -> bool:
        """``_ingest_source`` of a source parsed as a stream (``worker.stream``): its tape is
        staged already (a temp file to rename), its session is the meta and light events with
        their blocks prepared. False when a tape already there under its name turns out
        corrupt (removed: the caller parses the log again and writes it afresh)."""
        src = str(s.path)
        summary = run.summary
        state = json.loads(cur[5]) if cur is not None and cur[5] else {}
        rec = None
        # one session: ``staged`` is its tape; several (``worker.stream`` of a source of many
        # sessions): a tuple of them, one per session, in order
        per = staged if staged and isinstance(staged[0], tuple) else (staged,)
        refs = []   # every tape adopted and checked before any session is added
        for ref, tmp, _kept in per[:len(out.sessions)]:
            refs.append(self.stager.adopt(ref, tmp))
            if not self._sound(refs[-1], summary):
                return False
        for sess, ref, (_ref, _tmp, kept), prep in zip(out.sessions, refs, per, prepared):
            rec = self._sealed_record(src, sess, ref, kept, prep)
            batch.add(rec)
            _streamed(sess, ref, state, summary)
        self._record_errors(src, out.errors, summary, run.pending)
        run.pending.append(_cursor_row(s, sk, out.end_offset, state, 0, run.now))
        return True

    def _ingest_parts(self, s: Source, sk, ticket, run: _Run) -> None:
        """A history of many sessions streamed a session at a time (``worker.stream`` with
        ``emit``: in the worker, its ``Parts``; in this process, at its turn): each session is
        indexed as it completes — its tape adopted, its rows committed (``_take_part``) — and
        the source's errors and cursor go to ``run.pending`` last, once every session is in. A
        kill part of the way leaves the sessions committed so far and no cursor: the next run
        streams the history again, and the sessions already there are found under their tape
        ids (a sealed tape is indexed once). Nothing of a finished session is held here but its
        key's line of the cursor's state. A tape found corrupt under its name is removed, and
        the history streamed again here (its tape then written afresh)."""
        src = str(s.path)
        summary = run.summary
        cur = run.cursors.get(src)
        state = json.loads(cur[5]) if cur is not None and cur[5] else {}
        box = [store.Batch(self.conn, self.cache)]

        def take(item) -> None:
            self._take_part(src, item, box, state, summary)

        def here() -> tuple:
            return parse_worker.stream(s.adapter.name, src, self.config.mode, str(self.root), take)

        fut = ticket[0]
        try:
            try:
                if isinstance(fut, _Deferred):
                    res = here()
                else:
                    parts = fut.engram_parts
                    try:
                        while (item := parts.get()) is not None:
                            take(item)
                    finally:
                        parts.abandon()   # (stopped early: what comes later is removed)
                    try:
                        res = run.procs.result(fut)
                    except WorkerGone:
                        log.warning("parse worker exited; parsing %s in-process", s.path)
                        res = here()
            except _CorruptTape:
                res = here()
            if res[0] == "error":
                raise _WorkerError(res[1])
            if res[0] == "oserror":
                raise OSError(res[1], res[2], res[3])
            if res[0] != "ok":
                raise _WorkerCrash(res[1], res[2])
            out = res[1]
            batch, box[0] = box[0], None
            self._commit(batch, [], summary)
        finally:
            for rec in box[0].sessions if box[0] is not None else ():
                if isinstance(rec.prepared, store.PreparedSpill):   # not committed (the source
                    rec.prepared.discard()                          # failed): their files
                parse_worker.discard_spilled(rec.events)
        self._record_errors(src, out.errors, summary, run.pending)
        run.pending.append(_cursor_row(s, sk, out.end_offset, state, 0, run.now))

    def _take_part(self, src: str, item: tuple, box: list, state: dict, summary: dict) -> None:
        """(``_ingest_parts``) one streamed session, ``(SessionLog, PreparedSpill, (TapeRef,
        temp file or None, {offset: line}))``: its tape adopted (a file already there under its
        name that the index does not know is checked first: a corrupt one is removed), its lines
        kept for the lineage pass, its record added to ``box[0]``, committed once
        ``STREAM_COMMIT_SESSIONS`` are there (or ``STREAM_COMMIT_EVENTS`` events, or a big
        session). Its files are taken over, removed when it is not added."""
        sess, prep, (ref, tmp, kept) = item
        added = False
        try:
            if tmp is not None and ref.path.exists() and not self.stager.staged(ref.path):
                # (a corrupt file under its name is removed: the temp file takes its place)
                self._sound(dataclasses.replace(ref, created=False), summary)
            ref, tmp = self.stager.adopt(ref, tmp), None
            if not (self.stager.staged(ref.path) or self._sound(ref, summary)):
                raise _CorruptTape()   # (removed: the history is streamed again, its tape written)
            box[0].add(self._sealed_record(src, sess, ref, kept, prep))
            added = True
        finally:
            if not added:
                parse_worker.discard_part((sess, prep, (ref, tmp, kept)))
        _streamed(sess, ref, state, summary)
        if (len(box[0]) >= STREAM_COMMIT_SESSIONS or box[0].n_events >= STREAM_COMMIT_EVENTS
                or isinstance(prep, store.PreparedSpill)):
            batch, box[0] = box[0], store.Batch(self.conn, self.cache)
            self._commit(batch, [], summary)

    def _ingest_source(self, s: Source, sk, cur, seal: bool, now: float, batch: store.Batch,
                       pending_cursors: list, summary: dict, parsed: ParseOutput | None = None,
                       prepared: list[store.Prepared] | None = None,
                       encoded: list[list[bytes]] | None = None,
                       taped: list[tuple] | None = None) -> bool:
        """Stage the sealed sessions of one parsed source as tapes and add every session to
        ``batch``; its errors and cursor go to ``pending_cursors`` (committed with the batch).
        Nothing reaches the batch unless the whole source went through. ``encoded``: each
        session's events as their canonical JSON, its events then cut down to what the index
        reads (``worker._encoded``). ``taped``: each session's tape made by the parse
        (``worker._taped``: a source asked for by ``_ParseQueue.tapes`` — no cursor, quiet), its
        events cut down likewise. False, with nothing added, when a tape made by the parse finds a
        corrupt file under its name (removed): the caller parses the source again."""
        out: ParseOutput = parsed if parsed is not None else self._parse(s)
        src = str(s.path)
        state = json.loads(cur[5]) if cur is not None else {}
        quiet = seal or (now - sk[1] / 1e9) >= self.config.seal_after
        any_live = False
        records: list[store.SessionRecord] = []
        counts = {"sessions": 0, "live": 0, "sealed": 0, "tapes_written": 0, "events": 0}
        for i, sess in enumerate(out.sessions):
            counts["sessions"] += 1
            events = sess.events
            prep = prepared[i] if prepared is not None else None
            lines = encoded[i] if encoded is not None else None
            st = state.get(sess.key, {"sealed": 0, "tape": None})
            sealed = int(st.get("sealed", 0))
            if sealed:
                if len(events) <= sealed:
                    continue
                meta = dict(events[0])
                meta["continues"] = st.get("tape")
                events = [meta] + events[sealed:]
                if prep is not None:  # the new meta event is worked out at commit
                    prep = store.Prepared([None] + prep.blocks[sealed:], prep.texts)
                if lines is not None:
                    lines = [None] + lines[sealed:]
            lid = live_tape_id(src, sess.key)
            if taped is not None or quiet:
                if taped is not None:  # (sealed whole: asked for only without a cursor, and quiet)
                    ref, tmp, kept = taped[i]
                    taped[i] = (ref, None, kept)  # the stager's now
                    ref = self.stager.adopt(ref, tmp)
                    if not self._sound(ref, summary) and not self.stager.staged(ref.path):
                        return False  # (a tape staged by this run, a twin session's, is sound)
                    self._keep_taped(ref.tape_id, events, kept)
                else:
                    tape_events = events
                    if lines is not None:  # the same bytes as the whole events would give
                        tape_events = [events[0]] + [orjson.Fragment(b) for b in lines[1:]]
                    ref = self._stage(self._tape_dir_for(events[0]), tape_events, events, summary)
                counts["tapes_written"] += int(ref.created)
                counts["sealed"] += 1
                rec = store.SessionRecord(ref.tape_id, events, path=str(ref.path),
                                          source_path=src, source_key=sess.key, prepared=prep,
                                          replaces=lid if lid in self.live_ids else None)
                state[sess.key] = {"sealed": len(sess.events), "tape": ref.tape_id}
            else:
                any_live = True
                counts["live"] += 1
                rec = store.SessionRecord(lid, events, live=True, source_path=src,
                                          source_key=sess.key, prepared=prep)
                if lines is not None:
                    rec.live_json = [writer.encode_event(events[0])] + lines[1:]
            rec.encode()  # a value that cannot be written is this source's error
            if lines is None and prep is not None and None not in prep.blocks[1:]:
                # its tape staged and its JSON made, the batch holds only what the commit reads
                # of events prepared ahead (their texts are in the tape and the prepared arrays)
                rec.events = [events[0]] + [store.light_event(ev) for ev in events[1:]]
            records.append(rec)
            counts["events"] += len(events)
        for rec in records:
            batch.add(rec)
        for k, n in counts.items():
            summary[k] += n
        self._record_errors(src, out.errors, summary, pending_cursors)
        pending_cursors.append(_cursor_row(s, sk, out.end_offset, state, int(any_live), now))
        return True

    def _sealed_record(self, src: str, sess, ref: writer.TapeRef, kept, prep) -> store.SessionRecord:
        """A streamed session's record, its tape adopted: its kept lines go to the lineage cache,
        and it replaces the live tape of the same session, if any (encoded, ready to add)."""
        self._keep_taped(ref.tape_id, sess.events, kept)
        lid = live_tape_id(src, sess.key)
        rec = store.SessionRecord(ref.tape_id, sess.events, path=str(ref.path), source_path=src,
                                  source_key=sess.key, prepared=prep,
                                  replaces=lid if lid in self.live_ids else None)
        rec.encode()
        return rec

    def _keep_taped(self, tape_id: str, events, kept) -> None:
        """A tape the parse made or a big tape streamed: its lines the lineage pass reads
        (``kept``, offset → line: a dict, or a streamed tape's ``PackedLines``, handed over as
        they are: ``kept`` is emptied, the parse answer that holds it does not hold the lines
        through the session's commit) kept for it, as the ingest's own staging keeps them."""
        from engram.lineage.cache import PackedLines

        if isinstance(kept, PackedLines):
            owned = kept.take()
            if self.cache is not None:
                self.cache.keep_tape(tape_id, events, owned)
            return
        if self.cache is not None and hasattr(orjson, "Fragment"):
            self.cache.keep_tape(tape_id, events,
                                 {o: orjson.Fragment(b) for o, b in kept.items()})

    def _sound(self, ref: writer.TapeRef, summary: dict) -> bool:
        """Whether a staged tape can be indexed: written now, or already indexed, or a file
        already there under its name that reads whole (checked as a stream: none of it held).
        A corrupt one is removed (counted in ``tapes_repaired``) for the caller to write afresh
        from the log."""
        if ref.created or self._indexed(ref.tape_id):
            return True
        try:
            reader.check_raw(ref.path)
        except CorruptTape as e:
            log.warning("%s: %s; writing it again from its log", ref.path, e.message)
            ref.path.unlink(missing_ok=True)
            summary["tapes_repaired"] = summary.get("tapes_repaired", 0) + 1
            return False
        return True

    def _stage(self, tape_dir: Path, tape_events: list, events: list[dict],
               summary: dict) -> writer.TapeRef:
        """Stage a sealed session's tape (``tape_events``: its events, or the ``meta`` event and
        the others' canonical JSON; ``events``: the events as the index reads them). A file
        already there under its name that the index does not know yet is verified first: a
        corrupt one is replaced (written afresh from the events)."""
        ref = self.stager.stage(tape_dir, tape_events)
        if not self._sound(ref, summary):
            ref = self.stager.stage(tape_dir, tape_events)
        if self.cache is not None:
            self.cache.keep_tape(ref.tape_id, events, tape_events)
        return ref

    def _indexed(self, tape_id: str) -> bool:
        return self.conn.execute("SELECT 1 FROM tapes WHERE tape_id=?", (tape_id,)).fetchone() \
            is not None

    def _record_errors(self, src: str, errors: list[dict], summary: dict, pending: list) -> None:
        pending.append(("DELETE FROM errors WHERE source=?", (src,)))
        for e in errors:
            err = e.get("error", e)
            summary["error_count"] += 1
            summary["errors"].append(e)
            pending.append(("INSERT INTO errors(source, line, code, message) VALUES (?,?,?,?)",
                            (src, err.get("line"), err.get("code"), err.get("message"))))

    def _commit(self, batch: store.Batch, pending_cursors: list, summary: dict) -> None:
        """The batch's rows with the cursors and errors of its sources, in one transaction;
        the tapes its rows point at are durable first."""
        stager = getattr(self, "stager", None)
        if stager is not None:
            stager.flush()  # tapes are durable before any index row points at them
        parse_worker.release_freed_memory()  # what the batch's parsing freed, before its arrays
        try:
            stats = batch.commit(pending_cursors)
        finally:
            for rec in batch.sessions:  # a streamed session's prepared parts and events
                if isinstance(rec.prepared, store.PreparedSpill):
                    rec.prepared.discard()
                parse_worker.discard_spilled(rec.events)
        for k in ("blocks", "fingerprints"):
            summary[k] += stats[k]
        summary["tapes_indexed"] += sum(1 for r in batch.sessions if not r.live)

    def _tape_dir_for(self, meta: dict) -> Path:
        return parse_worker.tape_dir_for(meta, str(self.root))

    def _index_tape_dirs(self, summary: dict, progress: Progress | None) -> None:
        known = {r[0] for r in self.conn.execute("SELECT tape_id FROM tapes WHERE live=0")}
        batch = store.Batch(self.conn)
        pending: list = []
        for d in self.tape_dirs():
            if not d.is_dir() or self.config.is_excluded(d):
                continue
            for p in sorted(d.glob("*" + writer.SUFFIX)):
                try:
                    tid = reader.tape_id_of(p)
                except CorruptTape:
                    continue
                if tid in known:
                    continue
                if reader.content_bound(p) >= reader.STREAM_MIN_BYTES:
                    # a big tape: streamed, and indexed in a transaction of its own (after the
                    # tapes before it, so the rows are those of the whole-tape path)
                    self._commit(batch, pending, summary)
                    batch, pending = store.Batch(self.conn), []
                    try:
                        summary["events"] += self._index_streamed_tape(p, tid, summary)
                    except CorruptTape as e:
                        self._record_errors(str(p), [e.to_dict()], summary, pending)
                        continue
                    known.add(tid)
                    continue
                try:
                    events = reader.read_tape(p)
                except CorruptTape as e:
                    self._record_errors(str(p), [e.to_dict()], summary, pending)
                    continue
                known.add(tid)
                batch.add(store.SessionRecord(tid, events, path=str(p),
                                              source_path=events[0].get("source_path")))
                summary["events"] += len(events)
                if batch.n_events >= BATCH_EVENTS:
                    self._commit(batch, pending, summary)
                    batch, pending = store.Batch(self.conn), []
        self._commit(batch, pending, summary)
        self._index_sidecars(summary)

    def _index_streamed_tape(self, p: Path, tid: str, summary: dict) -> int:
        """Index a big tape of a tape directory as a stream (``worker.prepare_tape``: checked
        whole first, as ``read_tape`` checks it, then its blocks prepared a part at a time into
        temp files) and commit it alone: ``Batch.commit`` indexes it a part at a time (as a
        streamed log's session), in one transaction -- a kill leaves it not indexed, and the next
        ingest indexes it. Its lines the lineage pass reads are kept for it, as for a streamed
        log. ``CorruptTape`` (nothing of it indexed) as ``read_tape`` raises it; its number of
        events."""
        work = paths.private_dir(paths.user_tapes_dir())
        writer.sweep_temp(work)   # what an ingest killed while it indexed one left behind
        events, prep, kept = parse_worker.prepare_tape(str(p), work)
        batch = store.Batch(self.conn, self.cache)
        try:
            batch.add(store.SessionRecord(tid, events, path=str(p), prepared=prep,
                                          source_path=events.meta.get("source_path")))
            self._keep_taped(tid, events, kept)
            del kept
        except BaseException:
            prep.discard()
            parse_worker.discard_spilled(events)
            raise
        self._commit(batch, [], summary)   # (its temp files removed, committed or not)
        return len(events)

    # -- sidecars (issue 6) ------------------------------------------------------------------
    def _index_sidecars(self, summary: dict) -> None:
        """``<tape_id>.sidecar.jsonl`` enrichment beside tapes (``engram/index/sidecar.py``)."""
        from engram.index import sidecar

        dirs = [d for d in self.tape_dirs() if d.is_dir() and not self.config.is_excluded(d)]
        n = sidecar.index_sidecars(self.conn, dirs)
        if n:
            summary["sidecars"] = n
    # -- end sidecars --------------------------------------------------------------------------


class _ParseQueue:
    """The parses of ``todo``, run ahead of the indexing and handed out strictly in source
    order: ``for (source, stat_key), ticket in queue`` (``Ingestor._parsed`` turns a ticket into
    its result).

    Parsing (pure Python) runs ahead of the indexing: in a worker process for big ingests
    (``worker.py``), else one source ahead in a thread while SQLite commits (which release the
    GIL) proceed in the caller. While the next result is not ready, the staged tapes are written
    (``TapeStager.write_one``), and with a worker the next group of the queue is parsed here
    (``steal``)."""

    def __init__(self, ing: Ingestor, todo: list, run: _Run):
        self.ing, self.run, self.procs = ing, run, run.procs
        self.queue: deque = deque(todo)
        self.ahead: deque = deque()   # (source, ticket, bytes sent to the worker for it)
        self.ahead_bytes = 0
        # of ``ahead_bytes``, those sent to the worker: ``PROCESS_AHEAD_BYTES`` bounds these
        # alone; a group parsed here (``steal``) must not keep the worker from its next ones
        self.sent_bytes = 0
        # a history streamed in the worker a session at a time is queued: nothing more is sent
        # until the ingest has taken it (the worker, its pipe full of sessions, reads no request;
        # a request written now could wait on it, and the ingest with it)
        self.streaming = False
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engram-parse")

    def __iter__(self):
        self.refill()
        while self.ahead:
            while not _ready(self.ahead[0][1]) and (self.ing.stager.write_one() or (
                    self.procs is not None and self.steal())):
                pass
            item, ticket, sent = self.ahead.popleft()
            self.ahead_bytes -= max(item[1][0], 0)
            self.sent_bytes -= sent
            self.refill()
            yield item, ticket
            if _in_parts(ticket) and not isinstance(ticket[0], _Deferred):
                self.streaming = False
                self.refill()
            del item, ticket  # the parse result is not held past its source's turn

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    @staticmethod
    def _items(group: list) -> list[tuple[str, str]]:
        return [(g[0].adapter.name, str(g[0].path)) for g in group]

    def _next_group(self, limit: int | None = None) -> tuple[list, int]:
        """The next sources of the queue to parse together, and their size in bytes (none
        bigger than ``limit``)."""
        group: list = []
        size = 0
        while len(group) < GROUP_SOURCES and size < GROUP_BYTES and self.queue:
            if limit is not None and self.queue[0][1][0] > limit or self._streams(self.queue[0]):
                break
            nxt = self.queue.popleft()
            group.append(nxt)
            size += max(nxt[1][0], 0)
        return group, size

    @staticmethod
    def _compact(size: int) -> bool:
        return size >= COMPACT_MIN_BYTES

    def _queue_group(self, group: list, size: int, fut: Future, sent: bool) -> None:
        self.ahead.extend((g, (fut, j), max(g[1][0], 0) if sent else 0) for j, g in enumerate(group))
        self.ahead_bytes += size
        if sent:
            self.sent_bytes += size

    def tapes(self, group: list) -> tuple | None:
        """What ``worker.parse_many`` needs to make the tapes of the sources of ``group`` that
        are sealed whole as new tapes (no cursor, quiet: every session a new tape, as
        ``Ingestor._ingest_source`` would stage it): ``(root, one flag per source, keep)``, keep
        while the ingest cache takes more lines; None when there is none."""
        run, ing = self.run, self.ing
        flags = [run.cursors.get(str(s.path)) is None
                 and (run.seal or (run.now - sk[1] / 1e9) >= ing.config.seal_after)
                 for s, sk in group]
        if not any(flags):
            return None
        from engram.lineage import cache as lineage_cache

        cache = ing.cache
        keep = cache is not None and cache.lines_bytes < lineage_cache.MAX_LINES_BYTES
        return str(ing.root), flags, keep

    def _streams(self, item) -> bool:
        return self.ing._streamable(item[0], item[1], self.run)

    def _stream(self) -> None:
        """The next source of the queue, parsed as a stream (``worker.stream``) on its own."""
        nxt = self.queue.popleft()
        s = nxt[0]
        args = (s.adapter.name, str(s.path), self.ing.config.mode, str(self.ing.root))
        if getattr(s.adapter, "stream_sessions", None) is not None:   # many sessions: in parts
            if self.procs is not None:
                fut = self.procs.submit_stream(*args, parts=True)
                self.streaming = True
            else:
                fut = _Deferred()
        else:
            fut = (self.procs.submit_stream(*args) if self.procs is not None
                   else self.pool.submit(parse_worker.stream, *args))
        size = max(nxt[1][0], 0)
        sent = size if self.procs is not None else 0
        self.ahead.append((nxt, (fut, None), sent))
        self.ahead_bytes += size
        self.sent_bytes += sent

    def refill(self) -> None:
        if self.procs is None:
            while len(self.ahead) < PARSE_AHEAD and self.queue:
                if self._streams(self.queue[0]):
                    self._stream()
                    continue
                nxt = self.queue.popleft()
                self.ahead.append((nxt, self.pool.submit(self.ing._parse, nxt[0]), 0))
            return
        # the worker parses groups of sources (fewer, bigger batches of its block work)
        while (len(self.ahead) < PROCESS_AHEAD and self.sent_bytes < PROCESS_AHEAD_BYTES
               and self.ahead_bytes < AHEAD_BYTES and not self.streaming):
            if self.queue and self._streams(self.queue[0]):
                self._stream()
                continue
            group, size = self._next_group()
            if not group:
                return
            self._queue_group(group, size, self.procs.submit(
                self._items(group), self.ing.config.mode, self._compact(size), self.tapes(group)),
                sent=True)

    def steal(self) -> bool:
        """While the worker is still on the next source and no tape is left to write, parse
        the next group of the queue here (the same ``parse_many`` the worker runs, so the
        same result), queued behind the ones sent to the worker: this core would otherwise
        wait. False when the queue is empty, or when ``AHEAD_BYTES`` of sources are parsed or
        being parsed ahead of the indexing (what is held in memory stays bounded while the
        worker is on one huge log). A source over ``STEAL_MAX_BYTES`` is left to the worker."""
        if self.ahead_bytes >= AHEAD_BYTES:
            return False
        group, size = self._next_group(STEAL_MAX_BYTES)
        if not group:
            return False
        self._queue_group(group, size, self.procs.answered(
            self._items(group), self.ing.config.mode, self._compact(size), self.tapes(group)),
            sent=False)
        summary = self.run.summary
        summary["parsed_here"] = summary.get("parsed_here", 0) + len(group)
        return True


class _WorkerError(EngramError):
    """An ``EngramError`` raised in the parse worker (as its ``to_dict()``)."""

    def __init__(self, d: dict):
        err = d.get("error", {})
        super().__init__(err.get("message") or "", path=err.get("path"), line=err.get("line"))
        self.d = d

    def to_dict(self) -> dict:
        return self.d


class _WorkerCrash(Exception):
    """Any other exception in the parse worker: its ``Type: message`` and traceback."""

    def __init__(self, message: str, trace: str):
        super().__init__(message)
        self.message, self.trace = message, trace


def _streamed(sess, ref, state: dict, summary: dict) -> None:
    """A streamed session indexed (its record added): the source's cursor state and the counts."""
    state[sess.key] = {"sealed": len(sess.events), "tape": ref.tape_id}
    summary["sessions"] += 1
    summary["sealed"] += 1
    summary["streamed"] = summary.get("streamed", 0) + 1
    summary["tapes_written"] += int(ref.created)
    summary["events"] += len(sess.events)


def _cursor_row(s: Source, sk, end_offset: int, state: dict, live: int, now: float) -> tuple:
    """The statement that records how far ``s`` was read (committed with its batch's rows)."""
    return ("INSERT OR REPLACE INTO cursors(source, adapter, size, mtime_ns, end_offset, state, live,"
            " updated) VALUES (?,?,?,?,?,?,?,?)",
            (str(s.path), s.adapter.name, sk[0], sk[1], end_offset, json.dumps(state, sort_keys=True),
             live, utc_iso(now)))


def _new_summary() -> dict:
    return {"sources": 0, "skipped": 0, "parsed": 0, "sessions": 0, "live": 0, "sealed": 0,
            "tapes_written": 0, "tapes_indexed": 0, "events": 0, "blocks": 0,
            "fingerprints": 0, "bytes": 0, "errors": [], "error_count": 0}


def _ready(ticket) -> bool:
    """Whether a parse in the queue is done: the thread's ``Future`` or the worker's
    ``(future, index)``; a history streamed in parts: once its first session (or its answer)
    is there."""
    fut = ticket if isinstance(ticket, Future) else ticket[0]
    parts = getattr(fut, "engram_parts", None)
    return fut.done() if parts is None else parts.ready()


def _in_parts(ticket) -> bool:
    """Whether a ticket is a history streamed a session at a time (``Ingestor._ingest_parts``)."""
    return isinstance(ticket, tuple) and ticket[1] is None and (
        isinstance(ticket[0], _Deferred) or hasattr(ticket[0], "engram_parts"))


class _Deferred:
    """The ticket of a history of many sessions streamed in this process at its turn
    (``Ingestor._ingest_parts``), each session indexed as it completes."""

    @staticmethod
    def done() -> bool:
        return True


class _CorruptTape(Exception):
    """(``Ingestor._take_part``) a tape already there under a session's name was corrupt."""


def _ingest_cache():
    """What the lineage pass will read of this run's sessions (``engram/lineage/cache.py``)."""
    from engram.lineage.cache import IngestCache

    return IngestCache()


def _real_locations(roots: list[tuple[Adapter, Path]]) -> list[str]:
    """The resolved directories of the harness locations (a file location: its directory)."""
    out = set()
    for _ad, root in roots:
        try:
            if not root.exists():
                continue
            d = root if root.is_dir() else root.parent
            out.add(os.path.realpath(d))
        except OSError:
            continue
    return sorted(out)


class _Resolver:
    """``os.path.realpath`` of many paths under few directories: a directory is resolved once
    (its realpath kept), a file then costs one ``lstat`` — is it a link — instead of one for each
    part of its path (16k logs: ~130k ``lstat`` calls otherwise, the bulk of discovery)."""

    def __init__(self) -> None:
        self.dirs: dict[str, str] = {}

    def __call__(self, path: str) -> str:
        path = os.path.abspath(path)
        head, name = os.path.split(path)
        if not name or name in (".", "..") or os.path.islink(path):
            return os.path.realpath(path)
        real = self.dirs.get(head)
        if real is None:
            real = self.dirs[head] = os.path.realpath(head)
        return os.path.join(real, name)


def _leaves(src: Path, inside: list[str], resolve: _Resolver) -> str | None:
    """Where ``src`` resolves to when that is outside every directory of ``inside`` (a
    symbolic link, or a path under one, out of the configured locations); else None."""
    real = resolve(src)
    for d in inside:
        if real == d or real.startswith(d.rstrip(os.sep) + os.sep):
            return None
    return real


def _unreadable_dirs(root: Path) -> list[dict]:
    """An error for each directory under ``root`` (``WALK_DEPTH`` levels, links not followed)
    that cannot be listed: its logs cannot be found, which must not go unsaid."""
    errors: list[dict] = []
    if not root.is_dir():
        return errors

    def onerror(e: OSError) -> None:
        errors.append(_error(e.filename or root, E_UNREADABLE + "_DIR",
                             f"cannot list directory: {e.strerror or e}"))

    top = str(root).rstrip(os.sep).count(os.sep)
    for dirpath, dirnames, _files in os.walk(root, onerror=onerror):
        if dirpath.count(os.sep) - top >= WALK_DEPTH:
            dirnames[:] = []
    return errors


def _matches(src: Path, only: set[str]) -> bool:
    s = os.path.abspath(src)
    for o in only:
        if o == s or o.startswith(s.rstrip(os.sep) + os.sep):
            return True
        # a sidecar file of a store (SQLite -wal/-shm/-journal) belongs to the store
        for suffix in ("-wal", "-shm", "-journal"):
            if o == s + suffix:
                return True
    return False
