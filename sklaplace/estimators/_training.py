"""The MAP training of ``fit``: the net to train, its tensors, training, online tuning.

Each step reads the estimator's parameters (``s``: a read-only namespace of
``get_params`` with the estimator's ``log``, :func:`settings_of`) and returns what it
made; none writes to the estimator.

- :func:`prepare_net`: the default MLP, a copy of the user's skorch net (its criterion
  settings dropped: sklaplace trains with its own loss) or a frozen net;
- :func:`param_sizes`: the trainable tensors' sizes and the Kronecker probe
  (:func:`all_linear`) of the net to be trained;
- :func:`train`: a copy trained to the MAP (the prior as weight decay, the
  ``memory`` cache, the epochs' progress);
- :func:`online_callbacks` / :func:`online_result`: ``"online"`` tuning's callback
  and the values (δ, σ, history) it reports.
"""

import functools
import pickle
import types

import numpy as np
import torch
from sklearn.base import clone
from sklearn.frozen import FrozenEstimator
from sklearn.utils.validation import check_memory

from .._laplace import policy
from . import _warmup as warmup
from .._laplace import nets, progress
from .._laplace.convergence import training_curve
from .._laplace.hyperparameters import Hyperparameters, sigma_floor, weighted_spread
from .._laplace.online import OnlineEvidence
from .._laplace.prior import tensor_sizes
from .._laplace.subsets import AllWeights, _to_module
from .._laplace.threads import seeded


def settings_of(estimator):
    """The estimator's parameters as a read-only namespace, with its ``log``."""
    return types.SimpleNamespace(**estimator.get_params(deep=False), log=estimator._log,
                                 name=type(estimator).__name__)


# ---------------------------------------------------------------- the network
def all_linear(module, X):
    """Whether Kronecker factors can read the net: every trainable tensor in an
    ``nn.Linear`` run once per forward pass on one input row per data row (probed in
    eval mode on two rows of ``X``)."""
    training = module.training
    module.eval()
    try:
        x = X[:2] if torch.is_tensor(X) else _to_module(torch.tensor(np.array(X[:2])), module)
        return AllWeights(module).factored_on(x)
    finally:
        module.train(training)


def output_width(module, X):
    """Number of outputs per row of ``module`` (run in eval mode on two rows of ``X``)."""
    training = module.training
    module.eval()
    try:
        with torch.no_grad():
            x = _to_module(torch.tensor(np.array(X[:2])), module)  # a copy: X may be read-only
            out = module(x)
    finally:
        module.train(training)
    return int(out.reshape(x.shape[0], -1).shape[1])


def prepare_net(s, n_features, n_outputs):
    """(uninitialized net copy or None, frozen fitted net or None, likelihood or None);
    the parameter rules on ``net`` were checked by ``_validation.check_params``."""
    net = s.net
    if net is None:
        # skorch's epoch table from verbose=2 on; verbose=1 shows a progress indication
        return (nets.default_net(n_features, n_outputs, s.hidden_layer_sizes, s.max_epochs,
                                 s.lr, s.batch_size, int(s.verbose >= 2), device=s.device,
                                 solver=s.solver),
                None, None)
    if isinstance(net, FrozenEstimator):  # (check_params warned of its criterion settings)
        return None, net.estimator, nets.likelihood_of(net.estimator)
    net_copy = clone(net)
    for key in [k for k in vars(net_copy) if k.startswith("criterion__")]:
        delattr(net_copy, key)
    return net_copy, None, nets.likelihood_of(net)


def param_sizes(s, net, X, n_outputs, check_outputs):
    """(sizes of the trainable parameter tensors of the net to be trained, the
    Kronecker probe, its outputs per row). A user's net is initialized once (on a copy,
    with the global RNG restored) to check its output width against the task
    (``check_outputs``) before any training."""
    if s.net is None:  # the default MLP: nn.Linear layers only
        sizes, d_in = [], X.shape[1]
        for h in (*s.hidden_layer_sizes, n_outputs):
            sizes += [h * d_in, h]
            d_in = h
        return sizes, True, n_outputs
    with seeded(None):  # torch's global generator, under the lock of threaded fits
        module = clone(net).initialize().module_
    width = output_width(module, X)
    check_outputs(width)
    return tensor_sizes(module), all_linear(module, X), width


def with_batch_rows(s, net, n_rows):
    """The default MLP ``net`` with the minibatch of ``batch_size`` for ``n_rows``
    training rows (:func:`._laplace.policy.batch_rows`; a copy, ``net`` is not
    changed); a user's net and the full batch of L-BFGS (-1) as they are."""
    if s.net is not None or net.batch_size == -1:
        return net
    return clone(net).set_params(batch_size=policy.batch_rows(s.batch_size, n_rows))


