"""The variance outside the training range (``extrapolation_variance``).

The kernel against its definition (a Bayesian linear model of ReLU features beyond
the range, integrated numerically), its samples against its variance, the
jackknife choice, and what the classifier does with it on both sides.
"""

import pickle
import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris, make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

from sklaplace import LaplaceClassifier
from sklaplace._laplace.outside import VARIANCE_GRID, RangeKernel, choose_variance


def _kernel(X, variance=1.0):
    return RangeKernel.of(torch.as_tensor(X, dtype=torch.float64), variance=variance)


def test_zero_on_the_training_range_and_cubic_beyond():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 3))
    k = _kernel(X, 2.0)
    assert torch.all(k.diag(torch.as_tensor(X)) == 0)
    std, top = X.std(0), X.max(0)
    beyond = torch.as_tensor(np.array([top + 0.5 * std, top + 1.0 * std]))
    v = k.diag(beyond)
    # e = 0.5 and 1 standard deviations beyond in every coordinate: σ²·e³/3
    np.testing.assert_allclose(v.numpy(), 2.0 * np.array([0.125, 1.0]) / 3, rtol=1e-12)
    below = torch.as_tensor((X.min(0) - 1.0 * std)[None])
    np.testing.assert_allclose(k.diag(below).numpy(), [2.0 / 3], rtol=1e-12)


def test_kernel_is_the_covariance_of_relu_features_beyond_the_range():
    # one coordinate: features max(0, e − c) and max(0, c − e) for c on the half-lines
    # beyond the range, unit prior variance per unit length: k(e, e') = ∫ φ_c(e) φ_c(e') dc
    X = np.array([[0.0], [1.0], [2.0]])  # range [0, 2], std √(2/3)
    k = _kernel(X)
    pts = np.array([[-1.3], [-0.2], [0.5], [2.4], [3.1], [4.0]])
    e = k.excess(torch.as_tensor(pts)).numpy()[:, 0]
    c = np.linspace(0, 6, 600_001)
    dc = c[1] - c[0]
    up = np.maximum(e[:, None] - c[None], 0)
    down = np.maximum(-e[:, None] - c[None], 0)
    reference = (up @ up.T + down @ down.T) * dc
    K = k.cross(torch.as_tensor(pts), torch.as_tensor(pts)).numpy()
    np.testing.assert_allclose(K, reference, atol=1e-4)
    np.testing.assert_allclose(np.diag(K), k.diag(torch.as_tensor(pts)).numpy(), rtol=1e-12)
    assert np.linalg.eigvalsh(K).min() > -1e-12


def test_samples_have_the_kernel_as_covariance():
    X = np.random.default_rng(1).normal(size=(30, 2))
    k = _kernel(X, 0.7)
    pts = torch.as_tensor(np.array([[3.0, 0.0], [3.5, -4.0], [0.0, 0.0], [-3.0, 3.0]]))
    gen = torch.Generator().manual_seed(0)
    draws = k.sample(pts, 40_000, 2, gen)  # (S, n, C)
    cov = torch.einsum("snc,smc->nm", draws, draws) / (2 * len(draws))
    np.testing.assert_allclose(cov.numpy(), k.cross(pts, pts).numpy(), atol=0.05 * float(
        k.diag(pts).max()))


def test_leave_one_out_distance_only_for_rows_that_alone_hold_an_extreme():
    X = torch.tensor([[0.0, 5.0], [1.0, 5.0], [2.0, 1.0], [4.0, 3.0]], dtype=torch.float64)
    k = RangeKernel.of(X)
    loo = k.loo_diag(X).numpy()
    scale = X.std(0, correction=0).numpy()
    # row 3 alone holds the max of coordinate 0 (2 beyond the runner-up), row 0 its min
    # (1 below); coordinate 1's max is tied (rows 0, 1), its min is row 2 (2 below)
    expected = np.array([(1 / scale[0]) ** 3, 0.0, (2 / scale[1]) ** 3, (2 / scale[0]) ** 3]) / 6
    np.testing.assert_allclose(loo, expected, rtol=1e-12)


