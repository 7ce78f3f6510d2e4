"""Rules that belong to the C library stay there (issue 45 section 7): the Python side restates
none of them.  Source checks, as test_layering.py: runtime/memory.py holds no rule over tensor
names (the repack estimate asks tk_model_repack_plan), and a recurrent piece says itself whether
its kind writes per-token snapshots (tk_rs_piece.snap), so memory_rs.c keeps no list of piece
names that every kind's names must match."""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "toolkit" / "native"


def test_memory_py_has_no_tensor_name_rule():
    tree = ast.parse((ROOT / "toolkit" / "runtime" / "memory.py").read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert "re" not in imported and "fnmatch" not in imported, imported
    names = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)]
    assert "tk_model_repack_plan" in names      # the estimate is C's


def test_every_recurrent_piece_says_whether_it_is_snapshotted():
    pieces = []
    for p in sorted((NATIVE / "layers").glob("*.c")):
        for m in re.finditer(r"\(tk_rs_piece\)\s*\{([^;]*)\};", p.read_text()):
            depth, fields = 0, 1      # top-level commas of the initializer
            for ch in m.group(1):
                depth += ch in "([{"
                depth -= ch in ")]}"
                fields += ch == "," and depth == 0
            pieces.append((p.name, m.group(1)[:30], fields))
    assert len(pieces) >= 12
    assert all(f == 3 for _, _, f in pieces), [x for x in pieces if x[2] != 3]
    assert "SNAP_PIECES" not in (NATIVE / "memory" / "memory_rs.c").read_text()
