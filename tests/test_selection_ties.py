"""The regressor's architecture selection: held-out NLLs within one standard error of
their paired difference tie, towards the simpler candidate."""

import numpy as np

from sklaplace.estimators._selection import improves, summarize, tie_margin


def _rows(nlls):
    return [((50,) * i, 10 * (i + 1), nll, 0.0, 0.0, 1.0, 5, False)
            for i, nll in enumerate(nlls)]


def test_tie_margin_is_the_standard_error_of_the_paired_difference():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=40), rng.normal(size=40)
    d = a - b
    assert np.isclose(tie_margin([a, b], 0, 1), d.std(ddof=1) / np.sqrt(len(d)), rtol=1e-12)
    # integer weights count rows as repeated
    w = rng.integers(1, 4, size=40)
    rep = np.repeat(d, w)
    n_eff = w.sum() ** 2 / (w**2).sum()
    expected = np.sqrt(np.average((d - np.average(d, weights=w)) ** 2, weights=w) / (n_eff - 1))
    assert np.isclose(tie_margin([a, b], 0, 1, w), expected, rtol=1e-12)
    assert rep.size == w.sum()
    assert tie_margin([a, None], 0, 1) == 0.0 and tie_margin(None, 0, 1) == 0.0


def test_a_gain_within_noise_does_not_count_and_the_simpler_candidate_is_chosen():
    rng = np.random.default_rng(1)
    base = rng.normal(size=200)
    tie = base - 0.01 + np.tile([1.0, -1.0], 100)  # 0.01 nats better, SE ≈ 0.07
    gain = base - 0.5 + np.tile([0.1, -0.1], 100)  # 0.5 better, SE ≈ 0.007
    for other, wins in ((tie, False), (gain, True)):
        losses = [base, other]
        rows = _rows([base.mean(), other.mean()])
        assert improves(rows, losses) is wins
        assert improves(rows) is bool(other.mean() < base.mean())  # no losses: as before
        best, results = summarize([(), (50,)], rows, False, 1.0, losses=losses)
        assert best == int(wins)
        assert summarize([(), (50,)], rows, False, 1.0)[0] == int(other.mean() < base.mean())


def test_the_smallest_within_one_standard_error_of_the_best_wins_skipped_ones_last():
    rng = np.random.default_rng(2)
    base = rng.normal(size=300)
    mid = base - 0.5 + rng.normal(scale=0.05, size=300)    # clearly better than the linear
    big = mid - 0.001 + rng.normal(scale=0.05, size=300)   # ties with mid
    rows = _rows([base.mean(), mid.mean(), big.mean()])
    assert summarize([(), (50,), (50, 50)], rows, False, 1.0,
                     losses=[base, mid, big])[0] == 1
    rows[2] = rows[2][:2] + (np.nan,) + rows[2][3:]  # skipped
    assert summarize([(), (50,), (50, 50)], rows, False, 1.0,
                     losses=[base, mid, None])[0] == 1
