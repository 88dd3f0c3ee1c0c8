"""The counts issue 52 sets targets for, on a checkout (default: this one) or a git revision:

    python scripts/core_counts.py                 # the working tree
    python scripts/core_counts.py --rev a05b0ee   # a commit (read with `git show`, nothing checked out)

Prints JSON: lines and files of nni_lvbert/, the options machinery, study/; modules over 350 lines; functions over 60
lines; imports inside functions (all, and of the package's own modules); module-level import cycles (grimp, on the
working tree only).
"""
from __future__ import annotations

import argparse
import ast
import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPTIONS = ("options.py", "cliargs.py", "argcheck.py", "train_options.py", "presets.py", "resume.py", "ranks.py")


def sources(rev: str | None) -> dict[str, str]:
    if rev is None:
        return {str(p.relative_to(ROOT)): p.read_text() for p in (ROOT / "nni_lvbert").rglob("*.py")}
    names = subprocess.check_output(["git", "ls-tree", "-r", "--name-only", rev, "nni_lvbert"], cwd=ROOT, text=True)
    return {n: subprocess.check_output(["git", "show", f"{rev}:{n}"], cwd=ROOT, text=True)
            for n in names.split() if n.endswith(".py")}


def inner_imports(tree: ast.AST) -> tuple[int, int]:
    total = own = 0
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    total += 1
                    own += isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith(
                        "nni_lvbert"))
    return total, own


def counts(files: dict[str, str]) -> dict:
    lines = {n: s.count("\n") for n, s in files.items()}
    long_functions, inner, inner_own = [], 0, 0
    for name, src in files.items():
        tree = ast.parse(src)
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.end_lineno - fn.lineno + 1 > 60:
                long_functions.append(f"{name}:{fn.lineno} {fn.name} ({fn.end_lineno - fn.lineno + 1})")
        a, b = inner_imports(tree)
        inner, inner_own = inner + a, inner_own + b
    return {"package_lines": sum(lines.values()), "package_files": len(lines),
            "options_machinery_lines": sum(v for n, v in lines.items() if n.split("/")[-1] in OPTIONS
                                           and n.count("/") == 1),
            "study_lines": sum(v for n, v in lines.items() if n.startswith("nni_lvbert/study/")),
            "modules_over_350": sorted(f"{n} ({v})" for n, v in lines.items() if v > 350),
            "functions_over_60": sorted(long_functions), "imports_in_functions": inner,
            "own_imports_in_functions": inner_own}


def cycles() -> list[list[str]]:
    import grimp
    import networkx as nx

    graph = grimp.build_graph("nni_lvbert")
    g = nx.DiGraph((m, i) for m in graph.modules for i in graph.find_modules_directly_imported_by(m))
    return [c for c in nx.simple_cycles(g) if len(c) <= 6]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", help="a git revision instead of the working tree")
    args = parser.parse_args()
    out = counts(sources(args.rev))
    if args.rev is None:
        out["module_cycles"] = cycles()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
