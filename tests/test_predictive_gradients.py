"""``LaplaceRegressor.predict(return_mean_grad=True, return_std_grad=True)``: the gradients
of the GLM predictive's mean and std with respect to the rows of X, against central finite
differences of ``predict`` itself (float64), in scikit-optimize's shapes."""

import numpy as np
import pytest

from sklaplace import LaplaceRegressor

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def _data(n=80, d=2, outputs=1, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.uniform(-2, 2, size=(n, d))
    y = 10 * np.sin(X[:, 0]) + X[:, 1] ** 2 + 3 + 0.1 * rng.normal(size=n)
    if outputs > 1:
        y = np.column_stack([y, -2 * y + 0.5 * X[:, 0]])
    return X, y


def _fit(outputs=1, d=2, **params):
    X, y = _data(d=d, outputs=outputs)
    common = dict(hidden_layer_sizes=(8,), max_epochs=20, random_state=0)
    return LaplaceRegressor(**common, **params).fit(X, y)


def _finite_differences(reg, X, h):
    """Central differences of predict's mean and std, (n, [n_targets,] n_features)."""
    grads_mean, grads_std = [], []
    for j in range(X.shape[1]):
        e = np.zeros(X.shape[1])
        e[j] = h
        mp, sp = reg.predict(X + e, return_std=True)
        mm, sm = reg.predict(X - e, return_std=True)
        grads_mean.append((mp - mm) / (2 * h))
        grads_std.append((sp - sm) / (2 * h))
    return np.stack(grads_mean, axis=-1), np.stack(grads_std, axis=-1)


# rows inside and outside the training range [-2, 2]² (where the extrapolation term acts)
ROWS = np.array([[0.3, -1.5], [-2.7, 0.4], [1.1, 2.9], [3.5, -3.2]])


@pytest.mark.parametrize("params", [
    {},                                            # all weights, full (the "auto" here)
    {"hessian_structure": "diag"},
    {"hessian_structure": "kron"},
    {"extrapolation_variance": 1.0},               # the variance beyond the range, its term
    {"subnetwork": 20, "subset_of_weights": "subnetwork"},
    {"normalize_y": False, "hyperparameter_tuning": None},
], ids=["full", "diag", "kron", "extrapolation", "subnetwork", "unnormalized"])
def test_gradients_match_finite_differences(params):
    reg = _fit(**params)
    mean, std, mean_grad, std_grad = reg.predict(ROWS, return_std=True, return_mean_grad=True,
                                                 return_std_grad=True)
    np.testing.assert_array_equal(mean, reg.predict(ROWS))
    np.testing.assert_array_equal(std, reg.predict(ROWS, return_std=True)[1])
    fd_mean, fd_std = _finite_differences(reg, ROWS, 1e-6)
    assert mean_grad.shape == std_grad.shape == (4, 2)
    np.testing.assert_allclose(mean_grad, fd_mean, rtol=1e-6, atol=1e-6 * np.abs(fd_mean).max())
    np.testing.assert_allclose(std_grad, fd_std, rtol=1e-6, atol=1e-6 * np.abs(fd_std).max())
    assert np.abs(std_grad).max() > 1e-3  # the std does move with x here


def test_the_extrapolation_term_has_its_gradient():
    """Beyond the range the added variance σ²·|e|³/3 dominates the std's gradient: with it
    the std grows faster there than without it, by the term's derivative."""
    plain, wide = _fit(extrapolation_variance=0.0), _fit(extrapolation_variance=5.0)
    far = np.array([[4.0, 0.0]])
    _, s0, _, g0 = plain.predict(far, return_std=True, return_mean_grad=True,
                                 return_std_grad=True)
    _, s1, _, g1 = wide.predict(far, return_std=True, return_mean_grad=True,
                                return_std_grad=True)
    assert s1[0] > s0[0] and g1[0] > g0[0] > -np.inf
    fd = _finite_differences(wide, far, 1e-6)[1][0]
    np.testing.assert_allclose(g1, fd, rtol=1e-6, atol=1e-9)


def test_last_layer_gradients():
    """The last layer's features run in the network's own dtype (float32 for the default
    MLP): compared with wider differences."""
    reg = _fit(subset_of_weights="last_layer")
    _, _, mean_grad, std_grad = reg.predict(ROWS, return_std=True, return_mean_grad=True,
                                            return_std_grad=True)
    fd_mean, fd_std = _finite_differences(reg, ROWS, 1e-3)
    np.testing.assert_allclose(mean_grad, fd_mean, rtol=1e-3, atol=1e-3 * np.abs(fd_mean).max())
    np.testing.assert_allclose(std_grad, fd_std, rtol=1e-3, atol=1e-3 * np.abs(fd_std).max())


def test_multi_output_and_many_features():
    reg = _fit(outputs=2, d=3)
    X = np.random.RandomState(1).uniform(-2.5, 2.5, size=(3, 3))
    mean, std, mean_grad, std_grad = reg.predict(X, return_std=True, return_mean_grad=True,
                                                 return_std_grad=True)
    assert mean.shape == std.shape == (3, 2) and mean_grad.shape == std_grad.shape == (3, 2, 3)
    fd_mean, fd_std = _finite_differences(reg, X, 1e-6)
    np.testing.assert_allclose(mean_grad, fd_mean, rtol=1e-6, atol=1e-6 * np.abs(fd_mean).max())
    np.testing.assert_allclose(std_grad, fd_std, rtol=1e-6, atol=1e-6 * np.abs(fd_std).max())
    one = reg.predict(X[:1], return_std=True, return_mean_grad=True, return_std_grad=True)
    assert one[2].shape == (2, 3)
    np.testing.assert_allclose(one[2], mean_grad[0], rtol=1e-12)


def test_scikit_optimize_shapes_and_returns():
    """One row: mean and std of shape (1,), the gradients (n_features,), in skopt's order."""
    reg = _fit()
    x = ROWS[:1]
    out = reg.predict(x, return_std=True, return_mean_grad=True, return_std_grad=True)
    assert [a.shape for a in out] == [(1,), (1,), (2,), (2,)]
    mean, mean_grad = reg.predict(x, return_mean_grad=True)
    np.testing.assert_array_equal(mean_grad, out[2])
    assert len(reg.predict(x, return_std=True, return_mean_grad=True)) == 3


def test_gradients_refused_where_they_do_not_exist():
    reg = _fit()
    with pytest.raises(ValueError, match="return_std_grad"):
        reg.predict(ROWS, return_mean_grad=True, return_std_grad=True)
    with pytest.raises(ValueError, match="return_std_grad"):
        reg.predict(ROWS, return_std=True, return_std_grad=True)
    with pytest.raises(ValueError, match="return_cov"):
        reg.predict(ROWS, return_cov=True, return_mean_grad=True)
    reg.set_params(pred_type="nn")
    with pytest.raises(ValueError, match="pred_type"):
        reg.predict(ROWS, return_mean_grad=True)


def test_scikit_optimize_runs_with_its_defaults():
    """skopt.Optimizer with the estimator as its surrogate: gp_hedge's three acquisitions
    optimized by L-BFGS (acq_optimizer="auto" picks "lbfgs" for an estimator with
    gradients), a few steps on a 2-D function, every point inside the bounds."""
    skopt = pytest.importorskip("skopt")
    from skopt.acquisition import gaussian_ei

    base = LaplaceRegressor(hidden_layer_sizes=(8,), max_epochs=20, random_state=0)
    opt = skopt.Optimizer([(-2.0, 2.0), (-2.0, 2.0)], base_estimator=base,
                          n_initial_points=3, acq_optimizer_kwargs={"n_points": 200},
                          random_state=0)
    assert opt.acq_optimizer == "lbfgs"

    def objective(p):
        return (p[0] - 0.5) ** 2 + (p[1] + 0.3) ** 2

    for _ in range(6):
        point = opt.ask()
        assert all(-2.0 <= v <= 2.0 for v in point)
        result = opt.tell(point, objective(point))
    assert len(result.models) == 4 and len(result.x_iters) == 6
    # skopt's own EI gradient from our predict agrees with its finite differences
    model, x = result.models[-1], np.array([[0.1, 0.2]])
    value, grad = gaussian_ei(x, model, y_opt=min(result.func_vals), return_grad=True)
    h, fd = 1e-6, []
    for j in range(2):
        e = np.zeros(2)
        e[j] = h
        fd.append((gaussian_ei(x + e, model, min(result.func_vals))
                   - gaussian_ei(x - e, model, min(result.func_vals)))[0] / (2 * h))
    assert grad.shape == (2,) and np.abs(grad).max() > 1e-4, (value, grad)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-8)


def test_gradients_refused_for_heteroscedastic_noise_and_dask():
    X, y = _data()
    het = LaplaceRegressor(hidden_layer_sizes=(8,), max_epochs=10, random_state=0,
                           noise="heteroscedastic").fit(X, y)
    with pytest.raises(ValueError, match="heteroscedastic"):
        het.predict(ROWS, return_std=True, return_mean_grad=True, return_std_grad=True)
    da = pytest.importorskip("dask.array")
    reg = _fit()
    with pytest.raises(ValueError, match="dask"):
        reg.predict(da.from_array(ROWS, chunks=2), return_mean_grad=True)
