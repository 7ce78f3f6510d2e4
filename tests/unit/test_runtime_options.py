"""Load and context options as parameters (toolkit.h tk_model_params, tk_context_params' *_min;
toolkit.runtime.options.RuntimeOptions): the C library reads no environment, the CLI fills the
options from its flags and the TOOLKIT_* variables, and two models of one process can differ."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.errors import InputError
from toolkit.runtime.options import RuntimeOptions

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp"


def test_from_env_reads_the_variables_and_the_flags_win():
    env = {"TOOLKIT_REPACK": "0", "TOOLKIT_BF16_GEMM": "fma", "TOOLKIT_SSD_MIN": "17", "TOOLKIT_GDN_MIN": "0",
           "TOOLKIT_KDA_MIN": "64", "TOOLKIT_LIGHTNING_MIN": "128"}
    o = RuntimeOptions.from_env(env)
    assert (o.repack, o.bf16_gemm, o.ssd_min, o.gdn_min, o.kda_min, o.lightning_min) == ("off", "fma", 17, 0, 64, 128)
    assert RuntimeOptions.from_env(env, repack="all", ssd_min=5).repack == "all"
    assert RuntimeOptions.from_env(env, repack="all", ssd_min=5).ssd_min == 5
    assert RuntimeOptions.from_env({}) == RuntimeOptions(repack="auto")            # the CLI's default
    assert RuntimeOptions.from_env({"TOOLKIT_REPACK": "1"}).repack == "all"
    assert RuntimeOptions.from_env({"TOOLKIT_REPACK": "auto"}).repack == "auto"
    assert RuntimeOptions() == RuntimeOptions(repack=False)                       # the Python default: off
    assert RuntimeOptions(repack=True).repack == "all"


@pytest.mark.parametrize("var,val", [("TOOLKIT_REPACK", "yes"), ("TOOLKIT_REPACK", "on"), ("TOOLKIT_BF16_GEMM", "bf16"),
                                     ("TOOLKIT_SSD_MIN", "-3"), ("TOOLKIT_GDN_MIN", "1e3"), ("TOOLKIT_KDA_MIN", " 4"),
                                     ("TOOLKIT_LIGHTNING_MIN", "99999999999")])
def test_from_env_refuses_a_misspelt_value_naming_it(var, val):
    with pytest.raises(InputError) as e:
        RuntimeOptions.from_env({var: val})
    assert f"{var}={val!r}" in str(e.value) and "\n" not in str(e.value)


def test_bad_keyword_values_are_input_errors():
    for kw in ({"repack": "yes"}, {"bf16_gemm": "x"}, {"ssd_min": -1}, {"gdn_min": 1.5}, {"kda_min": True}):
        with pytest.raises(InputError):
            RuntimeOptions(**kw)
    with pytest.raises(InputError):
        RuntimeOptions.from_env({}, threshold=3)


CHILD = """
import json
from toolkit.binding import lib
from toolkit.runtime import Model
m = Model(%r)
print(json.dumps({"n": m.repack_info["n_tensors"], "thr": [lib.tk_ssd_threshold(), lib.tk_gdn_threshold(),
                  lib.tk_kda_threshold(), lib.tk_lightning_threshold()], "bf16dot": lib.tk_cpu_bf16dot()}))
