"""The Python package has no import cycle (issue 18, acceptance 3).

Two checks:
  * the import graph of python/luminamoon, read from the sources (every ``import`` / ``from ...
    import`` of a luminamoon module, at the top of a module or inside a function; only the
    ``if TYPE_CHECKING:`` blocks are left out, they never run), has no cycle;
  * every module imports in a fresh interpreter, first, before any other luminamoon module, and
    then all the others after it, in an order that differs from run to run of the loop (each child
    process is forked from a parent that has imported only torch, numpy and pyarrow, never
    luminamoon, so each child's luminamoon imports start from nothing).
"""
from __future__ import annotations

import ast
import os
import pathlib
import random
import sys
import traceback

import pytest

PKG = pathlib.Path(__file__).resolve().parents[2] / "python" / "luminamoon"


def _modules() -> dict[str, pathlib.Path]:
    mods = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


MODULES = _modules()
# compiled submodules (the extension luminamoon._C): leaves of the graph
NATIVE = {".".join(p.relative_to(PKG.parent).parts[:-1] + (p.name.split(".", 1)[0],))
          for p in PKG.rglob("*.so")} | {"luminamoon._C"}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(name: str, path: pathlib.Path) -> dict[str, int]:
    """The luminamoon modules `name` imports -> the line of the first such import."""
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: dict[str, int] = {}

    def add(target: str, line: int) -> None:
        if target != name and target not in NATIVE:
            found.setdefault(target, line)

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node):
            if _is_type_checking(node.test):
                for n in node.orelse:
                    self.visit(n)
            else:
                self.generic_visit(node)

        def visit_Import(self, node):
            for a in node.names:
                if a.name == "luminamoon" or a.name.startswith("luminamoon."):
                    add(a.name, node.lineno)

        def visit_ImportFrom(self, node):
            if node.level:
                base = pkg.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not (mod == "luminamoon" or mod.startswith("luminamoon.")):
                return
            for a in node.names:
                sub = f"{mod}.{a.name}"
                add(sub if (sub in MODULES or sub in NATIVE) else mod, node.lineno)

    Visitor().visit(ast.parse(path.read_text(), str(path)))
    return found


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), or with a self-loop."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_cycles():
    # the checker itself: a planted cycle is found, a chain is not
    assert _cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {}}) == []


def test_graph_reads_relative_and_lazy_imports():
    g = {m: _imports(m, p) for m, p in MODULES.items()}
    # string_tensor imports ops at the top; the package imports string_tensor
    assert "luminamoon.ops" in g["luminamoon.string_tensor"]
    assert "luminamoon.string_tensor" in g["luminamoon"]
    assert all(t in MODULES for deps in g.values() for t in deps)


def test_import_graph_has_no_cycle():
    graph = {m: _imports(m, p) for m, p in MODULES.items()}
    cycles = _cycles(graph)
    detail = []
    for comp in cycles:
        for v in comp:
            for w, line in sorted(graph[v].items()):
                if w in comp:
                    detail.append(f"{MODULES[v].relative_to(PKG.parent)}:{line} imports {w}")
    assert not cycles, "import cycles:\n" + "\n".join(detail)


def _child(first: str, seed: int) -> None:
    import importlib

    try:
        importlib.import_module(first)
        rest = sorted(m for m in MODULES if not m.endswith("__main__"))
        random.Random(seed).shuffle(rest)
        for m in rest:
            importlib.import_module(m)
    except BaseException:
        traceback.print_exc()
        os._exit(1)
    os._exit(0)


def test_every_module_imports_first_in_a_fresh_interpreter(tmp_path):
    # Runs in a child interpreter that has imported the heavy third-party modules only.
    import subprocess

    code = f"""
import os, sys
sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})
import numpy, pyarrow, torch  # noqa: F401  (shared by the forked children; luminamoon is not imported)
assert not any(m == "luminamoon" or m.startswith("luminamoon.") for m in sys.modules)
import test_imports as t
assert not any(m == "luminamoon" or m.startswith("luminamoon.") for m in sys.modules)
bad = []
for i, first in enumerate(sorted(m for m in t.MODULES if not m.endswith("__main__"))):  # __main__ runs the CLI
    pid = os.fork()
    if pid == 0:
        t._child(first, seed=i)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        bad.append(first)
print("BAD", bad)
sys.exit(1 if bad else 0)
"""
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900, env=env,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-8000:]
    assert "BAD []" in r.stdout


