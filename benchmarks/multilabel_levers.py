"""Levers of the multilabel fit, measured: ``python -m benchmarks multilabel_levers``.

Per task and split of the multilabel scoreboard (:mod:`benchmarks.multilabel`: the same
tasks, 75/25 splits and seeds, ``StandardScaler`` then the default ``LaplaceClassifier``),
what the default fit chose — the candidates' held-out NLL (summed over the labels), the
chosen architecture and its held-out δ — and the test rows' mean per-label NLL of:

* ``LA``: the default fit's GLM probit predictive (without the variance outside the
  training range: in range it is the same to the third decimal);
* ``per-label δ``: each label's probability from the refit's posterior at that label's
  own δ, chosen on the selection pass's held-out rows by the same one-standard-error
  rule over the same grid, label by label (the labels' marginal predictives under L
  scalar priors: for the linear model exactly L independent Bayesian logistic
  regressions);
* ``best δ``: the refit at the single δ of the grid best on the *test* rows (a ceiling
  of any scalar-δ tuning, not a method);
* ``selection``: the selection pass's fit alone (trained on 80 % of the rows, its own
  held-out δ), and ``mix``: the mean of its probabilities and the refit's (two networks
  of the chosen architecture);
* ``MAP``: the refit's network, and ``MLP``: ``MLPClassifier`` at its defaults.

The selection pass's fit is read by wrapping the estimator's private ``_refit`` (it
receives that fit): a diagnostic, not an API. ``--refit-lr F`` trains the chosen
candidate's refit on all rows at F × ``lr`` (the selection pass unchanged).

Example::

    python -m benchmarks multilabel_levers --tasks satellite_groups --splits 3
"""

import contextlib
import functools
import warnings
import zlib

import numpy as np

HELP = "multilabel levers: per-label δ, the test-best δ, the selection pass's net, per split"


def _nll(Y, p):
    """Bernoulli NLL per row and label."""
    p = np.clip(p, 1e-15, 1 - 1e-15)
    return -(Y * np.log(p) + (1 - Y) * np.log(1 - p))


def _probit(fitted, X):
    """Per-label probit probabilities of a ``FittedLaplace``'s GLM moments, without the
    variance outside the training range."""
    import torch
    from scipy.special import expit

    with torch.no_grad():
        f, cov = fitted.subset.moments(
            torch.tensor(X, dtype=torch.float64, device=fitted.device), fitted.posterior)
    var = torch.diagonal(cov, dim1=1, dim2=2).clamp_min(0).cpu().numpy()
    return expit(f.cpu().numpy() / np.sqrt(1 + np.pi / 8 * var))


@contextlib.contextmanager
def _capture(refit_lr):
    """Within the block, wrap ``BaseLaplace._refit``: record the selection pass's fit and
    the rows in model units (the yielded dict); with ``refit_lr`` ≠ 1 the refit trains at
    that factor of lr. The original method is restored on exit."""
    from sklearn.base import clone

    from sklaplace.estimators import _base

    seen, original = {}, _base.BaseLaplace._refit

    def _refit(self, pipe, first, X, y_model, sample_weight):
        seen.update(first=first[3], X=X, y=y_model)
        if refit_lr != 1:
            train = pipe.train
            net = clone(train.args[1]).set_params(lr=train.args[1].lr * refit_lr)
            pipe.train = functools.partial(train.func, train.args[0], net, *train.args[2:],
                                           **train.keywords)
        return original(self, pipe, first, X, y_model, sample_weight)

    _base.BaseLaplace._refit = _refit
    try:
        yield seen
    finally:
        _base.BaseLaplace._refit = original


def selection_split(random_state, n_rows, fraction):
    """(fit rows, held-out rows) of a multilabel fit's architecture selection: the split
    that ``BaseLaplace._fit`` draws from ``random_state`` (two seeds, then the split's)."""
    from sklaplace._laplace.holdout import validation_split

    rng = np.random.RandomState(random_state)
    rng.randint(0, 2**31 - 1, size=2)
    return validation_split(n_rows, fraction, int(rng.randint(0, 2**31 - 1)))


