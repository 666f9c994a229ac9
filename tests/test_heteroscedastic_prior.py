"""noise="heteroscedastic": the prior precision tuned per output head — the weights of
η₁'s rows of the output layer, those of the log precision's rows, and the rest — and the
variance outside the training range added as the one-σ regressor's, in units of y."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
import torch
from torch import nn

from sklaplace import LaplaceRegressor
from sklaplace._laplace import natural
from sklaplace._laplace.prior import PriorGroups
from sklaplace._laplace.subsets import AllWeights, LastLayer
from sklaplace.nets import MLP

SMALL = dict(noise="heteroscedastic", hidden_layer_sizes=(6,), max_epochs=40, random_state=0)


def data(n=60, T=1, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 2))
    y = np.sin(2 * X[:, :1]) + (0.1 + 0.2 * np.abs(X[:, 1:])) * rng.standard_normal((n, 1))
    return X, (y[:, 0] if T == 1 else np.hstack([y, -y + 0.1 * rng.standard_normal((n, 1))]))


def test_head_index_labels_the_output_rows_of_each_head():
    module = MLP(3, 4, (5,))  # T = 2: rows 0, 1 are η₁, rows 2, 3 the log precision
    heads = natural.head_index(module, 4)
    W1, b1, W2, b2 = np.split(heads, np.cumsum([15, 5, 20]))
    assert (W1 == 0).all() and (b1 == 0).all()
    np.testing.assert_array_equal(W2.reshape(4, 5), np.repeat([[1], [1], [2], [2]], 5, 1))
    np.testing.assert_array_equal(b2, [1, 1, 2, 2])
    assert natural.head_index(module, 6) is None  # the last layer does not have 2T outputs
    frozen = MLP(3, 4, (5,))
    frozen.layers[-1].weight.requires_grad_(False)
    assert natural.head_index(frozen, 4) is None


@pytest.mark.parametrize("structure, n_free", [("scalar", 3), ("layerwise", 6)])
def test_groups_split_by_head_expand_and_return_one_value_per_parameter(structure, n_free):
    module = MLP(3, 4, (5,)).double()
    subset = AllWeights(module)
    heads = natural.head_index(module, 4)
    groups = PriorGroups(structure, subset, heads)
    assert groups.n_free == n_free
    values = torch.arange(1.0, n_free + 1, dtype=torch.float64)
    per_weight = groups.expand(values).numpy()
    # each group: one (tensor group, head) pair, constant within it
    base = np.zeros(subset.n_params, int) if structure == "scalar" else subset.group_index
    for g in range(n_free):
        members = per_weight == g + 1
        assert len({(b, h) for b, h in zip(base[members], heads[members])}) == 1
    whole = groups.to_whole(values.numpy(), 1.0)
    np.testing.assert_array_equal(whole, per_weight)  # all weights: whole net = subset
    # the start: per group, the geometric mean of the subset δ
    start = torch.as_tensor(np.exp(np.random.default_rng(0).normal(size=subset.n_params)))
    expected = [np.log(start.numpy()[per_weight == g + 1]).mean() for g in range(n_free)]
    np.testing.assert_allclose(groups.log_start(start).numpy(), expected, rtol=1e-12)


def test_last_layer_subset_groups_split_the_heads():
    module = MLP(3, 2, (5,)).double()
    subset = LastLayer(module, torch.zeros(2, 3, dtype=torch.float64))
    heads = natural.head_index(module, 2)[subset.whole_index]
    groups = PriorGroups("scalar", subset, heads)
    assert groups.n_free == 2  # η₁'s row and the log precision's row, no shared weight
    whole = groups.to_whole(np.array([2.0, 3.0]), 7.0)
    # outside the subset (15 + 5 hidden values): kept; the output weight's rows, its bias
    np.testing.assert_array_equal(whole, [7.0] * 20 + [2.0] * 5 + [3.0] * 5 + [2.0, 3.0])


@pytest.mark.parametrize("tuning", ["evidence", "online"])
def test_fitted_prior_is_one_value_per_head_and_beats_every_scalar(tuning):
    X, y = data()
    est = LaplaceRegressor(hyperparameter_tuning=tuning, hessian_structure="full",
                           online_frequency=5, **SMALL).fit(X, y)
    delta = np.asarray(est.prior_precision_)
    heads = natural.head_index(est.net_.module_, 2)
    assert delta.shape == heads.shape
    for h in range(3):
        assert np.ptp(delta[heads == h]) == 0
    # one δ for all weights is a special case of one per head: the grouped maximum of the
    # evidence is at least the best scalar's (a fine grid)
    grid = [est.log_evidence(prior_precision=d) for d in 10.0 ** np.linspace(-4, 4, 161)]
    assert est.log_evidence_ >= max(grid) - 1e-9
    assert est.log_evidence() == pytest.approx(est.log_evidence_, rel=1e-12)
    # each head's δ is a stationary point of the evidence, inside its bounds (η₁'s are
    # e^(−2ḡ) times the others'): moving one group's δ by ±2 % lowers it
    for h in range(3):
        for factor in (0.98, 1.02):
            moved = np.where(heads == h, delta * factor, delta)
            assert est.log_evidence(prior_precision=moved) < est.log_evidence_


def test_eta1_prior_is_searched_relative_to_its_scale():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (100, 2))
    y = X[:, 0] - 0.5 * X[:, 1] + 0.002 * rng.standard_normal(100)  # σ ≈ std(y) / 300
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)  # no optimum on a bound
        warnings.filterwarnings("ignore", "MAP training ran", ConvergenceWarning)
        est = LaplaceRegressor(hyperparameter_tuning="evidence", hessian_structure="full",
                               **{**SMALL, "max_epochs": 60}).fit(X, y)
    delta, heads = np.asarray(est.prior_precision_), natural.head_index(est.net_.module_, 2)
    Xt = torch.as_tensor(X, dtype=torch.float64)
    g_bar = float(est.net_.module_.double()(Xt)[:, 1].mean())
    eta1 = delta[heads == 1][0]
    # η₁'s weights are ~e^ḡ times the mean's: its optimum lies below the others' bound
    assert g_bar > 4 and eta1 < 1e-4
    assert 1e-4 * np.exp(-2 * g_bar) < eta1
    for factor in (0.98, 1.02):
        moved = np.where(heads == 1, delta * factor, delta)
        assert est.log_evidence(prior_precision=moved) < est.log_evidence_


def test_kron_keeps_one_value_per_tensor_and_two_targets_split_by_head():
    X, y = data(T=2)
    est = LaplaceRegressor(hyperparameter_tuning="evidence", hessian_structure="kron",
                           **SMALL).fit(X, y)
    assert np.ndim(est.prior_precision_) == 0  # Kronecker factors: the structure's own
    full = LaplaceRegressor(hyperparameter_tuning="evidence", hessian_structure="full",
                            **SMALL).fit(X, y)
    delta, heads = np.asarray(full.prior_precision_), natural.head_index(full.net_.module_, 4)
    out = full.net_.module_.layers[-1]
    n_out = out.weight.numel() + out.bias.numel()
    np.testing.assert_array_equal(heads[-n_out:][:2 * 6], 1)  # the two η₁ rows
    assert len(np.unique(delta)) == 3


def test_a_net_without_a_2t_output_layer_keeps_the_structure_groups():
    class Heads(nn.Module):  # two output layers: none has 2T outputs
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(2, 5), nn.Tanh())
            self.mean, self.log_precision = nn.Linear(5, 1), nn.Linear(5, 1)

        def forward(self, X):
            h = self.body(X)
            return torch.cat([self.mean(h), self.log_precision(h)], 1)

    assert natural.head_index(Heads(), 2) is None


def test_variance_outside_the_range_is_the_homoscedastic_one_in_units_of_y():
    X, y = data()
    y = 50 * y + 3  # normalize_y: the kernel's σ² is in model units, ×std(y)² in y's
    far = np.array([[2.5, -0.3], [0.2, 0.1]])  # the first row beyond the range, not the second
    for noise in ("heteroscedastic", "homoscedastic"):
        params = {**SMALL, "noise": noise}
        base = LaplaceRegressor(**params, extrapolation_variance=None).fit(X, y)
        wide = LaplaceRegressor(**params, extrapolation_variance=2.0).fit(X, y)
        kernel = wide.laplace_.outside
        k = kernel.diag(torch.as_tensor(far, dtype=torch.float64)).numpy()
        np.testing.assert_allclose(k / kernel.variance, [((2.5 - X[:, 0].max()) / X[:, 0].std()) ** 3 / 6, 0],
                                   rtol=1e-12)  # mean over the 2 coordinates of |e|³/3
        std = wide.laplace_.targets.std[0]
        a, b = base.predict_dist(far), wide.predict_dist(far)
        np.testing.assert_allclose(b.epistemic_var - a.epistemic_var, k * std**2,
                                   rtol=1e-9, atol=1e-9 * std**2)
        np.testing.assert_allclose(b.aleatoric_var, a.aleatoric_var, rtol=1e-12)
