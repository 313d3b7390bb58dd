"""Code blocks: the function or class around a line, and the top-level symbols of a file.

Hover explains the *enclosing block* of the hovered line; code lens puts one lens on each
*top-level block*. Both come from a tree-sitter parse where ``tree-sitter-language-pack`` has a
grammar for the file's language, and from a plain-text fallback otherwise:

* ``enclosing_block(text, path_or_lang, line) -> (start, end)``: the innermost definition
  (function, method, class, struct, impl, interface, Markdown section, ...) containing ``line``;
  outside any definition, the top-level chunk around it (see below).
* ``top_level_blocks(text, path) -> [(start, end, name)]``: the file's top-level definitions, in
  order; a file with none (or no grammar) gets its top-level chunks.

Lines are 1-based and inclusive, like everywhere in ``engram/``. A *chunk* (the fallback) is a
run of non-blank lines, continued across blank lines while the next non-blank line is indented or
closes a bracket (``}``, ``)``, ``]``, ``end``): a Python/C/Ruby function without a grammar is one
chunk, a Markdown or text file splits into paragraphs.

Parsers are created once per language and the last few parse trees are cached by text, so a hover
after a code lens on the same buffer does not parse again. Nothing here imports LSP code.
"""

from __future__ import annotations

import bisect
import logging
import re
import threading
from collections import OrderedDict
from pathlib import PurePath
from typing import NamedTuple

log = logging.getLogger(__name__)

# file suffix (lower case) -> tree-sitter-language-pack language name
_SUFFIX_LANG = {
    ".py": "python",
    ".pyi": "python",
    ".pyw": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".kt": "kotlin",
    ".kts": "kotlin",
    ".scala": "scala",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".hpp": "cpp",
    ".hh": "cpp",
    ".hxx": "cpp",
    ".cs": "csharp",
    ".rb": "ruby",
    ".php": "php",
    ".swift": "swift",
    ".lua": "lua",
    ".sh": "bash",
    ".bash": "bash",
    ".zsh": "bash",
    ".css": "css",
    ".scss": "scss",
    ".md": "markdown",
    ".markdown": "markdown",
    ".ex": "elixir",
    ".exs": "elixir",
    ".hs": "haskell",
    ".ml": "ocaml",
    ".jl": "julia",
    ".r": "r",
    ".dart": "dart",
    ".zig": "zig",
    ".sql": "sql",
}
_NAME_LANG = {"Makefile": "make", "Dockerfile": "dockerfile", "CMakeLists.txt": "cmake"}

# node types that are definitions worth explaining on their own
_DEF_TYPES = frozenset(
    {
        # python
        "function_definition",
        "class_definition",
        "decorated_definition",
        # javascript / typescript
        "function_declaration",
        "generator_function_declaration",
        "class_declaration",
        "abstract_class_declaration",
        "method_definition",
        "interface_declaration",
        "type_alias_declaration",
        "enum_declaration",
        "module",
        "internal_module",
        # go
        "method_declaration",
        "type_declaration",
        # rust
        "function_item",
        "impl_item",
        "struct_item",
        "enum_item",
        "trait_item",
        "mod_item",
        "macro_definition",
        "union_item",
        # java / c# / kotlin / scala
        "constructor_declaration",
        "record_declaration",
        "annotation_type_declaration",
        "struct_declaration",
        "namespace_declaration",
        "object_declaration",
        "object_definition",
        "trait_definition",
        # c / c++
        "class_specifier",
        "struct_specifier",
        "enum_specifier",
        "namespace_definition",
        "template_declaration",
        # ruby
        "method",
        "singleton_method",
        "class",
        "singleton_class",
        # php / lua / bash / elixir / misc
        "function_statement",
        "local_function_statement",
        "trait_declaration",
        # css / markdown
        "rule_set",
        "media_statement",
        "section",
    }
)
# wrappers that make a top-level definition out of what they wrap
_WRAPPER_TYPES = frozenset({"export_statement", "decorated_definition", "template_declaration"})
# `const f = () => {}` and friends
_VALUE_DECL_TYPES = frozenset({"lexical_declaration", "variable_declaration"})
_FUNCTION_VALUE_TYPES = frozenset(
    {"arrow_function", "function_expression", "function", "class", "generator_function"}
)

_MAX_PARSE_BYTES = 8 * 1024 * 1024
_TREE_CACHE_SIZE = 32

