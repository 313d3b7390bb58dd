"""Import hygiene: what ``import engram`` loads, and which module may import which.

- Loading ``engram`` and every module under it (in a fresh interpreter) never loads pygls,
  lsprotocol, torch or transformers: the CLI starts without them (the language server needs the
  first two, the optional ``embed`` extra the last two, imported inside functions).
- A static check (``ast``; imports inside functions count, ``if TYPE_CHECKING:`` blocks do not
  run and do not count for cycles; ``importlib.import_module`` with a literal name counts):
  no import cycle among the modules of ``engram/`` and ``engram_lsp/``; ``engram`` never imports
  ``engram_lsp``; imports inside ``engram`` run one way through the layers (``LAYERS``); and
  ``engram_lsp`` imports only the engine's surface of ``engram`` (``LSP_MAY_IMPORT``).

Every failure prints the full list of violations, each with its file and line.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("engram", "engram_lsp")
HEAVY = ("pygls", "lsprotocol", "torch", "transformers")

LEAVES = ("errors", "paths", "config", "digest", "linediff", "sortedset", "env", "files",
          "timestamps", "warm", "spill", "glibc", "collect", "pipes")
"""Shared utilities (``engram.<name>``), and the package root ``engram`` itself: layer 0, where
any module may import any other (the cycle check still applies)."""

LAYERS: dict[str, int] = {
    **dict.fromkeys(LEAVES, 0), "": 0,
    "adapters": 1, "tape": 1, "fingerprint": 1, "sdk": 1,
    "index": 2,
    "lineage": 3, "retrieval": 3,
    "query": 4, "embed": 4, "ingest": 4,
    "commits": 5, "share": 5, "agents": 5,
    "engine": 6,
    "mcp": 7,
    "render": 8,
    "commands": 9,
    "cli": 10,
}
"""Layer of each part of ``engram`` (``engram.<part>...``). A module imports from its own part
and from lower layers only: leaves ← adapters ← ingest; tape, fingerprint and index below
lineage; lineage ← query ← engine ← render ← cli; ``ingest`` (which drives tape writing, indexing
and the lineage pass) beside ``query``, neither importing the other. ``retrieval`` (scoring
signals, feedback, the retrieval log) sits beside lineage so queries can rank with it;
``commits`` (git), ``share`` (push/pull) and ``agents`` (notes, brief, hooks) build on queries and
are reached through the engine; ``mcp`` serves the engine; ``commands`` holds the subcommands that
live outside ``cli``."""

PEERS_INSIDE_FUNCTIONS = {frozenset({"query", "embed"})}
"""Parts of one layer that may import each other, but only inside functions: semantic search
needs transcript windows, and the windows' search needs semantic hits (docs/architecture.md)."""

LSP_MAY_IMPORT = ("engram", "engram.engine", "engram.errors", "engram.config",
                  "engram.query.direct", "engram.glibc", "engram.collect", "engram.paths",
                  "engram.pipes")
"""All of ``engram`` that ``engram_lsp`` may import: it goes through the ``Engine``; and the code
lens counts without numpy (``engram.query.direct``), for the first lenses before the engine's
import (which loads numpy) is done; glibc's malloc knobs (``engram.glibc``); the garbage
collection between requests that ``engram mcp`` shares (``engram.collect``); and where the
machine's index lives, read ahead into the page cache first thing at the process's start
(``engram.paths.readahead``, a leaf module: before ``engram.config`` and its YAML are imported); and
the output pipe's buffer that the ingest's worker and ``engram mcp`` widen too (``engram.pipes``)."""


@dataclass(frozen=True)
class Import:
    source: str       # importing module
    target: str       # imported module (the longest module name of ours the import names)
    path: str         # file of the importing module, relative to the repository
    line: int
    in_function: bool  # inside a def/lambda: runs when called, not when the module loads
    type_only: bool    # under ``if TYPE_CHECKING:``: never runs

    def __str__(self) -> str:
        where = " (in a function)" if self.in_function else ""
        return f"{self.path}:{self.line}: {self.source} imports {self.target}{where}"


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module of our packages: dotted name → (file, is a package)."""
    mods = {}
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            mods[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return mods


MODULES = _modules()


def _ours(name: str) -> str | None:
    """The longest prefix of ``name`` that is one of our modules."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


