"""llama-quantize's per-architecture exceptions come from the architecture row (ArchSpec.quant_keep,
quant_min_q8_0), not from names of families in toolkit/quantize/rules.py."""
from __future__ import annotations

import dataclasses

from toolkit.arch import arch_spec, table
from toolkit.gguf_io import GGMLType
from toolkit.quantize.rules import allows_quantization


def test_glm5_next_keeps_its_list():
    assert not allows_quantization("blk.0.hc_attn_fn.weight", (64, 24), arch="glm5-next")
    assert allows_quantization("blk.0.hc_attn_fn.weight", (64, 24), arch="kimi-linear")
    assert "attn_q_b" in arch_spec("glm5-next").quant_min_q8_0


def test_a_rows_exceptions_are_read(monkeypatch):
    """A row that lists a tensor keeps it: the rules hold no family's name."""
    name, shape = "blk.0.ssm_in.weight", (64, 256)
    assert allows_quantization(name, shape, arch="mamba2")
    monkeypatch.setitem(table._BY_NAME, "mamba2", dataclasses.replace(arch_spec("mamba2"), quant_keep=("ssm_in",)))
    assert not allows_quantization(name, shape, arch="mamba2")


def test_a_rows_q8_0_floor_is_read(monkeypatch):
    from toolkit.quantize.rules import ModelInfo, Options, TypeChooser
    from toolkit.quantize.types import file_type
    ft = file_type("Q4_0")
    name = "blk.0.ssm_out.weight"

    def choose():
        return TypeChooser(ModelInfo("mamba2", 2), ft.ftype, ft.default, Options(), [name]).choose(
            name, (256, 64), GGMLType.F32).type

    assert choose() == GGMLType.Q4_0
    monkeypatch.setitem(table._BY_NAME, "mamba2", dataclasses.replace(arch_spec("mamba2"), quant_min_q8_0=("ssm_out",)))
    assert choose() == GGMLType.Q8_0


def test_a_rows_no_fallback_list_is_read(monkeypatch):
    """recurrent-gemma's RG-LRU gate blocks keep their type where llama.cpp takes a fallback; a row
    without the list takes the fallback."""
    from toolkit.quantize.rules import ModelInfo, Options, TypeChooser
    from toolkit.quantize.types import file_type
    ft = file_type("Q4_K_M")
    name, shape = "blk.0.rglru_gate_i.weight", (20, 20, 4)     # rows of 20: not a k-block

    def choose():
        return TypeChooser(ModelInfo("recurrent-gemma", 2), ft.ftype, ft.default, Options(), [name]).choose(
            name, shape, GGMLType.F32).type

    assert choose() == GGMLType.F32
    monkeypatch.setitem(table._BY_NAME, "recurrent-gemma",
                        dataclasses.replace(arch_spec("recurrent-gemma"), quant_no_fallback=()))
    assert choose() not in (GGMLType.F32, GGMLType.Q4_K)
