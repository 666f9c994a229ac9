"""MAP training's convergence rule (tol / n_iter_no_change), n_iter_ / loss_curve_, L-BFGS."""

import warnings

import numpy as np
import pytest
import torch
from scipy.optimize import minimize
from sklearn.exceptions import ConvergenceWarning
from skorch import NeuralNetRegressor
from torch import nn

from sklaplace import LaplaceClassifier, LaplaceRegressor
from sklaplace._laplace.convergence import Convergence, Converged

SMALL = dict(hidden_layer_sizes=(8,), hyperparameter_tuning=None, random_state=0)


def linear_data(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, X @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.normal(size=n)


def rule_stops_at(losses, tol, n_iter_no_change):
    """The first epoch (1-based) at which the rule stops, computed from a loss curve."""
    best, count = np.inf, 0
    for epoch, loss in enumerate(losses, 1):
        count = count + 1 if loss > best - tol else 0
        best = min(best, loss)
        if count >= n_iter_no_change:
            return epoch
    return None


@pytest.mark.parametrize("Est", [LaplaceRegressor, LaplaceClassifier])
def test_stops_early_on_an_easy_problem(Est):
    X, y = linear_data()
    if Est is LaplaceClassifier:
        y = (y > 0).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = Est(max_epochs=1000, tol=1e-3, n_iter_no_change=5, **SMALL).fit(X, y)
    assert est.n_iter_ < 1000
    assert est.n_iter_ == len(est.net_.history) == len(est.loss_curve_)
    np.testing.assert_array_equal(est.loss_curve_, est.net_.history[:, "train_loss"])
    # the curve meets the rule at its last epoch and not before
    assert rule_stops_at(est.loss_curve_, 1e-3, 5) == est.n_iter_


def test_capped_training_warns_and_tol_none_does_not():
    X, y = linear_data()
    with pytest.warns(ConvergenceWarning, match="max_epochs=3"):
        est = LaplaceRegressor(max_epochs=3, **SMALL).fit(X, y)
    assert est.n_iter_ == 3 and est.loss_curve_.shape == (3,)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = LaplaceRegressor(max_epochs=30, tol=None, **SMALL).fit(X, y)
    assert est.n_iter_ == 30  # no rule: every epoch runs
    with warnings.catch_warnings():  # a count no training reaches: no early stop
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = LaplaceRegressor(max_epochs=30, n_iter_no_change=10**6, **SMALL).fit(X, y)
    assert est.n_iter_ == 30


def test_user_net_gets_the_rule_and_the_attributes():
    X, y = linear_data()
    net = NeuralNetRegressor(nn.Linear(3, 1), max_epochs=500, lr=0.05,
                             optimizer=torch.optim.Adam, batch_size=32)
    est = LaplaceRegressor(net, tol=1e-3, n_iter_no_change=5,
                           hyperparameter_tuning=None).fit(X, y)
    assert est.n_iter_ < 500 and len(est.loss_curve_) == est.n_iter_
    assert "sklaplace_convergence" not in dict(est.net_.callbacks_)  # not left on the net


def test_frozen_net_reports_the_training_it_came_with():
    from sklearn.frozen import FrozenEstimator

    X, y = linear_data()
    net = NeuralNetRegressor(nn.Linear(3, 1), max_epochs=3, train_split=None, verbose=0).fit(
        X.astype(np.float32), y[:, None].astype(np.float32))
    est = LaplaceRegressor(FrozenEstimator(net)).fit(X, y)
    assert est.n_iter_ == 3
    np.testing.assert_array_equal(est.loss_curve_, net.history[:, "train_loss"])


def test_partial_fit_records_its_own_training():
    X, y = linear_data()
    est = LaplaceRegressor(max_epochs=400, tol=1e-3, n_iter_no_change=5,
                           **SMALL).fit(X, y)
    first = est.n_iter_
    est.partial_fit(X[:60], y[:60])
    assert est.n_iter_ == len(est.loss_curve_) == len(est.net_.history)
    assert est.n_iter_ < 400 and (est.n_iter_, first) != (0, 0)


def test_partial_fit_far_from_the_first_task_warns():
    # The second task's targets lie ~1000 units away; 50 Adam epochs
    # from the first task's weights end far from them, and said nothing before
    rng = np.random.default_rng(0)
    w = np.array([1.0, -2.0, 0.5])
    X1, X2 = rng.normal(size=(200, 3)), rng.normal(size=(200, 3))
    reg = LaplaceRegressor(max_epochs=50, hidden_layer_sizes=(10,), random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg.fit(X1, X1 @ w)
    with pytest.warns(ConvergenceWarning, match="without converging"):
        reg.partial_fit(X2, X2 @ w + 1000)
    assert np.abs(reg.predict(X2) - (X2 @ w + 1000)).mean() > 100  # indeed far off


class _StubNet:
    def __init__(self):
        self.history = []
        self.criterion_ = type("Crit", (), {})()
        self.criterion_.prior_precision = torch.tensor(1.0)
        self.criterion_.sigma_noise = torch.tensor(1.0)


def run_rule(losses, updates=(), tol=0.1, n=3):
    """Epochs the callback lets run; ``updates``: epochs after which δ changes."""
    cb, net = Convergence(tol, n).initialize(), _StubNet()
    for epoch, loss in enumerate(losses, 1):
        cb.on_epoch_begin(net)
        net.history.append({"train_loss": loss})
        try:
            cb.on_epoch_end(net)
        except Converged:
            return epoch
        if epoch in updates:  # as OnlineEvidence does: new tensors on the criterion
            net.criterion_.prior_precision = torch.tensor(float(epoch))
    return None


def test_online_update_starts_a_new_reference():
    flat = [1.0, 0.5, 0.5, 0.5, 0.5, 0.5]
    assert run_rule(flat) == 5  # three epochs without an improvement of 0.1
    # δ grows after epoch 3: the objective jumps to 2.0 and is flat there; the jump is no
    # improvement and no setback, the count carries on (epochs 3, 5, 6)
    assert run_rule([1.0, 0.5, 0.5, 2.0, 2.0, 2.0, 2.0], updates=(3,)) == 6
    # a drop that comes with an update is no improvement either (without the update, epoch
    # 4's 0.3 < 0.5 - 0.1 would reset the count and the rule would not stop by epoch 6)
    assert run_rule([1.0, 0.5, 0.5, 0.3, 0.3, 0.3], updates=(3,)) == 6
    assert run_rule([1.0, 0.5, 0.5, 0.3, 0.3, 0.3]) is None
    assert run_rule(flat, tol=0.1, n=3) == rule_stops_at(flat, 0.1, 3)


def test_online_tuning_converges():
    X, y = linear_data()
    est = LaplaceRegressor(hidden_layer_sizes=(8,), hyperparameter_tuning="online",
                           max_epochs=1000, tol=1e-3, n_iter_no_change=5,
                           random_state=0).fit(X, y)
    assert est.n_iter_ < 1000 and len(est.evidence_history_) >= 1


@pytest.mark.parametrize("params, name", [
    ({"tol": -1e-3}, "tol"), ({"tol": "x"}, "tol"), ({"n_iter_no_change": 0}, "n_iter_no_change"),
    ({"n_iter_no_change": True}, "n_iter_no_change"), ({"solver": "sgd"}, "solver")])
def test_parameters_validated(params, name):
    X, y = linear_data(20)
    with pytest.raises(ValueError, match=name):
        LaplaceRegressor(**params, **SMALL).fit(X, y)


def test_lbfgs_refuses_a_user_net():
    X, y = linear_data(20)
    net = NeuralNetRegressor(nn.Linear(3, 1), max_epochs=2)
    with pytest.raises(ValueError, match="solver='lbfgs' applies to the default MLP"):
        LaplaceRegressor(net, solver="lbfgs").fit(X, y)


def exact_logistic_map(X, y, delta):
    """argmin of mean BCE + δ/(2N)·‖(w, b)‖² in float64 (scipy, gradient by torch)."""
    Xt, yt = torch.tensor(X), torch.tensor(y, dtype=torch.float64)

    def objective(v):
        v = torch.tensor(v, requires_grad=True)
        f = Xt @ v[:-1] + v[-1]
        loss = nn.functional.binary_cross_entropy_with_logits(f, yt) + delta / (
            2 * len(X)) * (v**2).sum()
        loss.backward()
        return float(loss.detach()), v.grad.numpy()

    res = minimize(objective, np.zeros(X.shape[1] + 1), jac=True, method="L-BFGS-B",
                   options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 10000})
    return res.x


def test_lbfgs_reaches_the_exact_logistic_map():
    # no hidden layer: the MAP of Bayesian logistic regression, a convex problem
    rng = np.random.default_rng(1)
    X = rng.normal(size=(150, 4))
    y = (X @ np.array([1.0, -1.0, 0.5, 0.0]) + rng.normal(size=150) > 0).astype(int)
    v = exact_logistic_map(X, y, delta=1.0)
    clf = LaplaceClassifier(hidden_layer_sizes=(), solver="lbfgs", max_epochs=500,
                            tol=1e-9, n_iter_no_change=5, hyperparameter_tuning=None,
                            random_state=0).fit(X, y)
    layer = clf.net_.module_.layers[0]
    got = np.r_[layer.weight.detach().numpy().ravel(), layer.bias.detach().numpy()]
    assert clf.n_iter_ < 500
    np.testing.assert_allclose(got, v, atol=2e-4)


def test_lbfgs_weights_equal_duplicated_rows_and_is_deterministic():
    X, y = linear_data(40)
    w = np.r_[np.full(20, 2), np.ones(20)].astype(int)
    kw = dict(solver="lbfgs", max_epochs=200, **SMALL)
    # float64: the weighted and the duplicated losses are equal up to summation order, so
    # both trainings take the same steps and stop at the same epoch (predictions ~1e-13
    # apart). In float32 their rounding differs by ~1e-7 and 27 L-BFGS epochs carried it to
    # 3.5e-5 (0.8 % of a small prediction), by an amount each CPU's kernels decide.
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        weighted = LaplaceRegressor(**kw).fit(X, y, sample_weight=w)
        repeated = LaplaceRegressor(**kw).fit(np.repeat(X, w, 0), np.repeat(y, w))
        again = LaplaceRegressor(**kw).fit(np.repeat(X, w, 0), np.repeat(y, w))
    finally:
        torch.set_default_dtype(dtype)
    np.testing.assert_array_equal(repeated.predict(X), again.predict(X))
    assert weighted.n_iter_ == repeated.n_iter_ < 200
    # scikit-learn's sample-weight check's tolerance
    np.testing.assert_allclose(weighted.predict(X), repeated.predict(X), rtol=1e-7, atol=1e-9)


def test_lbfgs_passes_the_sample_weight_check_with_any_batch_size():
    # full batch whatever batch_size says (minibatch Adam with batch_size=4 fails this check)
    from sklearn.utils.estimator_checks import check_sample_weight_equivalence_on_dense_data

    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # the check's rtol=1e-7 is float32's rounding
    try:
        for est in (LaplaceRegressor(solver="lbfgs", batch_size=4, max_epochs=20, **SMALL),
                    LaplaceClassifier(solver="lbfgs", batch_size=4, max_epochs=20, **SMALL)):
            check_sample_weight_equivalence_on_dense_data(type(est).__name__, est)
    finally:
        torch.set_default_dtype(dtype)


def test_lbfgs_line_search_keeps_descending():
    # torch's default max_eval (max_iter·5/4 = 1 for one iteration per epoch) left the line
    # search one evaluation: the first rejected step returned t = 0 and the loss stayed
    # at 1.14511 from epoch 21 on (diabetes, the default MLP)
    from sklearn.datasets import load_diabetes
    from sklearn.preprocessing import StandardScaler

    X, y = load_diabetes(return_X_y=True)
    reg = LaplaceRegressor(hidden_layer_sizes=(50,), solver="lbfgs", tol=None, max_epochs=40,
                           hyperparameter_tuning=None,
                           random_state=0).fit(StandardScaler().fit_transform(X), y)
    assert reg.loss_curve_[-1] < reg.loss_curve_[20] - 1e-2
    assert np.all(np.diff(reg.loss_curve_) < 0)  # a line search accepts descent steps only


def test_lbfgs_line_search_stays_finite_on_unscaled_features():
    """torch's strong-Wolfe line search in float32 squares directional derivatives of
    ~1e22 here (features of scale 1e6): they overflowed and the step turned NaN; the
    default MLP's L-BFGS does its algebra in float64."""
    from sklaplace._laplace import optim

    torch.manual_seed(2)
    X, y = torch.randn(64, 5) * 1e6, torch.randn(64, 1)
    linear = nn.Linear(5, 1)
    opt = optim.LBFGS(linear.parameters(), lr=1, max_iter=1, max_eval=25,
                      line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = 0.5 * ((linear(X) - y) ** 2).mean()
        loss.backward()
        return loss

    losses = [float(opt.step(closure)) for _ in range(10)]
    assert np.all(np.isfinite(losses)) and losses[-1] < 1e-3 * losses[0]
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all()
               for p in linear.parameters())


def test_the_default_fits_unscaled_features():
    """The linear candidate's L-BFGS diverged on features of scale 1e6 ("MAP training
    diverged … raise prior_precision"), which the default fitted before it trained by
    L-BFGS: the predictions are finite again."""
    from sklearn.datasets import make_regression

    X, y = make_regression(80, 5, random_state=0)
    reg = LaplaceRegressor(random_state=0).fit(X * 1e6, y)
    mean, std = reg.predict(X * 1e6, return_std=True)
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(std)) and np.all(std > 0)
