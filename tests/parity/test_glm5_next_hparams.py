"""The glm5-next keys this branch reads (toolkit/arch/readers.py read_glm5_next_extras): mHC,
the DSA k-pool indexer, the SwiGLU clamps, from llama.cpp's glm5next-tiny file; bad values give
one InputError naming the key and the file."""
from __future__ import annotations

import pathlib

import gguf
import pytest

from gguf_edit_util import rewrite
from toolkit.arch.hparams import HParams
from toolkit.arch.readers import KeyReader, read_glm5_next_extras
from toolkit.errors import InputError
from toolkit.gguf_io import GGUFFile

SRC = pathlib.Path(__file__).parent.parent / "fixtures" / "llamacpp" / "glm5next-tiny.f32.gguf"
U32, F32, B, ARR = (gguf.GGUFValueType.UINT32, gguf.GGUFValueType.FLOAT32, gguf.GGUFValueType.BOOL,
                    gguf.GGUFValueType.ARRAY)


def _read(path) -> HParams:
    hp = HParams(arch="glm5-next", n_vocab=512, n_embd=64, n_layer=5, n_ctx_train=0, rms_eps=1e-5, layer_kinds=[],
                 ffn_kinds=[])
    read_glm5_next_extras(KeyReader(GGUFFile(str(path)), "glm5-next"), hp, None)
    return hp


def test_llama_cpp_file():
    hp = _read(SRC)
    assert (hp.hc_count, hp.hc_sinkhorn_iters, hp.idx_n_head, hp.idx_head_dim, hp.idx_top_k, hp.dsa_kpool,
            hp.dsa_select_tail, hp.dsa_full) == (4, 20, 8, 16, 32, 8, 1, [1, 1, 1, 0, 1])
    assert hp.hc_eps == pytest.approx(1e-6) and hp.dsa_k_norm_eps == pytest.approx(1e-6)
    assert hp.swiglu_clamp_exp == 1.0 and hp.swiglu_clamp_shexp == 1.0


def test_other_hc_counts_are_read(tmp_path):
    p = tmp_path / "g.gguf"
    rewrite(SRC, p, {"glm5-next.hyper_connection.count": (3, U32, None)})
    assert _read(p).hc_count == 3


@pytest.mark.parametrize("kv, needle", [
    ({"glm5-next.attention.indexer.kpool": (0, U32, None)}, "'glm5-next.attention.indexer.kpool' = 0 must be in [1, 1048576]"),
    ({"glm5-next.hyper_connection.count": (0, U32, None)}, "'glm5-next.hyper_connection.count' = 0 must be in [1, 64]"),
    ({"glm5-next.attention.indexer.top_k": (30, U32, None)}, "must be a positive multiple of"),
    ({"glm5-next.hyper_connection.sinkhorn_iterations": (0, U32, None)}, "sinkhorn_iterations' = 0"),
    ({"glm5-next.attention.indexer.types": ([True, False], ARR, B)}, "has 2 entries, expected 5"),
    ({"glm5-next.swiglu_clamp_exp": ([1.0, 2.0, 1.0, 1.0, 1.0], ARR, F32)}, "a clamp per layer is not supported"),
])
def test_bad_keys(tmp_path, kv, needle):
    p = tmp_path / "g.gguf"
    rewrite(SRC, p, kv)
    with pytest.raises(InputError) as e:
        _read(p)
    assert needle in str(e.value) and str(p) in str(e.value)


@pytest.mark.parametrize("kv, needle", [
    ({"glm5-next.attention.indexer.key_length": (8, U32, None)}, "blk.2.indexer.attn_q_b.weight"),
    ({"glm5-next.attention.indexer.kpool": (0, U32, None)}, "kpool' = 0"),
    ({"glm5-next.hyper_connection.count": (0, U32, None)}, "hyper_connection.count' = 0"),
    ({"glm5-next.hyper_connection.count": (3, U32, None)}, "blk.0.hc_attn_fn.weight"),
    # the stored value, not its negation; 0 is not run as the softplus gate (that is kda.safe_gate false)
    ({"glm5-next.kda.gate_lower_bound": (1.0, F32, None)}, "kda.gate_lower_bound' = 1.0 must be a negative"),
    ({"glm5-next.kda.gate_lower_bound": (0.0, F32, None)}, "kda.gate_lower_bound' = 0.0 must be a negative"),
    ({"glm5-next.attention.q_lora_rank": (0, U32, None)}, "attention.q_lora_rank' = 0"),   # names the file and key
    ({"glm5-next.attention.indexer.types": ([True, True, False, False, True], ARR, B)}, "marks layer 2, the first attention"),
    ({"glm5-next.attention.indexer.types": ([False] * 5, ARR, B)}, "attention.indexer.types' marks layer 2"),
    ({"glm5-next.attention.layer_norm_epsilon": (-1.0, F32, None)}, "attention.layer_norm_epsilon' = -1.0 is not a valid"),
])
def test_run_refuses_with_one_line(tmp_path, monkeypatch, capsys, kv, needle):
    """toolkit run on a file whose keys disagree with its tensors (or are out of range): exit 2,
    one line naming the key or tensor"""
    from gguf_edit_util import run_error
    p = tmp_path / "g.gguf"
    rewrite(SRC, p, kv)
    err = run_error(monkeypatch, capsys, p)
    assert needle in err and str(p) in err, err
