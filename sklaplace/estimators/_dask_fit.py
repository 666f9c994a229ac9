"""``fit`` on dask collections: the rows stay in their partitions, on the workers.

Every step of the fit that reads rows is a sum over rows (:mod:`._laplace.partial`):
each partition computes its pieces with the in-memory fit's row-chunked routines, the
pieces are added up a tree (:func:`._dask.tree_reduce`) and the client decomposes the
total once, tunes and stores — the in-memory fit up to the order of additions. Nothing
gathers the rows: the client holds the pieces (a P × P matrix at most, within the
memory budget), two probe rows and the few rows that extend the training range.

Scope: a ``FrozenEstimator`` net with every structure and subset, the evidence, held-out
(``"cv"``, the classifier's), online (a trained net's) or no tuning and the variance
outside the training range;
with a net to train, the default configuration (:mod:`._dask_train`, the sequence in
:mod:`._dask_sequence`). Any other parameter gets a ``ValueError`` naming it.
"""

import copy
import dataclasses

import numpy as np
import torch
from sklearn.frozen import FrozenEstimator
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import column_or_1d

from .._laplace import policy
from ._dask import (check_collections, compute, empty_like, partition_task, read_pair,
                    row_parts, share, tree_reduce)
from ._dask_holdout import held_out_choice
from ._labels import FIT_CHECKS as LABEL_CHECKS
from ._regressor_noise import FIT_CHECKS as TARGET_CHECKS
from ._fitting import online_choice, resolve_subset
from .._laplace import likelihoods, nets
from .._laplace import partial as parts
from .._laplace import tuning as tuners
from .._laplace.convergence import training_curve
from .._laplace.curvature import default_lowrank_rank
from .._laplace.fitted import FittedLaplace
from .._laplace.hyperparameters import Hyperparameters, TargetScale, trained_scaling
from .._laplace.outside import RangeKernel, variance_of_rows
from .._laplace.prior import tensor_sizes
from ._training import output_width, prepare_net, settings_of
from ._validation import check_seed, validate_numeric

#: Parameters a fit of a frozen net on dask input may set (the others keep their defaults).
FROZEN_PARAMETERS = frozenset({
    "net", "subset_of_weights", "hessian_structure", "subnetwork", "lowrank_rank",
    "prior_precision", "prior_structure", "curvature", "temperature",
    "hyperparameter_tuning", "validation_fraction", "link_approx", "n_samples", "pred_type",
    "extrapolation_variance", "random_state", "verbose", "sigma_noise"})


def _same(a, b):
    try:
        return bool(np.array_equal(np.asarray(a, dtype=object), np.asarray(b, dtype=object))) \
            if not isinstance(a, str) else a == b
    except Exception:
        return a is b


def check_dask_parameters(estimator, free):
    """A ``ValueError`` naming every parameter outside ``free`` that differs from its
    default: the dask path does not implement it."""
    defaults = type(estimator)().get_params(deep=False)
    changed = sorted(k for k, v in estimator.get_params(deep=False).items()
                     if k not in free and not _same(v, defaults[k]))
    if changed:
        raise ValueError(
            f"{type(estimator).__name__}.fit on dask input supports the default configuration "
            "and, with a FrozenEstimator net, every hessian_structure and subset_of_weights; "
            f"these parameters differ from their defaults: {', '.join(changed)}. Set them to "
            "their defaults, or fit on data in memory.")


def _refuse(name, value, why):
    raise ValueError(f"{name}={value!r} is not supported on dask input: {why}")


