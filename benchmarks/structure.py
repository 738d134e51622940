"""The library's structure as counts (issue "One shape for every study…"): modules, levels of the import graph,
import cycles, places that train a grid of runs, string literals of metric keys outside the schema, README lines.

    .venv/bin/python benchmarks/structure.py            # this checkout
    .venv/bin/python benchmarks/structure.py --rev REV  # the same counts at a git revision (read with git show)

Static (``ast``), so it runs in a second and imports nothing of the library. An import counts where it is written,
also inside a function (a deferred import is still a dependency); ``nbkit.x`` importing ``nbkit.x.y`` counts.
Deferred imports (inside a function) are counted apart, and upward imports are counted against the layer list of
the ``pyproject.toml`` of the checkout or revision counted (``[tool.importlinter]``; at a revision without one,
against ``LAYERS`` below, the same order): an import from a module into a higher layer, or between the two
independent ones (``|``).
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAYERS = [
    "__main__",
    "cli",
    "workbook",
    "studies",
    "rl | plots",
    "offline",
    "engines : formats : mismatch : forced : lm_head : gemm : vllm_gemm : number_formats : routing : "
    "sampling_filter : models : toymodels : tasks : gpu_pins : results",
    "errors : runlog : outputs : locks : logs : pool : versions : paths : dtypes : schema : stats : "
    "noninferiority : fieldcheck : contracts",
]
"""The layers top to bottom (pyproject's contract when this file was written). A module that a revision has in
another place (``workbook.primer``, ``rl.study``, ``cli.launch``, ``rl.gpu_budget`` before issue 39) is placed by
``MOVED``: where its code lives now."""
MOVED = {
    "nbkit.workbook.primer": "number_formats",
    "nbkit.rl.study": "rl",
    "nbkit.studies.cli": "cli",
    "nbkit.cli.launch": "cli",
    "nbkit.rl.gpu_budget": "rl",
}
"""Modules of earlier revisions → the top-level name whose layer they sat in then (their package's)."""


def sources(rev: str | None) -> dict[str, str]:
    """``module name → source`` of every ``nbkit`` module, in the work tree or at ``rev``."""
    if rev is None:
        files = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "nbkit").rglob("*.py"))
        return {_module(f): (ROOT / f).read_text() for f in files}
    names = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", rev, "nbkit"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split()
    return {
        _module(f): subprocess.run(
            ["git", "show", f"{rev}:{f}"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout
        for f in names
        if f.endswith(".py")
    }


def _module(path: str) -> str:
    parts = path[:-3].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(name: str, tree: ast.AST, known: set[str]) -> set[str]:
    """The ``nbkit`` modules ``name`` imports (``from nbkit import a`` counts module ``nbkit.a`` when it exists)."""
    out = set()
    package = name if _is_package(name, known) else name.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("nbkit")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            if not base.startswith("nbkit"):
                continue
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known}
    return {m for m in out if m in known and m != name}


def import_statements(tree: ast.AST, deferred_only: bool) -> int:
    """How many ``nbkit`` import statements a module writes (inside functions only, with ``deferred_only``)."""
    nodes = (
        [n for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(f)]
        if deferred_only
        else list(ast.walk(tree))
    )
    return len(
        {
            id(n)
            for n in nodes
            if isinstance(n, ast.ImportFrom)
            and (n.level or (n.module or "").startswith("nbkit"))
            or isinstance(n, ast.Import)
            and any(a.name.startswith("nbkit") for a in n.names)
        }
    )


def layer_of(layers: list[str]):
    """``module → (layer index, group)`` by its top-level name under ``nbkit`` (None for ``nbkit`` itself)."""
    place = {}
    for i, layer in enumerate(layers):
        for j, part in enumerate(layer.split("|")):
            for name in part.split(":"):
                place[name.strip()] = (i, j)

    def of(module: str):
        if module == "nbkit":
            return None
        top = MOVED.get(module, module.split(".")[1])
        return place.get(top.split(".")[0])

    return of


def upward(graph: dict[str, set[str]], of) -> int:
    """Imports into a higher layer, or between two independent modules of one layer."""
    n = 0
    for a, targets in graph.items():
        for b in targets:
            la, lb = of(a), of(b)
            if la is None or lb is None:
                continue
            if lb[0] < la[0] or (lb[0] == la[0] and lb[1] != la[1]):
                n += 1
    return n


def _is_package(name: str, known: set[str]) -> bool:
    return any(k.startswith(name + ".") for k in known)


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def levels(graph: dict[str, set[str]], comps: list[set[str]]) -> int:
    """Levels of the condensed import graph (a module imported by nothing of the library sits on the top level)."""
    of = {m: i for i, c in enumerate(comps) for m in c}
    dag = {i: {of[w] for m in c for w in graph[m]} - {i} for i, c in enumerate(comps)}
    depth: dict[int, int] = {}

    def d(i):
        if i not in depth:
            depth[i] = 1 + max((d(j) for j in dag[i]), default=0)
        return depth[i]

    return max((d(i) for i in dag), default=0)


def counts(rev: str | None = None) -> dict[str, int]:
    src = sources(rev)
    trees = {k: ast.parse(v) for k, v in src.items()}
    known = set(src)
    graph = {k: imports(k, t, known) for k, t in trees.items()}
    comps = strongly_connected(graph)
    of = layer_of(layers_at(rev))

    schema_module = next((k for k in sorted(src) if k.rsplit(".", 1)[-1] == "schema"), "nbkit.records.schema")
    schema = src.get(schema_module, "")
    keys = (
        {
            n.value
            for n in ast.walk(ast.parse(schema))
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and "/" in n.value and " " not in n.value
        }
        if schema
        else set()
    )
    literals = sum(
        1
        for k, t in trees.items()
        if k != schema_module
        for n in ast.walk(t)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in keys
    )
    if not keys:  # before the schema existed: the literal the issue counted
        literals = sum(v.count('"mismatch/token_abs_logp_diff/mean"') for v in src.values())
    grid_loops = sum(
        1
        for t in trees.values()
        for n in ast.walk(t)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        and n.name in {"run_grid", "train_grid", "run"}
        and any(isinstance(c, ast.For) for c in ast.walk(n))
        and any(
            isinstance(c, ast.Call) and getattr(c.func, "id", getattr(c.func, "attr", "")) == "train"
            for c in ast.walk(n)
        )
    )
    readme = (
        subprocess.run(["git", "show", f"{rev}:README.md"], cwd=ROOT, capture_output=True, text=True).stdout
        if rev
        else (ROOT / "README.md").read_text()
    )
    largest = max(src, key=lambda k: src[k].count("\n"))
    return {
        "modules": len(src),
        "root modules (nbkit/*.py)": 1 + sum(k.count(".") == 1 and not _is_package(k, known) for k in src),
        "lines": sum(v.count("\n") for v in src.values()),
        "import levels": levels(graph, comps),
        "import cycles": sum(len(c) > 1 for c in comps),
        "modules in a cycle": sum(len(c) for c in comps if len(c) > 1),
        "deferred nbkit import statements": sum(import_statements(t, True) for t in trees.values()),
        "upward imports (module pairs, deferred included)": upward(graph, of),
        f"largest module ({largest})": src[largest].count("\n"),
        "lines over 120 characters": sum(len(line) > 120 for v in src.values() for line in v.splitlines()),
        "functions that train a grid of runs": grid_loops,
        "metric-key literals outside the schema": literals,
        "README lines": readme.count("\n"),
    }


def layers_at(rev: str | None) -> list[str]:
    """The layers of the import-linter contract in ``pyproject.toml`` (of the work tree, or at ``rev``); ``LAYERS``
    where there is none (a revision before the contract)."""
    if rev is None:
        text = (ROOT / "pyproject.toml").read_text() if (ROOT / "pyproject.toml").is_file() else ""
    else:
        text = subprocess.run(["git", "show", f"{rev}:pyproject.toml"], cwd=ROOT, capture_output=True, text=True).stdout
    contracts = tomllib.loads(text).get("tool", {}).get("importlinter", {}).get("contracts", []) if text else []
    return next((c["layers"] for c in contracts if c.get("type") == "layers"), LAYERS)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rev", action="append", help="git revision(s) to count (default: the work tree)")
    args = ap.parse_args(argv)
    for rev in args.rev or [None]:
        print(f"{rev or 'work tree'}:")
        for k, v in counts(rev).items():
            print(f"  {k:52s} {v:>6}")


if __name__ == "__main__":
    main()