# ---------------------------------------------------------------- training
def train(s, net, frozen, X, y_model, likelihood, hyper, sizes, seed, sample_weight=None,
          init_module=None, what="MAP training", callbacks=(), mean_start=None):
    """(``net_``, n_iter, loss curve): the frozen net, or a copy of ``net`` trained to the
    MAP on (X, y) at ``hyper`` (starting from the weights of ``init_module`` when given).

    ``verbose``: one line ``what`` with the epochs and the time, and the epochs'
    progress while it runs longer than a few seconds (``_laplace.progress``).
    ``mean_start``: the module the mean-first phase of ``noise="heteroscedastic"``
    continues from (:func:`._warmup.select_mean`)."""
    if frozen is not None:
        s.log(f"{what}: none, the FrozenEstimator's net keeps its weights")
        # skorch leaves a net in train mode after fit; the LA reads it in inference mode
        # (dropout off, batch-norm statistics fixed), as skorch's own predict sets it
        frozen.module_.eval()
        return (frozen, *training_curve(frozen))
    fit = check_memory(s.memory).cache(nets.train_map)
    extra = {} if sample_weight is None else {"sample_weight": sample_weight}
    prior, warm_epochs = hyper.for_training(sizes), 0
    if warmup.applies(s, likelihood, frozen, init_module):
        mean_net, init_module, prior = warmup.train_mean(
            s, X, y_model, hyper, seed, sample_weight, callbacks, functools.partial(
                online_callbacks, s, sample_weight=sample_weight, linear=True), sizes,
            start=mean_start)
        warm_epochs = len(mean_net.history)
        s.log(f"{what}: the mean alone first, {warm_epochs} epochs")
    if init_module is not None:
        extra["init_module"] = init_module
    net = with_batch_rows(s, net, len(X))
    shown = progress.Progress(net.max_epochs, what, s.log) if s.verbose else None
    token = progress.show_epochs(shown)
    try:
        trained = fit(
            clone(net), X, y_model, likelihood=likelihood.name,
            default_dtype=str(torch.get_default_dtype()),  # in the memory cache's key
            temperature=s.temperature, sigma_noise=hyper.sigma.numpy(),
            prior_precision=prior, seed=seed, callbacks=callbacks,
            tol=s.tol, n_iter_no_change=s.n_iter_no_change, **extra,
        )
    except pickle.PicklingError as error:
        if s.memory is None:
            raise
        raise ValueError(
            "memory= keys the MAP training on a hash of its arguments, and the net's "
            f"parameters cannot be pickled ({error.args[0]}). Use memory=None, or module "
            "parameters that pickle (no lambdas or local functions).") from error
    finally:
        seconds = progress.stop_epochs(token, shown)
    s.log(f"{what}: {len(trained.history)} epochs in {seconds:.2f} s")
    trained.module_.eval()  # inference mode from here on, as skorch's predict leaves it
    n_iter, curve = training_curve(trained)
    return trained, warm_epochs + n_iter, curve


def online_callbacks(s, likelihood, sizes, linear, y_model, n_out, sample_weight=None, *,
                     n_rows=None, spread=None):
    """The :class:`OnlineEvidence` callback of ``"online"`` tuning, with the structure
    the final LA takes (:func:`resolve_subset`). Rows in parts (``y_model`` None):
    their number ``n_rows`` and the targets' ``spread`` (model units)."""
    in_parts, n_rows = n_rows is not None, len(y_model) if n_rows is None else n_rows
    if spread is None and likelihood.has_noise:
        spread = float(weighted_spread(y_model, sample_weight))
    structure = s.hessian_structure
    if structure == "auto":
        structure = policy.kron_or_diag(
            policy.all_weights_structure(linear, n_rows, n_out, sum(sizes),
                                         kernel=not in_parts), s.refine,
            policy.kron_holds_prior(s.prior_structure, s.prior_precision, sizes))
    gaussian = likelihood.has_noise
    return [OnlineEvidence(
        likelihood.name, hessian_structure=structure, curvature=s.curvature,
        prior_structure=s.prior_structure, frequency=s.online_frequency,
        burn_in=s.online_burn_in, n_steps=s.online_steps, lr=s.online_lr,
        temperature=s.temperature, lowrank_rank=s.lowrank_rank,
        # relative to the targets' scale: a constant target's spread 0 left σ unbounded
        # below, and the evidence drove it to ~1e-12, where float32 training overflows
        sigma_floor=float(sigma_floor(spread)) if gaussian else 0.0,
        curvature_schedule=s.online_curvature, sample_weight=sample_weight,
    )]


def online_callback(net):
    return next(cb for _, cb in net.callbacks_ if isinstance(cb, OnlineEvidence))


def online_result(s, callback, targets, n_rows):
    """(Hyperparameters, history) of the online updates: the values training ended with
    (the callback reports them), and each update in the units of y."""
    offset = 0.0 if targets is None else targets.evidence_offset(n_rows)
    history = [
        {**h, "log_evidence": h["log_evidence"] + offset,
         "sigma_noise": None if h["sigma_noise"] is None
         else targets.sigma_original(torch.as_tensor(h["sigma_noise"]))}
        for h in callback.history_
    ]
    delta = torch.as_tensor(callback.prior_precision_)
    best = [h for h in callback.history_ if h["epoch"] == callback.best_epoch_]
    if delta.dim() == 0:
        prior = float(delta)
    elif s.prior_structure == "layerwise" and best:
        prior = best[0]["prior_precision"]
    else:
        prior = delta.numpy()
    return Hyperparameters.of(prior, callback.sigma_noise_), history
