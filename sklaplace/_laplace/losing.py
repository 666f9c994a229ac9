"""A candidate of a model selection that is losing on the held-out rows stops training.

``hidden_layer_sizes="auto"`` trains its candidates on the same fit rows and chooses by
the held-out rows' NLL (``estimators/_selection.py``). Under online tuning
(:class:`~sklaplace._laplace.online.OnlineEvidence`) the training loss of a larger
candidate often plateaus long before the convergence rule of
:mod:`~sklaplace._laplace.convergence` ends it (each update of δ and σ re-bases the
rule), so a candidate that is going to lose may train for all ``max_epochs`` epochs: at
10⁵ rows the (50, 50) net's 140 epochs were 60 % of the default regressor's fit.

:class:`LosingCandidate` watches, at each online update (every epoch without online
tuning), the held-out NLL of the MAP plug-in predictive — the net's output with the
current σ (:func:`plugin_nll`: one forward pass over the held-out rows, no curvature) —
and stops training once that NLL has not improved by ``tol`` for ``patience`` epochs
while its best is still worse than ``reference``: the same quantity of the best smaller
candidate (its trained net at its fitted σ), and not before epoch ``min_epochs``. Online
tuning then restores its best update, as at any end of training. The selection sets the
patience to ``n_iter_no_change`` epochs and ``min_epochs`` to 2,000 optimizer steps (the
plateau of a net's first steps lasts steps, not epochs). A candidate that improves on the
smaller ones, or keeps improving, trains as before; one that is stopped would lose unless
it overtook them after the plateau.
"""

import math

import numpy as np
import torch
from skorch.callbacks import Callback

from . import likelihoods
from .convergence import Converged, Convergence


def plugin_nll(module, X, y, likelihood, sigma=None, weight=None):
    """Mean held-out NLL of the MAP plug-in predictive: the net's outputs on ``X`` (in
    the module's dtype and device) under ``likelihood`` at noise ``sigma`` (model units;
    the regressor's NLL per target cell, as the selection scores it)."""
    likelihood = likelihoods.get(likelihood)
    training = module.training
    module.eval()
    try:
        with torch.no_grad():
            f = module(X).reshape(X.shape[0], -1).to(torch.float64)
    finally:
        module.train(training)
    y = torch.as_tensor(y, device=f.device)
    if likelihood.has_noise:
        sigma = torch.as_tensor(sigma, dtype=torch.float64, device=f.device).reshape(-1)
        losses = likelihood.noisy_nll(f, likelihood.targets(y), sigma) / f.shape[1]
    else:
        losses = likelihood.nll(f, likelihood.targets(y))
    losses = losses.cpu().numpy()
    return float(np.average(losses, weights=weight))


class LosingCandidate(Callback):
    """Stop training once the held-out plug-in NLL has stalled behind ``reference``.

    Parameters
    ----------
    X, y : ndarray
        The held-out rows (``y`` in model units, as trained).
    likelihood : str
        The likelihood's name.
    reference : float
        The best smaller candidate's held-out plug-in NLL (:func:`plugin_nll`).
    patience : int
        Epochs without an improvement by ``tol`` that stop a candidate behind
        ``reference``.
    tol : float
        Least improvement of the best held-out NLL that counts.
    weight : ndarray or None
        The held-out rows' weights.
    min_epochs : int
        The epoch before which it does not stop.

    Attributes
    ----------
    stopped_ : bool
        Whether the rule ended training.
    best_nll_ : float
        The best held-out plug-in NLL seen.
    history_ : list of (int, float)
        (epoch, held-out plug-in NLL) of each evaluation.
    """

    def __init__(self, X, y, likelihood, reference, patience, tol=1e-4, weight=None,
                 min_epochs=0):
        self.X = X
        self.y = y
        self.likelihood = likelihood
        self.reference = reference
        self.patience = patience
        self.tol = tol
        self.weight = weight
        self.min_epochs = min_epochs

    def initialize(self):
        self.stopped_ = False
        self.best_nll_ = math.inf
        self.history_ = []
        self._n_updates = 0
        self._last = 0
        self._X = None
        self._no_improvement = 0
        return self

    def _due(self, net):
        """Whether to evaluate now: after a new online update (every epoch without
        online tuning, whose σ does not change)."""
        online = Convergence.online(net)
        if online is None:
            return True
        n_updates = len(getattr(online, "history_", None) or [])
        due, self._n_updates = n_updates > self._n_updates, n_updates
        return due

    def on_epoch_end(self, net, **kwargs):
        if not self._due(net):
            return
        epoch = len(net.history)
        module = net.module_
        if not all(torch.isfinite(p).all() for p in module.parameters()):
            return  # a diverged net: train_map reports it
        if self._X is None:
            p = next(module.parameters())
            self._X = torch.as_tensor(np.asarray(self.X)).to(p.device, p.dtype)
        nll = plugin_nll(module, self._X, self.y, self.likelihood,
                         getattr(net.criterion_, "sigma_noise", None), self.weight)
        self.history_.append((epoch, nll))
        if nll < self.best_nll_ - self.tol:
            self._no_improvement = 0
        else:
            self._no_improvement += epoch - self._last
        self._last = epoch
        self.best_nll_ = min(self.best_nll_, nll)
        behind = self.best_nll_ > self.reference
        if self._no_improvement >= self.patience and behind and epoch >= self.min_epochs:
            self.stopped_ = True
            raise Converged


def detach(net):
    """Remove the :class:`LosingCandidate` callback from a trained skorch ``net`` (so that
    a stored net keeps no held-out rows) and return it, its rows dropped; None if absent."""
    found = None

    def keep(item):
        nonlocal found
        callback = item[1] if isinstance(item, tuple) else item
        if isinstance(callback, LosingCandidate):
            found = callback
            return False
        return True

    for name in ("callbacks", "callbacks_"):
        items = getattr(net, name, None)
        if items:
            setattr(net, name, [item for item in items if keep(item)])
    if found is not None:
        found.X = found.y = found.weight = found._X = None
    return found
