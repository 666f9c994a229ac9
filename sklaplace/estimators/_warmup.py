"""The mean-first start of ``noise="heteroscedastic"``'s training (the default MLP).

Trained from a random start on the natural parameters, the network can explain the
residuals as noise instead of fitting them: the gradient of the mean is scaled by the
precision, so rows it fits badly get a larger σ(x) and then little gradient (Seitzer
et al. 2022). On the low-noise energy set the mean's test RMSE was 0.84 against 0.54
for the one-σ regressor. So the default MLP is trained in two phases:

1. the same MLP with T outputs, the mean alone, on the one-σ Gaussian likelihood at
   the fit's settings (with ``"online"`` tuning: its callback tunes δ and σ as
   ``noise="homoscedastic"`` does);
2. its hidden layers and mean weights start the natural-parameter network: the log
   precision's weights start at zero and its bias at g₀ = −log mean(r²) per target,
   the residuals' mean square (at least σ's floor of tuning squared), and η₁'s weights
   are those of the mean times e^(g₀) (μ = η₁e^(−g) unchanged); training then continues
   on the heteroscedastic likelihood, all outputs jointly.

With ``hidden_layer_sizes="auto"`` (or a list of candidates) the first phase is the
default's fit: :func:`select_mean` runs its architecture selection among the one-σ mean
networks (:mod:`._selection`: the same split, candidates and greedy stop, their held-out
Gaussian NLL), and the chosen candidate's training continues on all rows from its
selection net, as the default's refit does (the linear model's by L-BFGS under the default
``solver``); the natural-parameter network of the chosen sizes starts from there and trains
by ``solver`` (L-BFGS's line search, on the natural parameters of a linear model, stepped
to a non-finite loss on a synthetic set). A tuple is one architecture.

A net of your own (``net=``) starts as it is.
"""

import numpy as np
import torch
from sklearn.utils.validation import check_memory

from .._laplace import likelihoods, nets, policy
from .._laplace.hyperparameters import sigma_floor, weighted_spread
from .._laplace.online import OnlineEvidence
from .._laplace.subsets import _to_module
from . import _selection as selection


def applies(s, likelihood, frozen, init_module):
    """Whether the training of this fit starts with the mean alone."""
    return (likelihood.name == "heteroscedastic" and s.net is None and frozen is None
            and init_module is None)


def mean_sizes(hidden, n_features, n_targets):
    """Parameter tensor sizes of the default MLP with ``n_targets`` outputs."""
    sizes, d_in = [], n_features
    for h in (*hidden, n_targets):
        sizes += [h * d_in, h]
        d_in = h
    return sizes


def select_mean(s, X, y_model, sample_weight, tuning, seed, prepare, offset):
    """The architecture of ``hidden_layer_sizes="auto"`` (or a list): the default's
    selection among the one-σ mean networks (:func:`._selection.select`, on the split of
    ``seed``); (the chosen sizes, how its mean's training on all rows starts, as the
    default's refit: (the chosen candidate's selection net, the solver),
    ``model_selection_results_``). ``prepare(sizes, solver,
    prior_scale)``: the pipeline of the mean alone (the Gaussian likelihood, T outputs)."""
    *fit, (sizes, _), results, _ = selection.select(
        s, s.hidden_layer_sizes, X, y_model, y_model.shape[1], sample_weight, tuning=tuning,
        seed=seed, stratify=False, prepare=prepare, scorers=None, offset=offset)
    sizes = tuple(sizes)
    return sizes, (fit[0].module_, "lbfgs" if sizes == () and s.solver == "adam" else s.solver), results