@dataclasses.dataclass(frozen=True)
class RowChecks:
    """The in-memory fit's checks and conversions of X and y (``validate_numeric`` with
    the estimator's ``FIT_CHECKS``, the class labels'), run on one partition where it is
    read, on a new estimator of the fitted one's class (``estimator_class``)."""

    estimator_class: type
    classifier: bool
    n_features: int

    def __call__(self, X, y):
        if len(X) == 0:  # scikit-learn's checks refuse no rows; the fit counts all partitions'
            return np.empty((0, self.n_features)), np.asarray(y)
        if self.classifier and y.ndim == 2:  # one column: the client warned once, as in memory
            y = y.iloc[:, 0] if hasattr(y, "iloc") else y[:, 0]
        X, y = validate_numeric(self.estimator_class(), X, y, **_fit_checks(self.classifier))
        if self.classifier:  # the in-memory check of all labels, part by part
            check_classification_targets(y)
        return X, y


def _fit_checks(classifier):
    return LABEL_CHECKS if classifier else TARGET_CHECKS


def read_parts(estimator, X, y):
    """(the partitions' (X, y) pairs, the first pass's sums, classifier or not); sets
    ``n_features_in_`` and ``feature_names_in_`` as the in-memory fit does."""
    import dask

    check_collections(X, y)
    classifier = hasattr(estimator, "class_weight")
    if classifier and y.ndim == 2 and (len(y.columns) if hasattr(y, "columns")
                                       else y.shape[1]) != 1:
        raise ValueError("y on dask input must be 1-D class labels for LaplaceClassifier "
                         "(a multilabel indicator matrix is fitted in memory only).")
    # X's columns, dtypes and shape checked on the client first, with the in-memory
    # messages; a copy takes the fitted attributes until the partitions pass theirs
    probe = copy.copy(estimator)
    validate_numeric(probe, empty_like(X), ensure_min_samples=0,
                     dtype=_fit_checks(classifier)["dtype"])
    if classifier:
        column_or_1d(empty_like(y), warn=True)  # the in-memory warning of a column y
    n_features = probe.n_features_in_
    raw, _ = row_parts(X, y)
    check = RowChecks(type(estimator), classifier, n_features)
    stats = first_pass(raw, classifier, check)
    if stats["rows"] == 0:
        raise ValueError(f"Found array with 0 sample(s) (shape=(0, {n_features})) while a "
                         f"minimum of 1 is required by {type(estimator).__name__}.")
    pairs = [dask.delayed(read_pair)(p, check) for p in raw]
    estimator.n_features_in_ = n_features
    names = probe.__dict__.get("feature_names_in_")
    if names is not None:
        estimator.feature_names_in_ = names
    else:
        estimator.__dict__.pop("feature_names_in_", None)
    return pairs, stats, classifier


# ------------------------------------------------------------------ first pass
def first_pass(pairs, classifier, check=None):
    """Rows, the training range's sums, the labels or the targets' sums, two probe rows;
    with ``check``, of the partitions as they are (:func:`._dask.row_parts`), read by
    :func:`._dask.read_pair`, raising the error of the first partition in their order
    that fails its checks (the same error whichever partition a worker read first)."""
    import dask

    pieces = [dask.delayed(_first_piece)(p, classifier, check) for p in pairs]
    (stats,) = compute(tree_reduce(pieces, _add_first))
    if "error" in stats:
        raise stats["error"]
    return stats


def _as_rows(X):
    return torch.as_tensor(np.asarray(X, dtype=np.float64).reshape(len(X), -1))


@partition_task
def _first_piece(pair, classifier, check=None):
    if check is not None:
        try:
            pair = read_pair(pair, check)
        except (TypeError, ValueError) as error:  # raised on the client, in partition order
            return {"error": error}
    X, y = pair
    piece = {"rows": len(X), "range": parts.range_sums(_as_rows(X)), "head": (X[:2], y[:2])}
    if classifier:
        piece["labels"] = np.unique(y)
    else:
        y2 = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
        piece.update(y_ndim=np.ndim(y), y_sum=y2.sum(0), y_sq=(y2**2).sum(0))
    return piece


