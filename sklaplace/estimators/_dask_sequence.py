"""``fit`` on dask collections: the sequence of the in-memory fit, on the partitions.

The steps are the in-memory ``BaseLaplace._fit``'s, with the rows left on the workers:

- the policy sees the global N (``hyperparameter_tuning="auto"``: the estimator's own
  rule, ``_laplace.policy``; the structure and subset of each LA: the rows it is fitted
  on), the memory guard applies per partition;
- held-out rows are each partition's own, masked where they are (:mod:`._dask_holdout`);
- ``"cv"`` (the classifier's default): the net trained on the fit rows, its LA there
  with δ chosen by the held-out rows (grid, one-standard-error rule), then the net
  trained on, warm, on all rows and its LA there at the chosen δ;
- ``hidden_layer_sizes="auto"`` (the default): the candidates, criterion and greedy
  stop of :mod:`._selection` (shared: :func:`._selection.run_candidates`,
  :func:`._selection.summarize`), each candidate trained on the fit rows
  (:mod:`._dask_train`: full-batch L-BFGS, every candidate) and scored by the held-out
  rows; the chosen one trained on, warm, on all rows with its LA at the held-out δ.

The regressor's ``"auto"`` tuning is ``"online"`` as in memory: every
``online_frequency`` epochs the curvature of the current net is a reduction over the
partitions and the evidence's δ and σ feed back into the objective
(:func:`._dask_train._online_update`). The regressor's ``"cv"`` (a search of σ per δ over
the held-out rows) is refused there, naming ``hyperparameter_tuning``.
"""

import numpy as np
from sklearn.frozen import FrozenEstimator

from . import _selection as selection
from ._dask_fit import (FROZEN_PARAMETERS, _model_spread, _refuse, _targets,
                        check_dask_parameters, first_pass, laplace_on_parts, read_parts, store)
from ._dask_holdout import held_out_nll, split_parts
from ._dask_train import TRAIN_PARAMETERS, train_on_parts
from .._laplace import likelihoods
from .._laplace.convergence import training_curve
from .._laplace.policy import MIN_HELD_OUT_ROWS
from .._laplace.threads import single_thread
from ._training import settings_of
from ._validation import check_params, check_seed


def fit_dask(estimator, X, y):
    """Fit ``estimator`` on dask ``X`` and ``y`` (partitioned alike); the rows stay on
    the workers. The client's steps run on one torch thread, as every partition's task
    (:func:`._dask.partition_task`): the same numbers whatever the machine's load."""
    with single_thread():
        return _fit(estimator, X, y)


def _fit(estimator, X, y):
    frozen = isinstance(estimator.net, FrozenEstimator)
    check_dask_parameters(estimator, FROZEN_PARAMETERS if frozen else TRAIN_PARAMETERS)
    check_params(estimator)
    pairs, stats, classifier = read_parts(estimator, X, y)
    info = _targets(estimator, stats, classifier)
    tuning = _tuning(estimator, stats["rows"], frozen, classifier)
    rng = check_seed("random_state", estimator.random_state)
    rng.randint(0, 2**31 - 1, size=2)  # the training and prediction seeds (as in memory)
    split_seed = int(rng.randint(0, 2**31 - 1))
    s = settings_of(estimator)
    sizes = (None if frozen else
             selection.candidates(s.hidden_layer_sizes, stats["range"]["wx"].numel(), info[1]))
    if sizes is not None:
        return _recorded(_select(estimator, s, pairs, stats, classifier, info, tuning, sizes,
                                 split_seed))
    hidden = None if frozen else tuple(s.hidden_layer_sizes)

    def train(parts, part_stats, init=None, what="MAP training"):
        return (None if frozen else
                train_on_parts(estimator, parts, part_stats, info, hidden, init, what,
                               online=tuning == "online"))

    chosen = report = init = None
    if tuning == "cv":
        fit_pairs, held, fit_stats = _split(s, pairs, stats, classifier, split_seed)
        if stats["rows"] == fit_stats["rows"]:
            raise ValueError(
                f"validation_fraction={s.validation_fraction} holds out no row: every "
                "partition is too small to split; use larger partitions or "
                "hyperparameter_tuning='evidence'.")
        first_net = train(fit_pairs, fit_stats, what=f"MAP training on {fit_stats['rows']} of "
                                                     f"{stats['rows']} rows (the rest held out)")
        first = laplace_on_parts(estimator, fit_pairs, fit_stats, classifier, first_net, info,
                                 tuning, held_out=held)
        chosen, report = first.hyper, {"validation_nll": first.report["validation_nll"]}
        init = None if frozen else first_net.module_
    net = train(pairs, stats, init, what=f"MAP training on all {stats['rows']} rows")
    fitted = laplace_on_parts(estimator, pairs, stats, classifier, net, info, tuning,
                              chosen=chosen, report=report)
    store(estimator, net, fitted)
    estimator.hidden_layer_sizes_ = hidden
    return estimator if frozen else _recorded(estimator)


