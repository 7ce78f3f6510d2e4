"""The import layering written in ARCHITECTURE.md (section Layering) holds for every module of
the package, only toolkit.binding imports the compiled extension toolkit._native, only
binding, convert, quantize and runtime import the cffi objects ``ffi`` / ``lib`` by name, and
no module imports another module's private name (one that starts with ``_``, dunders aside).

The checker is a pure function of (source text, path, rules); the self-tests below feed it
synthetic sideways imports to prove it reports them.
"""
from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PKG = ROOT / "toolkit"
NATIVE = "_native"          # the unit of the cffi extension toolkit._native
ROOT_UNIT = "toolkit"       # toolkit/__init__.py
FFI_NAMES = {"ffi", "lib"}  # the cffi objects: imported by name only in these units
FFI_UNITS = {"binding", "convert", "quantize", "runtime"}


def parse_rules(markdown: str) -> dict[str, frozenset[str]]:
    """The ```layering block of the "## Layering" section: unit -> the units it may import."""
    sec = re.search(r"^## Layering\s*$(.*?)(?=^## |\Z)", markdown, re.M | re.S)
    assert sec, "ARCHITECTURE.md has no '## Layering' section"
    block = re.search(r"^```layering\s*$(.*?)^```", sec.group(1), re.M | re.S)
    assert block, "the Layering section has no ```layering block"
    rules: dict[str, frozenset[str]] = {}
    for line in block.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        unit, arrow, deps = line.partition("->")
        assert arrow, f"layering line without '->': {line!r}"
        unit = unit.strip()
        assert unit not in rules, f"unit {unit!r} listed twice"
        rules[unit] = frozenset(deps.split())
    return rules


def unit_of_path(relpath: str) -> str:
    """'toolkit/runtime/run.py' -> 'runtime'; 'toolkit/errors.py' -> 'errors';
    'toolkit/__init__.py' -> 'toolkit'."""
    parts = pathlib.PurePosixPath(relpath).parts
    assert parts[0] == "toolkit", relpath
    if len(parts) == 2:
        stem = parts[1][:-3] if parts[1].endswith(".py") else parts[1]
        return ROOT_UNIT if stem == "__init__" else stem
    return parts[1]


def _package_of(relpath: str) -> list[str]:
    """The dotted package a file's relative imports start from."""
    parts = list(pathlib.PurePosixPath(relpath).parts)
    return parts[:-1]   # a module's package; for __init__.py, the package itself


def _target_units(mod: str, names: list[str], known: set[str]) -> list[str]:
    """Units a ``from mod import names`` / ``import mod`` reaches; [] when outside toolkit."""
    p = mod.split(".")
    if p[0] != "toolkit":
        return []
    if len(p) > 1:
        return [p[1]]
    # `import toolkit` / `from toolkit import x`: x is a unit when it names one
    return [n if n in known else ROOT_UNIT for n in names] or [ROOT_UNIT]


