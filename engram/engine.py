"""The ``Engine`` facade: what the CLI and the language server call.

Line numbers are 1-based and inclusive everywhere here. Reads use one SQLite connection per thread
(WAL: never blocked by an ingest); ingest uses its own connection and a file lock, so two ingests
(two processes, or the watcher and a manual run) take turns instead of racing.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from pathlib import Path

import apsw

from engram import config as config_mod
from engram import paths
from engram.errors import BadSpan, UnknownTape
from engram.files import count_lines, read_text_file
from engram.index import db, queries
from engram.index.access import TapeAccess
from engram.query import explain, walk, window
from engram.timestamps import utc_iso

log = logging.getLogger(__name__)

# the index files whose postings a process holds in memory (``Engine.hold_postings``): the index
# path as given (absolute) -> the connection's file name, the key of ``engram.index.postings``
_held_postings: dict[str, str] = {}


# the lines of the documents explained lately: an agent asks about spans of a few dozen files in
# any order (the MCP bench: 36 files; eight were kept, so most of its explains split their file
# again); at most 256 documents and ~32 MB (a line: its text and ~57 bytes of str and tuple)
_LINES = explain._PerFile(size=256, budget=32 << 20)


def _lines(text: str) -> tuple[str, ...]:
    """The lines of a document (memoised: an editor or an agent explains many spans of the same
    file, and splitting a 5,000-line file costs ~0.3 ms)."""
    hit = _LINES.peek(text)
    if hit is None:
        hit = _LINES.put(text, tuple(text.split("\n")), 2 * len(text) + 57 * text.count("\n"))
    return hit


class Engine:
    def __init__(self, root: Path | None = None, *, index_path: Path | None = None,
                 config: config_mod.Config | None = None, semantic: bool = True):
        """``semantic``: let explain add ``via: "semantic"`` sessions when embedding is on and
        vectors exist (a long-running server wants it; a one-shot CLI call opts in, since it
        would load the model for every invocation)."""
        self.semantic = semantic
        #: who asks (``cli`` / ``lsp`` / ``mcp`` / ``api``): recorded in the retrieval log
        self.client = "api"
        self.config = config or config_mod.load(root)
        self.root = Path(root).resolve() if root is not None else self.config.root
        self.config.root = self.root
        self.index_path = Path(index_path) if index_path else self.config.index_file()
        self._index_key = os.path.abspath(self.index_path)
        self._local = threading.local()
        self._display: dict[tuple[str, str], str] = {}  # ``_display_path`` memo
        self._conns: list[apsw.Connection] = []
        self._lock = threading.Lock()
        self.last_ingest: dict | None = None

    # -- connections -------------------------------------------------------------------------
    def conn(self) -> apsw.Connection:
        """This thread's read connection (created on first use; the index is created if absent)."""
        c = getattr(self._local, "conn", None)
        if c is None:
            c = db.connect(self.index_path, create=True)
            self._local.conn = c
            with self._lock:
                self._conns.append(c)
        return c

    def refresh(self) -> None:
        """The start of a request on this thread: its connection's row cache and memos, keyed
        on ``data_version``, then answer from the index as of now, not as of this connection's
        last read (``queries.refresh``). Nothing to do before the thread's first connection."""
        c = getattr(self._local, "conn", None)
        if c is not None:
            with contextlib.suppress(apsw.Error):  # its first query reports what is wrong
                queries.refresh(c)

    def close(self) -> None:
        with self._lock:
            for c in self._conns:
                with contextlib.suppress(Exception):
                    c.close()
            self._conns.clear()
        self._local = threading.local()

    @contextlib.contextmanager
    def _ingest_lock(self):
        index = db.index_file(self.index_path)  # (not a directory: its lock goes beside it)
        paths.private_dir(index.parent)  # as ``db.connect`` makes it (0700, parents too)
        lock_path = index.with_suffix(".lock")
        with open(lock_path, "a+") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    # -- ingest ------------------------------------------------------------------------------
    def ingest(self, *, seal: bool = False, rebuild: bool = False, progress=None,
               paths: list[Path] | None = None) -> dict:
        with self._ingest_lock():
            if rebuild:
                self.close()
                for suffix in ("", "-wal", "-shm"):
                    p = Path(str(self.index_path) + suffix)
                    if p.exists():
                        p.unlink()
            conn = db.connect(self.index_path, create=True, mmap=False)
            try:
                from engram.ingest.ingestor import Ingestor  # (lazy: explain needs none of ingest)
                summary = Ingestor(self.root, self.config, conn).run(
                    seal=seal, paths_=paths, progress=progress)
                db.set_meta(conn, "last_ingest", utc_iso())
                if not summary.get("nothing_to_do") or db.get_meta(conn, "generation") is None:
                    db.set_meta(conn, "generation", f"{time.time_ns()}-{os.getpid()}")
            finally:
                conn.close()
        summary["index"] = str(self.index_path)
        self.last_ingest = summary
        return summary

    def generation(self) -> str | None:
        """A token that changes whenever an ingest, by any process on the machine, changed the
        index: the index is shared, so a server whose own ingest had nothing to do (another
        window's did it) still knows its cached answers are stale."""
        try:
            return db.get_meta(self.conn(), "generation")
        except Exception:  # no index yet, or unreadable: no generation to compare
            return None

    def watch_paths(self) -> list[Path]:
        """Every harness location and tape directory ingest reads, whether or not it exists yet
        (a first Claude Code run creates ``~/.claude/projects`` while the editor is open)."""
        from engram.ingest.ingestor import Ingestor  # (lazy: explain needs none of ingest)
        ing = Ingestor(self.root, self.config, None)  # type: ignore[arg-type]
        out: list[Path] = []
        for p in [p for _ad, p in ing.harness_roots()] + ing.tape_dirs():
            if p not in out:
                out.append(p)
        return out

    def watcher(self, on_batch, **options):
        """A ``Watcher`` (``engram.ingest.watcher``: debounced batches of changed paths, polling
        for paths that do not exist yet, a periodic sweep) of ``watch_paths()``, the index's
        directory ignored; not started. ``options``: ``debounce_s``, ``on_sweep``, ``sweep_s``,
        ``poll_s``, ``on_error``. ``engram watch`` and the language server use it."""
        from engram.ingest.watcher import Watcher

        ignore = [self.index_path.absolute().parent, self.root / ".engram-cache"]
        return Watcher(self.watch_paths(), on_batch, ignore=ignore, **options)

    # -- explain -----------------------------------------------------------------------------
    def _read_span(self, file: str, start: int, end: int, text: str | None) -> tuple[str, tuple[str, ...]]:
        if text is None:
            p = Path(file)
            if not p.is_absolute():  # relative to the current directory, else to the repo root
                p = Path.cwd() / p if (Path.cwd() / p).exists() else self.root / p
            try:  # a regular file of bounded size only (engram.files): not a FIFO, /dev/zero, ...
                text = read_text_file(p, shown=file)
            except FileNotFoundError:
                raise BadSpan("no such file", path=file) from None
        return text, _lines(text)

    def explain(self, file: str, start: int, end: int, *, text: str | None = None,
                before: int | None = None, after: int | None = None,
                min_confidence: float | None = None, all: bool = False,
                expand_until: int | None = None, brief: bool = False,
                window_sessions: int | None = None, client: str | None = None) -> dict:
        if start < 1 or end < start:
            raise BadSpan(f"bad line range {start}-{end} (1-based, start ≤ end)", path=file)
        full, lines = self._read_span(file, start, end, text)
        n = len(lines) - (1 if lines and lines[-1] == "" else 0)
        if start > max(n, 1):
            raise BadSpan(f"line {start} is past the end of the file ({n} lines)", path=file)
        end = min(end, max(n, 1))
        s, e = start, end
        span_text = "\n".join(lines[s - 1:e]) + "\n"
        if len(explain.span_fingerprints(span_text, (full, s - 1, e - 1))[0]) == 0:
            s, e = self._enclosing(file, full, start, end)
            span_text = "\n".join(lines[s - 1:e]) + "\n"
            explain.span_fingerprints(span_text, (full, s - 1, e - 1))
        span = {"file": self._display_path(file), "start": s, "end": e, "requested": [start, end]}
        return self._logged("explain", f"{span['file']}:{s}-{e}", self._with_notes(explain.explain_text(
            self.conn(), span_text, span=span,
            before=self.config.window_before if before is None else before,
            after=self.config.window_after if after is None else after,
            min_confidence=self.config.min_confidence if min_confidence is None else min_confidence,
            all=all, expand_until=expand_until, brief=brief, semantic=self._semantic(),
            window_sessions=self.config.window_sessions if window_sessions is None else window_sessions,
            path=self._abs_path(file), context=full), full,
            archive=span_text if all else None), client)

    def _logged(self, op: str, query: str, result: dict, client: str | None) -> dict:
        """``result``, its sessions recorded in the retrieval log (``engram.retrieval.log``)."""
        from engram.retrieval import log as rlog

        result = self._scoped(result)
        if getattr(self._local, "semantic_warming", False):  # ``_semantic`` skipped the model
            self._local.semantic_warming = False
            result.setdefault("stats", {})["semantic"] = "warming up: the embedding model is loading"
        rlog.log_answer(self, op, query, result.get("sessions") or result.get("results")
                        or result.get("items") or [], client or self.client)
        return result

    def _with_notes(self, result: dict, file_text: str | None, archive: str | None = None) -> dict:
        """Notes among the sessions get their ``note`` (kind, text, stale, ...), warnings first
        (``engram.agents.notes.annotate``). ``archive``: the span's text, to add the sessions
        ``engram gc --older-than`` archived that explain it (``--all``)."""
        if archive is not None:
            self._with_archive(result, archive)
        if not any(s.get("harness") == "engram" for s in result.get("sessions") or ()):
            return result  # no note among them (``notes.HARNESS``): the module is not loaded
        from engram.agents import notes

        return notes.annotate(self.conn(), result, file_text)

    def _with_archive(self, result: dict, span_text: str) -> None:
        """Append the archived sessions (``engram.agents.archive``) that explain ``span_text``
        and are not in ``result`` yet, marked ``archived: true``."""
        from engram.agents import archive

        if not archive.archive_path(self.index_path).exists():
            return
        known = {s["tape_id"] for s in result.get("sessions", [])}
        found = archive.archived_sessions(self.index_path, lambda conn: explain.explain_text(
            conn, span_text, span=result["span"], before=self.config.window_before,
            after=self.config.window_after, min_confidence=self.config.min_confidence, all=True,
            window_sessions=0))
        result["sessions"].extend(s for s in found if s["tape_id"] not in known)

    def explain_text(self, text: str, **kw) -> dict:
        """Explain raw text (no file): e.g. ``engram explain --stdin``."""
        lines = text.count("\n") + 1
        span = {"file": None, "start": 1, "end": lines, "requested": [1, lines]}
        kw.setdefault("before", self.config.window_before)
        kw.setdefault("after", self.config.window_after)
        kw.setdefault("min_confidence", self.config.min_confidence)
        kw.setdefault("window_sessions", self.config.window_sessions)
        kw.setdefault("semantic", self._semantic())
        return self._scoped(self._with_notes(
            explain.explain_text(self.conn(), text, span=span, **kw), text))

    def _scoped(self, result: dict) -> dict:
        """``result`` without the sessions this repository's config excludes. The index is the
        machine's: another repository's ingest may have read logs this one's ``exclude`` names, so
        its answers filter them (by the tape's source log or, for a tape source, its file)."""
        if not self.config.exclude:
            return result
        out = self._excluded_tapes()
        if not out:
            return result
        for key in ("sessions", "results"):
            rows = result.get(key)
            if isinstance(rows, list):
                result[key] = [r for r in rows if not (isinstance(r, dict) and r.get("tape_id") in out)]
        if isinstance(result.get("tombstones"), list):
            result["tombstones"] = [t for t in result["tombstones"] if t.get("tape_id") not in out]
        return result

    def _excluded_tapes(self) -> frozenset[str]:
        """Tape ids whose source matches ``exclude``, memoised per index version."""
        conn = self.conn()
        version = (conn.execute("PRAGMA data_version").fetchone()[0], db.get_meta(conn, "last_ingest"))
        memo = getattr(self, "_excluded_memo", None)
        if memo is not None and memo[0] == version:
            return memo[1]
        out = frozenset(tid for tid, src, path in conn.execute(
            "SELECT tape_id, source_path, path FROM tapes")
            if any(p and self.config.is_excluded(Path(p)) for p in (src, path)))
        self._excluded_memo = (version, out)
        return out

    def _semantic(self):
        """The hybrid-explain callable when embedding is enabled and vectors exist, else None
        (cheap checks only: no torch import, no model load when there are no vectors). Without
        it explain is the fingerprint-only result, byte for byte."""
        if not self.semantic:
            return None
        from engram.embed import hybrid

        try:
            if hybrid.warming(self):  # a server's model still loading: say so, do not wait (first:
                self._local.semantic_warming = True  # the loader holds the lock active() takes)
                return None
            if not hybrid.active(self):
                return None
        except Exception:  # the semantic signal is optional; never fail explain over it
            log.debug("embedding state check failed", exc_info=True)
            return None
        import functools

        return functools.partial(hybrid.semantic_sessions, self)

    def _enclosing(self, file: str, text: str, start: int, end: int) -> tuple[int, int]:
        from engram.query import symbols

        try:
            s, _ = symbols.enclosing_block(text, file, start)
            _, e = symbols.enclosing_block(text, file, end)
            return min(s, start), max(e, end)
        except Exception:  # symbol lookup is a convenience; never fail explain over it
            log.debug("enclosing_block failed for %s", file, exc_info=True)
            return start, end

    def _abs_path(self, file: str) -> str | None:
        p = Path(file)
        try:
            return str(p if p.is_absolute() else (self.root / p))
        except (OSError, ValueError):
            return None

    def _display_path(self, file: str) -> str:
        """``file`` relative to the repo root when it is inside it (symlinks resolved), else as
        given; memoised per working directory (an editor explains one file again and again, and
        resolving walks every component of the path)."""
        key = (file, os.getcwd())
        hit = self._display.get(key)
        if hit is None:
            p = Path(file)
            try:
                hit = str(p.resolve().relative_to(self.root)) if p.is_absolute() or p.exists() else file
            except ValueError:
                hit = file
            if len(self._display) > 1024:
                self._display.clear()
            self._display[key] = hit
        return hit

    def explain_blocks(self, file: str, text: str, blocks: list[tuple[int, int]],
                       windows: bool | None = None, events: bool = False) -> list[dict]:
        """Session counts for many blocks of one document: one fingerprint pass, one lookup
        (``engram/query/blocks.py``). ``top`` is each block's best session; with ``windows``
        (default: when a single block is asked for, as a hover does) it carries its first
        transcript window, read from the tape; with ``events`` the event that window is read
        around (for ``block_window``)."""
        from engram.query.blocks import explain_blocks

        return explain_blocks(self.conn(), text, list(blocks),
                                windows=len(blocks) == 1 if windows is None else windows,
                                events=events)

    def block_window(self, top: dict) -> dict | None:
        """The window ``explain_blocks(windows=True)`` gives a block's best session (``top``), for
        an entry computed with ``events`` and without windows (a code lens's) that a hover shows:
        None when ``top`` names no event the index holds (``engram/query/blocks.top_window``)."""
        from engram.query.blocks import top_window

        return top_window(self.conn(), top)

    # -- for a long-running process (the language server) -------------------------------------
    # What a server does between requests so that the next ones answer sooner; the answers are the
    # same with or without it.

    def hold_postings(self) -> None:
        """Hold this index's postings in memory from now on, read in the background
        (``engram.index.postings``; ``explain_blocks`` uses them once they are there): a code lens
        on a big file then does not wait for thousands of SQLite lookups. Never while a rebuild
        replaces the index file (this thread's connection would hold the old one)."""
        from engram.index import postings

        conn = self.conn()
        _held_postings[self._index_key] = conn.filename
        postings.keep_postings(conn)

    @property
    def holds_postings(self) -> bool:
        """Whether ``hold_postings`` was called for this index (by any engine of this process)."""
        return self._index_key in _held_postings

    def postings_status(self) -> dict | None:
        """``{"postings": rows held (None: not read yet, or too many), "reading": bool}``; None
        when this index's postings are not held."""
        held = _held_postings.get(self._index_key)
        if held is None:
            return None
        from engram.index import postings

        return postings.held_postings_status(held)

    def postings_paused(self):
        """A context manager: no reading of the held postings meanwhile (a read under way is
        waited for), for replacing the index file (a rebuild: a reader's connection would hold the
        old file open); a fresh read starts afterwards. A no-op when they are not held."""
        from engram.index import postings

        return postings.postings_paused(_held_postings.get(self._index_key))

    def prefill_postings(self, stop=None) -> bool | None:
        """Read the rows ``explain_blocks`` looks up through this thread's connection now, while
        nothing waits for them (``engram.index.postings.prefill``): False when the tables are too
        large; None when ``stop()`` (asked every few ms) said to leave the rest for later."""
        from engram.index import postings

        done = postings.prefill(self.conn(), stop)
        if done is None:
            return None
        # the lineage walk's plans at this engine's options (``walk.prefill``): a span's first
        # explain then follows prepared steps instead of reading each node's rows
        if walk.prefill(self.conn(), self.config.min_confidence, stop) is None:
            return None
        return done

    def prefetch_steps(self, file: str, text: str, before: int | None = None,
                       after: int | None = None):
        """What the first ``explain`` of ``file`` (buffer ``text``) reads, read ahead on this
        thread's connection as a generator of steps of a few ms (``engram.query.prefetch``): the
        caller can stop between two steps for a request."""
        from engram.query import prefetch

        return prefetch.steps(self, file, text, before, after)

    @staticmethod
    def read_file(path, shown: str | None = None) -> str:
        """A user's file as explain reads it (``engram.files.read_text_file``: a regular file of
        bounded size, UTF-8 with bad bytes replaced); raises ``FileNotFoundError`` or
        ``UnreadableFile``."""
        return read_text_file(path, shown=shown)

    @staticmethod
    def enclosing_block(text: str, path, line: int) -> tuple[int, int]:
        """The innermost function/class (else the chunk) around 1-based ``line`` of ``text``
        (``path``: a file name or a language, for tree-sitter): ``(start, end)``."""
        from engram.query import symbols

        return symbols.enclosing_block(text, path, line)

    @staticmethod
    def block_table(text: str, path, cancel=None) -> list[list[int]] | None:
        """Every line's ``enclosing_block`` of ``text`` as runs ``[first, last, start, end]``
        (one parse), for ``table_block``; None without a parse tree or when ``cancel()`` said so."""
        from engram.query import symbols

        return symbols.block_table(text, path, cancel=cancel)

    @staticmethod
    def table_block(table: list[list[int]], line: int) -> tuple[int, int]:
        """``enclosing_block`` of ``line`` from a ``block_table`` of the same text (no parse)."""
        from engram.query import symbols

        return symbols.table_block(table, line)

    @staticmethod
    def top_level_blocks(text: str, path) -> list[tuple[int, int, str]]:
        """Top-level definitions ``(start, end, name)`` of ``text`` in file order (chunks when
        there are none)."""
        from engram.query import symbols

        return symbols.top_level_blocks(text, path)

    @staticmethod
    def parse_symbols(text: str, path, cancel=None) -> bool:
        """Parse ``text`` now (cached), so that a later ``enclosing_block`` does not wait for it;
        False when ``cancel()`` turned true meanwhile and the parse was given up."""
        from engram.query import symbols

        return symbols.parse(text, path, cancel=cancel)

    def embedding_wanted(self) -> bool:
        """Whether a long-running process should embed new reasoning text after an ingest:
        ``embedding.enabled`` is true, or ``auto`` and this repository already has vectors
        (someone ran ``engram embed``: they are kept up to date). Never a multi-minute model job
        for a user who did not ask for semantic scoring. Cheap; never raises."""
        from engram.embed import run

        try:
            on, _why = run.wanted(self.config)
            if not on:
                return False
            if self.config.embedding.get("enabled") is True:
                return True
            return run.state(self).get("vectors", 0) > 0
        except Exception:  # optional signal
            log.debug("embedding state check failed", exc_info=True)
            return False

    def embed(self, progress=None, should_stop=None) -> dict:
        """Embed the reasoning text of sealed tapes not embedded yet (``engram embed``):
        ``progress(done, total)``, ``should_stop()`` asked between batches."""
        from engram.embed import run

        return run.embed_index(self, progress=progress, should_stop=should_stop)

    def preload_model(self) -> None:
        """Load the embedding model in a daemon thread when semantic scoring is active, so that
        the first explain or search does not pay the load (a no-op without vectors; never
        raises)."""
        try:
            from engram.embed import hybrid

            hybrid.preload(self)
        except Exception:  # optional signal
            log.debug("embedding preload skipped", exc_info=True)

    # -- agents (engram/agents) ----------------------------------------------------------------
    def add_note(self, file: str, start: int, end: int, kind: str, text: str,
                 related: str | None = None, *, tier: str = "human", via: str = "cli",
                 t: str | None = None) -> dict:
        """Write a note on lines ``start..end`` of ``file`` as a tape of harness ``engram`` and
        index it (``engram.agents.notes``): ``{tape_id, path, created, note}``. ``related``:
        ``TAPE#EVENT`` of an indexed tape."""
        from engram.agents import notes
        from engram.tape import writer

        rel = notes.resolve_related(self.conn(), related)
        events = notes.note_events(self.root, file, start, end, kind, text, related=rel,
                                   tier=tier, t=t, via=via)
        ref = writer.write_tape(notes.tape_dir(self.root, events), events)
        self._index_tape(ref.tape_id, ref.path, events)
        note = notes.note_object(events[0], events[1]["text"], events[1]["text"], events[0]["t"])
        note["at"] = events[0]["note"]["stored_range"]
        return {"tape_id": ref.tape_id, "path": str(ref.path), "created": ref.created,
                "note": note}

    def _index_tape(self, tape_id: str, path: Path, events: list[dict]) -> None:
        """Index one tape just written (a note) and run the lineage pass, under the ingest lock:
        what ``ingest`` would do for it, without discovering every harness log and tape file
        first (a note on the 1,300-tape corpus: 0.74 s -> 0.08 s)."""
        from engram.index import store
        from engram.lineage import derive

        with self._ingest_lock():
            conn = db.connect(self.index_path, create=True)
            try:
                if conn.execute("SELECT 1 FROM tapes WHERE tape_id=?", (tape_id,)).fetchone():
                    return
                batch = store.Batch(conn)
                batch.add(store.SessionRecord(tape_id, events, path=str(path),
                                              source_path=events[0].get("source_path")))
                batch.commit([])
                derive.after_ingest(conn)
                # the index changed: caches keyed by the generation (a server's lenses) are stale
                db.set_meta(conn, "generation", f"{time.time_ns()}-{os.getpid()}")
            finally:
                conn.close()

    def brief(self, paths: list[str] | None = None, budget: int = 1500, *,
              client: str | None = None) -> dict:
        """What to know before touching ``paths`` (none: the repository's recent work), within
        ``budget`` tokens (``engram.agents.brief``): ``{paths, items, tokens, markdown, ...}``."""
        from engram.agents import brief

        return self._logged("brief", "\n".join(paths or []),
                            brief.brief(self, paths or [], budget=budget), client)

    # -- navigation ----------------------------------------------------------------------------
    def view(self, tape_id: str, at: int = 0, before: int = 5, after: int = 5) -> dict:
        conn = self.conn()
        t = queries.tape_by_id(conn, tape_id)
        if t is None:
            raise UnknownTape(f"no indexed tape {tape_id!r}; see `engram tapes`")
        at = max(0, min(int(at), t.n_events - 1))
        lo, hi = max(0, at - before), min(t.n_events - 1, at + after)
        access = TapeAccess(conn)
        evs = access.read(t, range(lo, hi + 1))
        nxt = conn.execute("SELECT tape_id FROM tapes WHERE continues=? ORDER BY tape_id LIMIT 1",
                           (t.tape_id,)).fetchone()
        prev = t.continues
        p2, n2 = walk.continuation_neighbours(conn, t.id)
        prev = prev or p2
        nxt = nxt or ((n2,) if n2 else None)
        return {"tape_id": t.tape_id, "harness": t.harness, "session": t.session, "tier": t.tier,
                "label": t.label, "model": t.model, "live": bool(t.live), "n_events": t.n_events,
                "at": at, "range": [lo, hi], "events": [window.render_event(o, e) for o, e in evs],
                "previous_tape": prev, "next_tape": nxt[0] if nxt else None}

    def show(self, tape_id: str, raw: bool = False) -> dict | list:
        conn = self.conn()
        t = queries.tape_by_id(conn, tape_id)
        if t is None:
            raise UnknownTape(f"no indexed tape {tape_id!r}; see `engram tapes`")
        evs = TapeAccess(conn).read(t, range(t.n_events))
        if raw:
            return [e for _o, e in evs]
        return {"tape_id": t.tape_id, "path": t.path, "events": [window.render_event(o, e, full=True)
                                                                  for o, e in evs]}

    def has_tapes_of(self, harness: str) -> bool:
        """Whether any indexed tape is of ``harness`` (one indexed lookup; ``tapes()`` lists all)."""
        return self.conn().execute("SELECT 1 FROM tapes WHERE harness = ? LIMIT 1",
                                   (harness,)).fetchone() is not None

    def tapes(self) -> list[dict]:
        conn = self.conn()
        out = []
        for r in conn.execute(f"SELECT {queries.TAPE_COLS} FROM tapes ORDER BY first_t, tape_id"):
            t = queries.TapeRow(*r)
            import json
            cov = json.loads(t.coverage) if t.coverage else None
            out.append({"tape_id": t.tape_id, "harness": t.harness, "session": t.session,
                        "tier": t.tier, "model": t.model, "label": t.label, "cwd": t.cwd,
                        "first_t": t.first_t, "last_t": t.last_t, "events": t.n_events,
                        "live": bool(t.live), "coverage": (cov or {}).get("grade", "full"),
                        "coverage_reasons": (cov or {}).get("reasons", []),
                        "continues": t.continues, "path": t.path})
        return out

    # -- history -------------------------------------------------------------------------------
    def blame(self, file: str, text: str | None = None, *, earlier: bool = True) -> dict:
        """Per line of ``file`` the session that most likely wrote it (``engram blame``);
        ``text``: the buffer as an editor holds it, instead of the file on disk; ``earlier=False``:
        without the lineage walk behind ``earlier`` (the editor's line annotation needs only the
        lines)."""
        from engram.query import history

        return history.blame(self, file, text=text, earlier=earlier)

    def annotate(self, file: str, text: str) -> dict:
        """The editor's line annotation of the buffer ``text`` of ``file``: the lines ``blame``
        says a session produced, as runs (``engram.query.history.annotate``)."""
        from engram.query import history

        return history.annotate(self, file, text)

    # -- commits (engram/commits): git-native provenance ----------------------------------------
    def log(self, revs: list[str] | None = None, limit: int | None = None,
            agent: str | None = None, files: bool = False) -> dict:
        """``engram log``: commits of ``revs`` (git syntax, default HEAD) with their sessions."""
        from engram.commits import log as log_mod

        return log_mod.log(self, list(revs or []), limit=limit, agent=agent, files=files)

    def show_commit(self, rev: str) -> dict:
        """``engram show COMMIT``: one commit's sessions, files, reasoning and tokens."""
        from engram.commits import log as log_mod

        return log_mod.show(self, rev)

    def span_commits(self, file: str, start: int, end: int) -> dict:
        """The commits that brought lines ``start``-``end`` of ``file`` in, with their sessions."""
        from engram.commits import span

        return span.span_commits(self, file, start, end)

    def review(self, range_: str) -> dict:
        """``engram review A..B`` as JSON (``engram.commits.review.markdown`` renders it)."""
        from engram.commits import review as review_mod

        return review_mod.review(self, range_)

    def stats(self, by: str = "model", since: str | None = None, all_: bool = False,
              head: bool = True) -> dict:
        """``engram stats``: sessions, tokens, cost, agent lines at HEAD."""
        from engram.commits import stats as stats_mod

        return stats_mod.stats(self, by=by, since=since, all_=all_, head=head)

    def graph(self, target: str, fmt: str = "json") -> dict:
        """``engram graph``: the lineage graph of a span, file or tape (json, dot, mermaid)."""
        from engram.commits import graph as graph_mod

        return graph_mod.graph(self, target, fmt=fmt)

    # -- search --------------------------------------------------------------------------------
    def search(self, query: str, limit: int = 20, before: int = 2, after: int = 2, *,
               client: str | None = None, **filters) -> dict:
        """``engram search``; ``filters``: ``intent``, ``agent``, ``since``, ``file``, ``kind``,
        ``min_confidence`` (``engram.query.search``)."""
        from engram.query import search as search_mod

        return self._logged("search", query, search_mod.search(
            self, query, limit=limit, before=before, after=after, **filters), client)

    # -- the retrieval loop ----------------------------------------------------------------------
    def resolve_session(self, session: str) -> tuple[str, str | None]:
        """A session id, or a tape id (or unique prefix) → ``(session id, tape id)``; raises
        ``BadFeedback`` when the index knows neither."""
        from engram.retrieval.feedback import BadFeedback

        conn = self.conn()
        t = queries.tape_by_id(conn, session) if len(session) >= 6 else None
        if t is not None:
            return t.session or t.tape_id, t.tape_id
        row = conn.execute("SELECT tape_id FROM tapes WHERE session=? ORDER BY first_t, tape_id"
                           " LIMIT 1", (session,)).fetchone()
        if row is None:
            raise BadFeedback(f"no indexed session or tape {session!r}; see `engram tapes`")
        return session, row[0]

    def feedback(self, session: str, verdict: str, file: str | None = None,
                 start: int | None = None, end: int | None = None, note: str | None = None,
                 text: str | None = None) -> dict:
        """Record feedback on a session (``engram feedback``; the editors' buttons, MCP): a tape
        in the repository, indexed at once. ``file``/``start``/``end``: the span it is about;
        ``text``: the file's text (an editor's buffer), else the file is read. Returns the tape
        and the session's replayed feedback (confidence, validations)."""
        from engram.retrieval import feedback as fb

        sid, tape_id = self.resolve_session(session)
        span, span_text = None, None
        if file is not None:
            if start is None:
                raise fb.BadFeedback("a span needs its start line")
            span = (self._display_path(file), int(start), int(end if end is not None else start))
            if text is not None:
                span_text = "\n".join(text.split("\n")[span[1] - 1:span[2]]) + "\n"
        ref = fb.record_feedback(self.root, sid, verdict, span, note, tape_id=tape_id,
                                 span_text=span_text, file_path=file)
        self.ingest(paths=[ref.path])
        st = fb.load(self.conn()).get(sid)
        return {"tape_id": ref.tape_id, "session": sid, "verdict": verdict,
                "span": None if span is None else {"file": span[0], "start": span[1], "end": span[2]},
                **(st.summary() if st else fb.SessionFeedback().summary())}

    def used(self, session: str, answer: str | None = None, client: str | None = None) -> dict:
        """Record that an answer containing ``session`` was used (``engram used``; the editors'
        "open session"): salience +0.1, counted by ``engram stats --retrieval``."""
        from engram.retrieval import log as rlog

        sid, tape_id = self.resolve_session(session)
        ok = rlog.log_use(self, sid, client or self.client, answer)
        return {"session": sid, "tape_id": tape_id, "recorded": ok}

    def retrieval_report(self, since: str | None = None) -> dict:
        """``engram stats --retrieval``: answers logged, and how often one was used."""
        from engram.retrieval import report

        return report.usage(self.index_path, since=since)

    def adapters_report(self) -> list[dict]:
        """Per harness: where its logs are, whether found, how many sources and sessions, the
        versions seen and the coverage grade with reasons (from the index, when built)."""
        import json

        from engram import adapters
        from engram.adapters.base import version_key

        per: dict[str, dict] = {}
        if self.index_path.exists():
            for harness, meta_json, cov in self.conn().execute(
                    "SELECT harness, meta_json, coverage FROM tapes"):
                d = per.setdefault(harness or "?", {"sessions": set(), "versions": set(),
                                                    "grades": set(), "reasons": set()})
                meta = json.loads(meta_json or "{}")
                d["sessions"].add(meta.get("session"))
                if meta.get("harness_version"):
                    d["versions"].add(str(meta["harness_version"]))
                c = json.loads(cov) if cov else {}
                d["grades"].add((c or {}).get("grade", "full"))
                d["reasons"].update((c or {}).get("reasons", []))
        from engram.ingest.ingestor import Ingestor  # (lazy: explain needs none of ingest)
        ing = Ingestor(self.root, self.config, None)  # type: ignore[arg-type]
        rows = []
        for name in sorted(adapters.REGISTRY):
            try:
                ad = adapters.get(name)
            except ImportError as e:
                rows.append({"harness": name, "available": False, "reason": str(e)})
                continue
            locs = self.config.harness_paths(name, ad.default_paths() + ad.repo_paths(self.root))
            n_sources = 0
            for p in locs:
                if p.exists():
                    try:
                        n_sources += sum(1 for s in ad.discover(p) if not self.config.is_excluded(s))
                    except OSError:
                        pass
            d = per.get(name)
            grade = None
            if d:
                grade = ("text-only" if d["grades"] == {"text-only"} else
                         "degraded" if "degraded" in d["grades"] else "full")
            info = ad.describe()
            info.update({
                "harness": name, "available": True, "paths": [str(p) for p in locs],
                "found": any(p.exists() for p in locs), "sources": n_sources,
                "sessions": len(d["sessions"]) if d else 0,
                "versions_seen": sorted(d["versions"], key=lambda v: (version_key(v) or (), v)) if d else [],
                "coverage": grade, "reasons": sorted(d["reasons"]) if d else []})
            rows.append(info)
        del ing
        return rows

    # -- sharing ---------------------------------------------------------------------------------
    def pull(self, remote: str | None = None) -> dict:
        """Fetch ``refs/engram/tapes`` from ``remote`` (default ``sharing.remote``, else origin)
        and unpack its new tapes, each verified first, into ``$ENGRAM_HOME/pulled/``, a tape
        directory the next ingest reads (``engram.share.pull``; the watcher sees it change).
        Never pushes. The result: ``{"remote", "commit", "tapes", "new", "rejected", ...}``."""
        from engram import share

        return share.pull(self.root, self.config, remote=remote)

    # -- status ----------------------------------------------------------------------------------
    def status(self) -> dict:
        old = old_cache_report(self.root)
        db.index_file(self.index_path)  # a place it cannot be (a directory, another user's): said now
        if not self.index_path.exists():
            return {"root": str(self.root), "index": str(self.index_path), "indexed": False,
                    "counts": None, "last_ingest": None, "live_sessions": [],
                    "embedding": embedding_state(self.config, self), "old_cache": old}
        conn = self.conn()
        live = [{"tape_id": r[0], "harness": r[1], "session": r[2], "source": r[3], "last_t": r[4]}
                for r in conn.execute("SELECT tape_id, harness, session, source_path, last_t FROM tapes"
                                      " WHERE live=1 ORDER BY tape_id")]
        return {"root": str(self.root), "index": str(self.index_path), "indexed": True,
                "index_bytes": _file_size(self.index_path), "old_cache": old,
                "counts": queries.counts(conn), "last_ingest": db.get_meta(conn, "last_ingest"),
                "fingerprint": db.fingerprint_params(), "live_sessions": live,
                "embedding": embedding_state(self.config, self),
                "config_warnings": self.config.warnings}


