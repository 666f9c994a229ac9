"""MAP training on dask collections: full-batch L-BFGS driven from the client.

Each evaluation of the MAP objective is one reduction over the partitions (dask-glm's
``lbfgs`` pattern): the weights are scattered to the workers, every partition returns
its rows' summed negative log-likelihood and its gradient (in row chunks), the pieces
are added up a tree and the client adds the prior, then takes torch's L-BFGS step —
the optimizer, line search, initialization and objective of ``solver="lbfgs"`` in
memory (:func:`._laplace.nets.default_net`), one iteration per epoch, with the same
convergence rule (``tol``, ``n_iter_no_change``). Each round is an ordinary dask graph,
which dask re-runs on another worker if one is lost. The LA of the trained net is then
:func:`._dask_fit.laplace_on_parts`'s; the sequence is :mod:`._dask_sequence`'s.
"""

import copy
import warnings

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning

from ._dask import compute, partition_task, share, tree_reduce
from ._dask_fit import _as_rows, reduce_sums
from .._laplace import likelihoods, nets
from .._laplace import partial as parts
from .._laplace.curvature import default_lowrank_rank
from .._laplace.subsets import AllWeights
from .._laplace.convergence import Converged, Convergence
from .._laplace.hyperparameters import Hyperparameters
from .._laplace.prior import tensor_sizes
from .._laplace.threads import seeded
from ._training import online_callbacks, settings_of
from ._validation import check_seed

#: Parameters a fit that trains its net on dask input may set.
TRAIN_PARAMETERS = frozenset({
    "hidden_layer_sizes", "max_epochs", "tol", "n_iter_no_change", "solver",
    "prior_precision", "hyperparameter_tuning", "validation_fraction", "subset_of_weights",
    "hessian_structure",
    "lowrank_rank", "link_approx", "n_samples", "extrapolation_variance", "random_state",
    "verbose", "online_frequency", "online_burn_in", "online_steps", "online_lr",
    "online_curvature"})

#: Rows per autograd pass within a partition.
CHUNK_ROWS = 16384


def train_on_parts(estimator, pairs, stats, target_info, sizes, init_module=None,
                   what="MAP training", online=False):
    """The default MLP of hidden widths ``sizes`` trained to the MAP by L-BFGS over the
    partitions ``pairs`` (``stats``: their first pass; ``target_info``: the targets of
    all rows, :func:`._dask_fit._targets`), from the weights of ``init_module`` where
    given (a warm refit); a skorch net with its epochs' ``train_loss`` in ``history``.
    ``online``: ``"online"`` tuning's updates during training (:func:`_online_update`),
    its callback in the net's ``callbacks_`` as in memory."""
    import dask

    s = settings_of(estimator)
    if s.online_frequency == "converged":
        raise ValueError("online_frequency='converged' is not supported on dask input "
                         "(its L-BFGS updates every online_frequency epochs); use an int.")
    rng = check_seed("random_state", estimator.random_state)
    train_seed = int(rng.randint(0, 2**31 - 1, size=2)[0])  # as the in-memory fit draws it
    units, n_outputs, default, _ = target_info
    likelihood = likelihoods.get(default)
    n_features = stats["range"]["wx"].numel()
    hyper = Hyperparameters.of(estimator.prior_precision, estimator._initial_sigma())
    net = nets.default_net(n_features, n_outputs, tuple(sizes), s.max_epochs, s.lr,
                           s.batch_size, device="cpu", solver="lbfgs")
    n_rows = stats["rows"]
    with seeded(train_seed):
        net.set_params(criterion__likelihood=likelihood.name, criterion__n_train=n_rows,
                       criterion__temperature=s.temperature,
                       criterion__sigma_noise=hyper.sigma.numpy(), train_split=None)
        net.initialize()
        if init_module is not None:
            net.module_.load_state_dict(init_module.state_dict())
    sizes = tensor_sizes(net.module_)
    net.set_params(criterion__prior_precision=hyper.for_training(sizes))
    criterion = net.criterion_.attach(net.module_)
    params = [p for p in net.module_.parameters() if p.requires_grad]
    optimizer = net.optimizer_
    dtype = next(p for p in net.module_.parameters()).dtype
    # read and converted once, kept on the workers for every round
    rows = list(dask.persist(*[dask.delayed(_training_rows)(p, units, criterion, dtype)
                               for p in pairs]))
    static = [share((net.module_, criterion))]  # shared again after an online update
    callback = None
    if online:
        callback = online_callbacks(s, likelihood, sizes, True, None, n_outputs, n_rows=n_rows,
                                    spread=_pooled_spread(stats, target_info[3])
                                    if likelihood.has_noise else None)[0].initialize()
        net.callbacks_.append(("online_evidence", callback))
    s.log(f"{what} on {len(pairs)} dask partitions ({n_rows} rows): full-batch L-BFGS")

    def closure():
        optimizer.zero_grad()
        theta = torch.nn.utils.parameters_to_vector(params).detach()
        shared = share(theta)  # once per round
        pieces = [_delayed_loss(part, static[0], shared) for part in rows]
        (total,) = compute(tree_reduce(pieces, _add_loss))
        scale = 1.0 / (n_rows * s.temperature)
        prior = criterion.prior_term()
        if torch.is_tensor(prior):
            prior.backward()
        for p, g in zip(params, _split(total["grad"], params)):
            p.grad = g.to(p) * scale + (p.grad if p.grad is not None else 0)
        prior = float(prior.detach()) if torch.is_tensor(prior) else float(prior)
        return torch.as_tensor(float(total["nll"]) * scale + prior)

    rule = Convergence(s.tol, s.n_iter_no_change).initialize()
    net.module_.train()
    converged = False
    for _ in range(s.max_epochs):
        loss = float(optimizer.step(closure))
        net.history.new_epoch()
        net.history.record("epoch", len(net.history))
        net.history.record("train_loss", loss)
        if not np.isfinite(loss):
            raise ValueError(
                "MAP training diverged (the loss is not finite); scale the features and "
                "targets.")
        if callback is not None and callback.due(len(net.history)):
            _online_update(callback, net, pairs, likelihood, units, n_outputs, s.curvature)
            static[0] = share((net.module_, criterion))  # σ of the workers' NLL
        try:
            rule.on_epoch_begin(net)
            rule.on_epoch_end(net)
        except Converged:
            converged = True
            break
    if not converged and s.tol is not None:
        warnings.warn(
            f"MAP training ran max_epochs={s.max_epochs} epochs without converging: the "
            f"training loss did not stay within tol={s.tol} of its best for n_iter_no_change="
            f"{s.n_iter_no_change} epochs. Raise max_epochs (or tol), or scale the features "
            "and targets.", ConvergenceWarning)
    if callback is not None:
        callback.on_train_end(net)  # the best update's net, δ and σ, as in memory
    net.module_.eval()
    return net