class _Collector(ast.NodeVisitor):
    def __init__(self, module: str, is_pkg: bool, path: str):
        self.module, self.is_pkg, self.path = module, is_pkg, path
        self.depth = 0          # function nesting
        self.type_only = 0      # ``if TYPE_CHECKING:`` nesting
        self.found: list[Import] = []

    def _add(self, name: str, line: int) -> None:
        target = _ours(name)
        if target and target != self.module:
            self.found.append(Import(self.module, target, self.path, line, self.depth > 0,
                                     self.type_only > 0))

    def _function(self, node) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
        if name == "TYPE_CHECKING":
            self.type_only += 1
            for child in node.body:
                self.visit(child)
            self.type_only -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            pkg = self.module.split(".") if self.is_pkg else self.module.split(".")[:-1]
            pkg = pkg[: len(pkg) - (node.level - 1)]
            base = ".".join(pkg + ([base] if base else []))
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            self._add(sub if sub in MODULES else base, node.lineno)

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if (isinstance(f, ast.Attribute) and f.attr == "import_module" and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            self._add(node.args[0].value, node.lineno)
        self.generic_visit(node)


def _imports() -> list[Import]:
    out = []
    for module, (path, is_pkg) in MODULES.items():
        c = _Collector(module, is_pkg, str(path.relative_to(ROOT)))
        c.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        out.extend(c.found)
    return out


IMPORTS = _imports()


def _report(title: str, violations: list) -> str:
    return f"{title} ({len(violations)}):\n" + "\n".join(f"  {v}" for v in violations)


def _part(module: str) -> str:
    """``engram.query.walk`` → ``query``; ``engram`` → ``""``."""
    return module.split(".")[1] if module.count(".") else ""


# -- what import engram loads --------------------------------------------------------------------

_LOAD_ALL = """
import importlib, json, sys
heavy, names = %r, %r
seen, out = set(), {}
for name in names:
    importlib.import_module(name)
    new = sorted(m for m in sys.modules if m.split(".")[0] in heavy and m not in seen)
    if new:
        out[name] = new
        seen.update(new)
print(json.dumps(out))
"""


def test_import_engram_loads_no_lsp_or_torch():
    """A fresh interpreter imports ``engram`` and then every module under it, in order; the
    modules of pygls, lsprotocol, torch and transformers loaded by each are listed."""
    names = ["engram"] + sorted(m for m in MODULES if m.startswith("engram."))
    assert "engram.cli" in names and "engram.embed.model" in names
    code = _LOAD_ALL % (HEAVY, names)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    culprits = json.loads(proc.stdout.strip().splitlines()[-1])
    if culprits:
        pytest.fail(_report("importing these engram modules loads " + "/".join(HEAVY),
                            [f"{mod}: {', '.join(new[:8])}{' …' if len(new) > 8 else ''}"
                             for mod, new in culprits.items()]), pytrace=False)


# -- static checks ---------------------------------------------------------------------------------


def test_the_static_import_graph_is_seen():
    """The collector sees the kinds of import the checks rely on (a guard against a silent,
    empty graph)."""
    edges = {(i.source, i.target) for i in IMPORTS}
    assert ("engram.cli", "engram.render") in edges             # module level
    assert ("engram.engine", "engram.embed.hybrid") in edges    # inside a function
    assert ("engram.fingerprint", "engram.fingerprint.winnow") in edges  # relative or absolute
    assert any(i.in_function for i in IMPORTS) and any(not i.in_function for i in IMPORTS)
    assert any(s.startswith("engram_lsp") and t.startswith("engram.") for s, t in edges)


def _one_cycle(graph: dict[str, dict[str, Import]], comp: set[str]) -> str:
    """A shortest cycle through the first module of a strongly connected set, edge by edge."""
    start = min(comp)
    parent: dict[str, str | None] = {start: None}
    queue, end = [start], start
    for v in queue:  # breadth first, inside the set, until an edge leads back to start
        targets = sorted(t for t in graph.get(v, {}) if t in comp)
        if start in targets:
            end = v
            break
        for w in targets:
            if w not in parent:
                parent[w] = v
                queue.append(w)
    path: list[str] = []
    node: str | None = end
    while node is not None:
        path.append(node)
        node = parent[node]
    path.reverse()  # start ... end
    edges = [str(graph[x][y]) for x, y in zip(path, path[1:] + [start])]
    more = f" (one of the cycles among {len(comp)} modules)" if len(comp) > len(path) else ""
    return "cycle " + " -> ".join(path + [start]) + more + ":\n    " + "\n    ".join(edges)


def test_no_import_cycles():
    """No cycle among the modules of engram/ and engram_lsp/, imports inside functions included
    (a package's implicit import of its parent package is not an edge)."""
    graph: dict[str, dict[str, Import]] = {}
    for i in IMPORTS:
        if not i.type_only:
            graph.setdefault(i.source, {}).setdefault(i.target, i)
    cycles = []
    # Tarjan's strongly connected components, iteratively
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    for root in sorted(MODULES):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, {}))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, {})))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        cycles.append(_one_cycle(graph, set(comp)))
    if cycles:
        pytest.fail(_report("import cycles", cycles), pytrace=False)


