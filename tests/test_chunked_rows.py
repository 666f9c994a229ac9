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
    torch.testing.assert_close(covs, covs_all, rtol=1e-12, atol=1e-15)


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
