"""Held-out rows of a fit on dask collections: a mask per partition, on the workers.

The rows ``hyperparameter_tuning="cv"`` and ``hidden_layer_sizes="auto"`` hold out stay
in their partitions: each partition splits its own rows by the in-memory split
(:func:`._laplace.holdout.validation_split`: ⌈``validation_fraction``·n⌉ of its n rows,
stratified by label where every class allows it) under a seed of its own, drawn from the
fit's split seed and the partition's index (:func:`partition_rows`). The mask is a
function of (``random_state``, partition index, the partition's rows), recomputed where
the partition is read, so nothing moves: training and the LA read the partitions' fit
rows (:func:`split_parts`), the tuners their held-out rows.

Rows within each partition, not whole partitions: partitions are often ordered (by time,
by key), so holding out whole ones would score the candidates on another distribution
than they were trained on; and every partition keeps its share of the training work.
A partition too small to split (fewer than ⌈fraction·n⌉ + 2 rows) holds out none.

What the held-out rows return are sums: the held-out NLL of every δ of the grid of
:mod:`._laplace.holdout` with the sums of its products for the one-standard-error rule
(:func:`held_out_choice`), or the summed NLL of one predictive (:func:`held_out_nll`).
"""

import copy

import numpy as np
import torch

from ._dask import compute, partition_task, share, tree_reduce
from .._laplace import holdout
from .._laplace import tuning as tuners
from .._laplace.hyperparameters import Hyperparameters
from ._selection import held_out_losses


def partition_rows(n_rows, fraction, seed, index, labels=None):
    """(fit rows, held-out rows) of partition ``index`` of ``n_rows`` rows: the in-memory
    split under the partition's own seed (from ``seed`` and ``index``), stratified on
    ``labels`` where it can; all rows fit where the partition is too small to split."""
    n_val = int(np.ceil(fraction * n_rows))
    if n_val < 1 or n_rows - n_val < 2:
        return np.arange(n_rows), np.arange(0)
    part_seed = int(np.random.SeedSequence([int(seed), int(index)]).generate_state(1)[0])
    return holdout.validation_split(n_rows, fraction, part_seed, labels)


def global_split(sizes, fraction, seed, labels=None):
    """The partitions' masks as (fit rows, held-out rows) of all rows in order, for
    partitions of ``sizes`` rows: the same split of the same rows in memory."""
    fit, held, start = [], [], 0
    for index, n in enumerate(sizes):
        part = None if labels is None else labels[start:start + n]
        f, h = partition_rows(n, fraction, seed, index, part)
        fit.append(f + start)
        held.append(h + start)
        start += n
    return np.concatenate(fit), np.concatenate(held)


def _side(pair, fraction, seed, index, stratify, held):
    X, y = pair
    fit, held_out = partition_rows(len(X), fraction, seed, index, y if stratify else None)
    rows = held_out if held else fit
    return X[rows], y[rows]


def split_parts(pairs, fraction, seed, stratify):
    """(fit pairs, held-out pairs): each partition's rows split by its mask, as delayed
    (X, y) pairs computed where the partition is."""
    import dask

    side = dask.delayed(_side)
    return ([side(p, fraction, seed, i, stratify, False) for i, p in enumerate(pairs)],
            [side(p, fraction, seed, i, stratify, True) for i, p in enumerate(pairs)])


def _rows_on(pair, units, device):
    X, y = pair
    Xt = torch.as_tensor(np.asarray(X, dtype=np.float64).reshape(len(X), -1)).to(device)
    return Xt, units(y).to(device)


@partition_task
def _grid_piece(pair, shared, n_grid, sampled, n_samples, seed):
    evidence, subset, units, link = copy.deepcopy(shared)  # a worker's threads share it
    if len(pair[0]) == 0:
        return {"n": 0, "sum": np.zeros(n_grid), "cross": np.zeros((n_grid, n_grid))}
    Xv, yv = _rows_on(pair, units, subset.theta.device)
    _, losses = tuners.grid_losses(evidence, evidence.posterior, subset, Xv, yv,
                                   link.scorers(), sampled=sampled, n_samples=n_samples,
                                   seed=seed)
    n, sums, cross = holdout.loss_sums(losses)
    return {"n": n, "sum": sums, "cross": cross}


def _add(a, b):
    return {k: a[k] + b[k] for k in a}


def held_out_choice(evidence, subset, held_pairs, units, link, sigma, *, sampled, n_samples,
                    seed):
    """(Hyperparameters, the chosen δ's held-out NLL) of the classifier's held-out
    tuning on the partitions' held-out rows: :func:`._laplace.tuning.by_held_out`'s grid
    and one-standard-error rule, each partition returning its rows' summed NLL per δ
    and the sums of their products (:func:`._laplace.holdout.loss_sums`)."""
    import dask

    deltas = 10.0 ** (holdout.LOG10_PRIOR_GRID[::4] if sampled else holdout.LOG10_PRIOR_GRID)
    shared = share((evidence, subset, units, link))
    pieces = [dask.delayed(_grid_piece)(p, shared, len(deltas), sampled, n_samples, seed)
              for p in held_pairs]
    (total,) = compute(tree_reduce(pieces, _add))
    if total["n"] == 0:
        raise ValueError("validation_fraction holds out no row: every partition is too small "
                         "to split; use larger partitions or hyperparameter_tuning='evidence'.")
    chosen = holdout.choice_from_sums(total["n"], total["sum"], total["cross"])
    holdout.warn_at_grid_bound(chosen, deltas)
    return (Hyperparameters.of(float(deltas[chosen]), sigma),
            float(total["sum"][chosen] / total["n"]))


@partition_task
def _nll_piece(pair, shared):
    fitted, units, link = copy.deepcopy(shared)
    if len(pair[0]) == 0:
        return {"n": 0, "sum": 0.0}
    Xv, yv = _rows_on(pair, units, fitted.device)
    losses = held_out_losses(fitted, Xv, yv, None if link is None else link.scorers())
    return {"n": len(losses), "sum": float(np.sum(losses))}


def held_out_nll(fitted, held_pairs, units, link):
    """Mean held-out NLL of ``fitted``'s GLM predictive (model units, per target cell for
    the regressor: :func:`._selection.held_out_losses`; the classifier's under its
    ``link``) over the partitions' held-out rows."""
    import dask

    shared = share((fitted, units, link))
    (total,) = compute(tree_reduce([dask.delayed(_nll_piece)(p, shared) for p in held_pairs],
                                   _add))
    return total["sum"] / total["n"] if total["n"] else np.nan
