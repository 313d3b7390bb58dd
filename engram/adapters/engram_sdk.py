"""Sessions that custom agents log through ``engram.sdk.Session``: ``$ENGRAM_HOME/inbox/*.jsonl``.

One file per session, one JSON record per line, written by the SDK (format 1): ``start``
(session id, label, cwd, agent, model), then ``message`` (role user/assistant/system),
``tool_call``, ``tool_result``, ``read``, ``edit`` (a region with ``start``, else the whole file,
``before: null`` for a new file), ``note`` (a ``code.read`` of the span's text carrying
``note: {kind, text}``, and the text as an assistant message), ``close``. Every record has ``t``.

The harness is ``engram_sdk``; ``meta.agent`` names the framework that wrote the session. A file
without a ``start`` record first is not an SDK log (``unsupported-log`` in strict mode).
"""

from __future__ import annotations

from pathlib import Path

from engram import paths
from engram.adapters import base
from engram.errors import UnsupportedLog

FORMAT = 1
_ROLE_KIND = {"user": "msg.in", "assistant": "msg.out", "system": "msg.in"}


class EngramSdkAdapter(base.Adapter):
    name = "engram_sdk"
    tier = "agent"
    versions = base.VersionMatrix("1", "1")
    patterns = ("*.jsonl",)
    version = "1"

    def default_paths(self) -> list[Path]:
        return [paths.user_dir() / "inbox"]

    def parse_source(self, path: Path, *, mode: str = "permissive") -> base.ParseOutput:
        path = Path(path)
        out = base.ParseOutput(end_offset=0)
        start: dict | None = None
        events: list[dict] = []
        reasons: list[str] = []
        for line_no, end, rec, err in base.iter_jsonl(path):
            out.end_offset = end
            if err:
                out.errors.append(base.record_error(path, line_no, err, rec))
                if rec is None:
                    continue
            if start is None:
                if rec.get("k") != "start":
                    msg = "not an Engram SDK log: the first record is not a 'start' record"
                    if mode == "strict":
                        raise UnsupportedLog(msg, path=str(path), line=line_no)
                    out.errors.append(base.parse_error(path, line_no, msg))
                    return out
                start = rec
                if rec.get("format") != FORMAT:
                    reasons.append(f"SDK log format {rec.get('format')!r} (this Engram reads {FORMAT})")
                continue
            try:
                events.extend(_events(rec, start.get("cwd")))
            except Exception as e:  # a record of an unexpected shape never aborts the file
                out.errors.append(base.parse_error(
                    path, line_no, f"unexpected {rec.get('k')!r} record: {type(e).__name__}: {e}"))
        if start is None:
            return out
        meta = base.ev_meta(start.get("t"), harness=self.name, session=str(start.get("session")),
                            adapter=self, source_path=str(path), model=start.get("model"),
                            cwd=start.get("cwd"), label=start.get("label"),
                            agent=start.get("agent"), sdk_format=start.get("format"))
        out.sessions.append(base.SessionLog(meta["session"],
                                            base.finish_session([meta, *events],
                                                                degraded_reasons=reasons)))
        return out


def _events(rec: dict, cwd: str | None) -> list[dict]:
    k, t = rec.get("k"), rec.get("t")
    if k == "message":
        kind = _ROLE_KIND[rec["role"]]
        extra = {"role": "system"} if rec["role"] == "system" else {}
        return [base.ev_msg(t, kind, str(rec.get("text") or ""), **extra)]
    if k == "tool_call":
        return [base.ev_tool_call(t, str(rec["tool"]), rec.get("call_id"), rec.get("args"))]
    if k == "tool_result":
        return [base.ev_tool_result(t, rec.get("tool"), rec.get("call_id"), rec.get("stdout"),
                                    rec.get("stderr"), rec.get("exit"))]
    if k == "read":
        return [base.ev_read(t, rec["file"], int(rec.get("start") or 1), str(rec["text"]), cwd=cwd)]
    if k == "edit":
        after = str(rec["after"])
        if rec.get("start") is not None:
            s = int(rec["start"])
            return [base.ev_edit(t, rec["file"], s, str(rec.get("before") or ""), s, after, cwd=cwd)]
        created = {"created": True} if rec.get("before") is None else {}
        return base.edits_from_texts(t, rec["file"], rec.get("before"), after, cwd=cwd, **created)
    if k == "note":
        note = {"kind": rec["kind"], "text": str(rec["text"]), "range": [rec["start"], rec["end"]]}
        return [base.ev_read(t, rec["file"], int(rec["start"]), str(rec["span"]), cwd=cwd, note=note),
                base.ev_msg(t, "msg.out", f"[{rec['kind']}] {rec['text']}", note_kind=rec["kind"])]
    if k == "close":
        return []
    raise ValueError(f"unknown record kind {k!r}")


ADAPTER = EngramSdkAdapter()
