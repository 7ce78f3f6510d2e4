"""The help screens use typer's public hooks only (issue 45 §6): no module of the package imports
a private typer module or name, or assigns to an attribute of something typer exports (the old
cli/app.py replaced ``typer.rich_utils._print_options_panel``, ``_make_command_help``,
``TyperOption.display_type_rich`` and ``TyperArgument._usage_display_name``), and pyproject pins
the typer range the screens were compared under.

The checker is a pure function of the source text; the self-tests feed it the old patches.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

from cli_runner import cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
# typer's documented surface: the package, the command / group classes for cls= (typer.core),
# typer.main.get_command ("Using Click"), typer.testing.CliRunner
PUBLIC_TYPER_MODULES = {"typer", "typer.core", "typer.main", "typer.testing"}


def _is_module(name: str) -> bool:
    import importlib.util
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def private_typer_uses(source: str, path: str = "<src>") -> list[str]:
    """``path:line: what`` for each import of a typer module outside PUBLIC_TYPER_MODULES, each
    private name (``_x``) taken from a typer module, and each assignment to an attribute of a
    name bound to typer or something imported from it."""
    tree = ast.parse(source, path)
    bound: set[str] = set()     # local names bound to typer modules or objects
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "typer" or a.name.startswith("typer."):
                    if a.name not in PUBLIC_TYPER_MODULES:
                        out.append(f"{path}:{node.lineno}: import {a.name}")
                    bound.add((a.asname or a.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and (node.module == "typer" or node.module.startswith("typer.")):
            if node.module not in PUBLIC_TYPER_MODULES:
                out.append(f"{path}:{node.lineno}: from {node.module} import")
            for a in node.names:
                if a.name.startswith("_") or (_is_module(f"{node.module}.{a.name}")
                                               and f"{node.module}.{a.name}" not in PUBLIC_TYPER_MODULES):
                    out.append(f"{path}:{node.lineno}: from {node.module} import {a.name}")
                bound.add(a.asname or a.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in bound:
                out.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute):
                    base = t.value
                    while isinstance(base, ast.Attribute):
                        base = base.value
                    if isinstance(base, ast.Name) and base.id in bound:
                        out.append(f"{path}:{node.lineno}: assigns {ast.unparse(t)}")
    return sorted(set(out))


def test_package_uses_no_private_typer_api():
    found = []
    for f in sorted((ROOT / "toolkit").rglob("*.py")):
        found += private_typer_uses(f.read_text(), str(f.relative_to(ROOT)))
    assert not found, "\n".join(found)


@pytest.mark.parametrize("src, what", [
    ("from typer import rich_utils as ru\nru._print_options_panel = f\n", "import rich_utils"),
    ("import typer.rich_utils\n", "import typer.rich_utils"),
    ("from typer.core import TyperOption\nTyperOption.display_type_rich = f\n", "assigns"),
    ("from typer.core import TyperArgument\nx = TyperArgument._usage_display_name\n", "_usage_display_name"),
    ("import typer.core\ntyper.core._split_opt('x')\n", "_split_opt"),
    ("from typer._click import Command\n", "typer._click"),
])
def test_checker_reports_the_old_patches(src, what):
    found = private_typer_uses(src)
    assert found and any(what.split()[-1] in f for f in found), (src, found)


def test_checker_accepts_the_public_hooks():
    src = ("import typer\nimport typer.main\nfrom typer.core import TyperCommand, TyperGroup\n"
           "class C(TyperCommand):\n    def format_help(self, ctx, formatter):\n        self.x = 1\n"
           "app = typer.Typer(cls=TyperGroup)\ng = typer.main.get_command(app)\n")
    assert private_typer_uses(src) == []


def test_typer_range_is_pinned_and_installed():
    """pyproject names a closed typer range (the help screens were compared under it), and the
    installed typer is inside it."""
    import tomllib
    from importlib.metadata import version

    from packaging.requirements import Requirement
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    req = next(Requirement(d) for d in deps if Requirement(d).name == "typer")
    ops = {s.operator for s in req.specifier}
    assert ">=" in ops and "<" in ops, req
    assert version("typer") in req.specifier, (version("typer"), str(req))


def test_help_cells_as_written(monkeypatch, capsys):
    """What help.py draws itself: a flag pair's default without dashes, a repeated option's
    list type, an on/off flag without a type, an argument by its metavar."""
    monkeypatch.setenv("COLUMNS", "200")
    out = cli(monkeypatch, capsys, "run", "-h")[1]
    assert "-e, --escape / --no-escape " in out and "[default: escape]" in out, out
    assert "--ignore-eos " in out and "--ignore-eos <" not in out, out
    assert "-n, --n-predict <int>" in out and "--temp <float>" in out, out
    out = cli(monkeypatch, capsys, "bench", "-h")[1]
    # bench -m defaults to the packaged model (no star since it is optional): the list type stays
    assert "-m, --model <list[str]> " in out and "-m, --model <list[str]> *" not in out, out
    out = cli(monkeypatch, capsys, "quantize", "-h")[1]
    assert "Usage: toolkit quantize [OPTIONS] IN.gguf [OUT.gguf] TYPE" in out, out
    assert "IN.gguf <str>" in out, out
