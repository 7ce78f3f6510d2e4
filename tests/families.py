"""The test fixtures as a table: one row per checkpoint under tests/fixtures/hf/ (and the llama.cpp
artefacts of the same name under tests/fixtures/llamacpp/).

A row says what the fixture is and which table-driven checks run on it:

- ``family``: the converter class the registry picks for its ``architectures[0]``
  (toolkit/convert/families), ``arch``: the GGUF ``general.architecture`` it converts to;
- ``layers`` / ``ffn``: the LayerKind / FFNKind names of its blocks (toolkit/arch/kinds.py);
- ``llamacpp``: the suffixes of tests/fixtures/llamacpp/NAME.* (llama.cpp 0c1e570's f32 file,
  its logits, or a summary of its file when the file is too large to keep);
- ``suppress``: the token ids the HF reference's greedy continuation never chose (its
  ``min_new_tokens``: end-of-text masked), ``bound``: the f32 relative L2 bound against HF;
- ``keep_f32``: glob patterns (fnmatch) of the tensor names (besides every 1-D tensor) that
  `toolkit quantize` keeps F32 at Q8_0 / Q4_K_M (llama.cpp's name rules for the architecture);
- ``quant_refs``: the llama-quantize types with a byte reference in tests/fixtures/quant/;
- ``slow``: its table-driven parity check is marked slow (`-m "not slow"`, CI, skips it: the
  gated-delta-net fixtures, whose llama.cpp files are checked against HF in the fast tier);
- ``caps``: properties of the model (checked against the converted file by
  tests/unit/test_families_table.py) and the checks run on it:

  ========== ====================================================================================
  swa        sliding-window attention layers (``n_swa`` > 0)
  mla        multi-head latent attention layers (LayerKind.MLA)
  moe        routed-expert FFN layers (FFNKind.MOE)
  mtp        a NextN / MTP block (``nextn_predict_layers`` > 0)
  parity     f32 conversion against HF's logits, one-shot and in ubatches (parity/test_families.py)
  two_seq    two sequences in one batch give each its own run's logits, bit for bit (idem)
  quant      Q8_0 / Q4_K_M: ``keep_f32`` stays F32, error ordered by bits (idem)
  rollback   speculative partial rollback, bit-identical (memory/test_spec_rollback.py)
  spec       speculative generation equals plain generation (unit/test_speculative.py)
  shift      context shift, long decode and saved states (memory/test_context_shift.py)
  cli_shift  `toolkit run --context-shift` (cli/test_cli_context_shift.py)
  estimate   the C memory estimate equals what a context allocates (memory/test_memory_estimate.py);
             ``estimate_lc``: the same on llama.cpp's file rather than our conversion
  sessions   state saved to a file and loaded again (memory/test_state_files.py)
  cli_session  `toolkit run --session`: an extended prompt reuses the saved state (memory/test_session_cli.py)
  loader     the loader asks for exactly the row's expected tensors (unit/test_arch_table.py);
             ``loader_lc``: the same on llama.cpp's file rather than our conversion
  chunked    the chunked form's workspace is planned only when its threshold can be reached
             (memory/test_chunked_workspace.py: the row's GDN / KDA / LIGHTNING layers)
  attn       the blocked attention kernel against its reference at every kernel level, and
  attn_deep  bit-identical across threads and ubatches at depth (split-K), and
  attn_ub    across ubatches and cell placement (unit/test_attn_blocked.py)
  ========== ====================================================================================

- ``fuzz``: the ``checkpoint_every`` values memory/test_memory_fuzz.py runs random memory
  operations with on the row's conversion (``fuzz_lc``: on llama.cpp's f32 file);

A family's first row is its main fixture (main_fixture: the one the config refusal cases are made
from, tests/cli/test_config_refusals.py).  A fixture carries a check's cap when the check runs on it: each family's first fixture, and a
variant where it exercises a path the first does not (another kind mix, shape or option).  A new
family is one row here and its fixture directory.
"""
from __future__ import annotations

import pathlib
from dataclasses import dataclass