_lock = threading.Lock()
_parsers: dict[str, object | None] = {}
_trees: OrderedDict[tuple[str, str], object] = OrderedDict()
_recent: OrderedDict[tuple[str, str], tuple[bytes, object]] = OrderedDict()  # last tree per doc
_lines: OrderedDict[str, list[str]] = OrderedDict()  # text → its lines, for the last few texts
_LINES_CACHE_SIZE = 8
_parse_locks: dict[str, threading.Lock] = {}


def language_for(path_or_lang: str | PurePath | None) -> str | None:
    """The tree-sitter language name for a path (by suffix) or a language name; None if unknown."""
    if path_or_lang is None:
        return None
    s = str(path_or_lang)
    if "/" not in s and "\\" not in s and "." not in s and s not in _NAME_LANG:
        return s.lower() or None
    p = PurePath(s)
    return _NAME_LANG.get(p.name) or _SUFFIX_LANG.get(p.suffix.lower())


def _doc_key(path_or_lang) -> str | None:
    """The document a text belongs to (a path), or None for a bare language name."""
    if path_or_lang is None:
        return None
    s = str(path_or_lang)
    return s if ("/" in s or "\\" in s or "." in s) else None


def _parser(lang: str):
    """A cached parser for ``lang``, or None when the language pack has no grammar for it."""
    with _lock:
        if lang in _parsers:
            return _parsers[lang]
    parser = None
    try:
        parser = _bundled_parser(lang)
        if parser is None:
            import tree_sitter_language_pack as tslp

            parser = tslp.get_parser(lang)  # type: ignore[arg-type]
    except Exception as exc:  # unknown language, or a pack that would download grammars
        log.debug("no tree-sitter grammar for %s: %s", lang, exc)
        parser = None
    with _lock:
        _parsers[lang] = parser
    return parser


def _bundled_parser(lang: str):
    """A parser from the language pack's own binding of ``lang`` (``bindings/<lang>``, what
    ``get_parser`` loads), loaded without importing the pack's ``__init__``, which imports three
    other grammars' packages and, through them, ``importlib.resources``, ``tempfile``, ``shutil``,
    ``bz2``, ``lzma``: 10-40 ms of a language server's first code lens. None when the pack has no
    such file (then ``get_parser`` answers)."""
    import importlib.machinery
    import importlib.util
    import os

    spec = importlib.util.find_spec("tree_sitter_language_pack")
    if spec is None or not spec.submodule_search_locations or not lang.isidentifier():
        return None
    name = f"tree_sitter_language_pack.bindings.{lang}"
    for where in spec.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(where, "bindings", lang + suffix)
            if os.path.isfile(path):
                from tree_sitter import Language, Parser

                loader = importlib.machinery.ExtensionFileLoader(name, path)
                module = importlib.util.module_from_spec(
                    importlib.util.spec_from_file_location(name, path, loader=loader))
                return Parser(Language(module.language()))
    return None