def _pooled_spread(stats, targets):
    """The std of all target cells in model units (``np.std`` of ``y_model``, in memory)
    from the first pass's per-output sums."""
    n = stats["rows"]
    mean = stats["y_sum"] / n
    var = np.maximum(stats["y_sq"] / n - mean**2, 0.0) / targets.std**2
    model_mean = (mean - targets.mean) / targets.std
    return float(np.sqrt(max(np.mean(var + model_mean**2) - np.mean(model_mean) ** 2, 0.0)))


def _online_update(callback, net, pairs, likelihood, units, n_outputs, curvature):
    """One update of ``"online"`` tuning (:class:`._laplace.online.OnlineEvidence`) on
    the partitions: the curvature of the net's weights as sums over them, the evidence
    from the sums, the callback's steps on it."""
    if not all(torch.isfinite(p).all() for p in net.module_.parameters()):
        return  # the loss check reports the divergence
    module = copy.deepcopy(net.module_).to(torch.float64).eval()
    subset = AllWeights(module)
    structure = callback.hessian_structure
    out_scale = torch.ones(n_outputs, dtype=torch.float64)
    sums = reduce_sums(pairs, subset, likelihood, out_scale, curvature, units, structure)
    rank = (callback.lowrank_rank or default_lowrank_rank(subset.n_params)
            if structure == "lowrank" else None)
    posterior = parts.posterior_from_sums(structure, subset, sums, rank)
    evidence = parts.evidence_from_sums(posterior, subset.theta.detach(), likelihood, sums,
                                        callback.temperature, curvature)
    crit = net.criterion_
    delta, sigma, value = callback.tune(evidence, subset, crit.prior_precision.cpu(),
                                        crit.sigma_noise.cpu())
    callback.record(net, len(net.history), subset, delta, sigma, value)


def _delayed_loss(pair, static, theta):
    import dask

    return dask.delayed(_part_loss)(pair, static, theta)


def _training_rows(pair, units, criterion, dtype):
    """A partition's rows as the training tensors (X in the module's dtype, the targets
    as the in-memory training takes them)."""
    X, y = pair
    yt = torch.as_tensor(criterion.likelihood.train_targets(units(y).numpy()))
    return _as_rows(X).to(dtype), yt.to(dtype) if yt.is_floating_point() else yt


@partition_task
def _part_loss(part, static, theta):
    """Σ nll of one partition's rows and its gradient (flat), in row chunks."""
    module, criterion = copy.deepcopy(static)  # a worker's threads share it
    params = [p for p in module.parameters() if p.requires_grad]
    torch.nn.utils.vector_to_parameters(theta.to(params[0].dtype), params)
    Xt, yt = part
    module.train()
    grad = torch.zeros(sum(p.numel() for p in params), dtype=torch.float64)
    nll = 0.0
    for start in range(0, len(Xt), CHUNK_ROWS):
        rows = slice(start, start + CHUNK_ROWS)
        with torch.enable_grad():
            f = module(Xt[rows])
            part = criterion.data_nll(f, yt[rows]) * f.shape[0]
            grads = torch.autograd.grad(part, params)
        nll += float(part.detach())
        grad += torch.cat([g.reshape(-1) for g in grads]).to(torch.float64)
    return {"nll": nll, "grad": grad}


def _add_loss(a, b):
    return {"nll": a["nll"] + b["nll"], "grad": a["grad"] + b["grad"]}


def _split(flat, params):
    out, start = [], 0
    for p in params:
        out.append(flat[start:start + p.numel()].reshape(p.shape))
        start += p.numel()
    return out
