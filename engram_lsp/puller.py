"""The background pull (``sharing.autoPull``): the team's tapes come in while the editor is open.

When ``sharing.autoPull`` is on (editor settings, else Engram's config files), the server runs
``Engine.pull`` (``engram pull``: fetch ``refs/engram/tapes`` from ``sharing.remote``, verify and
unpack the new tapes into ``$ENGRAM_HOME/pulled``) once at startup and then at most every
``sharing.pullInterval`` seconds (default 600, at least 60), on the background thread, never on a
request's path; when tapes came in it ingests (progress, then the code lenses refresh). It never
pushes. A failure (no remote, git missing, the network) is logged and shown once (as
``showNotifications`` allows) until a pull succeeds again; ``engram/status`` → ``server.pull``
says what happened last.
"""

from __future__ import annotations

import asyncio
import logging
import time

log = logging.getLogger(__name__)

TICK_S = 5.0  # how often the loop looks at the settings (a change applies within this)


def effective(ls) -> tuple[bool, float]:
    """``(autoPull, pullInterval)``: the editor's settings, else the engine's config."""
    engine = ls.backend.engine if ls.backend is not None else None
    cfg = engine.config if engine is not None else None
    enabled = ls.settings.auto_pull
    if enabled is None:
        enabled = bool(getattr(cfg, "sharing_auto_pull", False))
    interval = ls.settings.pull_interval
    if interval is None:
        interval = float(getattr(cfg, "sharing_pull_interval", 600.0) or 600.0)
    return enabled, max(60.0, float(interval))


async def pull_loop(ls) -> None:
    """Run for the server's lifetime (started after the startup ingest)."""
    ls.pull_state = {"enabled": False, "interval": None, "pulls": 0, "last_pull_at": None,
                     "last": None, "last_error": None}
    last = None
    while not ls.get_backend().closing:
        enabled, interval = effective(ls)
        ls.pull_state.update(enabled=enabled, interval=interval)
        if enabled and (last is None or time.monotonic() - last >= interval):
            last = time.monotonic()
            await pull_once(ls)
        await asyncio.sleep(TICK_S)


async def pull_once(ls) -> dict | None:
    backend = ls.get_backend()
    state = ls.pull_state
    try:
        result = await asyncio.wrap_future(backend.background(lambda: backend.open().pull()))
    except Exception as exc:
        message = f"background pull failed: {exc}"
        log.warning("%s", message)
        if state.get("last_error") is None:
            ls.notify_user(f"Engram: {message}", error=True)
        state.update(last_error=str(exc), last_pull_at=_now())
        return None
    state.update(pulls=state["pulls"] + 1, last_pull_at=_now(), last_error=None,
                 last={k: result.get(k) for k in ("remote", "commit", "tapes", "new")}
                 | {"rejected": len(result.get("rejected") or [])})
    log.info("pulled %s: %s new of %s tapes", result.get("remote"), result.get("new"),
             result.get("tapes"))
    if result.get("new"):
        await ls.indexer.ingest(title="Engram: indexing pulled sessions")
    return result


def _now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")
