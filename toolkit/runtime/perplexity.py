"""Perplexity over a text file and KL divergence against a base model, llama-perplexity style.

Protocol (ref: llama.cpp tools/perplexity/perplexity.cpp, ``perplexity()`` and
``kl_divergence()``):

* The whole file is tokenized once (the model's own BOS rule, ``Tokenizer.add_bos``).
* It is cut into ``n_chunk`` non-overlapping chunks of ``n_ctx`` tokens (a tail shorter
  than ``n_ctx`` is dropped).  Each chunk is decoded from an empty memory; when the
  tokenizer adds BOS, the chunk's first token is replaced by BOS, as llama.cpp does.
* Only the second half of each chunk is scored, so every scored token has at least
  ``n_ctx/2`` tokens of context: positions ``i`` in ``[n_ctx/2, n_ctx-1)`` predict token
  ``i+1``, i.e. ``n_ctx - 1 - n_ctx/2`` scored tokens per chunk.
* ``PPL = exp(mean NLL)``; its uncertainty is ``PPL * sqrt(var(NLL) / (N-1))`` (first-order
  propagation of the standard error of the mean NLL).
* KL divergence per scored token: ``KL(P_base || P) = sum_v p_base(v) (log p_base(v) -
  log p(v))`` in nats, mean +/- standard error of the mean; top-1 agreement is the share
  of scored tokens where both argmax agree, +/- ``sqrt(p (1-p) / (N-1))``.

Glossary: V = n_vocab, C = n_ctx, N = number of scored tokens.  Logits are float32 [C, V];
log-probabilities are computed in float64.

Base logits may come from a second GGUF (decoded chunk by chunk next to the model) or from a
file written earlier with ``kld_out`` (``.npz``: ``tokens`` int32 [n_chunk*C], ``n_ctx``,
``logprobs`` float32 [N, V], the base model's log-softmax of every scored row).
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Protocol, Sequence

import numpy as np

from toolkit.errors import InputError

LOGITS_FILE_FORMAT = "toolkit-kld-logits-v1"


class LogitsSource(Protocol):
    """What the scorer needs from a model: its vocabulary size and a chunk's logits."""

    n_vocab: int

    def chunk_logits(self, tokens: Sequence[int]) -> np.ndarray:
        """float32 [len(tokens), n_vocab] logits of one chunk decoded from an empty memory."""


# ---- numerics -------------------------------------------------------------------------------

