"""Online marginal-likelihood training (Immer et al. 2021, Alg. 1) as a skorch callback.

Every ``frequency`` epochs after ``burn_in``, the callback fits a Laplace
approximation over all weights at the current parameters and takes
``n_steps`` Adam steps (learning rate ``lr``) on the log evidence with respect
to the log prior precisions (and log σ for regression); the new prior is fed
back into the training objective through the criterion (:class:`~sklaplace._laplace.nets.MAPLoss`).
With ``curvature_schedule="doubling"`` the curvature is computed only at the updates
of epochs burn_in + F, + 2F, + 4F, …; the updates between take the evidence at the
current weights and residuals over the last curvature (a linear model's curvature does
not depend on its weights, so there both schedules agree).
As in laplace-torch's ``marglik_training``, the network and hyperparameters of
the update with the best log evidence are restored when training ends. The
natural-parameter net's δ is tuned per output head, as post-hoc tuning does
(:func:`~sklaplace._laplace.natural.evidence_heads`).
"""

import copy

import numpy as np
import torch
from skorch.callbacks import Callback

from .curvature import compute_posterior
from .evidence import LOG_PRIOR_BOUNDS, Evidence, maximize_evidence
from . import likelihoods, natural, optim
from .prior import PriorGroups
from .nets import module_device
from .subsets import AllWeights


