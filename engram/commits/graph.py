"""``engram graph SPAN|FILE|TAPE``: the lineage graph for people (dot, Mermaid) and tools (JSON).

Nodes are sessions (tapes), their edits, and commits; edges are ``edit`` (a session made an
edit), ``lineage`` (an edit continues an earlier one: the index's lineage edges), ``continues``
(a session continues another after a compaction), ``dispatch`` (an orchestrator dispatched it)
and ``commit`` (a commit brought in lines a session wrote). A span or file starts from the
sessions ``engram blame`` gives its lines; a tape starts from itself.
"""

from __future__ import annotations

import re
from pathlib import Path

from engram.index import queries, schema

MAX_NODES = 400


def _seeds(engine, target: str) -> tuple[set[int], dict]:
    """Tape row ids to start from, and what the target was."""
    conn = engine.conn()
    m = re.match(r"^(.*):(\d+)(?:-(\d+))?$", target)
    t = queries.tape_by_id(conn, target) if re.fullmatch(r"[0-9a-f]{6,32}", target) else None
    if t is not None:
        return {t.id}, {"tape": t.tape_id}
    file, start, end = (m.group(1), int(m.group(2)), int(m.group(3) or m.group(2))) if m else (target, None, None)
    b = engine.blame(file)
    ids = set()
    for ln in b["lines"]:
        if ln.get("tape_id") and (start is None or start <= ln["line"] <= end):
            row = queries.tape_by_id(conn, ln["tape_id"])
            if row:
                ids.add(row.id)
    what = {"file": b["file"]} | ({"start": start, "end": end} if start is not None else {})
    return ids, what


def graph(engine, target: str, fmt: str = "json") -> dict:
    conn = engine.conn()
    seeds, what = _seeds(engine, target)
    nodes: dict[str, dict] = {}
    edges: set[tuple[str, str, str]] = set()
    tapes = queries.tapes(conn, seeds)

    def tape_node(t) -> str:
        key = "s:" + t.tape_id
        nodes.setdefault(key, {"id": key, "kind": "session", "tape_id": t.tape_id,
                               "session": t.session, "harness": t.harness, "model": t.model,
                               "label": t.label, "t": t.first_t})
        return key

    for t in tapes.values():
        tape_node(t)
    edit = schema.kind_code("code.edit")
    ev_ids = [r[0] for tid in seeds for r in conn.execute(
        "SELECT id FROM events WHERE tape=? AND kind=? ORDER BY ofs LIMIT 200", (tid, edit))]
    evs = queries.events(conn, ev_ids)
    for eid, r in sorted(evs.items()):
        key = f"e:{eid}"
        nodes[key] = {"id": key, "kind": "edit", "file": r.file, "offset": r.ofs, "t": r.t}
        edges.add((tape_node(tapes[r.tape]), key, "edit"))
    # lineage edges between edits (the index's), one step back and forth
    if ev_ids:
        import apsw

        ids = apsw.carray(queries._i64(ev_ids))
        rows = conn.execute("SELECT from_event, to_event FROM edges WHERE from_event IN carray(?)"
                            " OR to_event IN carray(?)", (ids, ids)).fetchall()
        other = queries.events(conn, {x for r in rows for x in r} - set(evs))
        more_tapes = queries.tapes(conn, {r.tape for r in other.values()})
        for eid, r in other.items():
            if len(nodes) >= MAX_NODES:
                break
            key = f"e:{eid}"
            nodes[key] = {"id": key, "kind": "edit", "file": r.file, "offset": r.ofs, "t": r.t}
            edges.add((tape_node(more_tapes[r.tape]), key, "edit"))
        for a, b in rows:
            if f"e:{a}" in nodes and f"e:{b}" in nodes:
                edges.add((f"e:{a}", f"e:{b}", "lineage"))
    _continuations(conn, nodes, edges, tape_node)
    _commits(engine, what, nodes, edges)
    out = {"target": target, **what, "nodes": sorted(nodes.values(), key=lambda n: n["id"]),
           "edges": [{"from": a, "to": b, "kind": k} for a, b, k in sorted(edges)],
           "truncated": len(nodes) >= MAX_NODES}
    if fmt == "dot":
        out["text"] = dot(out)
    elif fmt == "mermaid":
        out["text"] = mermaid(out)
    return out


