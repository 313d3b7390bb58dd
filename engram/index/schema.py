"""Index schema as append-only, named migrations (applied in order, tracked in ``migrations``).

Text is content-addressed: each distinct text block (an edit's after-text, a read, a message, a tool
output) is fingerprinted once; ``refs`` points events at blocks with a role and the file line the
block starts at. Event text itself is not stored (windows are read back from tapes), except for
*live* (provisional) sessions, whose events sit in ``live_events`` until they are sealed.
"""

from __future__ import annotations

# roles of a block in an event
ROLE_EDIT_AFTER = 0
ROLE_EDIT_BEFORE = 1
ROLE_READ = 2
ROLE_MSG_IN = 3
ROLE_MSG_OUT = 4
ROLE_TOOL_CALL = 5
ROLE_TOOL_OUTPUT = 6
ROLE_SIDECAR = 7

KINDS = ["meta", "msg.in", "msg.out", "tool.call", "tool.result", "code.read", "code.edit",
         "span.link"]
KIND_CODE = {k: i for i, k in enumerate(KINDS)}


def kind_code(k: str) -> int:
    return KIND_CODE.get(k, 99)


def kind_name(code: int) -> str:
    return KINDS[code] if 0 <= code < len(KINDS) else "other"


MIGRATIONS: list[tuple[str, str]] = [
    ("0001_core", """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE tapes(
    id INTEGER PRIMARY KEY,
    tape_id TEXT NOT NULL UNIQUE,
    path TEXT,
    live INTEGER NOT NULL DEFAULT 0,
    harness TEXT, session TEXT, tier TEXT, model TEXT, cwd TEXT, label TEXT,
    first_t TEXT, last_t TEXT, n_events INTEGER NOT NULL DEFAULT 0,
    source_path TEXT, source_key TEXT, continues TEXT,
    coverage TEXT, meta_json TEXT
);
CREATE INDEX tapes_source ON tapes(source_path, source_key);
CREATE INDEX tapes_session ON tapes(session);
CREATE TABLE events(
    id INTEGER PRIMARY KEY,
    tape INTEGER NOT NULL,
    ofs INTEGER NOT NULL,
    kind INTEGER NOT NULL,
    t TEXT,
    file TEXT, rel TEXT,
    a_start INTEGER, a_end INTEGER,
    b_start INTEGER, b_end INTEGER
);
CREATE UNIQUE INDEX events_tape ON events(tape, ofs);
CREATE INDEX events_rel ON events(rel) WHERE rel IS NOT NULL;
CREATE TABLE blocks(
    id INTEGER PRIMARY KEY,
    hash BLOB NOT NULL UNIQUE,
    n_fp INTEGER NOT NULL,
    n_lines INTEGER NOT NULL
);
CREATE TABLE refs(
    block INTEGER NOT NULL, event INTEGER NOT NULL, role INTEGER NOT NULL, line0 INTEGER NOT NULL,
    PRIMARY KEY(block, event, role)
) WITHOUT ROWID;
CREATE INDEX refs_event ON refs(event);
CREATE TABLE fingerprints(
    hash INTEGER NOT NULL, block INTEGER NOT NULL, line INTEGER NOT NULL,
    PRIMARY KEY(hash, block, line)
) WITHOUT ROWID;
CREATE TABLE boilerplate(hash INTEGER PRIMARY KEY, n INTEGER NOT NULL);
CREATE TABLE edges(
    id INTEGER PRIMARY KEY,
    from_event INTEGER NOT NULL,
    to_event INTEGER NOT NULL,
    confidence REAL NOT NULL,
    location_delta TEXT NOT NULL,
    cardinality TEXT NOT NULL,
    agent_link INTEGER NOT NULL DEFAULT 0,
    location_only INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX edges_from ON edges(from_event);
CREATE INDEX edges_to ON edges(to_event);
CREATE TABLE tombstones(
    id INTEGER PRIMARY KEY,
    event INTEGER NOT NULL,
    block INTEGER,
    file TEXT, rel TEXT, start INTEGER, end INTEGER, t TEXT
);
CREATE TABLE continuations(
    from_tape INTEGER NOT NULL, to_tape INTEGER NOT NULL, score REAL NOT NULL, markers TEXT,
    PRIMARY KEY(from_tape, to_tape)
) WITHOUT ROWID;
CREATE TABLE cursors(
    source TEXT PRIMARY KEY,
    adapter TEXT NOT NULL,
    size INTEGER, mtime_ns INTEGER, end_offset INTEGER,
    state TEXT NOT NULL DEFAULT '{}',
    live INTEGER NOT NULL DEFAULT 0,
    updated TEXT
);
CREATE TABLE live_events(event INTEGER PRIMARY KEY, body BLOB NOT NULL);
CREATE TABLE errors(
    id INTEGER PRIMARY KEY, source TEXT, line INTEGER, code TEXT, message TEXT, seen TEXT
);
CREATE VIRTUAL TABLE fts USING fts5(text, content='', contentless_delete=1, tokenize='unicode61');
"""),
]

