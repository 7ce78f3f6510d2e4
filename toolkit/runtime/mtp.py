"""MTP drafts (``--mtp``): the model's own multi-token-prediction (NextN) block as the draft.

Qwen3-Next / Qwen3.5 checkpoints carry an MTP block (HF ``mtp.*``), and GLM-5-Next / Ling 3 ones a
DeepSeek-V3-style NextN layer (HF ``layers.{L}.{eh_proj, enorm, hnorm, shared_head.norm}`` (Ling 3:
``final_layernorm``, llama.cpp's ``blk.L.layer_output_norm``) and an MLA (+ GLM's DSA indexer, Ling's
RoPE and head gate) + MoE decoder layer, GLM's without mHC), converted as llama.cpp's ``blk.{L}.*``
(L = block_count - nextn_predict_layers, the first block after the main ones) with
``blk.{L}.nextn.{eh_proj, enorm, hnorm, shared_head_norm}``.  One draft step, for the token t
just chosen (drafted or accepted) and h the final hidden state at the position before it
(vLLM ``qwen3_next_mtp.py``, ``Qwen3NextMultiTokenPredictor.forward``)::

    x = eh_proj [rmsnorm(embd(t)) * enorm ; rmsnorm(h) * hnorm]     # [e; h], eh_proj [2D, D]
    x = block(x)                                   # the family's MTP layer (gated attention or MLA + MLP/MoE)
    h' = rmsnorm(x) * shared_head_norm             # the next step's h
    logits = output h'                             # the main model's (shared) head

where the main model's h is its own ``output_norm(x)``, the vector its output head reads (what
vLLM's target returns and hands the drafter).  The runtime runs the block as a model of its
own (:class:`MtpModel`: one layer, the tensors renamed, toolkit/native/layers/mtp.c), with its
own context: a KV cache for its attention layer, kept in step with the main model's accepted
tokens (position i of the block holds (t_{i+1}, h_i)) and rolled back with them.

    m = Model("qwen35.gguf"); ctx = Context(m, ...)
    drafter = open_mtp_draft(m, ctx, n_ctx=4096)   # also hooks ctx's decodes
    res = generate_speculative(ctx, tok, prompt, 64, sampler, drafter, draft_max=4)

Only the first NextN block is run (vLLM runs block ``step % n``; every checkpoint here has one).
"""
from __future__ import annotations

import dataclasses
import weakref
from typing import Sequence

import numpy as np

from toolkit.arch import FFNKind, LayerKind
from toolkit.arch.kinds import Norm
from toolkit.binding import ffi
from toolkit.errors import InputError
from toolkit.runtime.model import Model, c_hparams, load_table
from toolkit.runtime.speculative import draft_sampler, draft_steps, sample_draft

# the architectures whose NextN block runs
FAMILIES = ("qwen3next", "qwen35", "qwen35moe", "glm5-next", "bailingmoe3")

_HEAD = {"nextn.eh_proj.weight": "nextn.eh_proj.weight", "nextn.enorm.weight": "nextn.enorm.weight",
         "nextn.hnorm.weight": "nextn.hnorm.weight", "nextn.shared_head_norm.weight": "output_norm.weight",
         "nextn.shared_head_head.weight": "output.weight", "nextn.embed_tokens.weight": "token_embd.weight"}


def mtp_block(gguf, hp) -> int | None:
    """The index L of the file's first NextN block (``blk.L.nextn.eh_proj.weight`` present), or None."""
    L = int(hp.n_layer)
    return L if f"blk.{L}.nextn.eh_proj.weight" in gguf.tensors else None


def describe(gguf, hp) -> str:
    """What ``toolkit info`` says of the file's MTP head: "none", or "N block(s) at blk.L (runs
    with --mtp)" / "... (not run by this runtime)"."""
    L = mtp_block(gguf, hp)
    if L is None:
        return "none"
    n = sum(1 for t in gguf.tensors if t.endswith(".nextn.eh_proj.weight"))
    runs = "runs with --mtp" if hp.arch in FAMILIES else "not run by this runtime"
    return f"{n} NextN block{'s' if n != 1 else ''} at blk.{L} ({runs})"


