"""Ingest: harness logs → tapes (truth) → index (derived), incrementally.

For every enabled harness, each configured (or default) location is asked for its sources; a source
whose size and mtime match its cursor is skipped without being opened. A changed source is parsed
again (adapters are pure and prefix-stable, and content-addressed blocks make re-indexing cheap).

Each session in a source is either

* **live** — the source changed less than ``seal_after`` seconds ago: its events are indexed as
  provisional rows under a stable ``live-…`` tape id and replaced on every change; or
* **sealed** — quiet (or ``--seal``): written as one immutable tape and indexed from it; the
  cursor remembers how many events were sealed, and events appended later become a new tape whose
  ``meta.continues`` names the earlier one.

Tape directories (the repo's ``.engram/tapes``, ``$ENGRAM_HOME/tapes``, configured ``sources``) are
indexed too, so deleting ``.engram-cache/`` and ingesting again rebuilds the same index.
Nothing outside the configured locations is read.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import apsw
import xxhash

from engram import adapters, paths
from engram.ingest import worker as parse_worker
from engram.adapters.base import Adapter, ParseOutput
from engram.config import Config
from engram.errors import CorruptTape, EngramError, WorkerGone
from engram.index import store
from engram.tape import reader, writer

log = logging.getLogger(__name__)

BATCH_EVENTS = 50_000
BATCH_BYTES = 64 << 20          # ... or this many bytes of source logs: a commit per batch
PARSE_AHEAD = 4
PROCESS_MIN_BYTES = 16 << 20    # this much to parse: in a worker process (``worker.py``)
PROCESS_AHEAD_BYTES = 16 << 20  # source bytes sent to the worker ahead of the indexing (the rest
#                                 stays queued: this process parses from it while it would wait)
PROCESS_AHEAD = 1024            # ... and sources: enough for the worker to go on during a commit
AHEAD_BYTES = 64 << 20          # at most this many source bytes parsed or being parsed ahead in all
GROUP_SOURCES, GROUP_BYTES = 32, 2 << 20  # sources sent to the worker at a time
Progress = Callable[[int, int, str], None]


@dataclasses.dataclass
class Source:
    adapter: Adapter
    path: Path


def live_tape_id(source: str, key: str) -> str:
    return "live-" + xxhash.xxh3_64_hexdigest(f"{source}\0{key}".encode())


def _size_of(p: Path) -> int:
    try:
        if p.is_dir():
            return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        return p.stat().st_size
    except OSError:
        return 0


def _stat_key(p: Path) -> tuple[int, int]:
    """(size, mtime_ns) of a file, or of the newest file in a directory store."""
    try:
        if p.is_dir():
            size, mtime = 0, 0
            for f in p.rglob("*"):
                if f.is_file():
                    st = f.stat()
                    size += st.st_size
                    mtime = max(mtime, st.st_mtime_ns)
            return size, mtime
        st = p.stat()
        mtime = st.st_mtime_ns
        for side in (p.with_name(p.name + "-wal"),):  # SQLite stores change through their WAL
            if side.exists():
                sst = side.stat()
                size_extra = sst.st_size
                return st.st_size + size_extra, max(mtime, sst.st_mtime_ns)
        return st.st_size, mtime
    except OSError:
        return -1, -1


class Ingestor:
    def __init__(self, root: Path, config: Config, conn: apsw.Connection):
        self.root = Path(root)
        self.config = config
        self.conn = conn
        self.cache = None
        self.live_ids: set[str] = set()   # the index's live tapes when the run started

    # -- discovery ---------------------------------------------------------------------------
    def harness_roots(self) -> list[tuple[Adapter, Path]]:
        out = []
        for name in adapters.available():
            ad = adapters.get(name)
            for p in self.config.harness_paths(name, ad.default_paths() + ad.repo_paths(self.root)):
                out.append((ad, p))
        return out

    def sources(self, only: Iterable[Path] | None = None) -> list[Source]:
        only_set = {os.path.abspath(p) for p in only} if only is not None else None
        out: list[Source] = []
        seen: set[tuple[str, str]] = set()
        for ad, root in self.harness_roots():
            if not root.exists() or self.config.is_excluded(root):
                continue
            try:
                found = list(ad.discover(root))
            except OSError as e:
                log.warning("%s: cannot list: %s", root, e)
                continue
            for src in found:
                if self.config.is_excluded(src):
                    continue
                key = (ad.name, str(src))
                if key in seen:
                    continue
                if only_set is not None and not _matches(src, only_set):
                    continue
                seen.add(key)
                out.append(Source(ad, src))
        return out

    def tape_dirs(self) -> list[Path]:
        dirs = [paths.repo_tapes_dir(self.root), paths.user_tapes_dir(), *self.config.source_dirs()]
        out = []
        for d in dirs:
            if d not in out:
                out.append(d)
        return out

    # -- the run -----------------------------------------------------------------------------
    def run(self, *, seal: bool = False, paths_: Iterable[Path] | None = None,
            progress: Progress | None = None, now: float | None = None) -> dict:
        t0 = time.perf_counter()
        now = time.time() if now is None else now
        summary = {"sources": 0, "skipped": 0, "parsed": 0, "sessions": 0, "live": 0, "sealed": 0,
                   "tapes_written": 0, "tapes_indexed": 0, "events": 0, "blocks": 0,
                   "fingerprints": 0, "bytes": 0, "errors": [], "error_count": 0}
        srcs = self.sources(paths_)
        summary["sources"] = len(srcs)
        cursors = {r[0]: r for r in self.conn.execute(
            "SELECT source, adapter, size, mtime_ns, end_offset, state, live FROM cursors")}
        todo: list[tuple[Source, tuple[int, int]]] = []
        for s in srcs:
            sk = _stat_key(s.path)
            cur = cursors.get(str(s.path))
            if cur is not None and (cur[2], cur[3]) == sk:
                quiet = (now - sk[1] / 1e9) >= self.config.seal_after
                if not cur[6] or not (seal or quiet):
                    summary["skipped"] += 1
                    continue
            todo.append((s, sk))
        total_bytes = sum(max(sk[0], 0) for _, sk in todo)
        # the provisional tapes a sealed session replaces (a session is live or sealed once a run)
        self.live_ids = {r[0] for r in self.conn.execute("SELECT tape_id FROM tapes WHERE live=1")}
        done_bytes = 0
        self.cache = _ingest_cache()
        batch = store.Batch(self.conn, self.cache)
        pending_cursors: list[tuple] = []
        self.stager = writer.TapeStager()
        # Parsing (pure Python) runs ahead of the indexing: in a worker process for big ingests
        # (``worker.py``), else one source ahead in a thread while SQLite commits (which
        # release the GIL) proceed here. Results are consumed strictly in source order; while
        # the next one is not ready, the staged tapes are written (``TapeStager.write_one``).
        procs = self._parse_processes(todo, total_bytes)
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engram-parse")
        ahead: deque = deque()
        queue = iter(todo)
        ahead_bytes = 0

        def items(group: list) -> list[tuple[str, str]]:
            return [(g[0].adapter.name, str(g[0].path)) for g in group]

        def next_group() -> tuple[list, int]:
            """The next sources of the queue to parse together, and their size in bytes."""
            group: list = []
            size = 0
            while len(group) < GROUP_SOURCES and size < GROUP_BYTES:
                nxt = next(queue, None)
                if nxt is None:
                    break
                group.append(nxt)
                size += max(nxt[1][0], 0)
            return group, size

        def queue_group(group: list, size: int, fut: Future) -> None:
            nonlocal ahead_bytes
            ahead.extend((g, (fut, j)) for j, g in enumerate(group))
            ahead_bytes += size

        def refill() -> None:
            if procs is None:
                while len(ahead) < PARSE_AHEAD:
                    nxt = next(queue, None)
                    if nxt is None:
                        return
                    ahead.append((nxt, pool.submit(self._parse, nxt[0])))
                return
            # the worker parses groups of sources (fewer, bigger batches of its block work)
            while len(ahead) < PROCESS_AHEAD and ahead_bytes < PROCESS_AHEAD_BYTES:
                group, size = next_group()
                if not group:
                    return
                queue_group(group, size, procs.submit(items(group), self.config.mode))

        def steal() -> bool:
            """While the worker is still on the next source and no tape is left to write, parse
            the next group of the queue here (the same ``parse_many`` the worker runs, so the
            same result), queued behind the ones sent to the worker: this core would otherwise
            wait. False when the queue is empty, or when ``AHEAD_BYTES`` of sources are parsed or
            being parsed ahead of the indexing (what is held in memory stays bounded while the
            worker is on one huge log)."""
            if ahead_bytes >= AHEAD_BYTES:
                return False
            group, size = next_group()
            if not group:
                return False
            queue_group(group, size, procs.answered(items(group), self.config.mode))
            summary["parsed_here"] = summary.get("parsed_here", 0) + len(group)
            return True

        batch_bytes = 0
        try:
            refill()
            while ahead:
                while not _ready(ahead[0][1]) and (self.stager.write_one() or (
                        procs is not None and steal())):
                    pass
                (s, sk), fut = ahead.popleft()
                ahead_bytes -= max(sk[0], 0)
                refill()
                if progress:
                    progress(done_bytes, total_bytes, str(s.path))
                try:
                    parsed, prepared = self._parsed(s, fut, procs)
                    self._ingest_source(s, sk, cursors.get(str(s.path)), seal, now, batch,
                                        pending_cursors, summary, parsed=parsed,
                                        prepared=prepared)
                except EngramError as e:
                    self._record_errors(str(s.path), [e.to_dict()], summary, pending_cursors)
                except Exception as e:  # an adapter bug must not stop the other sources
                    if isinstance(e, _WorkerCrash):
                        log.error("adapter %s failed on %s\n%s", s.adapter.name, s.path, e.trace)
                    else:
                        log.exception("adapter %s failed on %s", s.adapter.name, s.path)
                    err = {"error": {"code": "E_ADAPTER_CRASH", "path": str(s.path), "line": None,
                                     "message": f"{type(e).__name__}: {e}"
                                     if not isinstance(e, _WorkerCrash) else e.message}}
                    self._record_errors(str(s.path), [err], summary, pending_cursors)
                done_bytes += max(sk[0], 0)
                summary["bytes"] += max(sk[0], 0)
                summary["parsed"] += 1
                batch_bytes += max(sk[0], 0)
                if batch.n_events >= BATCH_EVENTS or batch_bytes >= BATCH_BYTES:
                    self._commit(batch, pending_cursors, summary)
                    batch = store.Batch(self.conn, self.cache)
                    pending_cursors = []
                    batch_bytes = 0
        except BaseException:
            if procs is not None:
                procs.close()
            self.stager.discard()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        try:
            self._commit(batch, pending_cursors, summary)
            self._index_tape_dirs(summary, progress)
            if self.cache is not None:
                self.cache.worker = procs  # idle now: it computes continuations meanwhile
            self._post_index(summary)
        finally:
            if procs is not None:
                procs.close()
        if progress:
            progress(total_bytes, total_bytes, "done")
        summary["elapsed_s"] = round(time.perf_counter() - t0, 3)
        summary["errors"] = summary["errors"][:50]
        summary["nothing_to_do"] = (summary["parsed"] == 0 and summary["tapes_indexed"] == 0)
        return summary

    def _post_index(self, summary: dict) -> None:
        """Derived structure computed after rows land (lineage, continuations)."""
        try:
            from engram.lineage import derive as lineage
        except ImportError:
            return
        hook = getattr(lineage, "after_ingest", None)
        if hook is not None:
            summary["lineage"] = hook(self.conn, cache=getattr(self, "cache", None))
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
                ) -> tuple[ParseOutput, list | None]:
        """The result of a parse submitted to the thread or the worker process (a worker that
        died: parsed here instead), and the block work the worker did ahead, if any."""
        if procs is None:
            return fut.result(), None
        try:
            res = procs.result(fut[0])[fut[1]]
        except WorkerGone:
            log.warning("parse worker exited; parsing %s in-process", s.path)
            return self._parse(s), None
        if res[0] == "ok":
            return res[1], res[2]
        if res[0] == "error":
            raise _WorkerError(res[1])
        raise _WorkerCrash(res[1], res[2])

    def _ingest_source(self, s: Source, sk, cur, seal: bool, now: float, batch: store.Batch,
                       pending_cursors: list, summary: dict, parsed: ParseOutput | None = None,
                       prepared: list[store.Prepared] | None = None) -> None:
        out: ParseOutput = parsed if parsed is not None else self._parse(s)
        src = str(s.path)
        state = json.loads(cur[5]) if cur is not None else {}
        quiet = seal or (now - sk[1] / 1e9) >= self.config.seal_after
        any_live = False
        for i, sess in enumerate(out.sessions):
            summary["sessions"] += 1
            events = sess.events
            prep = prepared[i] if prepared is not None else None
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
            lid = live_tape_id(src, sess.key)
            if quiet:
                tape_dir = self._tape_dir_for(events[0])
                ref = self.stager.stage(tape_dir, events)
                if self.cache is not None:
                    self.cache.keep_tape(ref.tape_id, events, ref.raw)
                summary["tapes_written"] += int(ref.created)
                summary["sealed"] += 1
                if lid in self.live_ids:
                    store.delete_tape(self.conn, lid)
                batch.add(store.SessionRecord(ref.tape_id, events, path=str(ref.path),
                                              source_path=src, source_key=sess.key,
                                              prepared=prep))
                state[sess.key] = {"sealed": len(sess.events), "tape": ref.tape_id}
            else:
                any_live = True
                summary["live"] += 1
                batch.add(store.SessionRecord(lid, events, live=True, source_path=src,
                                              source_key=sess.key, prepared=prep))
            summary["events"] += len(events)
        self._record_errors(src, out.errors, summary, pending_cursors)
        pending_cursors.append((
            "INSERT OR REPLACE INTO cursors(source, adapter, size, mtime_ns, end_offset, state, live,"
            " updated) VALUES (?,?,?,?,?,?,?,?)",
            (src, s.adapter.name, sk[0], sk[1], out.end_offset,
             json.dumps(state, sort_keys=True), int(any_live), _iso(now))))

    def _record_errors(self, src: str, errors: list[dict], summary: dict, pending: list) -> None:
        pending.append(("DELETE FROM errors WHERE source=?", (src,)))
        for e in errors:
            err = e.get("error", e)
            summary["error_count"] += 1
            summary["errors"].append(e)
            pending.append(("INSERT INTO errors(source, line, code, message) VALUES (?,?,?,?)",
                            (src, err.get("line"), err.get("code"), err.get("message"))))

    def _commit(self, batch: store.Batch, pending_cursors: list, summary: dict) -> None:
        stager = getattr(self, "stager", None)
        if stager is not None:
            stager.flush()  # tapes are durable before any index row points at them
        stats = batch.commit()
        with self.conn:
            for sql, args in pending_cursors:
                self.conn.execute(sql, args)
        for k in ("blocks", "fingerprints"):
            summary[k] += stats[k]
        summary["tapes_indexed"] += sum(1 for r in batch.sessions if not r.live)

    def _tape_dir_for(self, meta: dict) -> Path:
        cwd = meta.get("cwd")
        if isinstance(cwd, str) and cwd and paths.is_within(cwd, self.root) and os.path.isabs(cwd):
            return paths.repo_tapes_dir(self.root)
        return paths.user_tapes_dir()

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

    # -- sidecars (issue 6) ------------------------------------------------------------------
    def _index_sidecars(self, summary: dict) -> None:
        """``<tape_id>.sidecar.jsonl`` enrichment beside tapes (``engram/index/sidecar.py``)."""
        from engram.index import sidecar

        dirs = [d for d in self.tape_dirs() if d.is_dir() and not self.config.is_excluded(d)]
        n = sidecar.index_sidecars(self.conn, dirs)
        if n:
            summary["sidecars"] = n
    # -- end sidecars --------------------------------------------------------------------------


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


def _ready(ticket) -> bool:
    """Whether a parse in ``Ingestor.run``'s queue is done: the thread's ``Future`` or the
    worker's ``(future, index)``."""
    return (ticket if isinstance(ticket, Future) else ticket[0]).done()


def _ingest_cache():
    """What the lineage pass will read of this run's sessions (``engram/lineage/cache.py``);
    ``None`` when lineage is not available."""
    try:
        from engram.lineage.cache import IngestCache
    except ImportError:
        return None
    return IngestCache()


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


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