def _imports(tree: ast.AST, relpath: str, known: set[str]):
    """(line, dotted module as written/resolved, target unit, names imported) for every import
    in ``tree``, at any depth (module level, functions, classes, try blocks), plus
    importlib.import_module / __import__ calls with a constant name."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                for u in _target_units(a.name, [], known):
                    yield node.lineno, a.name, u, set()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(relpath)
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names = {a.name for a in node.names}
            for u in _target_units(mod, sorted(names), known):
                yield node.lineno, mod, u, names
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in ("import_module", "__import__"):
                for u in _target_units(node.args[0].value, [], known):
                    yield node.lineno, node.args[0].value, u, set()


def check_source(source: str, relpath: str, rules: dict[str, frozenset[str]]) -> list[str]:
    """Violations of ``rules`` by the module ``source`` at ``relpath`` (``toolkit/...py``), one
    "path:line: unit -> unit (import mod)" string each; [] when every import is allowed."""
    unit = unit_of_path(relpath)
    if unit not in rules:
        return [f"{relpath}:1: unit {unit!r} is not in ARCHITECTURE.md's layering block"]
    known = set(rules) | {NATIVE}
    out = []
    for line, mod, target, names in _imports(ast.parse(source, relpath), relpath, known):
        private = sorted(n for n in names if n.startswith("_") and not n.startswith("__"))
        if private and target != NATIVE:
            out.append(f"{relpath}:{line}: imports the private name(s) {', '.join(private)} from {mod}: "
                       f"make them public there, or keep them in one module")
        if names & FFI_NAMES and unit not in FFI_UNITS:
            out.append(f"{relpath}:{line}: {unit} imports {'/'.join(sorted(names & FFI_NAMES))} from {mod}: "
                       f"only {', '.join(sorted(FFI_UNITS))} touch the C library")
        if target == NATIVE and unit != "binding":
            out.append(f"{relpath}:{line}: {unit} -> {target} (import {mod}): only toolkit/binding loads "
                       f"the C extension")
        elif target != unit and target not in rules[unit]:
            out.append(f"{relpath}:{line}: {unit} -> {target} (import {mod}) is not allowed by ARCHITECTURE.md")
    return out


# ---- the package ---------------------------------------------------------------------------

RULES = parse_rules((ROOT / "ARCHITECTURE.md").read_text())
FILES = sorted(p.relative_to(ROOT).as_posix() for p in PKG.rglob("*.py"))


def test_rules_name_only_known_units():
    units = {unit_of_path(f) for f in FILES}
    for u, deps in RULES.items():
        assert u in units, f"ARCHITECTURE.md names unit {u!r}, which has no file under toolkit/"
        assert deps <= units | {NATIVE}, f"{u} -> {sorted(deps - units - {NATIVE})}: no such unit"
    assert [u for u, deps in RULES.items() if NATIVE in deps] == ["binding"]


def test_package_follows_the_layering():
    assert len(FILES) > 40
    bad = [v for f in FILES for v in check_source((ROOT / f).read_text(), f, RULES)]
    assert not bad, "imports against ARCHITECTURE.md's layering:\n" + "\n".join(bad)


# ---- the checker can fail ------------------------------------------------------------------

@pytest.mark.parametrize("path, source, edge", [
    ("toolkit/runtime/x.py", "from toolkit.cli import app\n", "runtime -> cli"),
    ("toolkit/runtime/x.py", "import toolkit.cli.app as a\n", "runtime -> cli"),
    ("toolkit/runtime/x.py", "def f():\n    from toolkit import cli\n", "runtime -> cli"),
    ("toolkit/runtime/x.py", "def f():\n    if 1:\n        from ..quantize import driver\n", "runtime -> quantize"),
    ("toolkit/runtime/sub/x.py", "from ...convert import core\n", "runtime -> convert"),
    ("toolkit/quantize/__init__.py", "from ..runtime.model import default_threads\n", "quantize -> runtime"),
    ("toolkit/cli/x.py", "from toolkit.binding import lib\n", "cli -> binding"),
    ("toolkit/cli/x.py", "from toolkit.binding import lib\n", "cli imports lib"),
    ("toolkit/cli/x.py", "import importlib\nimportlib.import_module('toolkit.binding.cpu')\n", "cli -> binding"),
    ("toolkit/runtime/x.py", "from toolkit._native import ffi, lib\n", "runtime -> _native"),
    ("toolkit/cli/x.py", "def f():\n    from toolkit.runtime.model import lib\n", "cli imports lib"),
    ("toolkit/convert/x.py", "from toolkit import _native\n", "convert -> _native"),
    ("toolkit/gguf_io/x.py", "try:\n    import toolkit.arch\nexcept ImportError:\n    pass\n", "gguf_io -> arch"),
    ("toolkit/errors.py", "from toolkit.gguf_io import Keys\n", "errors -> gguf_io"),
    ("toolkit/newpkg/x.py", "import os\n", "unit 'newpkg'"),
    ("toolkit/serve/x.py", "from toolkit.runtime.generate import _Step, GenerationResult\n", "private name(s) _Step"),
    ("toolkit/runtime/x.py", "def f():\n    from .generate import _check_args\n", "private name(s) _check_args"),
    ("toolkit/runtime/x.py", "from toolkit.runtime.model import Model, _as_tokens\n", "private name(s) _as_tokens"),
])
def test_checker_reports_a_sideways_import(path, source, edge):
    bad = check_source(source, path, RULES)
    hits = [b for b in bad if edge in b]
    assert len(hits) == 1, bad
    assert all(b.startswith(path + ":") for b in bad), bad
    if "_native" in edge:
        assert "only toolkit/binding" in hits[0]
    if "imports lib" in edge:
        assert "touch the C library" in hits[0]


@pytest.mark.parametrize("path, source", [
    ("toolkit/runtime/x.py", "from toolkit.binding import check\nfrom . import model\nfrom .model import Model\n"),
    ("toolkit/runtime/x.py", "import os, numpy\nfrom toolkit.errors import InputError\nfrom toolkit import errors\n"),
    ("toolkit/binding/__init__.py", "from toolkit._native import ffi, lib\nfrom . import rows\n"),
    ("toolkit/cli/x.py", "from toolkit import __version__\nfrom toolkit.runtime import cpu_info\n"),
    ("toolkit/__main__.py", "from toolkit.cli import main\n"),
    ("toolkit/cli/x.py", "from toolkit import __version__\nimport os as _os\nfrom toolkit.runtime import Context as Ctx\n"),
])
def test_checker_allows_the_listed_edges(path, source):
    assert check_source(source, path, RULES) == []


def test_rules_parse_the_layering_block_only():
    md = ("# A\n\n## Other\n\n```layering\nx -> y\n```\n\n## Layering\n\ntext\n\n```layering\n"
          "a -> b c   # comment\nb ->\n```\n\n## Later\n")
    assert parse_rules(md) == {"a": frozenset({"b", "c"}), "b": frozenset()}
