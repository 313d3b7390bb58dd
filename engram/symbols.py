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

import logging
import re
import threading
from collections import OrderedDict
from pathlib import PurePath

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
        import tree_sitter_language_pack as tslp

        parser = tslp.get_parser(lang)  # type: ignore[arg-type]
    except Exception as exc:  # unknown language, or a pack that would download grammars
        log.debug("no tree-sitter grammar for %s: %s", lang, exc)
        parser = None
    with _lock:
        _parsers[lang] = parser
    return parser


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


def _tree(text: str, lang: str | None, doc: str | None = None):
    """A (cached) parse tree of ``text``, or None when the fallback must be used.

    ``doc`` names the document (its path): the previous tree of the same document is reused for
    an incremental reparse, so re-parsing a big file after an edit costs about a millisecond.
    """
    if not lang or len(text) > _MAX_PARSE_BYTES:
        return None
    key = (lang, text)
    with _lock:
        tree = _trees.get(key)
        if tree is not None:
            _trees.move_to_end(key)
            return tree
        previous = _recent.get((lang, doc)) if doc else None
    parser = _parser(lang)
    if parser is None:
        return None
    src = text.encode("utf-8", "surrogatepass")
    try:
        with _parse_locks.setdefault(lang, threading.Lock()):  # a Parser is not thread-safe
            if previous is not None and previous[0] != src:
                tree = parser.parse(src, _edited(previous[1], previous[0], src))
            else:
                tree = parser.parse(src)
    except Exception as exc:  # a grammar crash must never break a hover
        log.debug("tree-sitter parse failed (%s): %s", lang, exc)
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


# --- public API -------------------------------------------------------------------------------


def enclosing_block(text: str, path_or_lang: str | PurePath | None, line: int) -> tuple[int, int]:
    """The innermost function/class (else the chunk) around 1-based ``line``: ``(start, end)``."""
    lines = text.splitlines()
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


def top_level_blocks(text: str, path: str | PurePath | None) -> list[tuple[int, int, str]]:
    """Top-level definitions ``(start, end, name)`` in file order (chunks when there are none)."""
    lines = text.splitlines()
    if not lines:
        return []
    lang = language_for(path)
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