def test_engram_never_imports_engram_lsp():
    bad = [i for i in IMPORTS
           if i.source.split(".")[0] == "engram" and i.target.split(".")[0] == "engram_lsp"]
    if bad:
        pytest.fail(_report("engram imports engram_lsp", bad), pytrace=False)


def test_engram_imports_run_one_way_through_the_layers():
    unplaced = {_part(m) for m in MODULES if m.split(".")[0] == "engram"} - set(LAYERS)
    assert not unplaced, "parts of engram with no layer in LAYERS: " + ", ".join(sorted(unplaced))
    bad = []
    for i in IMPORTS:
        if i.source.split(".")[0] != "engram" or i.target.split(".")[0] != "engram":
            continue
        a, b = _part(i.source), _part(i.target)
        if a == b or LAYERS[b] < LAYERS[a] or LAYERS[a] == LAYERS[b] == 0:  # leaves: any leaf
            continue
        if LAYERS[a] == LAYERS[b] and frozenset({a, b}) in PEERS_INSIDE_FUNCTIONS and i.in_function:
            continue
        why = "same layer" if LAYERS[a] == LAYERS[b] else "upward"
        bad.append(f"{i}  [{a or 'engram'} (layer {LAYERS[a]}) -> {b or 'engram'} "
                   f"(layer {LAYERS[b]}): {why}]")
    if bad:
        pytest.fail(_report("engram imports against the layers (leaves < adapters, tape, "
                            "fingerprint < index < lineage < query, embed, ingest < engine "
                            "< render < cli)", bad), pytrace=False)


def test_engram_lsp_imports_only_the_engine_surface():
    bad = [i for i in IMPORTS if i.source.split(".")[0] == "engram_lsp"
           and i.target.split(".")[0] == "engram" and i.target not in LSP_MAY_IMPORT]
    if bad:
        pytest.fail(_report("engram_lsp imports beyond " + ", ".join(LSP_MAY_IMPORT), bad),
                    pytrace=False)


def test_no_function_is_longer_than_120_lines():
    """A function a newcomer can hold in their head: none in engram/ or engram_lsp/ over 120
    lines (split it into named steps instead)."""
    root = Path(__file__).resolve().parents[2]
    long = []
    for pkg in ("engram", "engram_lsp"):
        for p in sorted((root / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = node.end_lineno - node.lineno + 1
                    if n > 120:
                        long.append(f"{p.relative_to(root)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, "functions over 120 lines:\n" + "\n".join(long)