def _common_prefix(a: bytes, b: bytes) -> int:
    """Length of the common prefix (binary search over slice comparisons: memcmp speed)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _point(src: bytes, i: int) -> tuple[int, int]:
    return src.count(b"\n", 0, i), i - (src.rfind(b"\n", 0, i) + 1)


def _edited(tree, old: bytes, new: bytes):
    """A copy of ``tree`` told about the one edit turning ``old`` into ``new`` (for reparsing)."""
    start = _common_prefix(old, new)
    tail = _common_prefix(old[start:][::-1], new[start:][::-1])
    old_end, new_end = len(old) - tail, len(new) - tail
    edited = tree.copy()
    edited.edit(
        start_byte=start,
        old_end_byte=old_end,
        new_end_byte=new_end,
        start_point=_point(old, start),
        old_end_point=_point(old, old_end),
        new_end_point=_point(new, new_end),
    )
    return edited


def _tree(text: str, lang: str | None, doc: str | None = None, cancel=None):
    """A (cached) parse tree of ``text``, or None when the fallback must be used.

    ``doc`` names the document (its path): the previous tree of the same document is reused for
    an incremental reparse, so re-parsing a big file after an edit costs about a millisecond.
    ``cancel``: a parse in the background checks it every few microseconds and gives up (None,
    nothing cached) when it returns true; such a parse also lets a thread that wants the GIL
    take it at a check, after the switch interval (a plain parse holds the GIL throughout:
    15 ms for 5,000 lines).
    """
    if not lang or len(text) > _MAX_PARSE_BYTES:
        return None
    key = (lang, text)
    with _lock:
        tree = _trees.get(key)
        if tree is not None:
            _trees.move_to_end(key)
            return tree
    parser = _parser(lang)
    if parser is None:
        return None
    src = text.encode("utf-8", "surrogatepass")
    try:
        with _parse_locks.setdefault(lang, threading.Lock()):  # a Parser is not thread-safe
            with _lock:  # parsed meanwhile by the thread that held the parser?
                tree = _trees.get(key)
                if tree is not None:
                    return tree
                previous = _recent.get((lang, doc)) if doc else None
            args = []  # the old tree for an incremental parse
            if previous is not None and previous[0] != src:
                args.append(_edited(previous[1], previous[0], src))
            if cancel is None:
                tree = parser.parse(src, *args)
            else:
                try:
                    tree = parser.parse(
                        lambda at, _point: src[at : at + 65536],
                        *args,
                        progress_callback=lambda *_: bool(cancel()),
                    )
                except ValueError:  # cancelled
                    parser.reset()
                    return None
            with _lock:
                _trees[key] = tree
                while len(_trees) > _TREE_CACHE_SIZE:
                    _trees.popitem(last=False)
                if doc:
                    _recent[(lang, doc)] = (src, tree)
                    _recent.move_to_end((lang, doc))
                    while len(_recent) > _TREE_CACHE_SIZE:
                        _recent.popitem(last=False)
    except Exception as exc:  # a grammar crash must never break a hover
        log.debug("tree-sitter parse failed (%s): %s", lang, exc)
        return None
    return tree


def _lines_of(node) -> tuple[int, int]:
    """1-based inclusive line range of a node (an end at column 0 belongs to the line before)."""
    start = node.start_point[0] + 1
    end_row, end_col = node.end_point
    end = end_row + 1 if end_col > 0 else end_row
    return start, max(start, end)


def _trim_blank(lines: list[str], start: int, end: int) -> tuple[int, int]:
    """Clamp to the text and drop trailing blank lines (a Markdown section ends before the next)."""
    end = min(end, len(lines))
    while end > start and not lines[end - 1].strip():
        end -= 1
    return start, end


def _is_definition(node) -> bool:
    if node.type in _DEF_TYPES:
        return True
    if node.type in _VALUE_DECL_TYPES:
        return _function_value_declarator(node) is not None
    return False


def _function_value_declarator(node):
    for child in node.named_children:
        if child.type == "variable_declarator":
            value = child.child_by_field_name("value")
            if value is not None and value.type in _FUNCTION_VALUE_TYPES:
                return child
    return None


def _node_name(node) -> str:
    """A display name for a definition node ("" when it has none)."""
    name = node.child_by_field_name("name")
    if name is None and node.type in _VALUE_DECL_TYPES:
        decl = _function_value_declarator(node) or next(
            (c for c in node.named_children if c.type == "variable_declarator"), None
        )
        if decl is not None:
            name = decl.child_by_field_name("name")
    if name is None and node.type in _WRAPPER_TYPES:
        inner = node.child_by_field_name("definition") or node.child_by_field_name("declaration")
        if inner is None:
            inner = next((c for c in node.named_children if _is_definition(c)), None)
        if inner is not None:
            return _node_name(inner)
    if name is None and node.type == "impl_item":
        name = node.child_by_field_name("type")
    if name is None and node.type == "type_declaration":
        spec = next((c for c in node.named_children if c.type == "type_spec"), None)
        if spec is not None:
            name = spec.child_by_field_name("name")
    if name is None and node.type == "section":
        heading = next((c for c in node.named_children if c.type.endswith("heading")), None)
        if heading is not None and heading.text is not None:
            return heading.text.decode("utf-8", "replace").strip().lstrip("#").strip()
    if name is None or name.text is None:
        return ""
    return name.text.decode("utf-8", "replace")


def _definition_children(node) -> list:
    """Top-level definitions among ``node``'s children (wrappers kept whole)."""
    out = []
    for child in node.named_children:
        if child.type in _WRAPPER_TYPES:
            if _is_definition(child) or any(_is_definition(c) for c in child.named_children):
                out.append(child)
        elif _is_definition(child):
            out.append(child)
    return out