"""


def _child(env: dict, path: Path) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD % str(path)], capture_output=True, text=True,
                       env=dict({k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_")}, **env))
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_library_reads_no_environment(tmp_path):
    """TOOLKIT_REPACK, TOOLKIT_BF16_GEMM and the thresholds' variables change nothing in the C
    library (before: model.c, ssd.c, gdn.c, lightning.c and cpu.c read them with getenv): a
    Model without options re-lays nothing, and the process defaults stay the measured ones."""
    from toolkit.binding import lib
    from toolkit.quantize import quantize_file
    if lib.tk_cpu_detected() not in (1, 2):
        pytest.skip("repacking at load needs the avx2 or avx512 level")
    f = tmp_path / "q8.gguf"
    quantize_file(str(FIX / "qwen35-tiny.f32.gguf"), str(f), "Q8_0", n_threads=2)
    plain = _child({}, f)
    env = {"TOOLKIT_REPACK": "1", "TOOLKIT_SSD_MIN": "7", "TOOLKIT_GDN_MIN": "7", "TOOLKIT_KDA_MIN": "7",
           "TOOLKIT_LIGHTNING_MIN": "7", "TOOLKIT_BF16_GEMM": "fma" if plain["bf16dot"] else "dpbf16"}
    assert _child(env, f) == plain and plain["n"] == 0


def test_two_models_of_one_process_choose_their_own_repacking(tmp_path):
    """Per-model options (serve's --repack-draft): one model re-laid, one not, in one process;
    the re-laid one reports what it re-laid and released, and both decode."""
    import numpy as np

    from toolkit.binding import lib
    from toolkit.quantize import quantize_file
    from toolkit.runtime import Context, Model
    if lib.tk_cpu_detected() not in (1, 2):
        pytest.skip("repacking at load needs the avx2 or avx512 level")
    f = tmp_path / "q8.gguf"
    quantize_file(str(FIX / "qwen35-small.f32.gguf"), str(f), "Q8_0", n_threads=2)
    with Model(f, options=RuntimeOptions(repack="all")) as a, Model(f, options=RuntimeOptions(repack="off")) as b:
        ra, rb = a.repack_info, b.repack_info
        assert ra["n_tensors"] > 0 and ra["bytes"] > 0 and ra["released"] > 0, ra
        assert rb == {"n_tensors": 0, "bytes": 0, "ms": 0.0, "released": 0}
        toks = np.arange(1, 9, dtype=np.int32)
        with Context(a, n_ctx=32) as ca, Context(b, n_ctx=32) as cb:
            la, lb = ca.decode(toks, logits="all"), cb.decode(toks, logits="all")
        assert not np.array_equal(la, lb)                      # another float order: the re-laid kernel ran
        assert np.linalg.norm(la - lb) / np.linalg.norm(lb) < 1e-3


def test_model_params_out_of_range_are_refused():
    from toolkit.binding import ffi, lib
    from toolkit.runtime import Model
    m = Model(FIX / "mamba-tiny.f32.gguf")
    try:
        descs = ffi.new("tk_tensor_desc[]", 1)
        p = ffi.new("tk_model_params *")
        p.repack = 7
        out = ffi.new("tk_model **")
        assert lib.tk_model_load(m.path.encode(), m._c_hparams, descs, 0, p, out) == lib.TK_ERR_INVALID
        assert "repack = 7" in ffi.string(lib.tk_last_error()).decode()
    finally:
        m.close()


def test_auto_re_lays_the_types_that_win(tmp_path):
    """RuntimeOptions(repack="auto") (the CLI's default) re-lays the library's list of the types
    whose re-laid form wins (repack.c tk_repack_auto; today every type with a kernel), and each
    load matches its estimate (`info --memory`); "off" re-lays nothing."""
    from toolkit.binding import lib
    from toolkit.quantize import quantize_file
    from toolkit.runtime import Model
    from toolkit.runtime.memory import repack_estimate, repack_types
    if lib.tk_cpu_level() not in (lib.TK_CPU_AVX2, lib.TK_CPU_AVX512):
        pytest.skip("repacking at load needs the avx2 or avx512 level")
    auto = repack_types(mode="auto")
    assert auto and set(auto) <= set(repack_types(mode="all")) and repack_types(mode="off") == ()
    f = tmp_path / "q4km.gguf"
    quantize_file(str(FIX / "qwen35-small.f32.gguf"), str(f), "Q4_K_M", n_threads=2)
    for mode in ("auto", "all", "off"):
        with Model(f, options=RuntimeOptions(repack=mode)) as m:
            info, est = m.repack_info, repack_estimate(m, mode=mode)
        assert (info["n_tensors"], info["bytes"]) == (est["n_tensors"], est["bytes"]), mode
        assert (info["n_tensors"] > 0) == (mode != "off"), (mode, info)