def nextn_tensor_names(gguf) -> set[str]:
    """The names of the tensors only the NextN blocks use: ``blk.{i}.*`` with i >= block_count -
    nextn_predict_layers (the blocks the main model does not run; none without that key)."""
    n_next = gguf.get(f"{gguf.arch}.nextn_predict_layers") or 0
    n_block = gguf.get(f"{gguf.arch}.block_count") or 0
    if not n_next or not isinstance(n_next, int) or not isinstance(n_block, int):
        return set()
    out = set()
    for t in gguf:
        parts = t.name.split(".", 2)
        if parts[0] == "blk" and len(parts) > 2 and parts[1].isdigit() and int(parts[1]) >= n_block - n_next:
            out.add(t.name)
    return out


def check_mtp(model: Model) -> int:
    """The NextN block index of ``model`` for ``--mtp``.

    Raises:
        InputError: one line naming the file: it has no MTP head, or its architecture's head is
            not run here."""
    L = mtp_block(model.gguf, model.hparams)
    if L is None:
        raise InputError(f"--mtp: {model.path} has no MTP / NextN head (blk.N.nextn.* tensors; "
                         f"convert without --no-mtp from a checkpoint with mtp.* weights)")
    if model.hparams.arch not in FAMILIES:
        raise InputError(f"--mtp: {model.path}: the MTP head of {model.hparams.arch!r} is not run by this runtime "
                         f"(runs: {', '.join(FAMILIES)})")
    return L


def _block_hparams(hp, gguf, L: int):
    """The main model's hparams for a one-layer model of block L: gated attention (Qwen), MLA with
    its RoPE and head gate (Ling 3, as llama.cpp 0c1e570 bailingmoe3.cpp graph_mtp runs it) or MLA
    with its own DSA indexer (GLM-5-Next, DeepSeek-V3's NextN layer: a plain pre-norm block, no mHC
    streams -- llama.cpp's glm5-next.cpp binds no hc_* tensors past n_layer); its FFN."""
    ffn = FFNKind.MOE if f"blk.{L}.ffn_gate_inp.weight" in gguf.tensors else FFNKind.DENSE
    if hp.arch == "bailingmoe3":     # Ling 3: MLA with its RoPE and head gate, as the main attention layers
        return dataclasses.replace(hp, n_layer=1, layer_kinds=[LayerKind.MLA], ffn_kinds=[ffn], n_head_kv=[1],
                                   compress_ratios=[], ple_index=[], swa_layers=[], dsa_full=[])
    if hp.arch == "glm5-next":
        return dataclasses.replace(hp, n_layer=1, layer_kinds=[LayerKind.MLA], ffn_kinds=[ffn], n_head_kv=[1],
                                   dsa_full=[1], hc_count=0, hc_sinkhorn_iters=0, hc_eps=0.0, norm_place=int(Norm.PRE),
                                   compress_ratios=[], ple_index=[], swa_layers=[])
    att = [i for i in range(hp.n_layer) if hp.layer_kinds[i] == LayerKind.ATTENTION]
    n_kv = hp.n_head_kv[att[0]] if att else hp.n_head
    return dataclasses.replace(hp, n_layer=1, layer_kinds=[LayerKind.ATTENTION], ffn_kinds=[ffn], n_head_kv=[n_kv],
                               compress_ratios=[], ple_index=[], swa_layers=[], dsa_full=[])