def test_choice_is_the_largest_variance_within_the_cost_cap():
    X = torch.tensor([[0.0], [1.0], [2.0], [10.0]], dtype=torch.float64)
    y = torch.tensor([0, 1, 0, 1])
    k = RangeKernel.of(X)
    mean = torch.tensor([[5.0, -5.0]]).repeat(4, 1).double()

    def moments(rows):
        return mean[: len(rows)], torch.zeros(len(rows), 2, 2, dtype=torch.float64)

    def nll(f, cov, labels):  # a cost that grows with the added variance
        return cov[:, 0, 0].numpy()

    # the extreme rows 0 and 3 pay v·unit; cap 0.002 per row of the 4
    unit = k.loo_diag(X)
    chosen = choose_variance(k, X, y, None, moments, nll)
    allowed = VARIANCE_GRID[VARIANCE_GRID * float(unit.sum()) / 4 <= 0.002]
    assert chosen == allowed.max()


def _iris():
    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    rng = np.random.default_rng(0)
    rows = rng.permutation(len(X))
    return X[rows[:110]], y[rows[:110]], X[rows[110:]], y[rows[110:]]


@pytest.fixture(scope="module")
def iris_fits():
    X, y, X_te, y_te = _iris()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        auto = LaplaceClassifier(max_epochs=60, random_state=0).fit(X, y)
        off = LaplaceClassifier(max_epochs=60, random_state=0,
                                extrapolation_variance=0).fit(X, y)
    return auto, off, X, X_te, y_te


def test_default_adds_variance_only_outside_the_range(iris_fits):
    auto, off, X, X_te, _ = iris_fits
    assert auto.extrapolation_variance_ > 0 and off.extrapolation_variance_ == 0
    inside = np.all((X_te >= X.min(0)) & (X_te <= X.max(0)), axis=1)
    assert inside.sum() > 10
    np.testing.assert_array_equal(auto.predict_proba(X_te[inside]),
                                  off.predict_proba(X_te[inside]))
    far = 3 * X_te
    d_auto, d_off = auto.predict_dist(far), off.predict_dist(far)
    k = auto.laplace_.outside
    added = k.diag(torch.as_tensor(far)).numpy()
    np.testing.assert_allclose(d_auto.logit_cov - d_off.logit_cov,
                               added[:, None, None] * np.eye(3)[None], atol=1e-10)
    assert auto.predict_proba(far).max(1).mean() < off.predict_proba(far).max(1).mean() - 0.1