def _outermost_wrapper(node):
    """Climb from a definition to the wrapper that owns it (decorators, ``export``)."""
    while node.parent is not None and node.parent.type in _WRAPPER_TYPES:
        node = node.parent
    return node


# --- fallback: chunks -------------------------------------------------------------------------

_CLOSER = re.compile(r"^\s*(\}|\)|\]|end\b|fi\b|done\b|esac\b)")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _chunks(lines: list[str]) -> list[tuple[int, int]]:
    """Top-level chunks (1-based inclusive): see the module docstring."""
    chunks: list[tuple[int, int]] = []
    n = len(lines)
    i = 0
    while i < n:
        if not lines[i].strip():
            i += 1
            continue
        start = i
        end = i
        j = i + 1
        while j < n:
            if lines[j].strip():
                if j == end + 1 or _indent(lines[j]) > 0 or _CLOSER.match(lines[j]):
                    end = j
                    j += 1
                    continue
                break
            j += 1
        chunks.append((start + 1, end + 1))
        i = end + 1
    return chunks


def _chunk_name(lines: list[str], start: int) -> str:
    i = start - 1
    while i + 1 < len(lines) and lines[i].lstrip().startswith("@"):  # decorators
        i += 1
    head = lines[i].strip()
    m = re.match(
        r"(?:(?:export|public|private|static|async|pub|def|fn|func|function|class|"
        r"struct|impl|interface|module|local)\s+)+([A-Za-z_$][\w$]*)",
        head,
    )
    if m:
        return m.group(1)
    return head.lstrip("#").strip()[:40]


def _fallback_block(lines: list[str], line: int) -> tuple[int, int]:
    for start, end in _chunks(lines):
        if start <= line <= end:
            return start, end
    return line, line


# --- Python: top-level definitions by a lexical scan -------------------------------------------
#
# A code lens needs only the top-level definitions, and for Python they can be found without a
# parse: a top-level statement starts at column 0 outside strings, brackets and backslash
# continuations, and a definition runs to the last code line before the next one, plus the
# comments right after it that tree-sitter's indentation scanner keeps inside it (those indented
# at least as deep as its body, up to the first that is not). Several times faster than the
# parse (which holds the GIL). The scan gives up (``None``: the parse answers) on what it does
# not model: an unterminated string, unbalanced brackets, a decorator without a definition,
# line breaks other than \n and \r\n. tests/unit/test_symbols.py checks it against tree-sitter.