def _block_table(gguf, L: int) -> list:
    """The tensor table of block L as a model of its own: ``blk.L.X`` as ``blk.0.X``, the nextn
    head's tensors by _HEAD, and the main token_embd / output where the block has none."""
    out, have = [], set()
    pre = f"blk.{L}."
    for t in gguf:
        if not t.name.startswith(pre):
            continue
        rest = t.name[len(pre):]
        if rest == "layer_output_norm.weight":   # Ling 3's shared head norm (llama.cpp bailingmoe3.cpp graph_mtp)
            rest = "nextn.shared_head_norm.weight"
        name = _HEAD.get(rest, None) if rest.startswith("nextn.") else "blk.0." + rest
        if name is None:
            continue
        have.add(name)
        out.append(dataclasses.replace(t, name=name))
    for name in ("token_embd.weight", "output.weight"):
        if name not in have and name in gguf.tensors:
            out.append(gguf.tensors[name])
    return out


class MtpModel(Model):
    """A file's first NextN block as a one-layer model of the C runtime (see the module
    docstring), sharing ``main``'s file, vocabulary and threads.  Contexts of it take each
    token's h (``Context.decode_batch(..., embd=...)``).

    Raises:
        InputError: as :func:`check_mtp`; NativeError: a missing or misshaped block tensor."""

    def __init__(self, main: Model):   # noqa: super().__init__ not called: the file is main's
        L = check_mtp(main)
        self.path, self.mmap, self.gguf, self.options = main.path, main.mmap, main.gguf, main.options
        self.hparams = _block_hparams(main.hparams, main.gguf, L)
        self.n_threads, self.n_vocab = main.n_threads, main.n_vocab
        self.block = L
        self._ptr = ffi.NULL
        self._contexts = weakref.WeakSet()
        self.tensors = _block_table(main.gguf, L)
        self._c_hparams, self._c_arrays = c_hparams(self.hparams)
        if self.hparams.hc_count == 0:
            self._c_hparams.block.residual = 0     # the row's mHC residual is the main layers' (TK_RESIDUAL_PLAIN)
        self._ptr = load_table(self.path, self._c_hparams, self.tensors, mmap=self.mmap,
                               params=self.options.model_params())

    @property
    def weight_bytes(self) -> int:
        """Bytes of the tensors the block adds to the main model's (its blk.L.* tensors; the
        token embedding and output head are the main model's, mapped once)."""
        return int(sum(t.nbytes for t in self.tensors if t.name not in ("token_embd.weight", "output.weight")
                       or t is not self.gguf.tensors.get(t.name)))


