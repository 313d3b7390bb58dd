"""Session counts for many blocks of one document (code lens, hover): one fingerprint pass over the
document, one index lookup, and the per-block accounting done with numpy joins rather than Python
loops over postings.

For every block: ``sessions`` (tapes with direct evidence above the explain floor), ``best``
confidence, ``latest`` time, and ``top`` (the best session; with ``windows``, its first transcript
window read from the tape).
"""

from __future__ import annotations

from collections import defaultdict

import apsw
import numpy as np

from engram import fingerprint
from engram.index import queries as Q
from engram.index import schema as S
from engram.query import explain as X
from engram.query import window as W


def explain_blocks(conn: apsw.Connection, text: str, blocks: list[tuple[int, int]],
                   windows: bool = False) -> list[dict]:
    if not blocks:
        return []
    lines = text.split("\n")
    allk, klines = fingerprint.all_kgrams(text, fingerprint.DEFAULT_K)
    allk = np.asarray(allk, dtype=np.int64)
    klines = np.asarray(klines, dtype=np.int64) + 1
    wins = fingerprint.fingerprint_batch(["\n".join(lines[s - 1:e]) + "\n" for s, e in blocks])
    bp = Q.boilerplate(conn, np.unique(allk)) if len(allk) else set()
    bparr = np.fromiter(bp, dtype=np.int64, count=len(bp)) if bp else np.zeros(0, np.int64)
    n_win = np.array([len(np.setdiff1d(np.unique(w.hashes), bparr)) for w in wins], dtype=np.int64)

    # (index key, block number) for every k-gram of every block, minus boilerplate
    keep = ~np.isin(allk, bparr) if len(bparr) else np.ones(len(allk), bool)
    keys_all = Q.index_keys(allk[keep])
    lines_all = klines[keep]
    pk, pi = [], []
    for i, (s, e) in enumerate(blocks):
        m = (lines_all >= s) & (lines_all <= e)
        if n_win[i] and m.any():
            u = np.unique(keys_all[m])
            pk.append(u)
            pi.append(np.full(len(u), i, dtype=np.int64))
    out = [{"range": [s, e], "sessions": 0, "best": 0.0, "latest": None, "top": None}
           for s, e in blocks]
    if not pk:
        return out
    pk_a, pi_a = np.concatenate(pk), np.concatenate(pi)
    ukeys = np.unique(pk_a)
    rows = conn.execute("SELECT DISTINCT hash, block FROM fingerprints WHERE hash IN carray(?)",
                        (apsw.carray(Q._i64(ukeys)),)).fetchall()
    if not rows:
        return out
    post = np.array(rows, dtype=np.int64)
    post = post[np.argsort(post[:, 0], kind="stable")]
    ph, pb = post[:, 0], post[:, 1]
    # join (key, block#) with postings on key
    lo = np.searchsorted(ph, pk_a, side="left")
    hi = np.searchsorted(ph, pk_a, side="right")
    cnt = hi - lo
    has = cnt > 0
    lo, cnt, bi = lo[has], cnt[has], pi_a[has]
    if not len(lo):
        return out
    idx = np.repeat(lo, cnt) + (np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt))
    pair = np.repeat(bi, cnt) * (1 << 40) + pb[idx]          # block# · index block
    upair, hits = np.unique(pair, return_counts=True)
    doc_i, iblock = upair >> 40, upair & ((1 << 40) - 1)
    conf = np.minimum(1.0, hits / np.maximum(n_win[doc_i], 1))
    sel = conf > X.DIRECT_FLOOR
    doc_i, iblock, conf = doc_i[sel], iblock[sel], conf[sel]
    if not len(iblock):
        return out
    block_events: dict[int, list[int]] = defaultdict(list)
    for b, eid, _role, _l0 in Q.refs_for_blocks(conn, np.unique(iblock).tolist()):
        block_events[b].append(eid)
    erows = Q.events(conn, {e for es in block_events.values() for e in es})
    trows = Q.tapes(conn, {r.tape for r in erows.values()})
    edit = S.KIND_CODE["code.edit"]
    best: list[dict[int, tuple[float, int]]] = [dict() for _ in blocks]   # tape → (conf, event)
    for i, b, c in zip(doc_i.tolist(), iblock.tolist(), conf.tolist()):
        tb = best[i]
        for eid in block_events.get(b, ()):
            r = erows.get(eid)
            if r is None:
                continue
            cur = tb.get(r.tape)
            if cur is None or c > cur[0] or (c == cur[0] and r.kind == edit):
                tb[r.tape] = (c, eid)
    recency = {t: n for n, t in enumerate(sorted({t.last_t or "" for t in trows.values()},
                                                 reverse=True))}
    access = W.TapeAccess(conn) if windows else None
    for i, tb in enumerate(best):
        if not tb:
            continue
        ranked = sorted(tb.items(), key=lambda kv: (-round(kv[1][0], 2),
                                                    recency[trows[kv[0]].last_t or ""],
                                                    trows[kv[0]].tape_id))
        top_id, (top_conf, top_event) = ranked[0]
        top = trows[top_id]
        res = out[i]
        res.update({
            "sessions": len(tb), "best": round(top_conf, 4),
            "latest": max((trows[t].last_t or "") for t in tb) or None,
            "top": {"tape_id": top.tape_id, "harness": top.harness, "session": top.session,
                    "model": top.model, "label": top.label, "tier": top.tier or "agent",
                    "last_t": top.last_t, "confidence": round(top_conf, 4)}})
        if access is not None:
            r = erows[top_event]
            w = {"anchor": r.ofs, "kind": S.kind_name(r.kind), "confidence": round(top_conf, 4),
                 "file": r.file}
            w.update(W.window(access, top, r.ofs, 1, 1))
            res["top"]["windows"] = [w]
    return out