# strings and comments, left to right: outside them every quote or hash starts one (a prefix
# such as ``rb`` is letters, neither a quote nor a bracket, so it needs no matching). Group 1 is
# the string or comment; the possessive skip to the next quote or hash, and the empty match at
# the end, make the scan a tight loop (about twice as fast as searching for the alternatives).
_PY_LEX = re.compile(
    r"""[^#"']*+(?:("""
    r"""\#[^\n]*"""
    r'''|"""[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*(?:"""|\Z)'''
    r"""|'''[^'\\]*(?:(?:\\.|'(?!''))[^'\\]*)*(?:'''|\Z)"""
    r'''|"[^"\\\n]*(?:\\.[^"\\\n]*)*"'''
    r"""|'[^'\\\n]*(?:\\.[^'\\\n]*)*'"""
    r"""|["']"""  # a quote that starts no complete string
    r""")|\Z)""",
    re.DOTALL,
)
_PY_TRIPLE = re.compile(
    r'''"""[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*"""|'''
    r"""'''[^'\\]*(?:(?:\\.|'(?!''))[^'\\]*)*'''""",
    re.DOTALL,
)
_PY_DEF = re.compile(r"(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)|@")
# line breaks str.splitlines() knows and tree-sitter does not (or the reverse)
_ODD_BREAKS = ("\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


def _ts_indent(line: str) -> int:
    """A line's indentation as tree-sitter's Python scanner counts it (a tab is 8)."""
    n = 0
    for ch in line:
        if ch == " ":
            n += 1
        elif ch == "\t":
            n += 8
        elif ch == "\r":
            n = 0
        else:
            break
    return n


def _python_top_level(text: str) -> list[tuple[int, int, str]] | None:
    """``(first, last, name)`` (0-based rows) of the top-level definitions, as the tree-sitter
    grammar delimits them (the rows of its nodes), or None (see above)."""
    import numpy as np

    if _odd_breaks(text):
        return None
    # one byte per character (others become '?': neither brackets nor line breaks)
    codes = np.frombuffer(text.encode("latin-1", "replace"), dtype=np.uint8)
    spans = _py_string_spans(text, codes)
    if spans is None:
        return None
    return _py_blocks(text, _py_lines(text, codes, *spans))


def _odd_breaks(text: str) -> bool:
    """Whether ``text`` has line breaks the scan does not split on as the grammar does (then
    the parse answers)."""
    odd = _ODD_BREAKS[:5] if text.isascii() else _ODD_BREAKS
    return any(c in text for c in odd) or ("\r" in text and text.count("\r") != text.count("\r\n"))


def _py_blocks(text: str, lines) -> list[tuple[int, int, str]] | None:
    """The top-level definitions from the scan's logical lines (None: the parse answers)."""
    if lines is None:
        return None
    defs = _py_defs(text, lines.stmts)
    if defs is None:
        return None
    return _py_def_extents(text, defs, lines)


def _py_string_spans(text: str, codes):
    """``(starts, ends)`` of the strings and comments, ``[start, end)`` sorted (one ``-1`` each
    when there is none: nothing is inside one), or None for a lone quote or a triple-quoted string
    that runs to the end of the text."""
    import numpy as np

    spans = [m.span(1) for m in _PY_LEX.finditer(text) if m.start(1) >= 0]
    st = np.fromiter((a for a, _ in spans), np.int64, len(spans))
    en = np.fromiter((b for _, b in spans), np.int64, len(spans))
    if spans:
        lone = np.flatnonzero(en - st == 1)
        if len(lone) and (codes[st[lone]] != ord("#")).any():
            return None  # a lone quote
        if _runs_to_end(text, *spans[-1]):
            return None  # a triple-quoted string that runs to the end
    if not len(st):
        st = en = np.zeros(1, dtype=np.int64) - 1  # no span: nothing is inside one
    return st, en


# positions (not a per-character pass): strings and comments are spans [st, en); brackets and
# backslashes count where no span holds them


def _py_outside(pos, st, en):
    """Whether each position is outside every string and comment span."""
    import numpy as np

    k = np.searchsorted(st, pos, "right") - 1
    return (k < 0) | (pos >= en[np.maximum(k, 0)])


def _py_strictly_inside(pos, st, en):
    """Whether each position is inside a string or comment span, past its first character."""
    import numpy as np

    k = np.searchsorted(st, pos, "right") - 1
    kk = np.maximum(k, 0)
    return (k >= 0) & (st[kk] < pos) & (pos < en[kk])


def _py_member(pos, sorted_set):
    """Whether each position is in the sorted array ``sorted_set``."""
    import numpy as np

    if not len(sorted_set):
        return np.zeros(len(pos), dtype=bool)
    return sorted_set[np.minimum(np.searchsorted(sorted_set, pos), len(sorted_set) - 1)] == pos


class _PyLines(NamedTuple):
    """Every line of a Python text, classified (lists, one item per line, but ``rows``/``stmts``)."""

    kinds: list[int]        # 0 blank, 1 comment, 2 code
    logical: list[bool]     # a statement starts on the line
    first: list[int]        # offset of its first character other than " \t\r" (at its end: blank)
    line_start: list[int]
    line_end: list[int]
    rows: list[int]         # the rows of the top-level statements
    stmts: list[int]        # ... and the offsets they start at


def _py_lines(text: str, codes, st, en) -> _PyLines | None:
    """Every line at once (array operations): its first character other than " \\t\\r", whether
    that starts a comment, and whether a statement can start there — or None when the brackets
    outside strings and comments do not balance."""
    import numpy as np

    n = len(text)
    # (comparisons: 5x faster than a table lookup per byte)
    bpos = np.flatnonzero((codes == 40) | (codes == 41) | (codes == 91) | (codes == 93)
                          | (codes == 123) | (codes == 125))
    bpos = bpos[_py_outside(bpos, st, en)]
    bc = codes[bpos]
    opens = (bc == 40) | (bc == 91) | (bc == 123)
    bdepth = np.cumsum(opens.astype(np.int32) * 2 - 1, dtype=np.int32)  # open after each bracket
    if len(bdepth) and (bdepth[-1] != 0 or bdepth.min() < 0):
        return None
    bdepth = np.r_[0, bdepth]  # bdepth[i]: open before the i-th bracket
    newlines = np.flatnonzero(codes == 10)
    line_start = np.r_[0, newlines + 1]
    line_end = np.r_[newlines, n]
    # a statement cannot start strictly inside a string, inside brackets or after a backslash
    # that continues the line before
    bs = np.flatnonzero(codes == 92)
    bs = bs[_py_outside(bs, st, en)]
    after = bs + 1 + (codes[np.minimum(bs + 1, n - 1)] == 13)  # the \n the backslash escapes
    contpos = after[after < n] + 1  # lines that continue the one before (sorted)

    nonblank = np.flatnonzero((codes != 32) & (codes != 9) & (codes != 13) & (codes != 10))
    k = np.searchsorted(nonblank, line_start)
    first = line_end.copy()
    has = k < len(nonblank)
    first[has] = np.minimum(nonblank[k[has]], line_end[has])
    blank = first >= line_end
    safe = np.minimum(first, n - 1) if n else first
    comment = ~blank & (codes[safe] == 35) & _py_member(first, st)
    code = ~blank & ~comment
    can_start = (~_py_strictly_inside(first, st, en)
                 & (bdepth[np.searchsorted(bpos, first, "left")] == 0))
    logical = code & can_start & ~_py_member(first, contpos)
    kinds = (code.astype(np.int8) * 2 + comment).tolist()  # 0 blank, 1 comment, 2 code
    col0 = np.flatnonzero(logical & (first == line_start))  # top-level statements
    return _PyLines(kinds, logical.tolist(), first.tolist(), line_start.tolist(),
                    line_end.tolist(), col0.tolist(), first[col0].tolist())


def _py_defs(text: str, stmts: list[int]) -> list[tuple[int, int, str]] | None:
    """``(first statement, def statement, name)`` (indices into ``stmts``) of the top-level
    definitions, the first statement being their first decorator; None when a decorator
    decorates something else."""
    defs, pending = [], None
    for i, q in enumerate(stmts):
        m = _PY_DEF.match(text, q)
        if m is None:
            if pending is not None:
                return None  # a decorator on something else
        elif m.group(1) is None:  # a decorator
            pending = i if pending is None else pending
        else:
            defs.append((pending if pending is not None else i, i, m.group(1)))
            pending = None
    if pending is not None:
        return None
    return defs


def _py_def_extents(text: str, defs: list[tuple[int, int, str]], lines: _PyLines
                    ) -> list[tuple[int, int, str]]:
    """``(first, last, name)`` rows of each definition: up to its last code line, then the
    comments after it indented as its body, less trailing blank lines."""
    kinds, logical, first, line_start, line_end, rows, _stmts = lines

    def indent(r: int) -> int:
        return _ts_indent(text[line_start[r] : first[r]])

    out = []
    for top, i, name in defs:
        row = rows[i]
        nxt = rows[i + 1] if i + 1 < len(rows) else len(line_start)
        last = nxt - 1
        while last > row and kinds[last] != 2:
            last -= 1
        # the indentation of the body's first statement on a line of its own (None: one line)
        body_indent = next((indent(r) for r in range(row + 1, last + 1) if logical[r]), None)
        end = last
        if body_indent is not None:
            for r in range(last + 1, nxt):
                if kinds[r] == 1:
                    if indent(r) < body_indent:
                        break
                    end = r
        start = rows[top]
        while end > start and not text[line_start[end] : line_end[end]].strip():
            end -= 1  # as _trim_blank does (other whitespace than " \t\r" makes no blank here)
        out.append((start, end, name))
    return out


# The same scan without numpy (``top_level_blocks(plain=True)``: a language server's first code
# lens, before numpy is imported): the same spans, and each line's class from the same rules, with
# the text's brackets and backslashes outside strings and comments counted per line (C loops over
# the lines) instead of found by array operations.
_PY_MASK = str.maketrans("()[]{}\\", " " * 7)  # inside a string or comment: none of them
_PY_BRACKETS = re.compile(r"[()\[\]{}]")
_PY_OPEN = {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}


def _python_top_level_plain(text: str) -> list[tuple[int, int, str]] | None:
    """``_python_top_level`` without numpy: the same answer (``tests/unit/test_symbols.py``)."""
    if _odd_breaks(text):
        return None
    spans = _py_string_spans_plain(text)
    if spans is None:
        return None
    return _py_blocks(text, _py_lines_plain(text, *spans))


def _runs_to_end(text: str, a: int, b: int) -> bool:
    """Whether the last string span ``a..b`` of ``text`` is a triple-quoted string that runs to
    the end of the text (unterminated: the scan gives up on such a text)."""
    return (b == len(text) and text[a] != "#" and text.startswith(text[a] * 3, a)
            and _PY_TRIPLE.fullmatch(text, a, b) is None)


def _py_string_spans_plain(text: str) -> tuple[list[int], list[int]] | None:
    """``_py_string_spans`` as lists."""
    spans = [m.span(1) for m in _PY_LEX.finditer(text) if m.start(1) >= 0]
    if not spans:
        return [-1], [-1]
    if any(b - a == 1 and text[a] != "#" for a, b in spans):
        return None  # a lone quote
    if _runs_to_end(text, *spans[-1]):
        return None  # a triple-quoted string that runs to the end
    return [a for a, _ in spans], [b for _, b in spans]


def _py_lines_plain(text: str, st: list[int], en: list[int]) -> _PyLines | None:
    """``_py_lines`` without numpy."""
    from itertools import accumulate, repeat
    from operator import add, sub

    n = len(text)
    # the text with no bracket or backslash inside a string or comment (same length, same lines)
    parts, prev = [], 0
    for a, b in zip(st, en):
        if a >= 0:
            parts.append(text[prev:a])
            parts.append(text[a:b].translate(_PY_MASK))
            prev = b
    parts.append(text[prev:])
    code = "".join(parts)
    depth = list(accumulate(map(_PY_OPEN.__getitem__, _PY_BRACKETS.findall(code))))
    if depth and (depth[-1] != 0 or min(depth) < 0):
        return None
    lines = text.split("\n")
    masked = code.split("\n")
    line_start = list(accumulate(map(len, lines[:-1]), lambda x, y: x + y + 1, initial=0))
    line_end = list(map(add, line_start, map(len, lines)))
    first = list(map(sub, line_end, map(len, map(str.lstrip, lines, repeat(" \t\r")))))
    # brackets open before each line's first character (none between a line's start and it)
    delta = [sum(map(m.count, "([{")) - sum(map(m.count, ")]}")) if m else 0 for m in masked]
    open_before = list(accumulate(delta[:-1], initial=0))
    # lines that continue the one before: after a backslash outside strings and comments
    contpos = set()
    i = code.find("\\")
    while i >= 0:
        after = i + 1 + (text[min(i + 1, n - 1)] == "\r")  # the \n the backslash escapes
        if after < n:
            contpos.add(after + 1)
        i = code.find("\\", i + 1)
    starts = set(st)
    kinds, logical = [], []
    for r, (f, e) in enumerate(zip(first, line_end)):
        if f >= e:
            kinds.append(0)
            logical.append(False)
            continue
        if text[f] == "#" and f in starts:
            kinds.append(1)
            logical.append(False)
            continue
        kinds.append(2)
        k = bisect.bisect_right(st, f) - 1
        inside = k >= 0 and st[k] < f < en[k]
        logical.append(not inside and open_before[r] == 0 and f not in contpos)
    rows = [r for r, (lg, f, s0) in enumerate(zip(logical, first, line_start)) if lg and f == s0]
    return _PyLines(kinds, logical, first, line_start, line_end, rows, [first[r] for r in rows])


# --- public API -------------------------------------------------------------------------------


def parse(text: str, path_or_lang: str | PurePath | None, cancel=None) -> bool:
    """Parse ``text`` now (cached), so a later ``enclosing_block`` does not wait for it; False
    when ``cancel()`` turned true meanwhile (see ``_tree``) and the parse was given up."""
    lang = language_for(path_or_lang)
    if not lang or len(text) > _MAX_PARSE_BYTES or _parser(lang) is None:
        return True  # nothing to parse
    return _tree(text, lang, _doc_key(path_or_lang), cancel) is not None


def _split(text: str) -> list[str]:
    """``text.splitlines()``, kept for the last few texts (hovers over one buffer version share
    it; do not modify the list)."""
    with _lock:
        lines = _lines.get(text)
        if lines is not None:
            return lines
    lines = text.splitlines()
    with _lock:
        _lines[text] = lines
        while len(_lines) > _LINES_CACHE_SIZE:
            _lines.popitem(last=False)
    return lines


def enclosing_block(text: str, path_or_lang: str | PurePath | None, line: int) -> tuple[int, int]:
    """The innermost function/class (else the chunk) around 1-based ``line``: ``(start, end)``."""
    lines = _split(text)
    if not lines:
        return (1, 1)
    line = min(max(1, int(line)), len(lines))
    tree = _tree(text, language_for(path_or_lang), _doc_key(path_or_lang))
    if tree is not None:
        row = line - 1
        col = _indent(lines[row])
        node = tree.root_node.descendant_for_point_range(
            (row, col), (row, max(col, len(lines[row])))
        )
        best = None
        while node is not None:
            if _is_definition(node) and node.parent is not None:
                best = node
                break
            node = node.parent
        if best is not None:
            start, end = _lines_of(_outermost_wrapper(best))
            return _trim_blank(lines, start, end)
    return _fallback_block(lines, line)


def block_table(text: str, path_or_lang: str | PurePath | None, cancel=None
                ) -> list[list[int]] | None:
    """Every line's ``enclosing_block`` at once, as runs ``[first, last, start, end]`` (lines
    ``first``-``last``, 1-based, all answer ``(start, end)``), covering line 1 to the last; None
    when the text has no parse tree (no grammar, too big: the fallback needs no parse) or
    ``cancel()`` turned true. A caller that keeps it (the language server, on disk by the text's
    hash) answers a later ``enclosing_block`` of the same text without parsing it again
    (``table_block``). One parse, then a walk per line (about 10 µs each)."""
    lines = _split(text)
    lang = language_for(path_or_lang)
    if not lines or not lang or len(text) > _MAX_PARSE_BYTES or _parser(lang) is None:
        return None
    if _tree(text, lang, _doc_key(path_or_lang), cancel) is None:
        return None
    runs: list[list[int]] = []
    for line in range(1, len(lines) + 1):
        if cancel is not None and line % 256 == 0 and cancel():
            return None
        start, end = enclosing_block(text, path_or_lang, line)
        if runs and runs[-1][2] == start and runs[-1][3] == end:
            runs[-1][1] = line
        else:
            runs.append([line, line, start, end])
    return runs


def table_block(table: list[list[int]], line: int) -> tuple[int, int]:
    """``enclosing_block`` of 1-based ``line`` from a ``block_table`` of the same text (a line
    out of range is clamped, as ``enclosing_block`` clamps it)."""
    line = min(max(1, int(line)), table[-1][1])
    i = bisect.bisect_right(table, line, key=lambda run: run[0]) - 1
    return table[i][2], table[i][3]


def top_level_blocks(text: str, path: str | PurePath | None, scan: bool = True,
                     plain: bool = False) -> list[tuple[int, int, str]]:
    """Top-level definitions ``(start, end, name)`` in file order (chunks when there are none).
    ``scan=False``: Python from the parse too, not the scan (the same blocks). ``plain``: the
    scan without numpy, which a language server's first code lens does without
    (``engram.query.direct``; the same blocks)."""
    if not text:
        return []
    lang = language_for(path)
    found = None
    if scan and lang == "python" and len(text) <= _MAX_PARSE_BYTES and _parser(lang) is not None:
        found = _python_top_level_plain(text) if plain else _python_top_level(text)
        if found:
            return [(a + 1, b + 1, name) for a, b, name in found]  # ends trimmed already
    lines = text.splitlines()
    if found is not None:  # a scan that found no definitions
        return [(s, e, _chunk_name(lines, s)) for s, e in _chunks(lines)]
    return _top_level_tree(text, lines, lang, path)


def _top_level_tree(text, lines, lang, path) -> list[tuple[int, int, str]]:
    tree = _tree(text, lang, _doc_key(path))
    if tree is not None:
        root = tree.root_node
        nodes = _definition_children(root)
        # a Markdown document with one title section: lens its subsections instead
        while lang == "markdown" and len(nodes) == 1 and nodes[0].type == "section":
            inner = _definition_children(nodes[0])
            if not inner:
                break
            nodes = inner
        if nodes:
            out = []
            for node in nodes:
                start, end = _trim_blank(lines, *_lines_of(node))
                out.append((start, end, _node_name(node)))
            return out
    return [(s, e, _chunk_name(lines, s)) for s, e in _chunks(lines)]