# Issue 18 part 4: modules that moved keep their old import path, as an alias of the same module object
# (so `from old import _private` and monkeypatch of the old path's attributes reach the new module).
MOVED = {
    "luminamoon.runner": "luminamoon.cli.runner",
    "luminamoon.config": "luminamoon.cli.config",
    "luminamoon.report": "luminamoon.cli.report",
    "luminamoon.writers": "luminamoon.cli.writers",
    "luminamoon.demo_corpus": "luminamoon.cli.demo_corpus",
    "luminamoon.data.adapters": "luminamoon.data.resumable",
}
ALIASES = set(MOVED)


def test_moved_modules_keep_their_old_path():
    import importlib

    for old, new in MOVED.items():
        assert old in MODULES and new in MODULES, (old, new)
        assert importlib.import_module(old) is importlib.import_module(new), old
        assert sys.modules[old] is sys.modules[new], old
        assert sys.modules[new].__name__ == new


def test_new_modules_never_import_old_paths():
    # an alias importing its target is fine; a real module importing an alias would hide a cycle from the
    # static graph (the alias's import is an importlib call the graph does not read)
    bad = []
    for m, p in MODULES.items():
        if m in ALIASES:
            continue
        for target, line in _imports(m, p).items():
            if target in ALIASES:
                bad.append(f"{p.relative_to(PKG.parent)}:{line} imports the old path {target}")
    assert not bad, "\n".join(bad)


def test_old_path_alias_shares_monkeypatch(monkeypatch):
    import luminamoon.cli.runner as new
    import luminamoon.runner as old

    sentinel = object()
    monkeypatch.setattr(old, "run_corpus", sentinel)
    assert new.run_corpus is sentinel


def test_both_pipelines_share_one_checkpoint_module():
    # issue 18 part 4: the checkpoint code ResumablePipeline and DistributedPipeline both need is one module
    import luminamoon.data.checkpoint as ck
    import luminamoon.data.dist_near as dn
    import luminamoon.data.dist_state as ds
    import luminamoon.data.distributed as dd
    import luminamoon.data.resumable as rs

    g = {m: _imports(m, p) for m, p in MODULES.items()}
    for user in ("luminamoon.data.resumable", "luminamoon.data.distributed"):
        assert "luminamoon.data.checkpoint" in g[user], user
    assert rs.run_differences is dd.run_differences is ck.run_differences
    assert rs.describe_setting is dd.describe_setting is ck.describe_setting
    assert dd.load_json_checked is ds.load_json_checked is dn.load_json_checked is ck.load_json_checked
    assert dd.global_sidecar_path is ds.global_sidecar_path is ck.sidecar_path
    assert dd.rank_sidecar_path is ds.rank_sidecar_path is ck.rank_sidecar_path
    assert ds.wal_path is ck.wal_path and dd.WAL_NAME_RE is ck.WAL_NAME_RE
    # no module of the data package defines them again
    import re as _re
    for m, p in MODULES.items():
        if m.startswith("luminamoon.data.") and m != "luminamoon.data.checkpoint":
            src = p.read_text()
            for fn in ("run_differences", "source_differences", "describe_setting", "load_json_checked",
                       "rank_sidecar_path", "global_sidecar_path", "dump_json"):
                assert not _re.search(rf"^def {fn}\(", src, _re.M), (m, fn)


def test_sources_split():
    # readers and writers have their own modules; the old names still import from sources / luminamoon.data
    import luminamoon.data as D
    import luminamoon.data.readers as R
    import luminamoon.data.sources as S
    import luminamoon.data.writers as W

    assert S.write_jsonl is W.write_jsonl is D.write_jsonl
    for name in ("TooLong", "_PlainReader", "_IndexedGzipReader", "_FramedReader"):
        assert getattr(S, name) is getattr(R, name)
        assert getattr(R, name).__module__ == "luminamoon.data.readers"
    assert W.write_jsonl.__module__ == "luminamoon.data.writers"
