"""When MAP training has converged: scikit-learn's ``tol`` / ``n_iter_no_change`` rule.

As :class:`~sklearn.neural_network.MLPClassifier` does, training stops once the
per-epoch training loss (the full MAP objective of :class:`~sklaplace._laplace.nets.MAPLoss`,
likelihood and prior) has not fallen below the best loss so far minus ``tol``
for ``n_iter_no_change`` consecutive epochs; when ``max_epochs`` ends it first,
:func:`fit_net` warns :class:`~sklearn.exceptions.ConvergenceWarning`.
``tol=None`` switches the rule off (``max_epochs`` epochs, no warning), as in
:class:`~sklearn.linear_model.SGDClassifier`.

Online tuning (:class:`~sklaplace._laplace.online.OnlineEvidence`) changes the
prior precision δ (and σ) of the objective between epochs, which moves the loss
by a jump that says nothing about the weights, and a new σ rescales the data
term, with it the epochs' noise, by σ_old²/σ_new².  The rule judges one
quantity across updates (:meth:`Convergence.comparable`): the loss in the units
of the objective training started with (σ₀), its log σ terms dropped,

    S = (σ/σ₀)² (L − (C log σ + C log √(2π)) / T) = ‖y − f‖² / (2 T σ₀²) + (σ/σ₀)² R(θ; δ)

(row means; R the prior term), which a new σ or δ changes only through the
prior term; ``tol`` applies in the units of the current objective (tol·(σ/σ₀)²
in S), so without a change of σ the rule is the classic one.

At an update the first epoch under the new hyperparameters becomes the best value; it
counts neither as an improvement nor as an epoch without one, and the count carries on.
The epochs in which the weights adapt to the new objective then count as improvements,
so with updates every few epochs training seldom stops before ``max_epochs``.  Carrying
the best value over by the change of S at the current weights, and a stop on the log
evidence of the updates, were measured and lost (docs/defaults.md, "Training").

A candidate of ``hidden_layer_sizes="auto"`` that is losing on the held-out rows stops
on another rule, which has those rows to judge by: :mod:`sklaplace._laplace.losing`.
"""

import math
import warnings

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from skorch.callbacks import Callback


class Converged(Exception):
    """Raised by :class:`Convergence` to end skorch's epoch loop (caught by :func:`fit_net`).

    Not ``KeyboardInterrupt`` (skorch's own early-stopping signal): a real Ctrl-C
    must not read as convergence.
    """