FIX = pathlib.Path(__file__).parent / "fixtures"
EOT = (0,)
FULL_SET = frozenset({"F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_S", "Q4_K_M",
                      "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS"})
WITH_S_L = FULL_SET | {"Q3_K_S", "Q3_K_L", "Q5_K_S"}
LFM2_SET = frozenset({"Q8_0", "Q4_0", "Q2_K", "Q4_K_M", "Q5_K_M", "IQ4_XS"})
FALCONH1_SET = LFM2_SET | {"F16", "BF16", "Q3_K_M", "Q6_K"}


@dataclass(frozen=True)
class Fixture:
    name: str
    family: str
    arch: str
    layers: frozenset[str]
    ffn: frozenset[str]
    caps: frozenset[str]
    llamacpp: tuple[str, ...] = ()
    suppress: tuple[int, ...] = ()
    bound: float = 1e-5
    keep_f32: tuple[str, ...] = ()
    quant_refs: frozenset[str] = frozenset()
    slow: bool = False
    fuzz: tuple[int, ...] = ()
    fuzz_lc: tuple[int, ...] = ()

    @property
    def hf(self) -> pathlib.Path:
        """tests/fixtures/hf/NAME: the HF checkpoint directory."""
        return FIX / "hf" / self.name

    @property
    def llamacpp_f32(self) -> pathlib.Path:
        """tests/fixtures/llamacpp/NAME.f32.gguf (present when ``"f32.gguf" in llamacpp``)."""
        return FIX / "llamacpp" / f"{self.name}.f32.gguf"

    def f32(self, hf_f32) -> pathlib.Path:
        """llama.cpp's f32 file where the row has one, else our f32 conversion (``hf_f32``:
        conftest's name -> converted path)."""
        return self.llamacpp_f32 if "f32.gguf" in self.llamacpp else hf_f32(self.name)


def _row(name, family, arch, layers, ffn, caps="", **kw) -> Fixture:
    return Fixture(name, family, arch, frozenset(layers.split()), frozenset(ffn.split()), frozenset(caps.split()), **kw)


LC_GGUF = ("f32.gguf",)
LC_LOGITS = ("f32.gguf", "logits.npy")
LC_SUMMARY = ("f32.summary.json",)
MAMBA_F32 = ("*.ssm_conv1d.weight", "*.ssm_a", "*.ssm_d")

