"""The held-out δ of a small data set, pooled over folds (cross-fitting).

``"cv"`` tuning chooses δ by the held-out NLL of ``validation_fraction`` of the rows
for the net trained on the rest, and the refit on all rows predicts at that δ. With
few held-out rows that choice is noisy: on ionosphere (53 held-out rows) the held-out
rows chose δ = 178 for a net whose best δ on the test rows was 5.6 (test NLL 0.44
against 0.29), on breast cancer (86) δ = 10⁴ where 10 was best (0.165 against
0.122) — the choice was wrong for the held-out pass's own net, not only for the refit.

Here the other folds of the same size (``validation_fraction`` of the rows; the
held-out rows are the first fold) each hold out their rows from a net trained on the
rest, by the same procedure as the held-out pass (a fresh training of the same
architecture from the same initialization), until ``POOLED_ROWS`` rows are held out
in all or every fold is used; the rows' losses over the δ grid are pooled and one
δ is chosen from them (the same one-standard-error rule). Every held-out loss is that
of a net that never trained on its row, so the pooled choice is one for a net of
this procedure and size — the final net's, up to the 20 % more rows it trains on.
Larger data hold out enough rows in one fold and train once, as before. Off by
default (``POOLED_ROWS = 0``; see its comment).
"""

import numpy as np
import torch
from sklearn.model_selection import KFold, StratifiedKFold

from .._laplace.holdout import one_standard_error_choice, warn_at_grid_bound
from .._laplace.hyperparameters import Hyperparameters
from .._laplace.tuning import grid_losses

#: Held-out rows the pooled choice of δ wants: folds are added until this many. 0 (the
#: default): one held-out fold. 500 was measured (docs/defaults.md): better test NLL on four
#: small sets, equal elsewhere, but beyond its MAP's bound on one split of breast cancer
#: (pooled δ = 1: NLL 0.100 against the MAP's 0.086; one fold δ = 5.6: 0.094) and 1.4–1.8×
#: the fit time.
POOLED_ROWS = 0
#: Most folds beyond the held-out one (each costs a training of the chosen architecture).
MAX_EXTRA_FOLDS = 2


def n_extra_folds(n_rows, n_held_out):
    """Folds beyond the held-out one: enough for ``POOLED_ROWS`` held-out rows, at most
    every fold of ``n_held_out`` rows the data hold."""
    folds = max(1, int(round(n_rows / n_held_out)))
    wanted = int(np.ceil(POOLED_ROWS / n_held_out))
    return max(0, min(folds, wanted, MAX_EXTRA_FOLDS + 1) - 1)


def extra_folds(fit_rows, n_held_out, n_extra, labels, seed):
    """``n_extra`` disjoint folds of ``fit_rows`` of about ``n_held_out`` rows each
    (stratified on ``labels`` where every class allows it)."""
    n_splits = max(2, int(round(len(fit_rows) / n_held_out)), n_extra)
    stratify = labels is not None and np.ndim(labels) == 1
    if stratify:
        _, counts = np.unique(labels[fit_rows], return_counts=True)
        stratify = counts.min() >= n_splits
    splitter = (StratifiedKFold if stratify else KFold)(n_splits=n_splits, shuffle=True,
                                                        random_state=seed)
    parts = splitter.split(fit_rows, labels[fit_rows] if stratify else None)
    return [np.sort(fit_rows[test]) for _, test in parts][:n_extra]


def pooled_choice(s, first, held_out, pipe, X, y_model, sample_weight, fit_rows, seed):
    """(Hyperparameters, pooled held-out NLL) of δ chosen on the held-out rows of
    ``first`` (the held-out pass's fit) and of the extra folds' fits, or None where one
    fold holds enough rows or the held-out losses are not the GLM predictive's.

    ``pipe``: the architecture's pipeline (``_base._pipeline``: ``train``, ``laplace``,
    ``scorers``); ``s``: the settings (the GLM predictive, unrefined, is pooled)."""
    n_extra = n_extra_folds(len(X), len(held_out))
    if (n_extra == 0 or pipe.scorers is None or first.tuning != "cv"
            or s.pred_type != "glm" or s.refine is not None):
        return None
    labels = None if pipe.likelihood.multilabel else y_model
    folds = [held_out] + extra_folds(fit_rows, len(held_out), n_extra, labels, seed)
    fits = [first]
    for k, rows in enumerate(folds[1:], start=2):
        train = np.setdiff1d(np.arange(len(X)), rows)
        w_train = None if sample_weight is None else sample_weight[train]
        w_rows = None if sample_weight is None else sample_weight[rows]
        net, *_ = pipe.train(X[train], y_model[train], sample_weight=w_train,
                             what=f"MAP training on {len(train)} of {len(X)} rows (fold {k} "
                                  f"of {len(folds)} held out to tune δ)")
        fits.append(pipe.laplace(net, X=X[train], y_model=y_model[train],
                                 sample_weight=w_train,
                                 validation=(X[rows], y_model[rows], w_rows)))
    losses, weights = [], []
    for fitted, rows in zip(fits, folds):
        Xv = torch.tensor(np.ascontiguousarray(X[rows]), dtype=torch.float64,
                          device=fitted.device)
        yv = torch.as_tensor(np.ascontiguousarray(y_model[rows]), device=fitted.device)
        deltas, fold_losses = grid_losses(fitted.evidence, fitted.evidence.posterior,
                                          fitted.subset, Xv, yv, pipe.scorers)
        losses.append(fold_losses)
        weights.append(np.ones(len(rows)) if sample_weight is None else sample_weight[rows])
    losses, weights = np.concatenate(losses, axis=1), np.concatenate(weights)
    chosen = one_standard_error_choice(losses, weights)
    warn_at_grid_bound(chosen, deltas)
    s.log(f"δ = {deltas[chosen]:.3g} by the held-out NLL of {len(folds)} folds "
        f"({len(weights)} rows)")
    return (Hyperparameters.of(float(deltas[chosen]), first.hyper.sigma),
            float(np.average(losses[chosen], weights=weights)))