class Convergence(Callback):
    """Stop training when the loss has not improved by ``tol`` for ``n_iter_no_change`` epochs.

    Parameters
    ----------
    tol : float
        Least improvement of the best training loss (S, module docstring) that counts.
    n_iter_no_change : int
        Consecutive epochs without such an improvement that end training.

    Attributes
    ----------
    converged_ : bool
        Whether the rule ended training.
    best_loss_ : float
        The best value of S (module docstring) so far, in terms of the current
        hyperparameters (re-based when they change).
    n_no_improvement_ : int
        The current count of epochs without improvement.
    """

    def __init__(self, tol=1e-4, n_iter_no_change=10):
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change

    def initialize(self):
        self.converged_ = False
        self.best_loss_ = np.inf
        self.n_no_improvement_ = 0
        self._hyper = self._sigma0 = None
        self._rebase = False
        return self

    @staticmethod
    def online(net):
        """The net's :class:`~sklaplace._laplace.online.OnlineEvidence` callback (a
        callback with ``UPDATES_EVIDENCE``), or None."""
        for item in getattr(net, "callbacks_", None) or ():
            callback = item[1] if isinstance(item, tuple) else item
            if getattr(callback, "UPDATES_EVIDENCE", False):
                return callback
        return None

    @staticmethod
    def _hyperparameters(net):
        crit = getattr(net, "criterion_", None)
        return (getattr(crit, "prior_precision", None), getattr(crit, "sigma_noise", None))

    @staticmethod
    def _sigma(crit, hyper):
        """σ as a float where the likelihood has a scalar noise, else None."""
        sigma = hyper[1]
        if not getattr(getattr(crit, "likelihood", None), "has_noise", False) or sigma is None:
            return None
        sigma = torch.as_tensor(sigma)
        return float(sigma) if sigma.numel() == 1 else None

    def _scale(self, crit, hyper):
        sigma = self._sigma(crit, hyper)
        return 1.0 if sigma is None or self._sigma0 is None else (sigma / self._sigma0) ** 2

    def comparable(self, crit, hyper, loss):
        """The epoch's ``loss`` (under ``hyper`` = (δ, σ)) as S (module docstring)."""
        sigma = self._sigma(crit, hyper)
        if sigma is None:
            return loss
        n_out = getattr(crit, "n_outputs_", 1)
        offset = n_out * (math.log(sigma) + 0.5 * math.log(2 * math.pi))
        return self._scale(crit, hyper) * (loss - offset / getattr(crit, "temperature", 1.0))

    def on_epoch_begin(self, net, **kwargs):
        crit = getattr(net, "criterion_", None)
        hyper = self._hyperparameters(net)
        if self._hyper is None:
            self._sigma0 = self._sigma(crit, hyper)
        elif np.isfinite(self.best_loss_) and not all(map(_same, hyper, self._hyper)):
            self._rebase = True  # the epoch's loss becomes the reference
        self._hyper = hyper

    def on_epoch_end(self, net, **kwargs):
        loss = net.history[-1].get("train_loss", np.nan)
        rebase, self._rebase = self._rebase, False
        if not np.isfinite(loss):
            return  # a diverged net: train_map reports it
        loss = self.comparable(getattr(net, "criterion_", None), self._hyper, loss)
        if rebase:
            self.best_loss_ = loss
            return
        # tol in the units of the current objective: S is the loss scaled by (σ/σ₀)²
        if loss > self.best_loss_ - self.tol * self._scale(net.criterion_, self._hyper):
            self.n_no_improvement_ += 1
        else:
            self.n_no_improvement_ = 0
        self.best_loss_ = min(self.best_loss_, loss)
        if self.n_no_improvement_ >= self.n_iter_no_change:
            online = self.online(net)
            if getattr(online, "frequency", None) == "converged":
                n_rows = float(getattr(net.criterion_, "n_train", 1))
                if online.at_convergence(net, self.tol * n_rows):
                    self.n_no_improvement_ = 0  # the next epoch rebases (on_epoch_begin)
                    return
            self.converged_ = True
            raise Converged


def _same(a, b):
    """Whether two hyperparameter values (tensors or None) are equal."""
    if a is b:
        return True
    if a is None or b is None:
        return False
    a, b = torch.as_tensor(a).cpu(), torch.as_tensor(b).cpu()
    return a.shape == b.shape and bool(torch.equal(a.to(b.dtype), b))


def fit_net(net, X, y, tol, n_iter_no_change):
    """``net.partial_fit(X, y)`` with the convergence rule (``tol=None``: without it).

    Returns whether the rule stopped training; warns ``ConvergenceWarning`` when
    ``max_epochs`` ran out first (not when another callback of the net stopped it).
    """
    if tol is None:
        net.partial_fit(X, y)
        return False
    callback = Convergence(tol, n_iter_no_change).initialize()
    callbacks_ = list(net.callbacks_)
    net.callbacks_ = callbacks_ + [("sklaplace_convergence", callback)]
    try:
        net.partial_fit(X, y)
    except Converged:
        net.notify("on_train_end", X=X, y=y)  # skorch skips it for any exception but Ctrl-C
    finally:
        net.callbacks_ = callbacks_
    return callback.converged_


def warn_not_converged(net, tol, n_iter_no_change, converged):
    """The ``ConvergenceWarning`` of a training that ran all ``max_epochs`` epochs."""
    if tol is None or converged or len(net.history) < net.max_epochs:
        return
    what = (f"the training loss did not stay within tol={tol} of its best for "
            f"n_iter_no_change={n_iter_no_change} epochs")
    warnings.warn(
        f"MAP training ran max_epochs={net.max_epochs} epochs without converging: {what}. "
        "Raise max_epochs (or tol), or scale the features and targets.", ConvergenceWarning)


def training_curve(net):
    """(epochs run, per-epoch training loss) from a skorch net's history."""
    history = getattr(net, "history", None) or []
    return len(history), np.array([h.get("train_loss", np.nan) for h in history], dtype=float)
