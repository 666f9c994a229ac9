"""The convergence rule under online tuning: an update of δ and σ re-bases the reference
(the first epoch under the new values is neither an improvement nor a setback)."""

import math

import torch

from sklaplace._laplace.convergence import Converged, Convergence
from sklaplace._laplace.nets import MAPLoss

N_TRAIN = 100
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


def test_the_rule_re_bases_at_each_update():
    # the epochs that recover from an update count as improvements: no stop
    wobbling = [(1.0, 0.3 if (e - 1) // 2 % 2 else 0.31) for e in range(1, 41)]
    adapting = [0.045 if e % 2 == 1 and e > 1 else 0.04 for e in range(1, 41)]
    assert stops_at(adapting, wobbling) is None


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


def test_tol_is_in_the_units_of_the_current_objective():
    # at σ = 0.2 an improvement of the squared residual by 4e-5 (2e-5 / σ² = 5e-4 of the
    # loss) is below tol = 1e-3, by 1e-4 (1.25e-3) above it, although it is below tol in
    # the units of σ₀ = 1; epoch 2, the first under the new σ, is the reference
    small = [(0.2, 0.2)] * 12
    start = [(1.0, 1.0)]
    assert stops_at([0.04, 0.04, 0.04 - 4e-5] + [0.04 - 4e-5] * 10, start + small) == 6
    assert stops_at([0.04, 0.04, 0.04 - 1e-4] + [0.04 - 1e-4] * 10, start + small) == 7
