"""Sampling: greedy, top-k / top-p / min-p / temperature on known distributions, seeds."""
from __future__ import annotations

import numpy as np
import pytest

from toolkit.errors import InputError
from toolkit.runtime.sampling import Sampler, SamplerParams


def logits_of(probs) -> np.ndarray:
    return np.log(np.asarray(probs, dtype=np.float64)).astype(np.float32)


# p = [0.05, 0.4, 0.3, 0.15, 0.1] (ids 0..4); sorted: 1 (.4), 2 (.3), 3 (.15), 4 (.1), 0 (.05)
P = [0.05, 0.4, 0.3, 0.15, 0.1]
OFF = dict(top_k=0, top_p=1.0, min_p=0.0)


def test_greedy_is_argmax_first_of_ties():
    s = Sampler(SamplerParams(temp=0.0))
    assert s.sample(logits_of(P)) == 1
    assert s.sample(np.array([1.0, 3.0, 3.0, 2.0], np.float32)) == 1
    assert Sampler(SamplerParams(temp=-1.0)).sample(np.array([[0.0, 5.0, 1.0]], np.float32)) == 1
    assert s.sample(np.array([np.nan, 1.0, 2.0, np.nan], np.float32)) == 2


def test_no_truncation_keeps_distribution():
    ids, probs = Sampler(SamplerParams(temp=1.0, **OFF)).candidates(logits_of(P))
    assert list(ids) == [1, 2, 3, 4, 0]
    np.testing.assert_allclose(probs, [0.4, 0.3, 0.15, 0.1, 0.05], rtol=1e-6)


def test_top_k():
    ids, probs = Sampler(SamplerParams(temp=1.0, top_k=2, top_p=1.0, min_p=0.0)).candidates(logits_of(P))
    assert list(ids) == [1, 2]
    np.testing.assert_allclose(probs, [0.4 / 0.7, 0.3 / 0.7], rtol=1e-6)


@pytest.mark.parametrize("top_p,keep", [(0.0, [1]), (0.39, [1]), (0.41, [1, 2]), (0.69, [1, 2]),
                                         (0.8, [1, 2, 3]), (0.96, [1, 2, 3, 4, 0])])
def test_top_p_shortest_prefix_reaching_p(top_p, keep):
    ids, _ = Sampler(SamplerParams(temp=1.0, top_k=0, top_p=top_p, min_p=0.0)).candidates(logits_of(P))
    assert list(ids) == keep


@pytest.mark.parametrize("min_p,keep", [(0.1, [1, 2, 3, 4, 0]), (0.2, [1, 2, 3, 4]), (0.3, [1, 2, 3]),
                                         (0.5, [1, 2]), (0.76, [1]), (1.0, [1])])
def test_min_p_relative_to_top(min_p, keep):
    # kept: p >= min_p * 0.4, i.e. thresholds .04, .08, .12, .2, .304, .4
    ids, _ = Sampler(SamplerParams(temp=1.0, top_k=0, top_p=1.0, min_p=min_p)).candidates(logits_of(P))
    assert list(ids) == keep


def test_order_truncation_before_temperature():
    """llama.cpp order: top-p sees the untempered distribution.  At temp 0.25 the tempered
    distribution is [~.72, ~.23, ...]: were top-p applied after temperature, p=0.7 would keep one
    token; applied before (llama.cpp), it keeps two."""
    ids, probs = Sampler(SamplerParams(temp=0.25, top_k=0, top_p=0.7, min_p=0.0)).candidates(logits_of(P))
    assert list(ids) == [1, 2]
    w = np.array([0.4, 0.3]) ** 4
    np.testing.assert_allclose(probs, w / w.sum(), rtol=1e-5)


def test_combined_chain():
    # top-k 4 -> {1,2,3,4}; top-p .9 on renormalised [.4,.3,.15,.1]/.95 -> cum .42,.74,.89,1.0 -> all 4;
    # min-p .3 -> p >= .3*.4/.95 in the renormalised space -> drops 4 (.1/.95 < .126)
    ids, _ = Sampler(SamplerParams(temp=1.0, top_k=4, top_p=0.9, min_p=0.3)).candidates(logits_of(P))
    assert list(ids) == [1, 2, 3]


def test_sample_frequencies_match_distribution():
    s = Sampler(SamplerParams(temp=1.0, seed=1234, **OFF))
    n = 20000
    counts = np.bincount([s.sample(logits_of(P)) for _ in range(n)], minlength=5) / n
    np.testing.assert_allclose(counts, P, atol=0.015)


def test_seed_reproducible_and_seed_sensitive():
    z = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    a = Sampler(SamplerParams(temp=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=42))
    b = Sampler(SamplerParams(temp=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=42))
    c = Sampler(SamplerParams(temp=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=43))
    sa = [a.sample(z) for _ in range(50)]
    assert sa == [b.sample(z) for _ in range(50)]
    assert sa != [c.sample(z) for _ in range(50)]
    assert len(set(sa)) > 10
    r = Sampler(SamplerParams())          # no seed: a random one, reported
    assert isinstance(r.seed, int) and r.to_dict()["seed"] == r.seed


def test_masked_logits_never_sampled():
    z = np.array([-np.inf, 0.0, -np.inf, 0.1], np.float32)
    s = Sampler(SamplerParams(temp=1.0, seed=0, **OFF))
    assert {s.sample(z) for _ in range(200)} == {1, 3}


@pytest.mark.parametrize("kw", [dict(top_p=1.5), dict(min_p=-0.1), dict(temp=float("nan")), dict(seed=-5)])
def test_bad_params(kw):
    with pytest.raises(InputError):
        Sampler(SamplerParams(**kw))
