"""Helpers the parity tests share: the relative L2 error, running a GGUF for logits or a
greedy continuation, and printing measured figures to the terminal (past pytest's capture)."""
from __future__ import annotations

import numpy as np


# Rounding explains the error. Relative weight error u: f16 2^-12 = 2.4e-4, bf16 2^-9 =
# 2.0e-3 (round to nearest of 11 / 8 significant bits), q8_0 about 6e-3 (step max|w|/127
# over a 32-block, rms step/sqrt(12), against the weights' rms). F16/BF16 matmuls read
# float32 activations (BF16 at avx512 with AVX512_BF16: bf16 ones, sqrt(2) u; measured under
# emulation 4.2e-3 .. 1.41e-2, jamba-tiny the largest, docs/internals.md); Q8_0 ones quantize the activations to Q8_0 blocks too (the integer
# path, as ggml does: another ~6e-3), so u = sqrt(2) * 6e-3 = 8.5e-3 there. Measured logits
# errors are 2-5.5 u on these fixtures; the bound is 10 u.  (test_runtime_parity.py, test_runtime_zamba2.py)
QUANT_BOUNDS = {"f16": 2.5e-3, "bf16": 2e-2, "q8_0": 8.5e-2}


def rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    """||a - b|| / ||b|| in float64 (b is the reference)."""
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b.astype(np.float64)))


def _n_ctx(n_tokens: int) -> int:
    """128 cells, or room for longer references (qwen4exp's 160 tokens) and a continuation."""
    return max(128, n_tokens + 32)


def logits_of(path, tokens, **ctx_kw) -> np.ndarray:
    """float32 [len(tokens), n_vocab]: every position's logits, one decode call (n_ctx 128, or
    len(tokens) + 32 when longer)."""
    from toolkit.runtime import Context, Model
    with Model(path) as m, Context(m, n_ctx=_n_ctx(len(tokens)), **ctx_kw) as ctx:
        return ctx.decode(tokens, logits="all")


def greedy_of(path, tokens, n: int, suppress: tuple[int, ...] = ()) -> list[int]:
    """The n-token greedy (argmax) continuation of ``tokens``; the ids ``suppress`` are never
    chosen (HF ``generate`` with ``min_new_tokens``: end-of-text masked, the round-3 references)."""
    from toolkit.runtime import Context, Model
    with Model(path) as m, Context(m, n_ctx=_n_ctx(len(tokens) + n)) as ctx:
        lg = ctx.decode(tokens)
        out: list[int] = []
        for _ in range(n):
            last = lg[-1].copy()
            last[list(suppress)] = -np.inf
            out.append(int(np.argmax(last)))
            lg = ctx.decode([out[-1]])
        return out


def terminal_report(request, label: str):
    """Body of a module-scoped ``report`` fixture: yields a list the tests append lines to,
    then writes them to the terminal as ``[label] line``."""
    lines: list[str] = []
    yield lines
    pm = request.config.pluginmanager
    tr, cap = pm.get_plugin("terminalreporter"), pm.get_plugin("capturemanager")
    if tr is not None and cap is not None and lines:
        with cap.global_and_fixture_disabled():
            tr.write_line("")
            for ln in lines:
                tr.write_line(f"[{label}] {ln}")


MODES = (("one-shot", {}), ("ubatch 1", {"n_ubatch": 1}), ("ubatch 7", {"n_ubatch": 7}))


def check_against_hf(path, ref, label: str, report: list[str], bound: float = 1e-5,
                     suppress: tuple[int, ...] = ()) -> None:
    """The f32 check against an HF reference.npz (``tokens``, ``logits``, ``greedy``): relative
    L2 error of every position's logits < ``bound`` in one shot and in ubatches of 1 and 7
    tokens, and the greedy continuation identical (with the ids ``suppress`` never chosen, as the
    reference's ``min_new_tokens`` did); the figures go to ``report``."""
    errs = {mode: rel_l2(logits_of(path, ref["tokens"], **kw), ref["logits"]) for mode, kw in MODES}
    greedy = greedy_of(path, ref["tokens"], len(ref["greedy"]), suppress)
    report.append(f"{label}: rel L2 " + ", ".join(f"{k} {v:.2e}" for k, v in errs.items()) +
                  f" (bound {bound:.0e}); greedy {'identical' if greedy == ref['greedy'].tolist() else 'DIFFERS'}")
    for mode, e in errs.items():
        assert e < bound, f"{label} {mode}: relative L2 error {e:.3e} >= {bound}"
    assert greedy == ref["greedy"].tolist(), f"{label}: greedy continuation differs"


def two_sequences_vs_separate(path, tok) -> float:
    """Largest |difference| between two sequences decoded in one batch (tok[:23] as sequence 0,
    tok[30:47] as 1, then one more token each, again in one batch) and each run alone."""
    return max(float(np.abs(x - y).max()) for x, y in two_sequences_pairs(path, tok))


def two_sequences_pairs(path, tok) -> list[tuple[np.ndarray, np.ndarray]]:
    """(in one batch, alone) logits of the four decodes two_sequences_vs_separate compares."""
    from toolkit.runtime import Context, Model
    a, b = tok[:23], tok[30:47]
    with Model(path) as m:
        with Context(m, n_ctx=128, n_seq_max=2) as ctx:
            ga, gb = ctx.decode_batch([(a, 0), (b, 1)], logits="all")
            na, nb = ctx.decode_batch([([7], 0), ([11], 1)], logits="all")
        with Context(m, n_ctx=128) as ctx:
            ra, rna = ctx.decode(a, logits="all"), ctx.decode([7], logits="all")
        with Context(m, n_ctx=128) as ctx:
            rb, rnb = ctx.decode(b, logits="all"), ctx.decode([11], logits="all")
    return [(ga, ra), (gb, rb), (na, rna), (nb, rnb)]