def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64.  logits: [R, V] (any float dtype) -> float64 [R, V]."""
    x = np.asarray(logits, dtype=np.float64)
    m = x.max(axis=1, keepdims=True)
    z = x - m
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def scored_range(n_ctx: int) -> tuple[int, int]:
    """(first, last) positions whose logits are scored in one chunk: ``[n_ctx//2, n_ctx-1)``."""
    return n_ctx // 2, n_ctx - 1


def chunk_nll(logprobs: np.ndarray, chunk: Sequence[int]) -> np.ndarray:
    """Negative log-likelihoods (nats) of the scored tokens of one chunk.

    logprobs: float [n_scored, V], the log-softmax of rows ``first .. n_ctx-2``;
    chunk: the chunk's n_ctx token ids.  Returns float64 [n_scored].
    """
    first, last = scored_range(len(chunk))
    targets = np.asarray(chunk[first + 1:last + 1], dtype=np.int64)
    return -logprobs[np.arange(len(targets)), targets].astype(np.float64)


def kld_rows(base_logprobs: np.ndarray, logprobs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row KL(P_base || P) in nats and top-1 agreement (bool), both [R].

    base_logprobs, logprobs: float [R, V] log-probabilities (log-softmax rows).
    """
    b = np.asarray(base_logprobs, dtype=np.float64)
    q = np.asarray(logprobs, dtype=np.float64)
    kl = (np.exp(b) * (b - q)).sum(axis=1)
    same = b.argmax(axis=1) == q.argmax(axis=1)
    return np.maximum(kl, 0.0), same


def mean_stderr(x: np.ndarray) -> tuple[float, float]:
    """Mean and standard error of the mean (``sqrt(var/(n-1))``, 0 for n < 2)."""
    x = np.asarray(x, dtype=np.float64)
    n = x.size
    if n == 0:
        return float("nan"), float("nan")
    m = float(x.mean())
    if n < 2:
        return m, 0.0
    var = float(((x - m) ** 2).mean())   # two-pass: no cancellation (llama.cpp uses E[x^2]-m^2)
    return m, math.sqrt(max(var, 0.0) / (n - 1))


# ---- results --------------------------------------------------------------------------------

@dataclass
class KLDStats:
    """KL divergence of a model against a base model over the scored tokens (nats)."""

    mean: float
    stderr: float
    median: float
    p99: float
    max: float
    top1: float            # share of scored tokens with the same argmax, in [0, 1]
    top1_stderr: float
    n_tokens: int
    base: str


@dataclass
class PerplexityResult:
    """What ``toolkit perplexity`` reports (``--json`` prints ``asdict`` of it)."""

    model: str
    file: str
    n_ctx: int
    n_chunks: int
    n_tokens_file: int     # tokens in the whole file
    n_scored: int          # tokens whose NLL enters the mean
    nll: float             # mean NLL, nats/token
    ppl: float
    ppl_stderr: float
    seconds: float         # wall time spent decoding (both models when a base GGUF is given)
    tokens_per_s: float    # decoded tokens (n_chunks * n_ctx) per second of the model alone
    chunk_ppl: list[float] = field(default_factory=list)
    kld: KLDStats | None = None

    def to_dict(self) -> dict:
        return asdict(self)


# ---- the runtime-backed source --------------------------------------------------------------

class RuntimeLogits:
    """Logits of a GGUF model from the C runtime, one chunk at a time (memory cleared per chunk).

    Raises whatever ``toolkit.runtime.model.Model`` raises for a bad file (InputError,
    UnsupportedError, NativeError), ResourceError when the context cannot be allocated.
    """

    def __init__(self, path: str, n_ctx: int, n_ubatch: int = 512, threads: int | None = None, mmap: bool = True,
                 options=None):
        from toolkit.runtime import Context, Model

        self.path = path
        self.model = Model(path, n_threads=threads, mmap=mmap, options=options)
        self.n_vocab = int(self.model.n_vocab)
        self.n_ctx = n_ctx
        self.ctx = Context(self.model, n_ctx=n_ctx, n_seq_max=1, n_ubatch=min(n_ubatch, n_ctx))

    def chunk_logits(self, tokens: Sequence[int]) -> np.ndarray:
        self.ctx.memory.clear()          # every chunk starts from zeroed state and an empty KV cache
        out = self.ctx.decode(list(map(int, tokens)), seq_id=0, logits="all")
        return np.asarray(out, dtype=np.float32)

    def tokenizer(self):
        from toolkit.runtime.tokenizer import Tokenizer

        return Tokenizer.from_gguf(self.model.gguf)


# ---- the base-logits file -------------------------------------------------------------------

class LogitsFileWriter:
    """Collects the scored rows' log-probabilities and writes them atomically as ``.npz``."""

    def __init__(self, path: str, tokens: Sequence[int], n_ctx: int, n_vocab: int, n_rows: int):
        self.path = path
        self.tokens = np.asarray(tokens, dtype=np.int32)
        self.n_ctx = n_ctx
        try:
            self.rows = np.empty((n_rows, n_vocab), dtype=np.float32)
        except MemoryError:
            from toolkit.errors import ResourceError
            raise ResourceError(f"{path}: {n_rows} x {n_vocab} float32 log-probabilities "
                                f"({n_rows * n_vocab * 4 / 2**20:.0f} MiB) do not fit in memory") from None
        self.n = 0

    def add(self, logprobs: np.ndarray) -> None:
        self.rows[self.n:self.n + len(logprobs)] = logprobs
        self.n += len(logprobs)

    def write(self, inputs: tuple[str, ...] = ()) -> None:
        from toolkit.gguf_io import atomic_output

        with atomic_output(self.path, inputs=inputs) as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, format=np.array(LOGITS_FILE_FORMAT), tokens=self.tokens,
                         n_ctx=np.array(self.n_ctx), logprobs=self.rows[:self.n])


class LogitsFileSource:
    """Base log-probabilities read back from a ``kld_out`` file (checked against our tokens)."""

    def __init__(self, path: str):
        try:
            z = np.load(path, allow_pickle=False)
            fmt = str(z["format"])
            self.tokens = z["tokens"]
            self.n_ctx = int(z["n_ctx"])
            self.logprobs = z["logprobs"]
        except (OSError, ValueError, KeyError, EOFError):   # numpy's text would suggest allow_pickle
            raise InputError(f"{path}: neither a GGUF model nor a .npz logits file written by --kld-out") from None
        if fmt != LOGITS_FILE_FORMAT:
            raise InputError(f"{path}: format {fmt!r}, expected {LOGITS_FILE_FORMAT!r}")
        self.path = path
        self.n_vocab = int(self.logprobs.shape[1])
        self.row = 0

    def next_rows(self, n: int) -> np.ndarray:
        if self.row + n > len(self.logprobs):
            raise InputError(f"{self.path}: has {len(self.logprobs)} scored rows; more are needed "
                             f"(was it written for the same file, --ctx and --chunks?)")
        out = self.logprobs[self.row:self.row + n]
        self.row += n
        return out


def _is_gguf(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"GGUF"
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})") from None


