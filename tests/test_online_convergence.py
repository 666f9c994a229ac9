"""The convergence rule under online tuning with ``CARRY_OVER_UPDATES``: an update of δ
and σ is no improvement and no setback, tol is in the units of the current objective,
and training stops; the default re-bases the reference at each update."""

import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning

from sklaplace import LaplaceRegressor
from sklaplace._laplace import convergence
from sklaplace._laplace.convergence import Converged, Convergence
from sklaplace._laplace.nets import MAPLoss

N_TRAIN = 100


@pytest.fixture(autouse=True)
def carry_over(request, monkeypatch):
    monkeypatch.setattr(convergence, "CARRY_OVER_UPDATES",
                        "default_rule" not in request.node.name)
THETA = torch.tensor([0.5, -1.0, 2.0])  # the (settled) weights the prior term reads


class _Net:
    """What the rule reads of a skorch net: the history and a Gaussian MAPLoss."""

    def __init__(self):
        self.history = []
        self.criterion_ = MAPLoss("gaussian", n_train=N_TRAIN, sigma_noise=1.0,
                                  prior_precision=1.0)
        self.criterion_.attach(torch.nn.ParameterList([torch.nn.Parameter(THETA.clone())]))
        self.criterion_.n_outputs_ = 1


def objective(mse, sigma, delta):
    """MAPLoss's value at mean squared residual ``mse``: ½mse/σ² + log σ + log√(2π) + R."""
    prior = 0.5 * delta * float((THETA**2).sum()) / N_TRAIN
    return 0.5 * mse / sigma**2 + math.log(sigma) + 0.5 * math.log(2 * math.pi) + prior


def stops_at(mses, hypers, tol=1e-3, n=4):
    """The epoch (1-based) the rule stops at; epoch e trains under ``hypers[e - 1]``
    (δ, σ), set on the criterion as OnlineEvidence does (new tensors between epochs)."""
    cb, net, kept = Convergence(tol, n).initialize(), _Net(), []
    for epoch, (mse, (delta, sigma)) in enumerate(zip(mses, hypers), 1):
        crit = net.criterion_
        if (float(crit.prior_precision), float(crit.sigma_noise)) != (delta, sigma):
            kept.append((crit.prior_precision, crit.sigma_noise))  # as OnlineEvidence keeps
            crit.prior_precision = torch.tensor(delta, dtype=torch.float64)
            crit.sigma_noise = torch.tensor(sigma, dtype=torch.float64)
        cb.on_epoch_begin(net)
        net.history.append({"train_loss": objective(mse, sigma, delta)})
        try:
            cb.on_epoch_end(net)
        except Converged:
            return epoch
    return None


def updates_every(k, epochs, start=(1.0, 1.0)):
    """(δ, σ) per epoch: σ shrinks and δ grows at every k-th epoch, as online tuning does."""
    hypers, (delta, sigma) = [], start
    for epoch in range(1, epochs + 1):
        hypers.append((delta, sigma))
        if epoch % k == 0:
            delta, sigma = delta * 1.5, max(0.2, sigma * 0.7)
    return hypers


def test_settled_weights_stop_while_the_updates_go_on():
    # the weights settled at epoch 1 (the same residuals); every 2 epochs new δ and σ
    # move the loss by jumps of 0.1 to 2: no improvement, the count runs on
    hypers = updates_every(2, 40)
    assert stops_at([0.04] * 40, hypers) == 5
    # the first epoch after each update fits a little worse (the weights adapt to the
    # new objective) and the next one is back: the recovery is no improvement either
    # (a reference re-based on the first epoch after an update made it one, so that
    # the count restarted at every update and training never stopped)
    adapting = [0.045 if e % 2 == 1 and e > 1 else 0.04 for e in range(1, 41)]
    assert stops_at(adapting, hypers) == 5
    wobbling = [(1.0, 0.3 if (e - 1) // 2 % 2 else 0.31) for e in range(1, 41)]
    assert stops_at(adapting, wobbling) == 5


def test_the_default_rule_re_bases_at_each_update():
    # the epochs that recover from an update count as improvements: no stop
    wobbling = [(1.0, 0.3 if (e - 1) // 2 % 2 else 0.31) for e in range(1, 41)]
    adapting = [0.045 if e % 2 == 1 and e > 1 else 0.04 for e in range(1, 41)]
    assert stops_at(adapting, wobbling) is None


def test_a_real_improvement_after_an_update_counts():
    hypers = updates_every(3, 40)
    mses = [0.04] * 4 + [0.03] * 36  # epoch 5 (under new δ, σ) fits better
    assert stops_at(mses, hypers) == 9
    # tol is in the units of the current objective: at σ = 0.2 an improvement of the
    # squared residual by 4e-5 (2e-5 / σ² = 5e-4 of the loss) is below tol = 1e-3, by
    # 1e-4 (1.25e-3) above it, although it is below tol in the units of σ₀ = 1
    small = [(0.2, 0.2)] * 12
    start = [(1.0, 1.0)]
    assert stops_at([0.04, 0.04 - 4e-5] + [0.04 - 4e-5] * 10, start + small) == 5
    assert stops_at([0.04, 0.04, 0.04 - 1e-4] + [0.04 - 1e-4] * 10, start + small) == 7


def test_a_criterion_without_a_prior_term_rebases():
    # the reference cannot be carried over: the epoch after the change sets it
    cb = Convergence(0.1, 2).initialize()

    class Net:
        history = []
        criterion_ = type("Crit", (), {"prior_precision": torch.tensor(1.0),
                                        "sigma_noise": torch.tensor(1.0)})()

    net = Net()
    for epoch, loss in enumerate([1.0, 1.0, 5.0, 4.0, 4.0], 1):
        if epoch == 3:
            net.criterion_.prior_precision = torch.tensor(2.0)
        cb.on_epoch_begin(net)
        net.history.append({"train_loss": loss})
        try:
            cb.on_epoch_end(net)
        except Converged:
            break
    assert epoch == 5 and cb.best_loss_ == 4.0


def smooth_data(n=150, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 2))
    return X, np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.05 * rng.normal(size=n)


def test_online_training_stops_before_max_epochs():
    X, y = smooth_data()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = LaplaceRegressor(hidden_layer_sizes=(16,), max_epochs=3000,
                               hyperparameter_tuning="online", random_state=0).fit(X, y)
    assert est.hyperparameter_tuning_ == "online"
    assert est.n_iter_ < 3000 and len(est.evidence_history_) >= 3


def test_the_stop_is_where_the_objective_has_settled():
    # training on from where the rule stopped (tol=None: every epoch) moves the fit
    # by less than the noise: the rule stopped at the MAP, not short of it
    X, y = smooth_data()
    X_test, y_test = smooth_data(400, seed=1)
    params = dict(hidden_layer_sizes=(16,), hyperparameter_tuning="online", random_state=0)
    stopped = LaplaceRegressor(max_epochs=3000, **params).fit(X, y)
    longer = LaplaceRegressor(max_epochs=stopped.n_iter_ + 200, tol=None, **params).fit(X, y)
    mean_a, std_a = stopped.predict(X_test, return_std=True)
    mean_b, std_b = longer.predict(X_test, return_std=True)
    assert np.sqrt(np.mean((mean_a - mean_b) ** 2)) < 0.05 * np.std(y)
    rmse_a = np.sqrt(np.mean((mean_a - y_test) ** 2))
    rmse_b = np.sqrt(np.mean((mean_b - y_test) ** 2))
    assert rmse_a < 1.2 * rmse_b + 0.01

