import os
import pathlib
import sys

import pytest
from hypothesis import settings

FIXTURES = pathlib.Path(__file__).parent / "fixtures"

# Tests live in tier folders (unit/, parity/, memory/, cli/, reliability/); the shared helpers
# (cli_runner, convert_cases, qref) stay here, imported by bare name from every folder.
if str(FIXTURES.parent) not in sys.path:
    sys.path.insert(0, str(FIXTURES.parent))

# Child processes (`python -m toolkit ...`) started from the repository root would put the
# source tree first on sys.path, and the source tree has no compiled `toolkit._native` after a
# normal (non-editable) install.  PYTHONSAFEPATH (Python >= 3.11) keeps the cwd off sys.path,
# so every child imports the installed package, as a user's shell would.
os.environ.setdefault("PYTHONSAFEPATH", "1")

# Hypothesis: HYPOTHESIS_PROFILE=long (or pytest --hypothesis-profile=long) restores the long
# property runs; the tests' own counts follow it through hypothesis_util.examples(quick, long).
settings.register_profile("long", max_examples=1000, deadline=None)
if os.environ.get("HYPOTHESIS_PROFILE"):
    settings.load_profile(os.environ["HYPOTHESIS_PROFILE"])


@pytest.fixture
def fixtures() -> pathlib.Path:
    return FIXTURES


@pytest.fixture
def at_level():
    """Set the kernel level (tk_cpu_set_level) for a test; the machine's is restored after."""
    from toolkit.binding import lib

    def set_level(level: int) -> int:
        return lib.tk_cpu_set_level(level)
    yield set_level
    lib.tk_cpu_set_level(lib.tk_cpu_detected())


@pytest.fixture(scope="session")
def hf_f32(tmp_path_factory):
    """name -> path of tests/fixtures/hf/NAME converted to an f32 GGUF (each converted once
    per test session, shared by every test file that asks)."""
    from toolkit.convert import convert
    done: dict[str, pathlib.Path] = {}

    def get(name: str) -> pathlib.Path:
        if name not in done:
            out = tmp_path_factory.mktemp("f32") / f"{name}.f32.gguf"
            convert(str(FIXTURES / "hf" / name), str(out), "f32")
            done[name] = out
        return done[name]
    return get


@pytest.fixture(scope="session")
def bamba_small_q(tmp_path_factory):
    """qtype -> path of tests/fixtures/llamacpp/bamba-small.f32.gguf quantized to QTYPE (2 threads,
    no imatrix, default options), each type quantized once per test session: test_quantize.py
    (against llama-quantize's bytes), test_quant_run.py and test_fastpath_breaker.py share them.
    The files are read-only to the tests."""
    from toolkit.quantize import quantize_file
    src = FIXTURES / "llamacpp" / "bamba-small.f32.gguf"
    d = tmp_path_factory.mktemp("bamba-small-q")
    done: dict[str, pathlib.Path] = {}

    def get(qtype: str) -> pathlib.Path:
        if qtype not in done:
            out = d / f"bamba-small.{qtype}.gguf"
            quantize_file(str(src), str(out), qtype, n_threads=2)
            done[qtype] = out
        return done[qtype]
    return get