def _recorded(estimator):
    record = getattr(estimator, "_record_scaling", None)  # the regressor's
    return record() if record is not None else estimator


def _tuning(estimator, n_rows, frozen, classifier):
    """``hyperparameter_tuning_`` on dask input: the in-memory policy of the global N."""
    net = estimator.net.estimator if frozen else None
    value = estimator._resolve_tuning(n_rows, net, None)
    if value == "cv" and not classifier:
        _refuse("hyperparameter_tuning", "cv",
                "the regressor's held-out search of sigma_noise per prior precision is not "
                "implemented there; use 'auto' or 'evidence'.")
    return value


def _split(s, pairs, stats, classifier, seed):
    """(fit pairs, held-out pairs, the fit rows' first pass) of the partitions' masks."""
    fit_pairs, held = split_parts(pairs, s.validation_fraction, seed, stratify=classifier)
    return fit_pairs, held, first_pass(fit_pairs, classifier)


def _select(estimator, s, pairs, stats, classifier, info, tuning, sizes, seed):
    """``hidden_layer_sizes="auto"`` on the partitions (module docstring)."""
    n_features, n_outputs = stats["range"]["wx"].numel(), info[1]
    fit_pairs, held, fit_stats = _split(s, pairs, stats, classifier, seed)
    by_evidence = stats["rows"] - fit_stats["rows"] < MIN_HELD_OUT_ROWS
    if by_evidence:  # too few held out: every candidate on all rows, the evidence decides
        fit_pairs, fit_stats = pairs, stats
    rng = check_seed("random_state", estimator.random_state)
    prediction_seed = int(rng.randint(0, 2**31 - 1, size=2)[1])
    link = (estimator._link(likelihoods.get(info[2]), prediction_seed) if classifier
            else None)
    spread = None if classifier else _model_spread(stats, info[3])

    def fit_one(c):
        net = train_on_parts(estimator, fit_pairs, fit_stats, info, c,
                             what=f"hidden_layer_sizes={c}: MAP training",
                             online=tuning == "online")
        fitted = laplace_on_parts(estimator, fit_pairs, fit_stats, classifier, net, info,
                                  tuning, held_out=held if tuning == "cv" and not by_evidence
                                  else None)
        evidence = (selection.evidence_at_optimum(fitted, s, None, None, spread=spread)
                    + estimator._evidence_offset(fitted))
        nll = np.nan
        if not by_evidence:
            nll = fitted.report.get("validation_nll")
            if nll is None:
                nll = held_out_nll(fitted, held, info[0], link)
        return (net, *training_curve(net), fitted), fitted.subset.n_params, nll, evidence

    fits, rows = selection.run_candidates(s, sizes, n_features, n_outputs, by_evidence, fit_one)
    best, results = selection.summarize(sizes, rows, by_evidence, s.prior_precision)
    net, n_iter, curve, fitted = fits[best]
    chosen = fitted.hyper if fitted.tuning == "cv" else None
    report = None if chosen is None else {"validation_nll": fitted.report["validation_nll"]}
    net = train_on_parts(estimator, pairs, stats, info, sizes[best], net.module_,
                         what=f"MAP training on all {stats['rows']} rows",
                         online=tuning == "online")
    fitted = laplace_on_parts(estimator, pairs, stats, classifier, net, info, tuning,
                              chosen=chosen, report=report)
    store(estimator, net, fitted)
    estimator.hidden_layer_sizes_, estimator.model_selection_results_ = sizes[best], results
    return estimator