class MtpDraft:
    """Drafts from the main model's NextN block, with the interface of
    :class:`toolkit.runtime.speculative.DraftModel` (draft / draft_batch / feed / trim /
    checkpoint / forget / forget_all / close).

    ``ctx`` is the block's context (one sequence per main sequence).  The main context's decodes
    hand it their hidden states (:meth:`take_hidden`, installed as the main context's
    ``on_hidden``); a draft first brings the block's sequence to the main one's history: its
    position i holds (history[base + i + 1], h at main position base + i).  ``base`` > 0 where
    the main model's hidden states before it were never seen (a restored session, a context
    shift): the block then starts there, its positions offset (RoPE is relative).  Drafted
    positions are dropped after each draft (they were fed the block's own h, not the model's).
    """

    def __init__(self, ctx, params=None, seed: int = 0):
        self.ctx = ctx
        n = int(ctx.n_seq_max)
        self.held: list[list[int]] = [[] for _ in range(n)]   # tokens fed, block position order
        self.base = [0] * n
        self.hid: list[dict[int, np.ndarray]] = [{} for _ in range(n)]   # main position -> h [D]
        self.sampler = draft_sampler(params, seed) if params is not None else None
        self.n_ctx_seq = int(ctx.n_ctx) // n
        self.pick = None   # tests: pick(history, j) -> the j-th draft after history, instead of the block's

    # ---- the main context's hidden states ----------------------------------------------------
    def take_hidden(self, seq: int, pos0: int, hidden: np.ndarray) -> None:
        """A main decode fed positions pos0 .. pos0 + T - 1 of ``seq``: their h rows [T, D]."""
        hid = self.hid[seq]
        for i in range(hidden.shape[0]):
            hid[pos0 + i] = hidden[i]

    # ---- keeping a sequence in step ----------------------------------------------------------
    def forget(self, seq: int) -> None:
        self.ctx.memory.seq_rm(seq, 0, -1)
        self.held[seq] = []
        self.base[seq] = 0

    def forget_all(self) -> None:
        self.ctx.memory.clear()
        self.held = [[] for _ in self.held]
        self.base = [0] * len(self.base)

    def _keep(self, seq: int, history: Sequence[int], n_main: int) -> None:
        """Roll the block's ``seq`` back to its common prefix with what ``history`` asks of it,
        for main positions below ``n_main``."""
        b = self.base[seq]
        want = list(history[b + 1:n_main + 1])
        n = self.ctx.memory.keep_prefix(seq, self.held[seq], want)
        del self.held[seq][n:]
        if not self.held[seq]:
            self.base[seq] = 0

    def _todo(self, seq: int, history: Sequence[int], n_main: int) -> tuple[list[int], list[np.ndarray]]:
        """The tokens and h rows that bring ``seq`` to main position n_main - 1 (restarting it
        past the last position whose h is unknown)."""
        self._keep(seq, history, n_main)
        hid = self.hid[seq]
        start = self.base[seq] + len(self.held[seq])
        gaps = [p for p in range(start, n_main) if p not in hid]
        if gaps:
            self.forget(seq)
            self.base[seq] = start = gaps[-1] + 1
        toks = [int(history[p + 1]) for p in range(start, n_main)]
        rows = [hid[p] for p in range(start, n_main)]
        for p in [p for p in hid if p < start]:   # fed: no longer needed
            del hid[p]
        return toks, rows

    def feed(self, seq: int, history: Sequence[int]) -> None:
        """Nothing to do: the block follows at the next draft (it needs the token after each
        position, and the main model's h, which its decode hooks gave)."""

    def trim(self, seq: int, history: Sequence[int]) -> None:
        self._keep(seq, history, len(history) - 1)

    def checkpoint(self, seq: int, history: Sequence[int] | None = None, n_min: int = 0) -> None:
        """A KV cache needs no checkpoint; with ``history``, roll back to what it shares."""
        if history is not None:
            self.trim(seq, history)

    def shift(self, seq: int, n_keep: int, d: int) -> None:
        """The main sequence dropped positions [n_keep, n_keep + d) and moved the rest back by d
        (toolkit.runtime.shift): the block does the same to its cells (a started-late block
        is emptied instead); its entry at n_keep - 1 keeps its h (a draft, exact or not)."""
        b = self.base[seq]
        n = len(self.held[seq])
        if b > 0 or n <= n_keep:
            self.forget(seq)
            return
        mem = self.ctx.memory
        if not (mem.seq_rm(seq, n_keep, n_keep + d) and mem.seq_add(seq, n_keep + d, n, -d)):
            self.forget(seq)
            return
        self.held[seq] = self.held[seq][:n_keep] + self.held[seq][n_keep + d:]
        if n_keep:
            self.held[seq][n_keep - 1] = -1   # its token is now another: the next draft re-feeds it
        self.hid[seq] = {p - d if p >= n_keep + d else p: h for p, h in self.hid[seq].items()
                         if not n_keep <= p < n_keep + d}

    # ---- drafting ------------------------------------------------------------------------------
    def draft(self, history: Sequence[int], k: int, grammar=None) -> tuple[list[int], list | None]:
        """Up to ``k`` drafts after ``history`` for sequence 0 (see DraftModel.draft)."""
        return self.draft_batch([(0, history, k, self.sampler, grammar)])[0]

    def _choose(self, item, j: int, row: np.ndarray) -> tuple[int, tuple]:
        """The j-th draft of ``item`` from the block's logits ``row``: (token, q as (ids, probs))."""
        sampler = item[3]
        if self.pick is not None:
            d = int(self.pick(item[1], j))
            return d, (np.array([d]), np.array([1.0]))
        return sample_draft(sampler, row)

    def draft_batch(self, items) -> list[tuple[list[int], list]]:
        """Drafts for several sequences (``items`` as DraftModel.draft_batch takes them: (seq,
        history, k, sampler[, grammar])).  The block is brought to each history (one decode call
        for all of them, its last row the first draft's logits), then each further draft step is
        one decode call of one token per sequence still drafting, h the block's own previous
        output.  The drafted positions are dropped at the end.  On a failed call every sequence
        of it is emptied and the error raised."""
        ins, ks, n_main = [], [], []
        for seq, history, k, *_ in items:
            n = len(history) - 1                          # the main sequence holds history[:-1]
            toks, rows = self._todo(seq, history, n)
            ins.append((seq, toks, rows))
            n_main.append(n)
            ks.append(max(0, min(int(k), self.n_ctx_seq - len(self.held[seq]) - len(toks))))
        out: list[tuple[list[int], list]] = [([], []) for _ in items]
        feed = [(i, s, t, r) for i, (s, t, r) in enumerate(ins) if t]
        if not feed:
            return out
        try:
            got = self.ctx.decode_batch([(t, s) for _, s, t, _ in feed], logits="last",
                                        embd=[np.stack(r) for *_, r in feed], hidden=True)
        except BaseException:
            for _, s, _, _ in feed:
                self.forget(s)
            raise
        row, h = {}, {}
        for (i, s, t, _), lo, hi in zip(feed, got[0], got[1]):
            self.held[s].extend(t)
            if ks[i] > 0:
                row[i], h[i] = lo[-1], hi[-1:]

        def decode(step: list[int], toks: list[int]) -> list[np.ndarray]:
            seqs = [items[i][0] for i in step]
            try:
                lo, hi = self.ctx.decode_batch([([t], s) for t, s in zip(toks, seqs)], logits="last",
                                               embd=[h[i] for i in step], hidden=True)
            except BaseException:
                for s in seqs:
                    self.forget(s)
                raise
            for j, i in enumerate(step):
                h[i] = hi[j][-1:]
            return [x[-1] for x in lo]
        out = draft_steps(items, ks, row, self._choose, decode)
        for i, (s, _, _) in enumerate(ins):    # drafted positions go: they were fed the block's own h
            keep = n_main[i] - self.base[s]
            if self.ctx.memory.seq_pos_max(s) + 1 > keep:
                self.ctx.memory.seq_rm(s, keep, -1)
        return out

    def close(self) -> None:
        self.ctx.close()


def open_mtp_draft(model: Model, main_ctx, *, n_ctx: int, n_seq_max: int = 1, n_ubatch: int = 512,
                   n_threads: int | None = None, params=None, seed: int = 0, **_ignored) -> MtpDraft:
    """An :class:`MtpDraft` on a new context of ``model``'s NextN block (:class:`MtpModel`),
    hooked to ``main_ctx``'s decodes (its ``on_hidden``).  The caller closes it; its MtpModel
    (one per main model, made on first use) is closed with ``model``.

    Raises:
        InputError: as :func:`check_mtp`; NativeError / ResourceError: as Context."""
    from toolkit.runtime.context import Context

    mm = getattr(model, "_mtp", None)
    if mm is None or mm._ptr == ffi.NULL:
        mm = model._mtp = MtpModel(model)   # one per main model, freed with it (Model.close)
    dctx = Context(mm, n_ctx=n_ctx, n_seq_max=n_seq_max, n_ubatch=n_ubatch, n_threads=n_threads)
    draft = MtpDraft(dctx, params, seed)
    main_ctx.on_hidden = draft.take_hidden
    return draft