def _file_size(p: Path) -> int:
    total = 0
    for suffix in ("", "-wal"):
        q = Path(str(p) + suffix)
        if q.exists():
            total += q.stat().st_size
    return total


def old_cache_report(root: Path) -> dict | None:
    """``{"path", "bytes"}`` of ``<root>/.engram-cache`` when an older Engram left its
    per-repository index there (nothing reads it now: ``engram gc --old-caches`` removes it)."""
    d = paths.old_cache_dir(root)
    try:
        if not (d / "index.sqlite").is_file():
            return None
        size = sum(p.stat().st_size for p in d.rglob("*") if p.is_file() and not p.is_symlink())
    except OSError:
        return None
    return {"path": str(d), "bytes": size}


def embedding_state(cfg: config_mod.Config, engine: Engine | None = None) -> dict:
    """The embedding scorer as ``engram status`` / ``engram/status`` report it: ``enabled``,
    ``available`` + ``reason``, ``model`` (configured) and ``model_id``, ``device`` (configured),
    ``device_in_use`` (when loaded in this process), ``vectors`` (stored for this model),
    ``store``, ``last_run`` (of ``engram embed``) and ``state`` (``on (...)`` / ``off: ...`` /
    ``no vectors yet: ...``). Cheap: no torch import, no model load."""
    state = {"enabled": cfg.embedding.get("enabled", "auto"), "device": cfg.embedding.get("device"),
             "model": cfg.embedding.get("model")}
    from engram.embed import run as embed_run

    try:
        return embed_run.state(engine if engine is not None else cfg)
    except Exception as e:  # status never fails over the optional scorer
        log.debug("embedding state failed", exc_info=True)
        state.update({"available": False, "reason": str(e), "state": f"off: {e}", "vectors": 0})
        return state


def parse_span(spec: str) -> tuple[str, int, int]:
    """``FILE:START-END`` / ``FILE:LINE`` / ``FILE`` (whole file) → (file, start, end)."""
    import re

    m = re.match(r"^(.*?):(\d+)(?:-(\d+))?$", spec)
    if not m:
        if os.path.exists(spec):
            return spec, 1, max(count_lines(read_text_file(spec)), 1)
        raise BadSpan(f"expected FILE:START-END, got {spec!r}")
    f, a, b = m.group(1), int(m.group(2)), int(m.group(3) or m.group(2))
    if a < 1 or b < a:
        raise BadSpan(f"bad line range {a}-{b} (1-based, start ≤ end)", path=f)
    return f, a, b