FIXTURES: tuple[Fixture, ...] = (
    _row("mamba-tiny", "MambaFamily", "mamba", "MAMBA1", "NONE",
         "parity rollback spec estimate_lc loader", llamacpp=LC_GGUF),
    _row("mamba-bias-tiny", "MambaFamily", "mamba", "MAMBA1", "NONE", "parity"),
    _row("mamba-gelu-tiny", "MambaFamily", "mamba", "MAMBA1", "NONE", "parity", suppress=EOT),
    _row("falconmamba-tiny", "FalconMambaFamily", "mamba", "MAMBA1", "NONE",
         "parity rollback estimate cli_session", suppress=EOT, fuzz=(3,)),
    _row("falconmamba-odd-tiny", "FalconMambaFamily", "mamba", "MAMBA1", "NONE", "parity loader", suppress=EOT),
    _row("falconmamba-bias-tiny", "FalconMambaFamily", "mamba", "MAMBA1", "NONE", "parity"),
    _row("mamba2-tiny", "Mamba2Family", "mamba2", "MAMBA2", "NONE",
         "parity rollback spec cli_shift estimate_lc sessions cli_session loader", llamacpp=LC_GGUF),
    _row("mamba2-bias-tiny", "Mamba2Family", "mamba2", "MAMBA2", "NONE", "parity", suppress=(2,)),
    _row("mamba2-dtclamp-tiny", "Mamba2Family", "mamba2", "MAMBA2", "NONE", "parity"),
    _row("mamba2-gelu-tiny", "Mamba2Family", "mamba2", "MAMBA2", "NONE", "parity", suppress=(2,)),
    _row("bamba-tiny", "GraniteHybridFamily", "granitehybrid", "ATTENTION MAMBA2", "DENSE",
         "parity rollback spec shift cli_shift estimate_lc sessions cli_session loader attn", llamacpp=LC_LOGITS, fuzz=(4,)),
    _row("bamba-bias-tiny", "GraniteHybridFamily", "granitehybrid", "ATTENTION MAMBA2", "DENSE", "parity", suppress=(2,)),
    _row("bamba-yarn-tiny", "GraniteHybridFamily", "granitehybrid", "ATTENTION MAMBA2", "DENSE", "parity"),
    _row("bamba-dtclamp-tiny", "GraniteHybridFamily", "granitehybrid", "ATTENTION MAMBA2", "DENSE", "parity"),
    _row("bamba-gelu-tiny", "GraniteHybridFamily", "granitehybrid", "ATTENTION MAMBA2", "DENSE", "parity", suppress=(2,)),
    _row("bamba-small", "GraniteHybridFamily", "granitehybrid", "ATTENTION MAMBA2", "DENSE",
         "parity", llamacpp=LC_GGUF, quant_refs=FULL_SET),
    _row("granitehybrid-moe-tiny", "GraniteHybridFamily", "granitehybrid", "ATTENTION MAMBA2", "MOE",
         "moe parity spec shift cli_shift estimate sessions loader", llamacpp=LC_GGUF, fuzz=(3,)),
    _row("granitehybrid-bias-tiny", "GraniteHybridFamily", "granitehybrid", "ATTENTION MAMBA2", "MOE", "moe parity", suppress=(2,)),
    _row("granitehybrid-linear-tiny", "GraniteHybridFamily", "granitehybrid", "ATTENTION MAMBA2", "MOE", "moe parity"),
    _row("granitehybrid-gelu-tiny", "GraniteHybridFamily", "granitehybrid", "ATTENTION MAMBA2", "MOE", "moe parity two_seq",
         suppress=(2,)),
    _row("jamba-tiny", "JambaFamily", "jamba", "ATTENTION MAMBA1", "DENSE MOE",
         "moe parity rollback spec shift cli_shift estimate sessions cli_session loader", fuzz=(0,)),
    _row("jamba-bias-tiny", "JambaFamily", "jamba", "ATTENTION MAMBA1", "DENSE MOE", "moe parity", suppress=(2,)),
    _row("qwen4exp-tiny", "Qwen4ExpFamily", "qwen4exp", "GDN QSA", "MOE",
         "moe parity two_seq spec estimate loader attn", llamacpp=LC_SUMMARY),
    _row("qwen4exp-hc3-tiny", "Qwen4ExpFamily", "qwen4exp", "GDN QSA", "MOE", "moe parity estimate"),
    _row("qwen4exp-attnbias-tiny", "Qwen4ExpFamily", "qwen4exp", "GDN QSA", "MOE", "moe parity two_seq"),
    _row("qwen4exp-yarn-tiny", "Qwen4ExpFamily", "qwen4exp", "GDN QSA", "MOE", "moe parity"),
    _row("qwen4exp-gelu-tiny", "Qwen4ExpFamily", "qwen4exp", "GDN QSA", "MOE", "moe parity", suppress=(2, 5)),
    _row("qwen4exp-ple2-tiny", "Qwen4ExpFamily", "qwen4exp", "GDN QSA", "MOE",
         "moe parity two_seq rollback estimate sessions loader"),
    _row("qwen3next-tiny", "Qwen3NextFamily", "qwen3next", "ATTENTION GDN", "MOE",
         "moe parity rollback shift cli_shift estimate_lc loader_lc attn_deep", llamacpp=LC_LOGITS, quant_refs=WITH_S_L, slow=True),
    _row("qwen3next-yarn-tiny", "Qwen3NextFamily", "qwen3next", "ATTENTION GDN", "MOE", "moe parity", suppress=EOT),
    _row("qwen3next-dkdv-tiny", "Qwen3NextFamily", "qwen3next", "ATTENTION GDN", "MOE", "moe parity",
         llamacpp=LC_SUMMARY, slow=True),
    _row("qwen3next-mtp-tiny", "Qwen3NextFamily", "qwen3next", "ATTENTION GDN", "MOE", "moe mtp"),
    _row("qwen35-tiny", "Qwen35Family", "qwen35", "ATTENTION GDN", "DENSE",
         "parity rollback spec shift cli_shift estimate_lc loader_lc chunked attn attn_deep attn_ub", llamacpp=LC_LOGITS, quant_refs=WITH_S_L, slow=True),
    _row("qwen35-linear-tiny", "Qwen35Family", "qwen35", "ATTENTION GDN", "DENSE", "parity", suppress=EOT),
    _row("qwen35-gelu-tiny", "Qwen35Family", "qwen35", "ATTENTION GDN", "DENSE", "parity two_seq", suppress=EOT),
    _row("qwen35-attnbias-tiny", "Qwen35Family", "qwen35", "ATTENTION GDN", "DENSE", "parity two_seq quant sessions",
         suppress=EOT),
    _row("qwen35-small", "Qwen35Family", "qwen35", "ATTENTION GDN", "DENSE", "parity", bound=2e-5,
         llamacpp=("f32.gguf", "logits.npy", "f32.summary.json"), quant_refs=FULL_SET, slow=True),
    _row("qwen35-dkdv-tiny", "Qwen35Family", "qwen35", "ATTENTION GDN", "DENSE", "parity", llamacpp=LC_SUMMARY, slow=True),
    _row("qwen35-mtp-tiny", "Qwen35Family", "qwen35", "ATTENTION GDN", "DENSE", "mtp parity", llamacpp=LC_SUMMARY, slow=True),
    _row("qwen35moe-tiny", "Qwen35MoeFamily", "qwen35moe", "ATTENTION GDN", "MOE",
         "moe parity shift cli_shift estimate_lc loader_lc", llamacpp=LC_LOGITS, quant_refs=WITH_S_L, slow=True, fuzz_lc=(2,)),
    _row("qwen35moe-yarn-tiny", "Qwen35MoeFamily", "qwen35moe", "ATTENTION GDN", "MOE", "moe parity", suppress=EOT),
    _row("qwen35moe-gelu-tiny", "Qwen35MoeFamily", "qwen35moe", "ATTENTION GDN", "MOE", "moe parity two_seq", suppress=EOT),
    _row("qwen35moe-pattern-tiny", "Qwen35MoeFamily", "qwen35moe", "ATTENTION GDN", "MOE", "moe parity",
         llamacpp=LC_SUMMARY, slow=True),
    _row("qwen35moe-vl-tiny", "Qwen35MoeFamily", "qwen35moe", "ATTENTION GDN", "MOE", "moe mtp parity",
         llamacpp=LC_SUMMARY, slow=True),
    _row("nemotronh-tiny", "NemotronHFamily", "nemotron_h_moe", "ATTENTION MAMBA2 NONE", "MOE NONE RELU2",
         "moe two_seq rollback spec shift cli_shift estimate cli_session loader", llamacpp=("f32.summary.json", "quant.json"), fuzz=(3,)),
    _row("nemotronh-pattern-tiny", "NemotronHFamily", "nemotron_h_moe", "ATTENTION MAMBA2 NONE", "MOE NONE", "moe"),
    _row("nemotronh-latent-tiny", "NemotronHFamily", "nemotron_h_moe", "ATTENTION MAMBA2 NONE", "MOE NONE", "moe parity"),
    _row("nemotronh-dense-tiny", "NemotronHFamily", "nemotron_h", "ATTENTION MAMBA2 NONE", "NONE RELU2",
         "shift cli_shift loader", fuzz=(0,)),
    _row("nemotronh-bias-tiny", "NemotronHFamily", "nemotron_h", "ATTENTION MAMBA2 NONE", "NONE RELU2", "parity", suppress=EOT),
    _row("nemotronh-act-tiny", "NemotronHFamily", "nemotron_h_moe", "ATTENTION MAMBA2 NONE", "MOE NONE RELU2", "moe parity two_seq"),
    _row("nemotronh-dtmin-tiny", "NemotronHFamily", "nemotron_h", "ATTENTION MAMBA2 NONE", "NONE RELU2", "parity"),
    _row("nemotronh-relu-tiny", "NemotronHFamily", "nemotron_h", "ATTENTION MAMBA2 NONE", "NONE RELU2", "parity two_seq",
         suppress=EOT),
    _row("falconh1-tiny", "FalconH1Family", "falcon-h1", "PARALLEL", "DENSE",
         "parity rollback spec shift cli_shift estimate loader",
         llamacpp=("f32.gguf", "logits.npy", "f32.summary.json", "bf16.summary.json", "q8_0.summary.json"),
         quant_refs=FALCONH1_SET, fuzz=(3,)),
    _row("falconh1-yarn-tiny", "FalconH1Family", "falcon-h1", "PARALLEL", "DENSE", "parity"),
    _row("falconh1-gates-tiny", "FalconH1Family", "falcon-h1", "PARALLEL", "DENSE", "parity", llamacpp=LC_SUMMARY),
    _row("falconh1-nonorm-tiny", "FalconH1Family", "falcon-h1", "PARALLEL", "DENSE", "parity", llamacpp=LC_SUMMARY),
    _row("falconh1-attnbias-tiny", "FalconH1Family", "falcon-h1", "PARALLEL", "DENSE", "parity"),
    _row("falconh1-projbias-tiny", "FalconH1Family", "falcon-h1", "PARALLEL", "DENSE", "parity two_seq quant rollback estimate"),
    _row("falconh1-dtclamp-tiny", "FalconH1Family", "falcon-h1", "PARALLEL", "DENSE", "parity"),
    _row("falconh1-gelu-tiny", "FalconH1Family", "falcon-h1", "PARALLEL", "DENSE", "parity two_seq", suppress=EOT),
    _row("lfm2-tiny", "LFM2Family", "lfm2", "ATTENTION SHORTCONV", "DENSE",
         "parity two_seq rollback spec shift cli_shift estimate cli_session loader_lc", llamacpp=LC_LOGITS, quant_refs=LFM2_SET, fuzz=(3,)),
    _row("lfm2-yarn-tiny", "LFM2Family", "lfm2", "ATTENTION SHORTCONV", "DENSE", "parity"),
    _row("lfm2-k4-tiny", "LFM2Family", "lfm2", "ATTENTION SHORTCONV", "DENSE", "parity two_seq", llamacpp=LC_SUMMARY),
    _row("lfm2-convbias-tiny", "LFM2Family", "lfm2", "ATTENTION SHORTCONV", "DENSE", "parity"),
    _row("lfm2moe-tiny", "LFM2MoeFamily", "lfm2moe", "ATTENTION SHORTCONV", "DENSE MOE",
         "moe parity two_seq shift cli_shift estimate_lc cli_session loader_lc", llamacpp=LC_LOGITS, quant_refs=LFM2_SET, fuzz=(0,)),
    _row("lfm2moe-linear-tiny", "LFM2MoeFamily", "lfm2moe", "ATTENTION SHORTCONV", "DENSE MOE", "moe parity"),
    _row("lfm2moe-bias-tiny", "LFM2MoeFamily", "lfm2moe", "ATTENTION SHORTCONV", "DENSE MOE", "moe parity",
         llamacpp=LC_SUMMARY),
    _row("lfm2moe-scale-tiny", "LFM2MoeFamily", "lfm2moe", "ATTENTION SHORTCONV", "DENSE MOE", "moe parity",
         llamacpp=LC_SUMMARY),
    _row("lfm3-tiny", "LFM3Family", "lfm3", "ATTENTION SHORTCONV", "DENSE",
         "swa parity two_seq quant rollback shift estimate cli_session attn", suppress=EOT, keep_f32=("*.shortconv.conv.weight",), fuzz=(3,)),
    _row("lfm3-yarn-tiny", "LFM3Family", "lfm3", "ATTENTION SHORTCONV", "DENSE", "swa parity shift", suppress=EOT),
    _row("lfm3-propscale-tiny", "LFM3Family", "lfm3", "ATTENTION SHORTCONV", "DENSE", "swa parity shift", suppress=EOT),
    _row("lfm3-convbias-tiny", "LFM3Family", "lfm3", "ATTENTION SHORTCONV", "DENSE", "swa parity"),
    _row("lfm3-attnbias-tiny", "LFM3Family", "lfm3", "ATTENTION SHORTCONV", "DENSE", "swa parity two_seq", suppress=EOT),
    _row("zamba2-tiny", "Zamba2Family", "zamba2", "MAMBA2 ZAMBA2_SHARED", "NONE",
         "parity two_seq rollback spec shift estimate cli_session loader attn", fuzz=(3,)),
    _row("zamba2-mem2-tiny", "Zamba2Family", "zamba2", "MAMBA2 ZAMBA2_SHARED", "NONE", "parity two_seq"),
    _row("zamba2-dtfloor-tiny", "Zamba2Family", "zamba2", "MAMBA2 ZAMBA2_SHARED", "NONE", "parity"),
    _row("zamba2-act-tiny", "Zamba2Family", "zamba2", "MAMBA2 ZAMBA2_SHARED", "NONE", "parity two_seq"),
    _row("zamba2-yarn-tiny", "Zamba2Family", "zamba2", "MAMBA2 ZAMBA2_SHARED", "NONE", "parity shift", suppress=EOT),
    _row("zamba2-linear-tiny", "Zamba2Family", "zamba2", "MAMBA2 ZAMBA2_SHARED", "NONE", "parity", suppress=EOT),
    _row("zamba2-bias-tiny", "Zamba2Family", "zamba2", "MAMBA2 ZAMBA2_SHARED", "NONE", "parity two_seq quant rollback estimate"),
    _row("zamba2-noconvb-tiny", "Zamba2Family", "zamba2", "MAMBA2 ZAMBA2_SHARED", "NONE", "parity"),
    _row("zamba-tiny", "ZambaFamily", "zamba", "MAMBA1 ZAMBA_SHARED", "NONE",
         "parity two_seq quant estimate", suppress=EOT, keep_f32=MAMBA_F32, fuzz=(3,)),
    _row("zamba-odd-tiny", "ZambaFamily", "zamba", "MAMBA1 ZAMBA_SHARED", "NONE",
         "parity two_seq rollback estimate cli_session loader", suppress=EOT, fuzz=(0,)),
    _row("zamba-gelutanh-tiny", "ZambaFamily", "zamba", "MAMBA1 ZAMBA_SHARED", "NONE", "parity two_seq", suppress=EOT),
    _row("zamba-1head-tiny", "ZambaFamily", "zamba", "MAMBA1 ZAMBA_SHARED", "NONE", "parity loader", suppress=EOT),
    _row("zamba-act-tiny", "ZambaFamily", "zamba", "MAMBA1 ZAMBA_SHARED", "NONE", "parity two_seq", suppress=EOT),
    _row("zamba-projbias-tiny", "ZambaFamily", "zamba", "MAMBA1 ZAMBA_SHARED", "NONE", "parity two_seq quant rollback estimate", suppress=EOT),
    _row("olmohybrid-tiny", "OlmoHybridFamily", "olmo-hybrid", "ATTENTION GDN", "DENSE",
         "parity two_seq quant rollback estimate cli_session loader", suppress=EOT, keep_f32=("*ssm_conv1d*", "*.ssm_a", "*.ssm_dt.bias"), fuzz=(3,)),
    _row("olmohybrid-linear-tiny", "OlmoHybridFamily", "olmo-hybrid", "ATTENTION GDN", "DENSE", "parity", suppress=EOT),
    _row("olmohybrid-nope-tiny", "OlmoHybridFamily", "olmo-hybrid", "ATTENTION GDN", "DENSE",
         "parity two_seq loader", suppress=EOT, fuzz=(0,)),
    _row("olmohybrid-bias-tiny", "OlmoHybridFamily", "olmo-hybrid", "ATTENTION GDN", "DENSE", "parity", suppress=EOT),
    _row("olmohybrid-relu2-tiny", "OlmoHybridFamily", "olmo-hybrid", "ATTENTION GDN", "DENSE", "parity two_seq",
         suppress=EOT),
    _row("laramini-tiny", "LaraMiniFamily", "lara-mini", "ATTENTION GDN", "MOE",
         "swa moe parity two_seq quant rollback shift estimate cli_session loader", suppress=EOT,
         keep_f32=("*.ssm_conv1d.weight", "*.ffn_gate_inp.weight"), fuzz=(3, 0)),
    _row("laramini-var-tiny", "LaraMiniFamily", "lara-mini", "ATTENTION GDN", "MOE", "swa moe parity", suppress=EOT),
    _row("laramini-yarn-tiny", "LaraMiniFamily", "lara-mini", "ATTENTION GDN", "MOE", "swa moe parity shift", suppress=EOT),
    _row("laramini-gelu-tiny", "LaraMiniFamily", "lara-mini", "ATTENTION GDN", "MOE", "swa moe parity two_seq", suppress=EOT),
    _row("minimax-tiny", "MiniMaxFamily", "minimax-01", "ATTENTION LIGHTNING", "MOE",
         "moe two_seq quant rollback shift estimate loader chunked", llamacpp=LC_GGUF, suppress=EOT,
         keep_f32=("*.ffn_gate_inp.weight",), fuzz=(3, 0)),
    _row("minimax-ab-tiny", "MiniMaxFamily", "minimax-01", "ATTENTION LIGHTNING", "MOE", "moe"),
    _row("minimax-gelu-tiny", "MiniMaxFamily", "minimax-01", "ATTENTION LIGHTNING", "MOE", "moe parity", suppress=EOT),
    _row("minimax-relu2-tiny", "MiniMaxFamily", "minimax-01", "ATTENTION LIGHTNING", "MOE", "moe parity", suppress=EOT),
    _row("minimax-swa-tiny", "MiniMaxFamily", "minimax-01", "ATTENTION LIGHTNING", "MOE", "swa moe parity two_seq rollback",
         suppress=EOT),
    _row("minimax-wide-tiny", "MiniMaxFamily", "minimax-01", "ATTENTION LIGHTNING", "MOE", "moe"),
    _row("minimax-linear-tiny", "MiniMaxFamily", "minimax-01", "LIGHTNING", "MOE", "moe"),
    _row("minimax-yarn-tiny", "MiniMaxFamily", "minimax-01", "ATTENTION LIGHTNING", "MOE", "moe parity shift", suppress=EOT),
    _row("recurrentgemma-tiny", "RecurrentGemmaFamily", "recurrent-gemma", "ATTENTION RGLRU", "GEGLU",
         "swa parity two_seq quant rollback shift estimate cli_session loader attn", suppress=EOT, keep_f32=("*rglru_gate*", "*ssm_conv1d*"), fuzz=(3,)),
    _row("recurrentgemma-odd-tiny", "RecurrentGemmaFamily", "recurrent-gemma", "ATTENTION RGLRU", "GEGLU",
         "swa parity two_seq rollback estimate", suppress=EOT, fuzz=(0,)),
    _row("recurrentgemma-act-tiny", "RecurrentGemmaFamily", "recurrent-gemma", "ATTENTION RGLRU", "GEGLU",
         "swa parity two_seq", suppress=EOT),
    _row("kimilinear-tiny", "KimiLinearFamily", "kimi-linear", "KDA MLA", "DENSE MOE",
         "mla moe parity two_seq quant rollback shift estimate chunked attn attn_ub", llamacpp=LC_LOGITS, suppress=EOT,
         keep_f32=("*.ffn_gate_inp.weight", "*.ssm_a", "*ssm_conv1d*"), quant_refs=FULL_SET, fuzz=(3,)),
    _row("kimilinear-var-tiny", "KimiLinearFamily", "kimi-linear", "KDA MLA", "DENSE MOE",
         "mla moe parity two_seq rollback estimate", suppress=EOT, fuzz=(0,)),
    _row("kimilinear-gelu-tiny", "KimiLinearFamily", "kimi-linear", "KDA MLA", "DENSE MOE", "mla moe parity two_seq",
         suppress=EOT),
    _row("kimilinear-attnbias-tiny", "KimiLinearFamily", "kimi-linear", "KDA MLA", "DENSE MOE", "mla moe parity two_seq", suppress=EOT),
    _row("glm5next-tiny", "Glm5NextFamily", "glm5-next", "KDA MLA", "DENSE MOE",
         "mla moe parity two_seq rollback shift estimate attn attn_deep", llamacpp=LC_LOGITS, suppress=EOT, quant_refs=WITH_S_L, fuzz=(3, 0)),
    _row("glm5next-var-tiny", "Glm5NextFamily", "glm5-next", "KDA MLA", "DENSE MOE",
         "mla moe parity two_seq rollback", suppress=EOT, fuzz=(3,)),
    _row("glm5next-softplus-tiny", "Glm5NextFamily", "glm5-next", "KDA MLA", "DENSE MOE", "mla moe parity two_seq",
         suppress=EOT),
    _row("glm5next-notail-tiny", "Glm5NextFamily", "glm5-next", "KDA MLA", "DENSE MOE", "mla moe parity two_seq",
         suppress=EOT),
    _row("glm5next-attnbias-tiny", "Glm5NextFamily", "glm5-next", "KDA MLA", "DENSE MOE", "mla moe parity two_seq", suppress=EOT),
    _row("glm5next-tied-tiny", "Glm5NextFamily", "glm5-next", "KDA MLA", "DENSE MOE", "mla moe parity", suppress=EOT),
    _row("glm5next-mtp-tiny", "Glm5NextFamily", "glm5-next", "KDA MLA", "DENSE MOE", "mla moe mtp parity",
         llamacpp=LC_SUMMARY, suppress=EOT, fuzz=(3,)),
    _row("bailinghybrid-tiny", "BailingMoe3Family", "bailingmoe3", "KDA MLA", "DENSE MOE",
         "mla moe parity two_seq quant rollback shift estimate", llamacpp=LC_LOGITS, suppress=EOT,
         quant_refs=WITH_S_L, fuzz=(3, 0)),
    _row("bailinghybrid-var-tiny", "BailingMoe3Family", "bailingmoe3", "KDA MLA", "DENSE MOE",
         "mla moe parity two_seq rollback", suppress=EOT, fuzz=(0,)),
    _row("bailinghybrid-yarn-tiny", "BailingMoe3Family", "bailingmoe3", "KDA MLA", "DENSE MOE",
         "mla moe parity shift", suppress=EOT),
    _row("bailinghybrid-mtp-tiny", "BailingMoe3Family", "bailingmoe3", "KDA MLA", "DENSE MOE", "mla moe mtp parity",
         llamacpp=LC_SUMMARY, suppress=EOT, fuzz=(3,)),
    _row("bailinghybrid-attnbias-tiny", "BailingMoe3Family", "bailingmoe3", "KDA MLA", "DENSE MOE", "mla moe parity two_seq", suppress=EOT),
)