def test_a_given_variance_is_used_and_the_sampled_net_refuses_one(iris_fits):
    _, _, X, _, _ = iris_fits
    y = np.arange(len(X)) % 3
    est = LaplaceClassifier(hidden_layer_sizes=(5,), max_epochs=3, extrapolation_variance=2.5,
                            hyperparameter_tuning="evidence", random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    assert est.extrapolation_variance_ == 2.5 and est.laplace_.outside.variance == 2.5
    samples = est._function_samples(3 * X[:4], 5, 0)
    assert samples.shape == (5, 4, 3)
    with pytest.raises(ValueError, match="extrapolation_variance"):
        LaplaceClassifier(pred_type="nn", extrapolation_variance=1.0).fit(X, y)
    with pytest.raises(ValueError, match="extrapolation_variance"):
        LaplaceClassifier(extrapolation_variance=-1.0).fit(X, y)
    nn = LaplaceClassifier(hidden_layer_sizes=(5,), max_epochs=3, pred_type="nn", n_samples=5,
                           random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        nn.fit(X, y)
    assert nn.extrapolation_variance_ == 0 and nn.laplace_.outside is None


def test_pickles_and_an_earlier_pickle_without_the_parameter(iris_fits):
    auto, *_ , X_te, _ = iris_fits
    again = pickle.loads(pickle.dumps(auto))
    np.testing.assert_array_equal(again.predict_proba(3 * X_te), auto.predict_proba(3 * X_te))
    state = auto.__getstate__()
    state.pop("extrapolation_variance")
    old = LaplaceClassifier.__new__(LaplaceClassifier)
    old.__setstate__(state)
    assert old.get_params()["extrapolation_variance"] == 0.0


def test_partial_fit_covers_every_task_range():
    X, y = make_classification(200, 4, n_informative=3, n_redundant=0, random_state=0)
    est = LaplaceClassifier(hidden_layer_sizes=(8,), max_epochs=5, random_state=0,
                            extrapolation_variance=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.partial_fit(X[:100], y[:100], classes=[0, 1])
        est.partial_fit(X[100:] + 5.0, y[100:])
    k = est.laplace_.outside
    both = np.vstack([X[:100], X[100:] + 5.0])
    np.testing.assert_allclose(k.low.numpy(), both.min(0))
    np.testing.assert_allclose(k.high.numpy(), both.max(0))


@pytest.mark.parametrize("link", ["probit", "mc"])
def test_far_rows_get_finite_uniform_probabilities(iris_fits, link):
    auto, _, _, X_te, _ = iris_fits
    est = auto.set_params(link_approx=link, n_samples=200)
    try:
        for factor in (1e3, 1e200):
            proba = est.predict_proba(factor * X_te[:4])
            assert np.isfinite(proba).all()
            assert np.isfinite(est.predict_dist(factor * X_te[:4]).logit_cov).all()
            atol = 1e-3 if link == "probit" else 0.15
            np.testing.assert_allclose(proba.max(1), 1 / 3, atol=atol)
    finally:
        est.set_params(link_approx="probit")


def test_regressor_adds_the_variance_in_model_units_and_to_the_joint_covariance():
    from sklaplace import LaplaceRegressor

    rng = np.random.default_rng(3)
    X = rng.normal(size=(80, 2))
    y = 50 + 20 * np.sin(X[:, 0]) + rng.normal(size=80)
    common = dict(hidden_layer_sizes=(8,), max_epochs=20, random_state=0,
                  hyperparameter_tuning="evidence")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        on = LaplaceRegressor(extrapolation_variance=2.0, **common).fit(X, y)
        off = LaplaceRegressor(extrapolation_variance=0, **common).fit(X, y)
        auto = LaplaceRegressor(**common).fit(X, y)
    assert auto.extrapolation_variance_ == 0  # the regressor's "auto" (docs/defaults.md)
    rows = np.vstack([X[:3], X.max(0) + X[:3] ** 2 + 0.5])
    std_on, std_off = on.predict(rows, return_std=True)[1], off.predict(rows, return_std=True)[1]
    added = on.laplace_.outside.diag(torch.as_tensor(rows)).numpy() * np.std(y) ** 2
    np.testing.assert_allclose(std_on**2 - std_off**2, added, rtol=1e-8, atol=1e-8)
    assert np.all(added[:3] == 0) and np.all(added[3:] > 0)
    _, cov = on.predict(rows, return_cov=True)
    np.testing.assert_allclose(np.sqrt(np.diag(cov)), std_on, rtol=1e-10)
    assert abs(cov[3, 4]) > abs(off.predict(rows, return_cov=True)[1][3, 4])


def test_partial_fit_after_fit_keeps_the_chosen_variance_over_both_ranges():
    X, y = make_classification(240, 4, n_informative=3, n_redundant=0, random_state=1)
    X = StandardScaler().fit_transform(X)
    est = LaplaceClassifier(hidden_layer_sizes=(8,), max_epochs=40, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X[:160], y[:160])
        chosen = est.extrapolation_variance_
        assert chosen > 0
        est.partial_fit(X[160:] + 4.0, y[160:])
    assert est.extrapolation_variance_ == chosen == est.laplace_.outside.variance
    np.testing.assert_allclose(est.laplace_.outside.high.numpy(), (X[160:] + 4.0).max(0))
    np.testing.assert_allclose(est.laplace_.outside.low.numpy(), X[:160].min(0))


def test_sampled_functions_carry_the_added_variance(iris_fits):
    auto, _, _, X_te, _ = iris_fits
    far = 2 * X_te[:5]
    draws = auto.sample_functions(far, n_samples=4000, random_state=0)  # (S, n, C)
    var = draws.var(0)
    expected = np.diagonal(auto.predict_dist(far).logit_cov, axis1=1, axis2=2)
    assert expected.max() > 1.0  # the rows are outside the range: the term dominates
    np.testing.assert_allclose(var, expected, rtol=0.15)


def test_leave_one_out_reads_weights_as_duplicated_rows():
    X = torch.tensor([[0.0], [1.0], [3.0]], dtype=torch.float64)
    k = RangeKernel.of(X)
    for w_top, outside in [(1.0, True), (1.5, True), (2.0, False), (3.0, False)]:
        w = torch.tensor([1.0, 1.0, w_top], dtype=torch.float64)
        assert bool(k.loo_diag(X, w)[2] > 0) is outside
