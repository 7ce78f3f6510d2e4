"""Longer fuzzing of the GGUF reader, `toolkit info` and Model loading than the test suite runs.

Two engines, neither a dependency of the package or of its [test] extra:

    # hypothesis (installed with .[test]): the suite's structure-aware mutations, random seed,
    # as many examples as asked for; prints the outcome counts as JSON
    python tools/fuzz_gguf.py --examples 20000 [--target reader|run] [--seed N]

    # atheris (pip install atheris; coverage-guided, libFuzzer options after the script's):
    python tools/fuzz_gguf.py --atheris -- -max_total_time=600 corpus_dir/

Any exception other than toolkit.errors.ToolkitError (or a signal) is a finding; with
hypothesis the failing input is shrunk and printed with a @reproduce_failure blob.  Run the
`run` target inside the ASan/UBSan build (see .ci/run) to catch memory errors in C.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "reliability"))

import fuzz_util as T  # noqa: E402  (the mutation codec lives with the suite)


def _target(name: str, path: str) -> str:
    """Run one input; returns the outcome name.  Raises on a finding."""
    from toolkit.errors import ToolkitError
    try:
        if name == "reader":
            T.read_and_describe(path)
        else:
            from toolkit.runtime import Context, Model
            with Model(path, n_threads=1) as m:
                ctx = Context(m, n_ctx=32, n_ubatch=8)
                ctx.decode([1, 2, 3])
                ctx.close()
    except ToolkitError as e:
        return type(e).__name__
    return "ok"


def run_hypothesis(n: int, target: str, seed: int | None) -> dict[str, int]:
    from hypothesis import HealthCheck, given, seed as hseed, settings

    counts: dict[str, int] = {}
    tmp = tempfile.mkdtemp(prefix="fuzz_gguf.")
    path = os.path.join(tmp, "m.gguf")

    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(T.mutated())
    def prop(case):
        with open(path, "wb") as fh:
            fh.write(case[1])
        with T.hang_guard(60):
            out = _target(target, path)
        counts[out] = counts.get(out, 0) + 1

    if seed is not None:
        prop = hseed(seed)(prop)
    prop()
    return counts


def run_atheris(argv: list[str], target: str) -> None:
    import atheris  # optional: pip install atheris

    tmp = tempfile.mkdtemp(prefix="fuzz_gguf.")
    path = os.path.join(tmp, "m.gguf")

    def one(data: bytes) -> None:
        with open(path, "wb") as fh:
            fh.write(data)
        _target(target, path)

    corpus = [str(p) for p in T.SEEDS.values()]
    atheris.Setup([sys.argv[0], *argv, *corpus], one)
    atheris.Fuzz()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=5000)
    ap.add_argument("--target", choices=("reader", "run"), default="reader")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--atheris", action="store_true", help="coverage-guided fuzzing with atheris")
    ap.add_argument("rest", nargs="*", help="libFuzzer arguments (after --)")
    a = ap.parse_args()
    if a.atheris:
        run_atheris(a.rest, a.target)
        return
    counts = run_hypothesis(a.examples, a.target, a.seed)
    print(json.dumps({"target": a.target, "examples": sum(counts.values()), "outcomes": counts}, indent=1))


if __name__ == "__main__":
    main()
