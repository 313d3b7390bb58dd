"""Diff texts found in harness logs → hunks for ``base.edits_from_hunks``.

* ``parse_unified(text)``: a unified diff (one or many files, with or without ``Index:`` /
  ``diff --git`` headers) → ``[(path | None, [hunk, ...])]``. Hunks use the structuredPatch shape
  (``oldStart``, ``newStart``, ``lines``); a side with zero lines (``@@ -5,0 +6,2 @@``) is moved to
  its insertion point (``oldStart`` 6), jsdiff's convention, so ``ev_edit`` ranges come out right.
* ``split_hunk(h)``: one sub-hunk per changed region (context runs dropped).
* ``parse_codex_patch(text)``: the ``*** Begin Patch`` format (``apply_patch`` tools) → per file
  ``(op, path, [(before, after), ...])`` without line numbers.
"""

from __future__ import annotations

import re

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _header_path(line: str) -> str | None:
    p = line[4:].split("\t", 1)[0].strip()
    if p == "/dev/null" or not p:
        return None
    if p.startswith(('"',)) and p.endswith('"'):
        p = p[1:-1]
    return p


def parse_unified(text: str) -> list[tuple[str | None, list[dict]]]:
    """Files and hunks of a unified diff; text that is not a diff gives ``[]``."""
    files: list[list] = []
    cur: list | None = None
    old_path: str | None = None
    git = False
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        ln = lines[i]
        m = _HUNK.match(ln)
        if m:
            old_n = int(m.group(2)) if m.group(2) is not None else 1
            new_n = int(m.group(4)) if m.group(4) is not None else 1
            old_s, new_s = int(m.group(1)), int(m.group(3))
            h = {"oldStart": old_s + 1 if old_n == 0 else old_s,
                 "newStart": new_s + 1 if new_n == 0 else new_s, "lines": []}
            i += 1
            while i < len(lines) and (old_n > 0 or new_n > 0):
                body = lines[i]
                tag = body[:1]
                if tag == "\\":
                    h["lines"].append(body)
                elif tag == " " or body == "":
                    if i == len(lines) - 1 and body == "":
                        break  # the split's trailing empty string, not a context line
                    old_n -= 1
                    new_n -= 1
                    h["lines"].append(body or " ")
                elif tag == "-":
                    old_n -= 1
                    h["lines"].append(body)
                elif tag == "+":
                    new_n -= 1
                    h["lines"].append(body)
                else:
                    break
                i += 1
            if i < len(lines) and lines[i].startswith("\\"):
                h["lines"].append(lines[i])
                i += 1
            if cur is None:
                cur = [old_path, []]
                files.append(cur)
            cur[1].append(h)
            continue
        if ln.startswith("diff --git "):
            git = True
            cur = None
        elif ln.startswith("Index: "):
            cur = None
        elif ln.startswith("--- "):
            old_path = _strip_git(_header_path(ln), git)
        elif ln.startswith("+++ "):
            new_path = _strip_git(_header_path(ln), git)
            cur = [new_path or old_path, []]
            files.append(cur)
        i += 1
    return [(p, hs) for p, hs in files if hs]


def _strip_git(p: str | None, git: bool) -> str | None:
    if p and git and p[:2] in ("a/", "b/"):
        return p[2:]
    return p


def split_hunk(h: dict) -> list[dict]:
    """Split one hunk at its context runs: one sub-hunk per changed region."""
    raw = h.get("lines")
    lines = [ln for ln in (raw if isinstance(raw, list) else []) if isinstance(ln, str) and not ln.startswith("\\")]
    old_no, new_no = int(h.get("oldStart") or 1), int(h.get("newStart") or 1)
    out: list[dict] = []
    cur: list[str] = []
    cur_old = cur_new = 0
    for ln in lines:
        tag = ln[:1]
        if tag in ("-", "+"):
            if not cur:
                cur_old, cur_new = old_no, new_no
            cur.append(ln)
            if tag == "-":
                old_no += 1
            else:
                new_no += 1
        else:
            if cur:
                out.append({"oldStart": cur_old, "newStart": cur_new, "lines": cur})
                cur = []
            old_no += 1
            new_no += 1
    if cur:
        out.append({"oldStart": cur_old, "newStart": cur_new, "lines": cur})
    return out


def parse_codex_patch(text: str) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """``*** Begin Patch`` text → ``[(op, path, [(before, after), ...])]``.

    ``op`` is ``add``, ``update`` or ``delete``; each pair is one changed region's text (context
    trimmed), lines newline-terminated. An ``add`` has one pair with an empty before side.
    """
    out: list[tuple[str, str, list[tuple[str, str]]]] = []
    op = path = None
    region: list[str] = []
    pairs: list[tuple[str, str]] = []

    def flush_region() -> None:
        nonlocal region
        changed = [i for i, ln in enumerate(region) if ln[:1] in ("-", "+")]
        if changed:
            body = region[changed[0]:changed[-1] + 1]
            before = "".join(ln[1:] + "\n" for ln in body if ln[:1] in ("-", " ", ""))
            after = "".join(ln[1:] + "\n" for ln in body if ln[:1] in ("+", " ", ""))
            pairs.append((before, after))
        region = []

    def flush_file() -> None:
        nonlocal pairs
        flush_region()
        if op and path:
            out.append((op, path, pairs))
        pairs = []

    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for ln in lines:
        if ln.startswith("*** ") and ln.rstrip() in ("*** Begin Patch", "*** End Patch",
                                                     "*** End of File"):
            if ln.rstrip() == "*** End Patch":
                flush_file()
                op = path = None
            continue
        m = re.match(r"^\*\*\* (Add|Update|Delete) File: (.+)$", ln)
        if m:
            flush_file()
            op, path = m.group(1).lower(), m.group(2).strip()
            continue
        if ln.startswith("*** Move to: "):
            continue
        if op is None:
            continue
        if ln.startswith("@@"):
            flush_region()
            continue
        if op == "add":
            region.append(ln if ln.startswith("+") else "+" + ln)
        elif op == "update":
            region.append(ln)
    flush_file()
    return out
