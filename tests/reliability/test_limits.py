"""Resource limits: requests larger than the machine are refused up front, naming the size.

* a GGUF whose tensors claim more bytes than the machine has RAM (a sparse file, so the
  claim is consistent with the file size and only the memory check can refuse it);
* a --ctx-size whose KV cache does not fit (checked against RAM in tk_context_new before any
  allocation), or that does not even fit the C int32;
* machines without features: the runtime's environment knobs (TOOLKIT_THREADS) are validated.

Each ends in ResourceError (exit 4) or InputError (exit 2) with one line on stderr.
"""
from __future__ import annotations

import os
import pathlib
import re
import resource

import pytest

from fuzz_util import TI, cli, seed

pytestmark = pytest.mark.native

FIX = pathlib.Path(__file__).parent.parent / "fixtures" / "llamacpp"
RAM = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _sparse_model(tmp_path, claim_bytes: int) -> pathlib.Path:
    """mamba-tiny plus one unused F32 tensor of ``claim_bytes`` bytes whose data is a hole."""
    g = seed("mamba")
    n_el = claim_bytes // 4
    ne0 = 2**20
    g.tis.append(TI(b"junk.weight", [ne0, n_el // ne0], 0, len(g.data) + (-len(g.data) % 32)))
    g.data += b"\0" * (-len(g.data) % 32)
    p = tmp_path / "huge.gguf"
    p.write_bytes(g.encode())
    with open(p, "r+b") as fh:
        fh.truncate(p.stat().st_size + (ne0 * (n_el // ne0)) * 4)   # sparse: no disk used
    return p


def test_tensors_claiming_more_than_ram_are_refused_before_mapping(tmp_path):
    claim = 1 << 41   # 2 TiB, more than any test machine
    assert claim > RAM
    try:
        p = _sparse_model(tmp_path, claim)
    except OSError as e:   # a filesystem without sparse files this large
        pytest.skip(f"cannot make a 2 TiB sparse file here: {e}")
    assert p.stat().st_blocks * 512 < 64 * 2**20, "the test file must be sparse"
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code, _o, err = cli(["run", "-m", str(p), "--tokens", "1,2", "-n", "1", "-c", "64"])
    assert code == 4, err
    assert re.search(r"tensors need 204[78]\.\d+ GiB, more than this machine's", err), err
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) < 256 * 1024
    # `info` only reads the header: a big model is described, not refused
    code, out, err = cli(["info", str(p), "--json", "--no-tensors"])
    assert code == 0, err


def test_tensors_claiming_bytes_beyond_the_file_name_the_claim(tmp_path):
    g = seed("mamba")
    g.tis[0].dims = [64, 2**40]        # token_embd claims 256 TiB in a 400 KB file
    p = tmp_path / "claims.gguf"
    p.write_bytes(g.encode())
    code, _o, err = cli(["run", "-m", str(p), "--tokens", "1", "-n", "1"])
    assert code == 2 and "token_embd.weight" in err and "claims 281474976710656 bytes" in err, err


@pytest.mark.parametrize("ctx,code,pattern", [
    (2**31 - 1, 4, r"context needs \d+\.\d+ GiB \(KV cache 1024\.00 GiB for n_ctx = 2147483647"),
    (2**40, 4, r"n_ctx = 1099511627776: the KV cache alone would need \d+\.\d GiB"),
])
def test_ctx_size_too_large_is_a_resource_error_naming_the_size(ctx, code, pattern):
    # bamba-tiny: 2 attention layers x 2 (K, V) x 32 floats per cell -> 512 B per cell
    m = str(FIX / "bamba-tiny.f32.gguf")
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rc, _o, err = cli(["run", "-m", m, "--tokens", "1,2", "-n", "1", "-c", str(ctx)])
    assert rc == code and re.search(pattern, err), err
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) < 256 * 1024, "allocated before refusing"


def test_context_api_refuses_before_allocating():
    from toolkit.errors import ResourceError
    from toolkit.runtime import Context, Model
    with Model(FIX / "bamba-tiny.f32.gguf") as m:
        with pytest.raises(ResourceError, match="more than this machine's"):
            Context(m, n_ctx=2**31 - 1)
        with pytest.raises(ResourceError, match="KV cache alone"):
            Context(m, n_ctx=2**33)
        Context(m, n_ctx=64).close()   # a sane size still works afterwards


# -c 0 (the model's context length) and -t 0 (all cores) are valid, as in llama.cpp
@pytest.mark.parametrize("flag,value", [("-c", "-1"), ("-c", "-5"), ("--ubatch", "0"), ("-t", "-1"), ("-n", "-7")])
def test_bad_sizes_are_input_errors(flag, value):
    rc, _o, err = cli(["run", "-m", str(FIX / "mamba-tiny.f32.gguf"), "--tokens", "1", flag, value])
    assert rc == 2 and err.startswith("error:"), err


@pytest.mark.parametrize("env", ["-1", "257", "two", "1e3"])
def test_bad_thread_environment_is_an_input_error(monkeypatch, env):
    monkeypatch.setenv("TOOLKIT_THREADS", env)
    rc, _o, err = cli(["run", "-m", str(FIX / "mamba-tiny.f32.gguf"), "--tokens", "1", "-n", "1"])
    assert rc == 2 and "TOOLKIT_THREADS" in err, err


def test_thread_environment_zero_means_all_cores_as_t_0(monkeypatch):
    # -t 0 means all cores; TOOLKIT_THREADS=0 must mean the same (it was refused)
    import os
    from toolkit.binding.cpu import default_threads
    monkeypatch.setenv("TOOLKIT_THREADS", "0")
    assert default_threads() == len(os.sched_getaffinity(0))
    rc, _o, err = cli(["run", "-m", str(FIX / "mamba-tiny.f32.gguf"), "--tokens", "1", "-n", "1", "-t", "0"])
    assert rc == 0, err


def test_one_thread_machine_gives_the_same_logits(monkeypatch):
    # a machine with one usable core (TOOLKIT_THREADS=1) must give the same result as two
    import numpy as np
    from toolkit.runtime import Context, Model
    out = []
    for n in ("1", "2"):
        monkeypatch.setenv("TOOLKIT_THREADS", n)
        with Model(FIX / "bamba-tiny.f32.gguf") as m:
            ctx = Context(m, n_ctx=64)
            out.append(ctx.decode([1, 2, 3], logits="all"))
            ctx.close()
    np.testing.assert_array_equal(out[0], out[1])


# ---- machines without features -----------------------------------------------------------------

def test_wide_instructions_only_in_dispatched_kernels():
    """The C library is built without -march, so a machine without AVX can load it: AVX/AVX-512
    instructions may appear only in the kernels compiled with a target attribute, which run
    only when cpu.c found the level (cpuid + xgetbv); their names carry the level (or the
    sub-feature: avxvnni)."""
    import platform
    import shutil
    import subprocess
    import toolkit._native as native
    if platform.machine() not in ("x86_64", "AMD64") or not shutil.which("objdump"):
        pytest.skip("x86-64 with objdump only")
    asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", native.__file__], capture_output=True, text=True,
                         check=True).stdout
    fn, bad = "?", {}
    for ln in asm.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", ln)
        if m:
            fn = m.group(1)
        elif ("%ymm" in ln or "%zmm" in ln) and not re.search(r"avx2|avx512|avxvnni", fn):
            bad[fn] = bad.get(fn, 0) + 1
    assert not bad, f"AVX instructions outside the dispatched kernels: {bad}"
    from toolkit.native._build import _flags
    cflags, _ = _flags()
    assert not [f for f in cflags if f.startswith(("-march", "-mavx", "-mfma", "-mtune=native"))], cflags


RUN = ["run", "-m", str(FIX / "bamba-tiny.f32.gguf"), "--tokens", "1,2,3,4", "-n", "4", "--temp", "0", "-c", "64",
       "-t", "1", "--json"]


def _child_run(tmp_path, env: dict, tag: str):
    """`toolkit run` in a fresh process (TOOLKIT_CPU is read once per process)."""
    import json
    import subprocess
    import sys
    import numpy as np
    logits = tmp_path / f"{tag}.npy"
    r = subprocess.run([sys.executable, "-m", "toolkit", *RUN, "--logits-out", str(logits)], capture_output=True,
                       text=True, timeout=120, cwd=tmp_path, env={**os.environ, **env})
    return r, (json.loads(r.stdout)["tokens"] if r.returncode == 0 else None), \
        (np.load(logits) if r.returncode == 0 else None)


@pytest.fixture(scope="module")
def scalar_run(tmp_path_factory):
    r0, tok0, lg0 = _child_run(tmp_path_factory.mktemp("scalar"), {"TOOLKIT_CPU": "scalar"}, "scalar")
    assert r0.returncode == 0, r0.stderr
    return tok0, lg0


@pytest.mark.slow
@pytest.mark.parametrize("cpu", ["avx512", "", "avx2-novnni"])
def test_toolkit_cpu_values_never_crash_and_agree_with_scalar(tmp_path, scalar_run, cpu):
    # a machine without AVX is what TOOLKIT_CPU=scalar makes of this one; a level the machine
    # lacks is capped to what it has (never SIGILL)
    import numpy as np
    tok0, lg0 = scalar_run
    r, tok, lg = _child_run(tmp_path, {"TOOLKIT_CPU": cpu}, "other")
    assert r.returncode == 0, (cpu, r.returncode, r.stderr[-1000:])
    assert tok == tok0
    np.testing.assert_allclose(lg, lg0, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("cpu", ["avx1024", "AVX2; rm -rf /", "\u00e9", "avx"])
def test_mistyped_toolkit_cpu_is_an_error(tmp_path, cpu):
    # the C library would take an unknown level as scalar, a silent 3-5x slowdown (issue 18)
    r, tok, lg = _child_run(tmp_path, {"TOOLKIT_CPU": cpu}, "other")
    assert r.returncode == 2 and "TOOLKIT_CPU=" in r.stderr and "Traceback" not in r.stderr, r.stderr[-500:]
