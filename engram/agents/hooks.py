"""``engram hooks install|uninstall claude|codex|gemini|git``: Engram in a harness's own hook
configuration, inside the repository.

* **claude** — ``.claude/settings.json``: a ``SessionStart`` hook running ``engram brief --hook``
  (Claude Code adds a SessionStart hook's output to the session's context) and, with
  ``--post-tool``, a ``PostToolUse`` hook on edits running ``engram hook-ingest``, which ingests
  the transcript the hook's JSON names (fresh answers without a watcher).
* **gemini** — ``.gemini/settings.json``: the same two hooks in Gemini CLI's hook format
  (``SessionStart``; ``AfterTool``; timeouts in milliseconds).
* **codex** — ``.codex/config.toml``: ``notify`` runs ``engram hook-ingest`` after each turn
  (Codex CLI has no session-start hook: the ``AGENTS.md`` section of ``engram init --agents`` is
  how a Codex agent learns about ``engram brief``). A ``notify`` the user set is never replaced.
* **git** — ``engram.commits.hooks`` (the commits part), called by ``engram hooks``.

Every entry Engram writes is marked (``# engram-managed`` at the end of the command; a
``# >>> engram >>>`` block in TOML), so install is idempotent and uninstall removes only ours:
the user's own hooks and settings are never touched. A file that is not valid JSON/TOML is an
error and is left as it is. A hook never fails the agent: it stops after ``HOOK_TIMEOUT_S``
(the harness is also told that timeout), exits 0, and says what went wrong in one line on stderr.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

from engram.errors import EngramError
from engram.files import replace_text

MARK = "# engram-managed"
HOOK_TIMEOUT_S = 2
TOML_BEGIN = "# >>> engram >>> (engram hooks install codex; removed by engram hooks uninstall codex)"
TOML_END = "# <<< engram <<<"


class HookConfigError(EngramError):
    """A harness configuration file Engram would edit is not valid: it is left untouched."""

    code = "hook-config"


def _cmd(*args: str) -> str:
    return " ".join(("engram", *args)) + "  " + MARK


# ---------------------------------------------------------------------------------------------
# JSON settings (Claude Code, Gemini CLI)


def _load_json(path: Path) -> dict:
    if not path.exists():
        return {}
    from engram.files import read_text_file

    text = read_text_file(path, shown=str(path))
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise HookConfigError(f"not valid JSON (line {e.lineno}: {e.msg}); fix it and run again: "
                              "nothing was changed", path=str(path)) from None
    if not isinstance(data, dict):
        raise HookConfigError("not a JSON object; nothing was changed", path=str(path))
    return data


def _ours(group: dict) -> bool:
    return isinstance(group, dict) and any(
        isinstance(h, dict) and MARK in str(h.get("command", "")) for h in group.get("hooks") or [])


def _strip(settings: dict) -> dict:
    """``settings`` without Engram's hook groups (and without hook lists that held only ours)."""
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return settings
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept = [g for g in groups if not _ours(g)]
        if kept:
            hooks[event] = kept
        elif any(_ours(g) for g in groups):
            del hooks[event]
    if not hooks:
        del settings["hooks"]
    return settings


def _json_hooks(harness: str, post_tool: bool) -> dict[str, list[dict]]:
    ms = harness == "gemini"
    timeout = HOOK_TIMEOUT_S * 1000 if ms else HOOK_TIMEOUT_S + 1

    def hook(*args):
        return {"type": "command", "command": _cmd(*args), "timeout": timeout}

    out = {"SessionStart": [{"matcher": "", "hooks": [hook("brief", "--hook")]}]}
    if post_tool:
        event, matcher = (("AfterTool", "write_file|replace") if ms
                          else ("PostToolUse", "Edit|MultiEdit|Write|NotebookEdit"))
        out[event] = [{"matcher": matcher, "hooks": [hook("hook-ingest")]}]
    return out


def _apply_json(path: Path, install: bool, harness: str, post_tool: bool) -> bool:
    settings = _load_json(path)
    before = json.dumps(settings, sort_keys=True)
    settings = _strip(settings)
    if install:
        hooks = settings.setdefault("hooks", {})
        if not isinstance(hooks, dict):
            raise HookConfigError("'hooks' is not an object; nothing was changed", path=str(path))
        for event, groups in _json_hooks(harness, post_tool).items():
            cur = hooks.get(event)
            if cur is not None and not isinstance(cur, list):
                raise HookConfigError(f"'hooks.{event}' is not a list; nothing was changed",
                                      path=str(path))
            hooks[event] = (cur or []) + groups
    if json.dumps(settings, sort_keys=True) == before:
        return False
    if not settings and not path.exists():
        return False
    replace_text(path, json.dumps(settings, indent=2, ensure_ascii=False) + "\n")
    return True