def _add_first(a, b):
    if "error" in a or "error" in b:
        return a if "error" in a else b
    out = {"rows": a["rows"] + b["rows"], "range": parts.add_range_sums(a["range"], b["range"]),
           "head": a["head"] if len(a["head"][0]) >= 2 else
           tuple(np.concatenate([u, v])[:2] for u, v in zip(a["head"], b["head"]))}
    if "labels" in a:
        out["labels"] = np.union1d(a["labels"], b["labels"])
    else:
        out.update(y_ndim=a["y_ndim"], y_sum=a["y_sum"] + b["y_sum"],
                   y_sq=a["y_sq"] + b["y_sq"])
    return out


# ------------------------------------------------------------------ the LA
@dataclasses.dataclass(frozen=True)
class ModelUnits:
    """Targets into model units on a worker: label indices, or the regressor's scaling."""

    classes: object = None
    targets: object = None

    def __call__(self, y):
        if self.classes is not None:
            return torch.as_tensor(np.searchsorted(self.classes, np.asarray(y)))
        y2 = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
        return torch.as_tensor(np.ascontiguousarray(self.targets.to_model(y2)))


def _targets(estimator, stats, classifier):
    """(ModelUnits, n_outputs, default likelihood, TargetScale or None)."""
    if classifier:
        classes = stats["labels"]
        if len(classes) < 2:
            raise ValueError("LaplaceClassifier needs at least two classes in y; got one class "
                             f"({classes[0]!r}).")
        estimator.classes_ = classes
        single = len(classes) == 2 and estimator.net is None
        return (ModelUnits(classes=classes), 1 if single else len(classes),
                "bernoulli" if single else "categorical", None)
    k = stats["y_sum"].size
    sigma = np.atleast_1d(np.asarray(estimator.sigma_noise, dtype=float))
    if sigma.size != 1:
        _refuse("sigma_noise", estimator.sigma_noise, "one noise level for all outputs only.")
    trained = (trained_scaling(estimator.net.estimator, k)
               if isinstance(estimator.net, FrozenEstimator) else None)
    if trained is not None:
        targets = TargetScale(np.asarray(trained[0], float), np.asarray(trained[1], float), True,
                              stats["y_ndim"])
    elif estimator.__dict__.get("normalize_y") and not isinstance(estimator.net, FrozenEstimator):
        n = stats["rows"]
        mean = stats["y_sum"] / n
        std = np.sqrt(np.maximum(stats["y_sq"] / n - mean**2, 0.0))
        targets = TargetScale(mean, np.where(std > 0, std, 1.0), True, stats["y_ndim"])
    else:
        targets = TargetScale(np.zeros(k), np.ones(k), False, stats["y_ndim"])
    return ModelUnits(targets=targets), k, "gaussian", targets


def _model_spread(stats, targets):
    """The std of the targets in model units (the evidence's bounds on σ)."""
    n = stats["rows"]
    mean = stats["y_sum"] / n
    var = np.maximum(stats["y_sq"] / n - mean**2, 0.0)
    return np.sqrt(var) / targets.std


@partition_task
def _part_sums(pair, shared, structure, range_stats):
    # a copy per task: the curvature passes hook the module, and a worker's threads
    # share the scattered object
    subset, likelihood, out_scale, curvature, units = copy.deepcopy(shared)
    X, y = pair
    Xt, yt = _as_rows(X).to(subset.theta.device), units(y).to(subset.theta.device)
    sums = parts.part_sums(structure, subset, likelihood, Xt, yt, out_scale, curvature)
    if range_stats is not None:
        sums["range"] = parts.range_extremes(Xt.cpu(), yt.cpu(), None, *range_stats)
    return sums


def _add_sums(a, b):
    out = parts.add_sums({k: v for k, v in a.items() if k != "range"},
                         {k: v for k, v in b.items() if k != "range"})
    if "range" in a:
        out["range"] = parts.add_range_extremes(a["range"], b["range"])
    return out


