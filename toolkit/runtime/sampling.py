"""Pick the next token from a row of logits: greedy, or top-k / top-p / min-p / temperature.

The order is llama.cpp's default sampler chain (common/sampling.cpp: ... top_k, typical_p,
top_p, min_p, xtc, temperature, then dist): the truncations see the *untempered*
distribution, the temperature only reshapes what survives them.  ``temp <= 0`` is greedy
(argmax; the first index among equal maxima), as in llama.cpp.

Before them (llama.cpp's chain starts with ``penalties``), the repetition penalties over the
last ``repeat_last_n`` accepted tokens (:meth:`Sampler.accept`; prompt tokens count, as in
llama-completion), per token with count c > 0 in that window (ref llama_sampler_penalties_apply,
src/llama-sampler.cpp):

    logit = logit * repeat_penalty if logit <= 0 else logit / repeat_penalty
    logit -= c * frequency_penalty + presence_penalty

Each truncation keeps at least one token.  Definitions (p = softmax of the candidates' logits):

    top_k(k):    the k largest logits (k <= 0: all)
    top_p(p):    after sorting by p descending, the shortest prefix whose cumulative p >= p
                 (p >= 1: all); ref llama.cpp llama_sampler_top_p_apply
    min_p(m):    tokens with p_i >= m * max_j p_j  (m <= 0: all); ref llama_sampler_min_p_apply
    temp(t):     logits / t
    dist:        draw from softmax(logits) with the seeded numpy Generator

Random numbers come from ``numpy.random.Generator(PCG64(seed))``: the same seed, logits and
parameters give the same tokens (not the same tokens as llama.cpp, whose RNG is mt19937).
"""
from __future__ import annotations

import collections
import os
from dataclasses import asdict, dataclass

import numpy as np

from toolkit.errors import InputError


