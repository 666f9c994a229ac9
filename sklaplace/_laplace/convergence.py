"""When MAP training has converged: scikit-learn's ``tol`` / ``n_iter_no_change`` rule.

As :class:`~sklearn.neural_network.MLPClassifier` does, training stops once the
per-epoch training loss (the full MAP objective of :class:`~sklaplace._laplace.nets.MAPLoss`,
likelihood and prior) has not fallen below the best loss so far minus ``tol``
for ``n_iter_no_change`` consecutive epochs; when ``max_epochs`` ends it first,
:func:`fit_net` warns :class:`~sklearn.exceptions.ConvergenceWarning`.
``tol=None`` switches the rule off (``max_epochs`` epochs, no warning), as in
:class:`~sklearn.linear_model.SGDClassifier`.

Online tuning (:class:`~sklaplace._laplace.online.OnlineEvidence`) changes the
prior precision (and σ) in the objective between epochs, which moves the loss
by a jump that says nothing about the weights.  The first epoch run under new
hyperparameters therefore starts a new reference: its loss becomes the best
loss, and it counts neither as an improvement nor as an epoch without one.
The count of epochs without improvement carries on across updates, so
training still stops once the weights settle while the updates go on.
"""

import warnings

import numpy as np
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
        Least improvement of the best training loss that counts.
    n_iter_no_change : int
        Consecutive epochs without such an improvement that end training.

    Attributes
    ----------
    converged_ : bool
        Whether the rule ended training.
    best_loss_ : float
        The best loss since the last change of the objective's hyperparameters.
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
        self._hyper = self._epoch_hyper = None
        return self

    @staticmethod
    def _hyperparameters(net):
        crit = getattr(net, "criterion_", None)
        return (id(getattr(crit, "prior_precision", None)), id(getattr(crit, "sigma_noise", None)))

    def on_epoch_begin(self, net, **kwargs):
        self._epoch_hyper = self._hyperparameters(net)

    def on_epoch_end(self, net, **kwargs):
        loss = net.history[-1].get("train_loss", np.nan)
        changed = self._hyper is not None and self._epoch_hyper != self._hyper
        self._hyper = self._epoch_hyper
        if not np.isfinite(loss):
            return  # a diverged net: train_map reports it
        if changed:  # an online update changed the objective: a new reference
            self.best_loss_ = loss
            return
        if loss > self.best_loss_ - self.tol:
            self.n_no_improvement_ += 1
        else:
            self.n_no_improvement_ = 0
        self.best_loss_ = min(self.best_loss_, loss)
        if self.n_no_improvement_ >= self.n_iter_no_change:
            self.converged_ = True
            raise Converged


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
    warnings.warn(
        f"MAP training ran max_epochs={net.max_epochs} epochs without converging: the "
        f"training loss did not stay within tol={tol} of its best for n_iter_no_change="
        f"{n_iter_no_change} epochs. Raise max_epochs (or tol), or scale the features and "
        "targets.", ConvergenceWarning)


def training_curve(net):
    """(epochs run, per-epoch training loss) from a skorch net's history."""
    history = getattr(net, "history", None) or []
    return len(history), np.array([h.get("train_loss", np.nan) for h in history], dtype=float)