def _continuations(conn, nodes, edges, tape_node) -> None:
    """Continuation and dispatch rows touching the graph's sessions (tape row ids)."""
    by_id = {}
    for key, n in list(nodes.items()):
        if n["kind"] == "session":
            t = queries.tape_by_id(conn, n["tape_id"])
            if t is not None:
                by_id[t.id] = key
    if not by_id:
        return
    import apsw

    ids = apsw.carray(queries._i64(sorted(by_id)))
    rows = conn.execute("SELECT from_tape, to_tape, coalesce(markers, '') FROM continuations"
                        " WHERE from_tape IN carray(?) OR to_tape IN carray(?)", (ids, ids)).fetchall()
    more = queries.tapes(conn, {x for a, b, _m in rows for x in (a, b)} - set(by_id))
    for tid, t in more.items():
        by_id[tid] = tape_node(t)
    for a, b, markers in rows:
        if a in by_id and b in by_id:
            edges.add((by_id[a], by_id[b], "dispatch" if "dispatch" in markers else "continues"))


def _commits(engine, what: dict, nodes, edges) -> None:
    if "file" not in what:
        return
    from engram.commits.git import GitError
    from engram.commits.span import span_commits

    try:
        n = sum(1 for _ in open(Path(engine.root) / what["file"], encoding="utf-8", errors="replace"))
        r = span_commits(engine, what["file"], what.get("start", 1), what.get("end", max(n, 1)))
    except (GitError, OSError):
        return
    sess = {n["tape_id"]: k for k, n in nodes.items() if n["kind"] == "session"}
    for c in r["commits"]:
        key = "c:" + c["sha"]
        nodes[key] = {"id": key, "kind": "commit", "sha": c["sha"], "subject": c["subject"], "t": c["t"]}
        for s in c["sessions"]:
            if s.get("tape_id") in sess:
                edges.add((sess[s["tape_id"]], key, "commit"))


def _label(n: dict) -> str:
    if n["kind"] == "session":
        s = f"{n.get('harness')} {(n.get('session') or '')[:8]}\\n{(n.get('label') or '')[:40]}"
    elif n["kind"] == "edit":
        s = f"edit #{n.get('offset')}\\n{(n.get('file') or '').rsplit('/', 1)[-1]}"
    else:
        s = f"{n['sha'][:10]}\\n{(n.get('subject') or '')[:40]}"
    return s.replace('"', "'")


def dot(g: dict) -> str:
    shape = {"session": "box", "edit": "ellipse", "commit": "diamond"}
    out = ["digraph engram {", "  rankdir=LR;"]
    for n in g["nodes"]:
        out.append(f'  "{n["id"]}" [shape={shape[n["kind"]]}, label="{_label(n)}"];')
    for e in g["edges"]:
        out.append(f'  "{e["from"]}" -> "{e["to"]}" [label="{e["kind"]}"];')
    return "\n".join(out) + "\n}\n"


def mermaid(g: dict) -> str:
    ids = {n["id"]: f"n{i}" for i, n in enumerate(g["nodes"])}
    out = ["flowchart LR"]
    for n in g["nodes"]:
        lab = _label(n).replace("\\n", "<br/>")
        o, c = {"session": ("[", "]"), "edit": ("(", ")"), "commit": ("{", "}")}[n["kind"]]
        out.append(f'  {ids[n["id"]]}{o}"{lab}"{c}')
    for e in g["edges"]:
        out.append(f'  {ids[e["from"]]} -->|{e["kind"]}| {ids[e["to"]]}')
    return "\n".join(out) + "\n"
