"""Helpers the parity tests share: the relative L2 error, running a GGUF for logits or a
greedy continuation, and printing measured figures to the terminal (past pytest's capture)."""
from __future__ import annotations

import numpy as np


def rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    """||a - b|| / ||b|| in float64 (b is the reference)."""
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b.astype(np.float64)))


def logits_of(path, tokens, **ctx_kw) -> np.ndarray:
    """float32 [len(tokens), n_vocab]: every position's logits, one decode call (n_ctx 128)."""
    from toolkit.runtime import Context, Model
    with Model(path) as m, Context(m, n_ctx=128, **ctx_kw) as ctx:
        return ctx.decode(tokens, logits="all")


def greedy_of(path, tokens, n: int) -> list[int]:
    """The n-token greedy (argmax) continuation of ``tokens``."""
    from toolkit.runtime import Context, Model
    with Model(path) as m, Context(m, n_ctx=128) as ctx:
        lg = ctx.decode(tokens)
        out: list[int] = []
        for _ in range(n):
            out.append(int(np.argmax(lg[-1])))
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
