"""No function in the package, its tools or its benchmarks is longer than MAX_LINES, except
the line-for-line ports of ggml's quantizers (kept as ggml writes them, so a diff against
ggml stays readable).  C functions are found by brace depth after comments and strings are
blanked; Python functions by ``ast``.
"""
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 120
# ggml ports: ggml-quants.c function names (quantize_row_*_impl, make_q*_quants, ...)
GGML_PORTS = re.compile(r"^(quantize_row_\w+|make_q\w*_quants|make_qkx\d_quants|make_qp_quants|quantize_iq4_nl_block"
                        r"|quantize_row_iq4_nl_impl|dequantize_row_\w+)$")


def c_functions(text: str) -> list[tuple[str, int, int]]:
    """(name, first line, lines) of every top-level function body in C source ``text``."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(\\.|[^"\\])*"', '""', text)
    text = re.sub(r"'(\\.|[^'\\])'", "' '", text)
    lines = text.split("\n")
    depth, start, found = 0, None, []
    for i, line in enumerate(lines):
        for ch in line:
            if ch == "{":
                if depth == 0:
                    j = i
                    while j > 0 and lines[j - 1].strip() and not lines[j - 1].rstrip().endswith((";", "}")) \
                            and not lines[j - 1].startswith("#"):
                        j -= 1
                    head = " ".join(x.strip() for x in lines[j:i + 1])
                    names = re.findall(r"(\w+)\s*\(", head.split("{")[0])
                    names = [n for n in names if n not in ("__attribute__", "target", "always_inline", "aligned")]
                    is_fn = bool(names) and "=" not in head.split("(")[0] and \
                        not re.match(r"\s*(typedef|(struct|enum|union)\s+\w*\s*\{)", head)
                    start = (names[0], j + 1) if is_fn else None
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0 and start:
                    found.append((start[0], start[1], i + 2 - start[1]))
                    start = None
    # braces duplicated across #if/#else branches, or a brace the blanking missed, leave the
    # depth off and every later function unseen: fail loudly instead
    assert depth == 0, f"unbalanced braces (depth {depth} at the end): the scanner cannot see the functions"
    return found


def py_functions(text: str) -> list[tuple[str, int, int]]:
    return [(n.name, n.lineno, n.end_lineno - n.lineno + 1) for n in ast.walk(ast.parse(text))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def long_functions(root: Path = ROOT) -> list[str]:
    bad = []
    for p in sorted((root / "toolkit" / "native").rglob("*.[ch]")):
        for name, line, n in c_functions(p.read_text()):
            if n > MAX_LINES and not (p.name.startswith("quants_") and GGML_PORTS.match(name)):
                bad.append(f"{p.relative_to(root)}:{line} {name}: {n} lines")
    for sub in ("toolkit", "tools", "bench"):
        for p in sorted((root / sub).rglob("*.py")):
            for name, line, n in py_functions(p.read_text()):
                if n > MAX_LINES:
                    bad.append(f"{p.relative_to(root)}:{line} {name}: {n} lines")
    return bad


def test_no_function_is_longer_than_the_limit():
    bad = long_functions()
    assert not bad, f"functions over {MAX_LINES} lines:\n" + "\n".join(bad)


def test_the_c_scanner_finds_a_long_function():
    body = "\n".join(f"    x += {i};" for i in range(MAX_LINES + 5))
    src = f"/* {{ */\nstatic int\nlong_one(int x,\n         int y) {{\n{body}\n    return x;\n}}\nint short_one(void) {{ return 0; }}\n"
    fns = {name: n for name, _, n in c_functions(src)}
    assert fns["long_one"] > MAX_LINES and fns["short_one"] == 1


@pytest.mark.parametrize("src,expect", [("def f():\n" + "    x = 1\n" * 130, 131), ("def g():\n    pass\n", 2)])
def test_the_python_scanner_counts_lines(src, expect):
    assert py_functions(src)[0][2] == expect


@pytest.mark.parametrize("head", ["struct tk_x *\nmake_x(int x)\n{", "enum tk_e pick(int x) {",
                                  "__attribute__((target(\"avx2\")))\nstatic void f(float * y,\n                   int x) {"])
def test_the_c_scanner_sees_struct_enum_and_attributed_functions(head):
    body = "\n".join(f"    x += {i};" for i in range(MAX_LINES + 5))
    src = f"static int a(int c) {{ return c == '{{'; }}\n{head}\n{body}\n    return 0;\n}}\n"
    assert max(n for _, _, n in c_functions(src)) > MAX_LINES


def test_the_c_scanner_refuses_unbalanced_braces():
    src = "static int a(int x) {\n#if A\n    if (x) {\n#else\n    if (!x) {\n#endif\n    }\n    return 0;\n}\n"
    with pytest.raises(AssertionError, match="unbalanced"):
        c_functions(src)