def reduce_sums(pairs, subset, likelihood, out_scale, curvature, units, structure,
                range_stats=None):
    """The partitions' :func:`._laplace.partial.part_sums` added up a tree."""
    import dask

    shared = share((subset, likelihood, out_scale, curvature, units))
    pieces = [dask.delayed(_part_sums)(p, shared, structure, range_stats) for p in pairs]
    (sums,) = compute(tree_reduce(pieces, _add_sums))
    return sums


def laplace_on_parts(estimator, pairs, stats, classifier, net_, target_info, tuning, *,
                     held_out=None, chosen=None, report=None):
    """The :class:`FittedLaplace` of the frozen net (``net_`` None) or of the trained
    ``net_`` on the partitions ``pairs`` (``stats``: their first pass), tuned by
    ``tuning``: the evidence, ``"online"`` (the values of the updates during the
    training of ``net_``), None, or ``"cv"``, by the held-out rows ``held_out``
    (:func:`._dask_holdout.held_out_choice`) or at the ``chosen`` hyperparameters of a
    held-out pass. ``target_info``: :func:`_targets` of all rows; ``report``: the fit's
    diagnostics (the held-out NLL of a refit's choice)."""
    s = settings_of(estimator)
    rng = check_seed("random_state", estimator.random_state)
    _, prediction_seed = (int(v) for v in rng.randint(0, 2**31 - 1, size=2))
    units, n_outputs, default, targets = target_info
    _, frozen, likelihood = prepare_net(s, stats["range"]["wx"].numel(), n_outputs)
    net = frozen if net_ is None else net_
    n_rows = stats["rows"]
    if s.pred_type == "gp":
        _refuse("pred_type", "gp", "use 'glm' or 'nn'.")
    likelihood = likelihoods.get(likelihood or default)
    head_X, head_y = stats["head"]
    width = output_width(net.module_, head_X)
    estimator._check_outputs(likelihood, n_outputs, width)
    hyper0 = Hyperparameters.of(estimator.prior_precision, estimator._initial_sigma())
    device = nets.module_device(net.module_)
    module = copy.deepcopy(net.module_).to(device, torch.float64).eval()
    Xp, yp = _as_rows(head_X).to(device), units(head_y).to(device)
    out_scale = torch.ones(width, dtype=torch.float64, device=device)
    holds = policy.kron_holds_prior(s.prior_structure, s.prior_precision,
                                    tensor_sizes(net.module_))
    reduce = lambda structure, subset, **kw: reduce_sums(  # noqa: E731
        pairs, subset, likelihood, out_scale, s.curvature, units, structure, **kw)

    def diag_of(subset):
        return parts.posterior_from_sums("diag", subset, reduce("diag", subset), device=device)

    subset, kind, structure = resolve_subset(
        s, likelihood, module, net.module_, Xp, yp, out_scale, width, hyper0, holds,
        n_rows=n_rows, diag_of=diag_of)
    if structure == "kron" and not holds:
        _refuse("hessian_structure", "kron", "it needs one prior precision per tensor.")
    if structure in ("full", "lowrank"):
        policy.check_time(structure, n_rows, width, subset.n_params, device.type, s.log,
                          kernel=False)
    rank = (s.lowrank_rank or default_lowrank_rank(subset.n_params)
            if structure == "lowrank" else None)
    jackknife = (classifier and s.extrapolation_variance == "auto" and s.pred_type != "nn"
                 and tuning is not None and held_out is None)
    kernel = _range_kernel(stats["range"]) if jackknife or _given(s) else None
    s.log(f"Laplace approximation on {len(pairs)} dask partitions ({n_rows} rows): {kind} "
          f"weights ({subset.n_params}), {structure} {s.curvature.upper()}")
    sums = reduce(structure, subset,
                  range_stats=(_mean(stats["range"]), kernel.low, kernel.high)
                  if jackknife else None)
    posterior = parts.posterior_from_sums(structure, subset, sums, rank, device)
    evidence = parts.evidence_from_sums(posterior, subset.theta.detach(), likelihood, sums,
                                        s.temperature, s.curvature)
    hyper, report = hyper0, dict(report or {})
    if chosen is not None:
        hyper = chosen
    elif held_out is not None:
        link = estimator._link(likelihood, prediction_seed)
        hyper, report["validation_nll"] = held_out_choice(
            evidence, subset, held_out, units, link, hyper0.sigma,
            sampled=s.pred_type == "nn", n_samples=s.n_samples, seed=prediction_seed)
    elif tuning in ("evidence", "online"):
        spread = None if classifier else _model_spread(stats, targets)

        def by_evidence(sigma):
            return tuners.by_evidence(evidence, subset, s.prior_structure, s.prior_precision,
                                      sigma, None, spread=spread)

        if tuning == "evidence":
            hyper = by_evidence(hyper0.sigma)
        else:  # the values the updates during training ended with
            hyper, report["evidence_history"] = online_choice(
                s, net_, targets, n_rows, kind, structure, by_evidence, hyper0.sigma)
    scale = hyper.scale(likelihood.has_noise, s.curvature, s.temperature)
    fitted = FittedLaplace(
        likelihood=likelihood, subset=subset,
        posterior=evidence.posterior.with_prior(hyper.delta(subset), scale),
        evidence=evidence, hyper=hyper, kind=kind, structure=structure, tuning=tuning,
        n_outputs=width, curvature=s.curvature, temperature=s.temperature,
        prediction_seed=prediction_seed, targets=targets, refined=False, report=report,
        task_rows=None, n_tasks=0)
    variance = float(s.extrapolation_variance or 0.0) if _given(s) else 0.0
    if jackknife:
        kernel = dataclasses.replace(kernel, scale=_scale(stats["range"], sums["range"]["ss"]))
        unit, Xr, yr, wr = parts.loo_units(kernel, sums["range"])
        scorer = estimator._held_out_scorers(likelihood, prediction_seed)[0]
        with torch.no_grad():
            variance = variance_of_rows(unit, Xr.to(device), yr.to(device),
                                        wr.numpy(), float(stats["range"]["n"]),
                                        fitted.glm_moments, scorer)
    elif _given(s):
        kernel = dataclasses.replace(kernel, scale=_scale(stats["range"], _second_moments(
            pairs, _mean(stats["range"]))))
    outside = kernel.with_variance(variance) if variance else None
    if net_ is None:
        frozen.module_.eval()
    return dataclasses.replace(fitted, hyper=hyper.with_outside_variance(variance),
                               outside=outside)