def run_split(name, X, Y, split, seen):
    from scipy.special import expit
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from sklaplace import LaplaceClassifier
    from sklaplace._laplace.holdout import LOG10_PRIOR_GRID, one_standard_error_choice

    seed = zlib.crc32(f"{name}:{split}".encode()) % 2**31
    X_tr, X_te, Y_tr, Y_te = train_test_split(X, Y, test_size=0.25, random_state=seed)
    la = make_pipeline(StandardScaler(), LaplaceClassifier(random_state=seed))
    mlp = make_pipeline(StandardScaler(), MLPClassifier(random_state=seed))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        la.fit(X_tr, Y_tr)
        mlp.fit(X_tr, Y_tr)
    clf, Xt = la[-1], la[0].transform(X_te)
    refit, first = clf.laplace_, seen["first"]
    results = clf.model_selection_results_
    row = dict(sizes=clf.hidden_layer_sizes_, candidates=results["hidden_layer_sizes"],
               held_out=results["held_out_nll"],
               delta=float(np.asarray(clf.prior_precision_)),
               LA=_nll(Y_te, _probit(refit, Xt)).mean(0),
               MAP=_nll(Y_te, expit(clf.predict_dist(Xt).logit_mean)).mean(0),
               MLP=_nll(Y_te, mlp.predict_proba(X_te)).mean(0))
    deltas = 10.0 ** LOG10_PRIOR_GRID
    if refit.tuning == "cv":
        Xs, ys = seen["X"], seen["y"]
        _, held_out = selection_split(seed, len(Xs), clf.validation_fraction)
        losses = np.stack([_nll(ys[held_out], _probit(first.with_prior(d), Xs[held_out]))
                           for d in deltas])  # (K, n, L)
        per = [one_standard_error_choice(losses[:, :, j]) for j in range(Y.shape[1])]
        row["label_deltas"] = deltas[per]
        at = {k: _probit(refit.with_prior(deltas[k]), Xt) for k in set(per)}
        row["per_label"] = np.array([_nll(Y_te[:, j], at[k][:, j]).mean()
                                     for j, k in enumerate(per)])
        p_first = _probit(first, Xt)
        row["selection"] = _nll(Y_te, p_first).mean(0)
        row["mix"] = _nll(Y_te, 0.5 * (p_first + _probit(refit, Xt))).mean(0)
    test = [_nll(Y_te, _probit(refit.with_prior(d), Xt)).mean() for d in deltas]
    row["best"], row["best_delta"] = min(test), deltas[int(np.argmin(test))]
    return row


COLUMNS = ("LA", "per_label", "best", "selection", "mix", "MAP", "MLP")


def report(results):
    lines = ["| task | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for name, rows in results.items():
        cells = [np.mean([np.mean(r[c]) for r in rows]) if all(c in r for r in rows)
                 else np.nan for c in COLUMNS]
        lines.append(f"| {name} | " + " | ".join(f"{v:.4f}" for v in cells) + " |")
    lines.append("")
    for name, rows in results.items():
        for split, r in enumerate(rows):
            extra = ""
            if "per_label" in r:
                extra = (f"; per-label δ {np.array2string(r['label_deltas'], precision=3)} "
                         f"{np.mean(r['per_label']):.4f}; selection {np.mean(r['selection']):.4f}"
                         f", mix {np.mean(r['mix']):.4f}")
            lines.append(
                f"- {name} {split}: held-out {np.round(r['held_out'], 4).tolist()} → "
                f"{r['sizes']} at δ {r['delta']:.3g}; per label LA "
                f"{np.round(r['LA'], 4).tolist()}, MAP {np.round(r['MAP'], 4).tolist()}, "
                f"MLP {np.round(r['MLP'], 4).tolist()}; best δ {r['best_delta']:.3g} "
                f"{r['best']:.4f}{extra}")
    return "\n".join(lines)


def add_arguments(parser):
    from .multilabel import TASKS

    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--refit-lr", type=float, default=1.0,
                        help="factor of lr for the chosen candidate's refit on all rows")
    parser.add_argument("--out", default=None, help="also write the tables to this file")


def main(args):
    from .multilabel import load_task

    results = {}
    with _capture(args.refit_lr) as seen:
        for name in args.tasks:
            X, Y = load_task(name, args.data_dir)
            results[name] = [run_split(name, X, Y, split, seen)
                             for split in range(args.splits)]
            print(report({name: results[name]}), flush=True)
    text = report(results)
    print(text)
    if args.out:
        from pathlib import Path

        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return results