@dataclass(frozen=True)
class SamplerParams:
    """Sampling parameters; the defaults are llama.cpp's (common_params_sampling)."""

    temp: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = None   # None: a random seed (reported by Sampler.seed)
    repeat_penalty: float = 1.0      # 1.0: off
    repeat_last_n: int = 64          # tokens of history the penalties look at (0: off; -1: all)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0

    @property
    def penalties(self) -> bool:
        """True when a penalty changes logits (llama.cpp's is_disabled, negated)."""
        return self.repeat_last_n != 0 and not (self.repeat_penalty == 1.0 and self.presence_penalty == 0.0
                                                and self.frequency_penalty == 0.0)

    def validate(self) -> None:
        """Raises InputError naming the flag when a value is out of range."""
        if not np.isfinite(self.temp):
            raise InputError(f"--temp must be a finite number, got {self.temp}")
        if self.top_k < 0:
            raise InputError(f"--top-k must be >= 0 (0: off), got {self.top_k}")
        if not 0.0 <= self.top_p <= 1.0:
            raise InputError(f"--top-p must be in [0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise InputError(f"--min-p must be in [0, 1], got {self.min_p}")
        if self.seed is not None and not 0 <= self.seed < 2**64:
            raise InputError(f"--seed must be in [0, 2^64), got {self.seed}")
        if not (np.isfinite(self.repeat_penalty) and self.repeat_penalty > 0):
            raise InputError(f"--repeat-penalty must be a finite number > 0 (1.0: off), got {self.repeat_penalty}")
        if self.repeat_last_n < -1:
            raise InputError(f"--repeat-last-n must be >= -1 (0: off, -1: all), got {self.repeat_last_n}")
        for flag, v in (("--presence-penalty", self.presence_penalty), ("--frequency-penalty", self.frequency_penalty)):
            if not np.isfinite(v):
                raise InputError(f"{flag} must be a finite number, got {v}")


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp((x - x.max()).astype(np.float64))
    return e / e.sum()


class Sampler:
    """Stateful sampler (owns the random generator).

    sample(logits): logits is float32 [n_vocab] (or [1, n_vocab]); returns a token id (int).
    """

    def __init__(self, params: SamplerParams = SamplerParams()):
        params.validate()
        self.params = params
        self.seed = params.seed if params.seed is not None else int.from_bytes(os.urandom(4), "little")
        self.rng = np.random.Generator(np.random.PCG64(self.seed))
        self.history: collections.deque[int] = collections.deque(
            maxlen=None if params.repeat_last_n < 0 else max(params.repeat_last_n, 0))

    def accept(self, token: int) -> None:
        """Add ``token`` to the penalty window (the last ``repeat_last_n`` accepted tokens)."""
        if self.params.repeat_last_n != 0:
            self.history.append(int(token))

    def reset(self) -> None:
        """Forget the penalty window (a new conversation)."""
        self.history.clear()

    def penalize(self, logits: np.ndarray) -> np.ndarray:
        """float32 [n_vocab] logits with the repetition penalties applied (a copy; the input
        itself when no penalty is on or the window is empty)."""
        z = np.asarray(logits, dtype=np.float32).reshape(-1)
        p = self.params
        if not p.penalties or not self.history:
            return z
        ids, counts = np.unique(np.fromiter(self.history, dtype=np.int64), return_counts=True)
        ok = (ids >= 0) & (ids < z.size)
        ids, counts = ids[ok], counts[ok]
        z = z.copy()
        v = z[ids]
        v = np.where(v <= 0, v * np.float32(p.repeat_penalty), v / np.float32(p.repeat_penalty))
        z[ids] = v - (counts.astype(np.float32) * np.float32(p.frequency_penalty) + np.float32(p.presence_penalty))
        return z

    @property
    def greedy(self) -> bool:
        return self.params.temp <= 0

    def candidates(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The distribution ``sample`` draws from: (ids int64 [n], probs float64 [n]), sorted by
        probability descending.  Greedy gives the argmax with probability 1."""
        z = np.asarray(logits, dtype=np.float32).reshape(-1)
        if z.size == 0:
            raise InputError("cannot sample from an empty row of logits")
        if self.greedy:
            zz = np.where(np.isnan(z), -np.inf, z)     # a NaN logit is never the argmax
            return np.array([int(np.argmax(zz))]), np.array([1.0])
        p = self.params
        ids = np.arange(z.size)
        # drop -inf/NaN logits (masked tokens) but keep at least one
        finite = np.isfinite(z)
        if not finite.all():
            ids = ids[finite] if finite.any() else ids[:1]
        # top-k
        if 0 < p.top_k < ids.size:
            part = np.argpartition(-z[ids], p.top_k - 1)[: p.top_k]
            ids = ids[part]
        # sort by logit descending (stable: the lower id first among equals)
        ids = ids[np.argsort(-z[ids], kind="stable")]
        # top-p on the untempered distribution of the survivors
        if p.top_p < 1.0:
            probs = _softmax(z[ids])
            cum = np.cumsum(probs)
            n_keep = int(np.searchsorted(cum, p.top_p, side="left")) + 1
            ids = ids[: max(1, min(n_keep, ids.size))]
        # min-p relative to the most probable survivor: p_i >= m * p_max  <=>  z_i >= z_max + log m
        if p.min_p > 0.0:
            zz = z[ids].astype(np.float64)
            keep = zz >= zz[0] + np.log(p.min_p)
            keep[0] = True
            ids = ids[keep]
        probs = _softmax(z[ids].astype(np.float64) / p.temp)
        return ids, probs

    def sample(self, logits: np.ndarray) -> int:
        """The next token id from float32 [n_vocab] logits: penalties, truncations, draw."""
        return self.sample_penalized(self.penalize(logits))

    def sample_penalized(self, logits: np.ndarray) -> int:
        """:meth:`sample` for logits :meth:`penalize` already saw: truncations, draw."""
        ids, probs = self.candidates(logits)
        if ids.size == 1:
            return int(ids[0])
        r = self.rng.random()
        k = int(np.searchsorted(np.cumsum(probs), r, side="right"))
        return int(ids[min(k, ids.size - 1)])

    def to_dict(self) -> dict:
        d = asdict(self.params)
        d["seed"] = self.seed
        return d