def store(estimator, net_, fitted):
    """``estimator`` with the fit stored (``net_``: the trained net, or the frozen one)."""
    net = estimator.net.estimator if net_ is None else net_
    return estimator._store(net, *training_curve(net), fitted)


def _given(s):
    return s.extrapolation_variance not in ("auto", None, 0, 0.0)


def _mean(range_sums):
    return range_sums["wx"] / range_sums["n"]


def _range_kernel(range_sums):
    ones = torch.ones_like(range_sums["wx"])
    return RangeKernel(range_sums["low"], range_sums["high"], ones)


def _scale(range_sums, ss):
    """:meth:`RangeKernel.of`'s scale: the std, 1 where (nearly) constant."""
    mean = _mean(range_sums)
    std = (ss / range_sums["n"]).sqrt()
    tiny = 10 * torch.finfo(std.dtype).eps * mean.abs().clamp_min(1.0)
    return torch.where(std > tiny, std, torch.ones_like(std))


def _second_moments(pairs, mean):
    import dask

    @partition_task
    def piece(pair):
        X = _as_rows(pair[0])
        return ((X - mean) ** 2).sum(0)

    (ss,) = compute(tree_reduce([dask.delayed(piece)(p) for p in pairs],
                                lambda a, b: a + b))
    return ss