# ---- the driver -----------------------------------------------------------------------------

def evaluate(source: LogitsSource, tokens: Sequence[int], n_ctx: int, *, bos_id: int | None = None,
             max_chunks: int | None = None, base: LogitsSource | LogitsFileSource | None = None,
             kld_writer: LogitsFileWriter | None = None, model_name: str = "", file_name: str = "",
             base_name: str = "", progress: Callable[[int, int, float], None] | None = None) -> PerplexityResult:
    """Score ``tokens`` with ``source`` (and optionally against ``base``), llama-perplexity style.

    tokens:  the whole file's token ids; n_ctx: chunk length (even, >= 4);
    bos_id:  when not None, each chunk's first token is replaced by it (llama.cpp's add_bos rule);
    base:    a second model or a logits file: adds KL divergence and top-1 agreement;
    kld_writer: receives this model's scored log-probabilities (for a later ``base``).
    progress: called as ``progress(chunk_index, n_chunks, running_ppl)``.

    Raises InputError when the file has fewer than ``n_ctx`` tokens, ``n_ctx`` is odd or < 4,
    or the base model's vocabulary / logits file does not match.
    """
    if n_ctx < 4 or n_ctx % 2:
        raise InputError(f"--ctx {n_ctx}: must be an even number >= 4")
    n_chunks = len(tokens) // n_ctx
    if max_chunks is not None and max_chunks > 0:
        n_chunks = min(n_chunks, max_chunks)
    if n_chunks < 1:
        raise InputError(f"{file_name or 'text'}: {len(tokens)} tokens, fewer than one chunk of --ctx {n_ctx}")
    if base is not None and base.n_vocab != source.n_vocab:
        raise InputError(f"{base_name}: n_vocab {base.n_vocab} differs from the model's {source.n_vocab}")
    if isinstance(base, LogitsFileSource):
        if base.n_ctx != n_ctx:
            raise InputError(f"{base_name}: written with --ctx {base.n_ctx}, not {n_ctx}")
        want = np.asarray(tokens[:n_chunks * n_ctx], dtype=np.int32)
        if len(base.tokens) < len(want) or not np.array_equal(base.tokens[:len(want)], want):
            raise InputError(f"{base_name}: its tokens differ from this file's (another text or tokenizer?)")

    nlls, chunk_ppl, kls, same = [], [], [], []
    t_model = t_all = 0.0
    first, last = scored_range(n_ctx)
    for c in range(n_chunks):
        chunk = list(tokens[c * n_ctx:(c + 1) * n_ctx])
        if bos_id is not None:
            chunk[0] = bos_id
        t0 = time.perf_counter()
        logits = source.chunk_logits(chunk)
        t_model += time.perf_counter() - t0
        if logits.shape != (n_ctx, source.n_vocab):
            raise InputError(f"{model_name}: decode returned logits of shape {logits.shape}, "
                             f"expected {(n_ctx, source.n_vocab)}")
        lp = log_softmax(logits[first:last])
        v = chunk_nll(lp, chunk)
        nlls.append(v)
        chunk_ppl.append(float(math.exp(v.mean())))
        if kld_writer is not None:
            kld_writer.add(lp)
        if base is not None:
            if isinstance(base, LogitsFileSource):
                blp = base.next_rows(last - first)
            else:
                t1 = time.perf_counter()
                blp = log_softmax(base.chunk_logits(chunk)[first:last])
                t_all += time.perf_counter() - t1
            k, s = kld_rows(blp, lp)
            kls.append(k)
            same.append(s)
        if progress is not None:
            allv = np.concatenate(nlls)
            progress(c, n_chunks, math.exp(float(allv.mean())))

    allv = np.concatenate(nlls)
    nll, nll_se = mean_stderr(allv)
    ppl = math.exp(nll)
    kld = None
    if base is not None:
        k = np.concatenate(kls)
        s = np.concatenate(same).astype(np.float64)
        km, kse = mean_stderr(k)
        p = float(s.mean())
        kld = KLDStats(mean=km, stderr=kse, median=float(np.median(k)), p99=float(np.percentile(k, 99)),
                       max=float(k.max()), top1=p,
                       top1_stderr=math.sqrt(p * (1 - p) / max(len(s) - 1, 1)), n_tokens=int(len(k)),
                       base=base_name)
    return PerplexityResult(
        model=model_name, file=file_name, n_ctx=n_ctx, n_chunks=n_chunks, n_tokens_file=len(tokens),
        n_scored=int(allv.size), nll=nll, ppl=ppl, ppl_stderr=ppl * nll_se,
        seconds=t_model + t_all, tokens_per_s=(n_chunks * n_ctx / t_model) if t_model > 0 else float("inf"),
        chunk_ppl=chunk_ppl, kld=kld)