# ---------------------------------------------------------------------------------------------
# Codex (TOML)


def _codex_block() -> str:
    return (f"{TOML_BEGIN}\nnotify = [\"engram\", \"hook-ingest\", \"--codex\"]  {MARK}\n"
            f"{TOML_END}\n")


def _apply_codex(path: Path, install: bool) -> bool:
    import tomllib

    from engram.files import read_text_file

    text = read_text_file(path, shown=str(path)) if path.exists() else ""
    lines = text.split("\n")
    if TOML_BEGIN in lines:
        a = lines.index(TOML_BEGIN)
        b = next((i for i in range(a, len(lines)) if lines[i] == TOML_END), a)
        rest = "\n".join(lines[:a] + lines[b + 1:])
    else:
        rest = text
    try:
        parsed = tomllib.loads(rest)
    except tomllib.TOMLDecodeError as e:
        raise HookConfigError(f"not valid TOML ({e}); nothing was changed", path=str(path)) from None
    if install:
        if "notify" in parsed:
            raise HookConfigError("already has a `notify` of your own; Engram does not replace "
                                  "it (add `engram hook-ingest --codex` to it yourself)",
                                  path=str(path))
        # top-level keys must come before the first table: the block goes first
        new = _codex_block() + ("\n" + rest.lstrip("\n") if rest.strip() else "")
    else:
        new = rest.lstrip("\n") if TOML_BEGIN in lines else text
    if new == text:
        return False
    if not new.strip() and not text.strip():
        return False
    replace_text(path, new)
    return True


# ---------------------------------------------------------------------------------------------


FILES = {"claude": ".claude/settings.json", "gemini": ".gemini/settings.json",
         "codex": ".codex/config.toml"}


def apply(root: Path, action: str, harness: str, post_tool: bool = False) -> dict:
    """Install or uninstall Engram's hooks for ``harness`` (claude, codex, gemini) in the
    repository at ``root``: ``{action, harness, file, changed}``. (``git``: the commands module
    calls ``engram.commits.hooks``.)"""
    install = action == "install"
    path = Path(root) / FILES[harness]
    if harness == "codex":
        changed = _apply_codex(path, install)
    else:
        changed = _apply_json(path, install, harness, post_tool)
    return {"action": action, "harness": harness, "file": str(path), "changed": changed}


# ---------------------------------------------------------------------------------------------
# running as a hook


class _TimeUp(BaseException):
    pass


def run_guarded(fn, what: str, timeout: float = HOOK_TIMEOUT_S) -> int:
    """Run ``fn`` as a hook: stopped after ``timeout`` seconds, any failure reported in one line
    on stderr, exit status 0 whatever happens."""

    def _alarm(_sig, _frame):
        raise _TimeUp()

    old = None
    try:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    except (ValueError, OSError, AttributeError):  # not the main thread, or no SIGALRM
        old = None
    try:
        fn()
    except _TimeUp:
        _say(f"engram: {what} skipped: took more than {timeout:g} s")
    except BaseException as e:  # noqa: BLE001 - a hook never fails the agent
        if isinstance(e, KeyboardInterrupt):
            _say(f"engram: {what} interrupted")
        else:
            _say(f"engram: {what} skipped: {' '.join(str(e).split()) or type(e).__name__}")
    finally:
        try:
            signal.setitimer(signal.ITIMER_REAL, 0)
            if old is not None:
                signal.signal(signal.SIGALRM, old)
        except (ValueError, OSError, AttributeError):
            pass
    return 0


def _say(line: str) -> None:
    try:
        sys.stderr.write(line[:300] + "\n")
        sys.stderr.flush()
    except OSError:
        pass


def transcript_of(payload_text: str | None) -> Path | None:
    """The transcript a hook's JSON names (Claude Code and Gemini CLI send ``transcript_path``
    on stdin; Codex's ``notify`` JSON names none: then the harness locations are ingested,
    incrementally)."""
    payload = {}
    if payload_text and payload_text.strip().startswith("{"):
        payload = json.loads(payload_text)
    t = payload.get("transcript_path") if isinstance(payload, dict) else None
    return Path(t) if isinstance(t, str) and t else None