# Lineage (issue 6): what kind of link an edge is, where it lands inside its target block, which
# side of its edit it explains (0 before-text, 1 after-text), the role of the target block and the
# edit's own before→after similarity (``span_sim``, before-text edges only); the
# anchor event of a continuation in its earlier tape; which tapes the lineage pass has seen.
MIGRATIONS.append(("0002_lineage", """
ALTER TABLE edges ADD COLUMN kind TEXT;
ALTER TABLE edges ADD COLUMN to_start INTEGER;
ALTER TABLE edges ADD COLUMN to_end INTEGER;
ALTER TABLE edges ADD COLUMN from_side INTEGER;
ALTER TABLE edges ADD COLUMN to_role INTEGER;
ALTER TABLE edges ADD COLUMN span_sim REAL;
ALTER TABLE continuations ADD COLUMN anchor INTEGER;
CREATE TABLE lineage_done(tape_id TEXT PRIMARY KEY, sig TEXT NOT NULL);
CREATE INDEX tombstones_event ON tombstones(event);
CREATE INDEX continuations_to ON continuations(to_tape);
"""))

# Line hashes of edit texts (before and after sides): explain's line-level blame among the edits
# that fingerprints found (``engram/query/explain.py``), as git blame does it for one file.
MIGRATIONS.append(("0003_block_lines", """
CREATE TABLE block_lines(block INTEGER PRIMARY KEY, hashes BLOB NOT NULL);
"""))

# Exact line hashes of edit texts (trailing whitespace stripped, nothing else): explain diffs an
# edit's own before → after on them, as a line diff of the real text would (the stripped hashes of
# 0003 make re-indented lines and all blank lines equal). NULL in rows written before.
MIGRATIONS.append(("0004_exact_lines", """
ALTER TABLE block_lines ADD COLUMN exact BLOB;
"""))

# Events by file: explain's blame by path asks for the logged edits of an absolute path
# (``events.file``); without an index that is a scan of every event (0.7-2.6 ms on a 20k-event
# index, growing with it).
MIGRATIONS.append(("0005_events_file", """
CREATE INDEX IF NOT EXISTS events_file ON events(file) WHERE file IS NOT NULL;
"""))

# Commit provenance (``engram/commits/``): one row per (repository, commit) with its attribution
# as JSON (a commit never changes; ``tapes_max`` is the newest tape the row had seen, so a session
# ingested later that predates the commit makes the row stale). Derived like everything here.
MIGRATIONS.append(("0006_commits", """
CREATE TABLE IF NOT EXISTS commit_attr(
    repo TEXT NOT NULL, sha TEXT NOT NULL, version INTEGER NOT NULL, tapes_max INTEGER NOT NULL,
    committed TEXT, data BLOB NOT NULL, PRIMARY KEY (repo, sha)
) WITHOUT ROWID;
"""))

# Notes and feedback are tapes of harness ``engram``, looked up by harness on every explain and
# brief (``engram.agents.notes``, ``engram.retrieval.feedback``): without an index that is a scan of
# every tape row (~60 ms at 16k sessions, on every `engram explain`).
MIGRATIONS.append(("0007_tapes_harness", """
CREATE INDEX IF NOT EXISTS tapes_harness ON tapes(harness);
"""))

# Fingerprint rows packed one SQLite row per index key (``engram/index/packed.py``): a blob of
# 6-byte (block, line) records instead of a ~17-byte row each (the index of the 16k-session scale
# corpus: 123 of its 194 MB were ``fingerprints``). Rows whose line needs more than 16 bits stay
# in ``fingerprints``; readers union the two. An older index is converted here, in SQL (the bytes
# ``packed.add`` writes; the pages it frees are reused by later ingests, ``engram gc`` returns
# them to the file system).
MIGRATIONS.append(("0008_packed_postings", """
CREATE TABLE packed(key INTEGER PRIMARY KEY, rows BLOB NOT NULL);
INSERT INTO packed(key, rows)
    SELECT hash + 2147483648,
           unhex(group_concat(printf('%08X%04X', block, line), '' ORDER BY block, line))
    FROM fingerprints WHERE line >= 0 AND line < 65535 AND block >= 0 AND block < 4294967296
    GROUP BY hash ORDER BY hash;
DELETE FROM fingerprints WHERE line >= 0 AND line < 65535 AND block >= 0 AND block < 4294967296;
"""))