class OnlineEvidence(Callback):
    """Tune the prior precision (and σ) by the Laplace evidence during training.

    Parameters
    ----------
    likelihood : {"categorical", "bernoulli", "gaussian"}
    hessian_structure : {"full", "diag", "kron", "lowrank"}, default="full"
    curvature : {"ggn", "ef"}, default="ggn"
    prior_structure : {"scalar", "layerwise", "diag"}, default="layerwise"
    frequency : int, default=5
        F: epochs between hyperparameter updates.
    burn_in : int, default=0
        Epochs before the first update.
    n_steps : int or None, default=100
        K Adam steps per update; None maximizes the evidence at each update
        (bounded L-BFGS-B, as post-hoc tuning).
        K: Adam steps on the log hyperparameters per update.
    lr : float, default=0.1
        Adam learning rate on the log hyperparameters.
    temperature : float, default=1.0
    lowrank_rank : int or None, default=None
    sigma_floor : float, default=0.0
        Lower bound of σ (model units).
    curvature_schedule : {"every", "doubling"}, default="every"
        Which updates recompute the curvature: every one, or those of epochs
        burn_in + F·2^k (the others reuse the last one).
    sample_weight : ndarray of shape (n_rows,) or None, default=None
        Row weights of the training data (as in ``fit``); the training targets then
        carry the normalized weights as their last column (``MAPLoss`` with
        ``sample_weight=True``), which the callback drops: the curvature and the
        evidence use these weights.

    Attributes
    ----------
    history_ : list of dict
        One entry per update: epoch, log_evidence (model units), prior_precision
        (one value per parameter tensor) and sigma_noise.
    prior_precision_, sigma_noise_ : ndarray
        The prior precision (one value, or one per net parameter) and σ (model units)
        that training ended with: those of the best update, or the initial ones.
    best_epoch_ : int or None
        The update whose state was restored at the end of training.
    """

    #: The convergence rule reads the updates' log evidence off ``history_`` (and
    #: ``frequency``): :mod:`sklaplace._laplace.convergence`.
    UPDATES_EVIDENCE = True

    def __init__(self, likelihood, *, hessian_structure="full", curvature="ggn",
                 prior_structure="layerwise", frequency=5, burn_in=0, n_steps=100, lr=0.1,
                 temperature=1.0, lowrank_rank=None, sigma_floor=0.0, curvature_schedule="every",
                 sample_weight=None):
        self.likelihood = likelihood
        self.hessian_structure = hessian_structure
        self.curvature = curvature
        self.prior_structure = prior_structure
        self.frequency = frequency
        self.burn_in = burn_in
        self.n_steps = n_steps
        self.lr = lr
        self.temperature = temperature
        self.lowrank_rank = lowrank_rank
        self.sigma_floor = sigma_floor
        self.curvature_schedule = curvature_schedule
        self.sample_weight = sample_weight

    def initialize(self):
        self.curvature_ = None  # (epoch, posterior) of the last curvature computed
        self.history_ = []
        self.best_epoch_ = None
        self.best_state_ = None
        return self

    def on_train_end(self, net, **kwargs):
        last = self.history_[-1]["epoch"] if self.history_ else 0
        data = self.__dict__.pop("_data", None)  # a dataset is no parameter of the callback
        if self.frequency == "converged" and last < len(net.history) and data is not None:
            self._update_net(net, data)  # the weights training ended with
        if self.best_state_ is not None:
            state, delta, sigma = self.best_state_
            net.module_.load_state_dict(state)
            net.criterion_.prior_precision, net.criterion_.sigma_noise = delta, sigma
        self.best_state_ = None
        self.curvature_ = None  # a cache of training (tensors a pickle would carry along)
        # what training ended with, as float64 arrays: a tensor here would be pickled with
        # the net's device, which a machine without it cannot unpickle
        self.prior_precision_ = np.asarray(torch.as_tensor(
            net.criterion_.prior_precision, dtype=torch.float64).cpu())
        self.sigma_noise_ = np.asarray(torch.as_tensor(
            net.criterion_.sigma_noise, dtype=torch.float64).cpu())

    def due(self, epoch):
        """Whether an update follows ``epoch`` (counted from 1) on the epoch schedule."""
        if self.frequency == "converged":
            return False  # the convergence rule asks for the updates (at_convergence)
        return not (epoch <= self.burn_in or (epoch - self.burn_in) % self.frequency)

    def on_epoch_end(self, net, dataset_train=None, **kwargs):
        self._data = dataset_train  # for at_convergence and on_train_end; not kept after
        if self.due(len(net.history)):
            self._update_net(net, dataset_train)

    def at_convergence(self, net, min_gain):
        """``frequency="converged"``: update where training has converged; whether it
        goes on (the update's log evidence beat every earlier one's by over ``min_gain``)."""
        before = max((h["log_evidence"] for h in self.history_), default=-np.inf)
        if not self._update_net(net, getattr(self, "_data", None)):
            return False
        if not self.history_[-1]["log_evidence"] > before + min_gain:
            return False
        if isinstance(net.optimizer_, torch.optim.LBFGS):
            net.optimizer_.state.clear()  # its curvature pairs are of the old objective
        return True

    def _update_net(self, net, dataset_train):
        """One update at the net's current weights; False for a diverged net."""
        epoch = len(net.history)
        if not all(torch.isfinite(p).all() for p in net.module_.parameters()):
            return False  # a diverged net has no curvature; train_map reports the divergence
        device = module_device(net.module_)  # the LA runs where the net is
        module = copy.deepcopy(net.module_).to(device, torch.float64).eval()
        X = torch.as_tensor(dataset_train.X).to(device, torch.float64)
        y = torch.as_tensor(dataset_train.y).to(device)
        weight = None
        likelihood = likelihoods.get(self.likelihood)
        if self.sample_weight is not None:  # drop the weight column of the training targets
            weight = torch.as_tensor(self.sample_weight, dtype=torch.float64, device=device)
            y = likelihood.split_weight(y)[0]
        else:
            y = likelihood.targets(y)
        crit = net.criterion_
        delta, sigma, value = self.update(module, X, y, crit.prior_precision.cpu(),
                                          crit.sigma_noise.cpu(), weight=weight, epoch=epoch)
        self.record(net, epoch, AllWeights(module), delta, sigma, value)
        return True

    def record(self, net, epoch, subset, delta, sigma, value):
        """Feed an update's (δ, σ) back into ``net``'s objective, keep the net's state
        where its evidence is the best so far, and add it to ``history_``."""
        crit = net.criterion_
        crit.prior_precision, crit.sigma_noise = delta.to(net.device), sigma.to(net.device)
        if not self.history_ or value > max(h["log_evidence"] for h in self.history_):
            state = {k: v.detach().clone() for k, v in net.module_.state_dict().items()}
            self.best_state_ = (state, crit.prior_precision, crit.sigma_noise)
            self.best_epoch_ = epoch
        groups = subset.group_index
        starts = np.concatenate([[0], np.flatnonzero(np.diff(groups)) + 1])
        if self.prior_structure == "diag":  # one value per weight
            per_group = delta.expand(len(groups))
        else:  # one value per tensor ("scalar": the same for every tensor)
            per_group = delta.expand(len(groups))[starts] if delta.dim() == 0 else delta[starts]
        self.history_.append({
            "epoch": epoch,
            "log_evidence": value,
            "prior_precision": per_group.numpy().copy(),
            "sigma_noise": (sigma.numpy().copy() if likelihoods.get(self.likelihood).has_noise
                            else None),
        })

    def _maximize(self, evidence, log_delta, groups, sigma0, offset):
        """The evidence maximum at the current net (bounded L-BFGS-B, each free δ's bounds
        shifted by ``offset``); as :meth:`update`."""
        gaussian = evidence.gaussian
        expand = groups.expand
        log_d, log_s = maximize_evidence(
            evidence, log_delta.numpy(), expand,
            np.log(sigma0.numpy()) if gaussian else None,
            max(self.sigma_floor, 1e-300) if gaussian else None, warn=False,
            log_offset=offset)
        delta = expand(torch.as_tensor(np.exp(log_d)))
        sigma = torch.as_tensor(np.exp(log_s), dtype=torch.float64) if gaussian else sigma0
        with torch.no_grad():
            value = float(evidence(delta, sigma if gaussian else None))
        return delta, sigma, value

    def recomputes(self, epoch):
        """Whether the update after ``epoch`` computes the curvature anew (the schedule)."""
        kept = getattr(self, "curvature_", None)  # None too before initialize()
        last = None if kept is None else kept[0]
        if (self.curvature_schedule == "every" or last is None or epoch is None
                or self.frequency == "converged"):  # updates that far apart see new weights
            return True
        # the curvature moves fast early in training and slowly later
        return epoch - last >= max(last - self.burn_in, self.frequency)

    def update(self, module, X, y, prior_precision, sigma_noise, weight=None, epoch=None):
        """One round: K Adam steps, or (``n_steps=None``) the maximum of the evidence.

        ``weight``: (N,) row weights or None; ``epoch``: the epoch it follows, for the
        curvature schedule (None: a new curvature). Returns (δ per parameter or 0-d, σ,
        log evidence).
        """
        subset = AllWeights(module)
        likelihood = likelihoods.get(self.likelihood)
        n_out = module(X[:1]).reshape(1, -1).shape[1]
        with torch.no_grad():
            f = subset.forward(X)
            # the natural-parameter net's δ per head, as post-hoc: one δ for all moved η₁'s
            # (trained at δ·e^(−2ḡ)) by e^(2ḡ) at the first update, and the loss with it
            heads, head_scale = natural.evidence_heads(likelihood, subset,
                                                       self.hessian_structure, n_out, f, weight)
            if self.recomputes(epoch):
                # a scalar prior's evidence needs the spectrum only (no eigenvectors)
                spectrum = (self.prior_structure == "scalar" and self.hessian_structure == "full"
                            and heads is None)
                self.curvature_ = (epoch, compute_posterior(
                    self.hessian_structure, subset, likelihood, X, y,
                    torch.ones(n_out, dtype=torch.float64, device=X.device), self.curvature,
                    self.lowrank_rank, weight=weight, eigenvalues_only=spectrum))
            posterior = self.curvature_[1]
        evidence = Evidence.at_fit(posterior, subset.theta, likelihood, f, y, weight,
                                   self.temperature, self.curvature)
        return self.tune(evidence, subset, prior_precision, sigma_noise, heads, head_scale)

    def tune(self, evidence, subset, prior_precision, sigma_noise, heads=None,
             head_log_scale=None):
        """The round's steps on the ``evidence`` of the current net (of rows in memory, or
        of sums over partitions): (δ per parameter or 0-d, σ, log evidence). ``heads``,
        ``head_log_scale``: the groups split by output head and their δ's bounds' scale
        (:func:`.natural.evidence_heads`), or None."""
        gaussian = likelihoods.get(self.likelihood).has_noise
        groups = PriorGroups(self.prior_structure, subset, heads)
        shift = np.zeros(groups.n_free)
        if heads is not None and head_log_scale:
            shift = np.array([head_log_scale.get(h, 0.0) for h in groups.head_of_groups(heads)])
        log_delta = groups.log_start(prior_precision).requires_grad_(True)
        params = [log_delta]
        sigma0 = sigma_noise.to("cpu", torch.float64)
        if sigma0.dim() > 0 and sigma0.numel() > 1:
            raise ValueError("hyperparameter_tuning='online' supports a scalar sigma_noise only.")
        if self.n_steps is None:
            return self._maximize(evidence, log_delta.detach(), groups, sigma0.reshape(()),
                                  shift)
        log_sigma = sigma0.reshape(()).log().clone().requires_grad_(gaussian)
        if gaussian:
            params.append(log_sigma)
        optimizer = optim.Adam(params, lr=self.lr)

        lower, upper = (torch.as_tensor(b + shift) for b in LOG_PRIOR_BOUNDS)

        def delta_of(v):
            return groups.expand(v.clamp(lower, upper).exp())

        def sigma_of(v):
            return v.exp().clamp_min(self.sigma_floor) if gaussian else None

        grouped = None if self.prior_structure == "scalar" else groups.index

        for _ in range(self.n_steps):
            optimizer.zero_grad()
            if grouped is None:
                loss = -evidence(delta_of(log_delta), sigma_of(log_sigma))
            else:  # one δ per group: the evidence's grouped (faster) form
                values = log_delta.clamp(lower, upper).exp()
                loss = -evidence(values, sigma_of(log_sigma), index=grouped)
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            delta, sigma = delta_of(log_delta), sigma_of(log_sigma)
            value = float(evidence(delta, sigma))
        sigma_out = sigma.detach() if gaussian else sigma0
        return delta.detach(), sigma_out, value
