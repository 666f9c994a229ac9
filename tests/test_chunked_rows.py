"""Per-row computations by chunks of rows: a small memory budget forces many chunks, and
the chunked paths give the numbers of one pass over all rows (float64)."""

import numpy as np
import pytest
import torch

from sklaplace import LaplaceClassifier, LaplaceRegressor
from sklaplace._laplace import holdout
from sklaplace._laplace.holdout import (LOG10_PRIOR_GRID, held_out_chunks,
                                        held_out_variances)


def _data(n=80, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(n, 4))
    y = np.argmax(X[:, :3] + 0.5 * rng.normal(size=(n, 3)), axis=1)
    return X, y


@pytest.mark.parametrize("structure", ["full", "lowrank", "diag", "kron"])
@pytest.mark.parametrize("kind", ["classifier", "regressor"])
def test_held_out_grid_by_row_chunks_equals_one_pass(structure, kind):
    X, y = _data()
    common = dict(hidden_layer_sizes=(5,), hessian_structure=structure,
                  hyperparameter_tuning=None, max_epochs=5, random_state=0)
    if kind == "regressor":
        est = LaplaceRegressor(**common).fit(X, np.c_[X[:, 0], X[:, 1] ** 2])
    else:
        est = LaplaceClassifier(**common).fit(X, y)
    fitted = est.laplace_
    posterior, Xv = fitted.evidence.posterior, torch.as_tensor(X[:23])
    deltas = 10.0 ** LOG10_PRIOR_GRID[::4]
    f_all, covs_all = held_out_variances(posterior, fitted.subset, Xv, deltas, 0.3)
    covs_all = torch.stack(list(covs_all))
    one_row = holdout.grid_row_bytes(fitted.subset, posterior, f_all.shape[1], len(deltas))
    chunks = list(held_out_chunks(posterior, fitted.subset, Xv, deltas, 0.3,
                                  budget=4 * one_row))
    assert [rows.stop - rows.start for rows, *_ in chunks] == [4] * 5 + [3]
    f = torch.cat([part for _, part, _ in chunks])
    covs = torch.cat([torch.stack(list(c)) for *_, c in chunks], dim=1)
    torch.testing.assert_close(f, f_all, rtol=1e-13, atol=1e-15)
    # at the smallest δ the posterior is ill-conditioned and the two sums' rounding differs
    # by ~1e-11 of the largest entry on some CPUs: compare on each δ's own scale
    scale = covs_all.abs().flatten(1).amax(1).reshape(-1, *[1] * (covs_all.dim() - 1))
    torch.testing.assert_close(covs / scale, covs_all / scale, rtol=0, atol=1e-10)


@pytest.mark.parametrize("kind", ["classifier", "regressor"])
def test_held_out_tuning_with_a_small_budget_equals_the_unchunked(kind, monkeypatch):
    X, y = _data(120)
    common = dict(hidden_layer_sizes=(6,), hyperparameter_tuning="cv", max_epochs=10,
                  random_state=0)

    def fit():
        if kind == "regressor":
            return LaplaceRegressor(**common).fit(X, X[:, 0] - X[:, 1] ** 2)
        return LaplaceClassifier(**common).fit(X, y)

    whole = fit()
    monkeypatch.setattr(holdout, "MANY_BYTES", 5_000)  # a few held-out rows per chunk
    chunked = fit()
    # the regressor's σ is the stationary point of the held-out NLL (a bounded search, then
    # Newton): a function of the held-out moments, which the chunks give to the last bits
    np.testing.assert_allclose(chunked.prior_precision_, whole.prior_precision_, rtol=1e-12)
    np.testing.assert_allclose(chunked.validation_nll_, whole.validation_nll_, rtol=1e-12)
    if kind == "regressor":
        np.testing.assert_allclose(chunked.sigma_noise_, whole.sigma_noise_, rtol=1e-12)


def test_range_kernel_and_jackknife_distances_by_row_chunks_equal_one_pass(monkeypatch):
    from sklaplace._laplace import outside

    rng = np.random.RandomState(1)
    X = torch.as_tensor(rng.normal(size=(57, 3)))
    X[10, 0] = X[:, 0].max() + 1.0  # alone at the top of coordinate 0
    X[20, 1] = X[21, 1] = X[:, 1].max() + 0.5  # a tie at the top of coordinate 1
    weights = [None, torch.as_tensor(rng.choice([0.5, 1.0, 3.0], size=57))]
    whole = [(outside.RangeKernel.of(X, w), outside.RangeKernel.of(X, w).loo_diag(X, w))
             for w in weights]
    monkeypatch.setattr(outside, "CHUNK_BYTES", 8 * 3 * 5)  # five rows per chunk
    for w, (kernel, loo) in zip(weights, whole):
        chunked = outside.RangeKernel.of(X, w)
        torch.testing.assert_close(chunked.scale, kernel.scale, rtol=1e-14, atol=0)
        torch.testing.assert_close(chunked.loo_diag(X, w), loo, rtol=1e-14, atol=0)
        assert (loo > 0).sum() >= 2
    fits = []
    for chunk in (outside.CHUNK_BYTES, 2**26):
        monkeypatch.setattr(outside, "CHUNK_BYTES", chunk)
        Xn, y = _data(150)
        fits.append(LaplaceClassifier(hidden_layer_sizes=(5,), hyperparameter_tuning="evidence",
                                      max_epochs=10, random_state=0).fit(Xn, y))
    assert fits[0].laplace_.hyper == fits[1].laplace_.hyper
    np.testing.assert_allclose(fits[0].predict_proba(Xn * 3), fits[1].predict_proba(Xn * 3),
                               rtol=1e-12)


def test_refined_held_out_tuning_with_a_small_budget_equals_the_unchunked(monkeypatch):
    X, y = _data(60)
    common = dict(hidden_layer_sizes=(3,), hyperparameter_tuning="cv", refine="laplace",
                  hessian_structure="full", max_epochs=5, random_state=0)
    whole = LaplaceClassifier(**common).fit(X, y)
    monkeypatch.setattr(holdout, "MANY_BYTES", 3_000)  # a few held-out rows per chunk
    chunked = LaplaceClassifier(**common).fit(X, y)
    np.testing.assert_allclose(chunked.prior_precision_, whole.prior_precision_, rtol=1e-12)
    np.testing.assert_allclose(chunked.validation_nll_, whole.validation_nll_, rtol=1e-12)