def train_mean(s, X, y_model, hyper, seed, sample_weight, callbacks, online_callbacks, sizes,
               start=None):
    """(the mean's trained skorch net, the natural-parameter module to start from, the
    training prior δ of the natural-parameter net, one value per parameter or a float).

    ``callbacks``: those of the natural-parameter training (an ``OnlineEvidence`` there
    means one here, made by ``online_callbacks``); ``sizes``: its parameter tensors;
    ``start``: (a mean module to continue training from or None, the solver), from
    :func:`select_mean`; None: a fresh start by ``solver``."""
    T = y_model.shape[1]
    gaussian = likelihoods.get("gaussian")
    mean_tensors = mean_sizes(s.hidden_layer_sizes, X.shape[1], T)
    module, solver = (None, s.solver) if start is None else start
    net = nets.default_net(X.shape[1], T, s.hidden_layer_sizes, s.max_epochs, s.lr,
                           policy.batch_rows(s.batch_size, len(X)), int(s.verbose >= 2),
                           device=s.device, solver=solver)
    online = any(isinstance(cb, OnlineEvidence) for cb in callbacks)
    extra = {} if sample_weight is None else {"sample_weight": sample_weight}
    if module is not None:
        extra["init_module"] = module
    fit = check_memory(s.memory).cache(nets.train_map)
    trained = fit(
        net, X, y_model, likelihood="gaussian", default_dtype=str(torch.get_default_dtype()),
        temperature=s.temperature, sigma_noise=hyper.sigma.numpy(),
        prior_precision=hyper.for_training(mean_tensors), seed=seed,
        callbacks=online_callbacks(likelihood=gaussian, sizes=mean_tensors, y_model=y_model,
                                   n_out=T) if online else (),
        tol=s.tol, n_iter_no_change=s.n_iter_no_change, **extra)
    module, g0 = natural_start(trained.module_, X, y_model, sample_weight)
    delta = trained.criterion_.prior_precision.detach().cpu().double().numpy()
    return trained, module, natural_prior(delta, mean_tensors, sizes, g0)


def natural_prior(delta, mean_tensors, sizes, g0):
    """The mean's training δ carried to the natural-parameter net: the same per hidden
    tensor, the output layer's divided by e^(2·mean g₀) (η₁'s weights are the mean's
    times e^(g₀)), so that its objective starts as the mean's at its σ ≈ e^(−g₀/2)."""
    per_weight = np.broadcast_to(delta, (sum(mean_tensors),))
    starts = np.concatenate([[0], np.cumsum(mean_tensors)[:-1]])
    values = [float(per_weight[i:i + n].mean()) for i, n in zip(starts, mean_tensors)]
    shrink = float(np.exp(-2 * g0.mean()))
    values[-2:] = [v * shrink for v in values[-2:]]
    return np.repeat(values, sizes)


def natural_start(mean_module, X, y_model, sample_weight=None):
    """(The default MLP with 2T outputs whose mean function is ``mean_module``'s and whose
    noise is constant, the residuals' (weighted) mean square per target; g₀ (T,))."""
    last = mean_module.layers[-1]
    with torch.no_grad():
        x = _to_module(torch.as_tensor(np.ascontiguousarray(X)), mean_module)
        mean = mean_module(x).double().reshape(len(x), -1)
        r2 = (torch.as_tensor(np.asarray(y_model, dtype=np.float64)).to(mean.device)
              .reshape(mean.shape) - mean) ** 2
        if sample_weight is None:
            ms = r2.mean(0)
        else:
            w = torch.as_tensor(np.asarray(sample_weight, dtype=np.float64)).to(mean.device)
            ms = (w[:, None] * r2).sum(0) / w.sum()
        # σ(x) starts no lower than σ's floor of tuning: residuals → 0 (a constant or
        # interpolated target) took e^(g₀) and η₁'s prior δ·e^(−2g₀) out of float32's range
        floor = torch.as_tensor(sigma_floor(weighted_spread(
            np.asarray(y_model, dtype=np.float64).reshape(mean.shape), sample_weight, axis=0)))
        g0 = -torch.log(ms.clamp_min(floor.to(ms) ** 2))
        T = mean.shape[1]
        module = clone_shape(mean_module, 2 * T)
        for new, old in zip(module.layers[:-1], mean_module.layers[:-1]):
            new.load_state_dict(old.state_dict())
        out, scale = module.layers[-1], torch.exp(g0).to(last.weight)
        out.weight.zero_()
        out.weight[:T] = last.weight * scale[:, None]
        out.bias[:T] = last.bias * scale
        out.bias[T:] = g0.to(last.bias)
    return module, g0.cpu().numpy()


def clone_shape(module, n_outputs):
    """A default MLP like ``module`` with ``n_outputs`` outputs, on its device and dtype."""
    hidden = tuple(layer.out_features for layer in module.layers[:-1]
                   if isinstance(layer, torch.nn.Linear))
    first = module.layers[0]
    new = nets.MLP(first.in_features, n_outputs, hidden)
    return new.to(first.weight)