BY_NAME: dict[str, Fixture] = {f.name: f for f in FIXTURES}
MODEL_CAPS = frozenset({"swa", "mla", "moe", "mtp"})
CHECK_CAPS = frozenset({"parity", "two_seq", "quant", "rollback", "spec", "shift", "cli_shift", "estimate",
                        "estimate_lc", "sessions", "cli_session", "loader", "loader_lc", "chunked", "attn",
                        "attn_deep", "attn_ub"})


def having(cap: str) -> list[Fixture]:
    """The rows carrying ``cap`` (one of MODEL_CAPS | CHECK_CAPS), in table order."""
    assert cap in MODEL_CAPS | CHECK_CAPS, cap
    return [f for f in FIXTURES if cap in f.caps]


def names(cap: str) -> list[str]:
    """The names of the rows carrying ``cap``, in table order (a pytest parametrize list)."""
    return [f.name for f in having(cap)]


def main_fixture() -> dict[str, str]:
    """Converter class name -> the name of the family's first row."""
    out: dict[str, str] = {}
    for f in FIXTURES:
        out.setdefault(f.family, f.name)
    return out


def params(cap: str) -> list:
    """names(cap) as pytest parameters, a row with ``slow`` marked slow."""
    import pytest
    return [pytest.param(f.name, marks=pytest.mark.slow) if f.slow else f.name for f in having(cap)]