def perplexity_file(model_path: str, text_path: str, n_ctx: int = 512, *, max_chunks: int | None = None,
                    kld_base: str | None = None, kld_out: str | None = None, threads: int | None = None,
                    progress: Callable[[int, int, float], None] | None = None, mmap: bool = True,
                    n_ubatch: int = 512, options=None) -> PerplexityResult:
    """``toolkit perplexity``: load ``model_path`` (GGUF), score ``text_path`` (UTF-8 text);
    ``options`` (:class:`toolkit.runtime.options.RuntimeOptions`, None: the defaults) for both
    models.

    kld_base: a base GGUF (decoded alongside) or a ``.npz`` logits file from ``kld_out``;
    kld_out:  write this model's scored log-probabilities there (atomic), for a later kld_base;
    n_ubatch: tokens per micro-batch (at most n_ctx), for the model and a base GGUF alike.

    Raises InputError (unreadable / non-UTF-8 text, too short for one chunk, mismatched base,
    kld_out equal to an input), plus what the runtime raises for a bad model file.
    """
    if kld_out and kld_base:
        raise InputError("--kld-out and --kld-base: give one or the other")
    if kld_out:   # before the evaluation: never an input, a directory or a device
        from toolkit.gguf_io import check_output
        check_output(kld_out, inputs=(model_path, text_path))
    try:
        with open(text_path, "rb") as fh:
            raw = fh.read()
    except OSError as e:
        raise InputError(f"{text_path}: cannot read ({e.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{text_path}: not UTF-8 text (byte {e.start})") from None
    if kld_out:
        d = os.path.dirname(os.path.abspath(kld_out))
        if not os.path.isdir(d):
            raise InputError(f"{kld_out}: output directory {d} " + ("is not a directory" if os.path.exists(d) else "does not exist"))

    src = RuntimeLogits(model_path, n_ctx, n_ubatch, threads=threads, mmap=mmap, options=options)
    tok = src.tokenizer()
    tokens = tok.encode(text, add_special=True)
    bos = tok.bos_id if (tok.add_bos and tok.bos_id is not None) else None

    base = None
    if kld_base:
        base = (RuntimeLogits(kld_base, n_ctx, n_ubatch, threads=threads, mmap=mmap, options=options) if _is_gguf(kld_base)
                else LogitsFileSource(kld_base))
    writer = None
    if kld_out:
        n_chunks = len(tokens) // n_ctx
        if max_chunks:
            n_chunks = min(n_chunks, max_chunks)
        first, last = scored_range(n_ctx)
        writer = LogitsFileWriter(kld_out, tokens[:n_chunks * n_ctx], n_ctx, src.n_vocab,
                                  max(n_chunks, 0) * (last - first))
    res = evaluate(src, tokens, n_ctx, bos_id=bos, max_chunks=max_chunks, base=base, kld_writer=writer,
                   model_name=model_path, file_name=text_path, base_name=kld_base or "", progress=progress)
    if writer is not None:
        writer.write(inputs=(model_path, text_path))
    return res
