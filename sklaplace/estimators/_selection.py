"""``hidden_layer_sizes="auto"``: the default MLP's architecture chosen by held-out NLL.

The candidates (``AUTO_CANDIDATES``: the linear model with no hidden layer, one and two
hidden layers; or the user's list) are ordered by capacity, their number of weights.
Each is trained on the same ``1 − validation_fraction`` of the rows and its Laplace
approximation fitted there with the estimator's tuning (``"cv"``: δ by the held-out
rows' NLL, as for one architecture); the held-out rows' NLL of each candidate's
predictive decides. The search stops at the first candidate that does not improve on
the smaller ones' held-out NLL (the larger ones are listed, not fitted), and the
linear model trains by L-BFGS under the default ``solver``: its MAP is a convex
problem that Adam's epochs often stop short of. The chosen candidate is then trained
on, warm, on all rows, and its LA fitted there at the held-out δ (``"cv"``; as one
architecture's refit) — keeping the selection pass's fit instead (no δ transferred to
a further-trained net, 20 % fewer rows) measured worse (docs/defaults.md).
With fewer than ``MIN_HELD_OUT_ROWS`` held-out rows each candidate is trained on all
rows and the Laplace evidence decides.

Under online tuning a candidate whose held-out NLL of the MAP plug-in predictive stalls
behind the smaller candidates' stops training (:mod:`sklaplace._laplace.losing`); ``model_selection_results_`` records each candidate's
epochs (``n_iter``) and whether it was stopped (``stopped_losing``).

Multilabel y (one sigmoid per label): a candidate that does not improve while its
held-out δ is at or below the prior precision it trained under (:func:`overfits`: the
held-out rows ask for a posterior at least as broad as the training prior, so its MAP
is overconfident there) is trained once more, afresh from the same initialization, at
``DECAY_STEP`` × that prior, scored the same way, and the search ends there; the chosen row's prior is the refit's
(``training_prior_precision`` in the results). On the multilabel scoreboard's synthetic
sets the (50,) net at 10× wins where at 1× it lost to the linear model; the real tables
never trigger it (docs/benchmarks.md, "Multilabel classification").

A user's ``net`` skips the selection, and so does an explicit tuple. ``partial_fit``
keeps one architecture over its tasks: "auto" there means ``CONTINUAL_SIZES``.
"""

import math
import numbers
import time
import warnings

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning

from . import _averaging as averaging_
from .._laplace import losing, policy
from .._laplace import tuning as tuners
from .._laplace.holdout import validation_split
from .._laplace.policy import MIN_HELD_OUT_ROWS

#: Multilabel y: the factor of the prior precision at which a candidate that
#: overfits (:func:`overfits`) is trained once more.
DECAY_STEP = 10.0
#: Optimizer steps that a candidate trains, counted from its start, before it can stop as
#: losing (it may stall ``n_iter_no_change`` epochs): the plateau of a net's first steps
#: lasts steps, not epochs (yacht's (50, 50), 2 steps an epoch, stopped after 35 epochs
#: lost to the (50,) it would have beaten: docs/benchmarks.md, "The default fit at
#: 10⁴–10⁶ rows").
LOSING_MIN_STEPS = 2000
#: The candidates of ``hidden_layer_sizes="auto"``, by capacity.
AUTO_CANDIDATES = ((), (50,), (50, 50))
#: What "auto" means where one architecture must serve several fits (``partial_fit``).
CONTINUAL_SIZES = (50,)


def _is_sizes(value):
    return isinstance(value, (tuple, list)) and all(
        isinstance(h, numbers.Integral) and not isinstance(h, bool) and h > 0 for h in value)


def size_problems(value):
    """The problems of a ``hidden_layer_sizes`` value ([] if none): "auto", a tuple of
    positive ints, or a list of such tuples (the candidates)."""
    if isinstance(value, str) and value == "auto":
        return []
    if _is_sizes(value):
        return []
    if (isinstance(value, (tuple, list)) and value
            and all(isinstance(c, (tuple, list)) and _is_sizes(c) for c in value)):
        return []
    return [f"hidden_layer_sizes must be a tuple of positive integers, 'auto' or a list of "
            f"such tuples (the candidates), got {value!r}."]


def n_weights(sizes, n_features, n_outputs):
    """Weights and biases of the MLP ``n_features → sizes… → n_outputs``."""
    total, d_in = 0, n_features
    for h in (*sizes, n_outputs):
        total += (d_in + 1) * h
        d_in = h
    return total


def candidates(value, n_features, n_outputs):
    """The candidate architectures ordered by capacity (ties keep their order), or
    None where ``value`` is one architecture."""
    if isinstance(value, str):
        value = AUTO_CANDIDATES
    elif _is_sizes(value):
        return None
    value = list(dict.fromkeys(tuple(int(h) for h in c) for c in value))
    return sorted(value, key=lambda c: n_weights(c, n_features, n_outputs))


def one_architecture(value):
    """The sizes of a fit without selection (``partial_fit``, a net's size estimate)."""
    if isinstance(value, str):
        return CONTINUAL_SIZES
    return tuple(value) if _is_sizes(value) else tuple(max(value, key=sum))


def held_out_losses(fitted, X, y, scorers, per_cell=True):
    """Held-out NLL per row (model units) of a fitted Laplace approximation's GLM
    predictive at its hyperparameters: the regressor's mean over the targets
    (``per_cell``) or their sum (the row's joint NLL)."""
    with torch.no_grad():
        f, cov = fitted.glm_moments(X)
        if scorers is not None:  # the classifier's link
            return np.asarray(scorers[0](f, cov, y))
        sigma = fitted.hyper.sigma.to(f)
        var = torch.diagonal(cov, dim1=1, dim2=2).clamp_min(0) + sigma**2
        r = y.reshape(f.shape) - f
        cells = 0.5 * (torch.log(2 * np.pi * var) + r**2 / var)
        return (cells.mean(1) if per_cell else cells.sum(1)).cpu().numpy()


def held_out_nll(fitted, X, y, weight, scorers):
    """Mean held-out NLL (model units, per target cell for the regressor) of a fitted
    Laplace approximation's GLM predictive at its hyperparameters."""
    return float(np.average(held_out_losses(fitted, X, y, scorers), weights=weight))


def evidence_at_optimum(fitted, s, y_model, weight, spread=None):
    """The log evidence (model units) at its own optimum δ (and σ): the criterion of a
    fit whose δ was chosen otherwise (at a held-out δ of 1e4 the ½δ‖θ‖² term would score
    the prior, not the model). ``spread``: the targets' std where ``y_model`` is not in
    memory."""
    if fitted.tuning in ("evidence", "online"):
        return fitted.log_evidence(None, fitted.hyper.sigma)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        sigma = fitted.hyper.sigma if fitted.evidence.gaussian else None
        hyper = tuners.by_evidence(fitted.evidence, fitted.subset, s.prior_structure,
                                   s.prior_precision, sigma, y_model, weight, spread=spread)
    return fitted.log_evidence(hyper.prior_precision, hyper.sigma)


def run_candidates(s, sizes, n_features, n_outputs, by_evidence, fit_one, retry=False):
    """Fit the candidates ``sizes`` in order, skipping those after a candidate that did
    not improve on the smaller ones' held-out NLL (the greedy search): (fits, rows),
    None in ``fits`` and NaN scores in ``rows`` where skipped. ``fit_one(sizes)`` → (fit,
    n_params, held-out NLL (NaN with ``by_evidence``), log evidence); the in-memory and
    the dask fits (:mod:`._dask_sequence`) share the search. ``retry`` (multilabel y, in
    memory): a candidate that :func:`overfits` is fitted once more by ``fit_one(sizes,
    DECAY_STEP)`` (the factor of its training prior), and the search ends there.
    A row: (sizes, n_params, held-out NLL, log evidence, seconds, training prior factor,
    epochs, whether the losing rule stopped it (``fit_one``'s optional fifth value)).
    """
    greedy = not by_evidence
    fits, rows, stop = [], [], False

    def fit_timed(c, *scale):
        start = time.perf_counter()
        fit, n_params, nll, evidence, *stopped = fit_one(c, *scale)
        seconds = time.perf_counter() - start
        name = f"hidden_layer_sizes={c}" + (f" at {scale[0]:g}× the prior" if scale else "")
        s.log(f"{name}: held-out NLL {nll:.4f}, log evidence {evidence:.2f} "
              f"({seconds:.2f} s)")
        fits.append(fit)
        rows.append((c, int(n_params), nll, evidence, seconds,
                     scale[0] if scale else 1.0, int(fit[1]),
                     bool(stopped and stopped[0])))

    for c in sizes:
        if stop or (greedy and len(rows) > 1
                    and not rows[-1][2] < min(r[2] for r in rows[:-1])):
            s.log(f"hidden_layer_sizes={c}: skipped (the last candidate did not improve)")
            rows.append((c, n_weights(c, n_features, n_outputs), np.nan, np.nan, 0.0, 1.0, 0,
                         False))
            fits.append(None)
            continue
        fit_timed(c)
        if retry and greedy and overfits(rows, fits[-1][3], s.prior_precision):
            s.log(f"hidden_layer_sizes={c}: its held-out δ "
                  f"{fits[-1][3].hyper.prior_precision:.3g} is at or below the prior it "
                  f"trained under: trained again at {DECAY_STEP:g}×")
            fit_timed(c, DECAY_STEP)
            stop = True
    return fits, rows


def overfits(rows, fitted, prior_precision):
    """Whether the last candidate (``rows[-1]``, its fit ``fitted``) did not improve on
    the smaller ones' held-out NLL while that NLL chose a posterior no narrower than the
    prior it trained under (held-out δ at or below a scalar training δ): its MAP is
    overconfident on the held-out rows, a sign that the weight decay was too weak for its
    capacity."""
    if len(rows) < 2 or rows[-1][2] < min(r[2] for r in rows[:-1]):
        return False
    if np.ndim(prior_precision) != 0 or fitted.tuning != "cv":
        return False
    return float(np.asarray(fitted.hyper.prior_precision)) <= float(prior_precision)


def _scaled(prior_precision, scale):
    """``scale`` × a prior precision: a float, or a float array."""
    value = scale * np.asarray(prior_precision, dtype=float)
    return float(value) if value.ndim == 0 else value


def losing_patience(s, n_rows):
    """(patience, least epochs) of a losing candidate that trains on ``n_rows`` rows under
    the settings ``s``: the epochs its held-out NLL may stall (``n_iter_no_change``) and
    the epochs before which it does not stop (:data:`LOSING_MIN_STEPS`)."""
    batch = min(policy.batch_rows(s.batch_size, n_rows), n_rows)
    return s.n_iter_no_change, math.ceil(LOSING_MIN_STEPS / math.ceil(n_rows / batch))


def summarize(sizes, rows, by_evidence, prior_precision):
    """(index of the chosen candidate, ``model_selection_results_``) of the candidates'
    ``rows`` (:func:`run_candidates`) trained under their factor of ``prior_precision``;
    a ``ConvergenceWarning`` where the largest won."""
    scores = -np.array([r[3] for r in rows]) if by_evidence else np.array([r[2] for r in rows])
    scores = np.where(np.isnan(scores), np.inf, scores)  # skipped candidates rank last
    best = int(np.argmin(scores))
    if len(sizes) > 1 and rows[best][0] == sizes[-1]:
        warnings.warn(
            f"hidden_layer_sizes: the largest candidate {sizes[-1]} won the selection "
            f"(by {'the evidence' if by_evidence else 'held-out NLL'}); a larger network "
            "might fit better: pass a list of candidates with larger ones.",
            ConvergenceWarning)
    results = {
        "hidden_layer_sizes": [r[0] for r in rows],  # tuples of different lengths
        "n_params": np.array([r[1] for r in rows]),
        "criterion": ["log_evidence" if by_evidence else "held_out_nll"] * len(rows),
        "held_out_nll": np.array([r[2] for r in rows], dtype=float),
        "log_evidence": np.array([r[3] for r in rows], dtype=float),
        "fit_time": np.array([r[4] for r in rows], dtype=float),
        # the prior precision of each candidate's MAP training
        "training_prior_precision": [_scaled(prior_precision, r[5]) for r in rows],
        "n_iter": np.array([r[6] for r in rows], dtype=int),  # its MAP training's epochs
        "stopped_losing": np.array([r[7] for r in rows], dtype=bool),  # the losing rule
        "rank": np.argsort(np.argsort(scores, kind="stable"), kind="stable") + 1,
    }
    return best, results


def select(s, value, X, y_model, n_outputs, sample_weight, *, tuning, seed, stratify,
           prepare, scorers, offset, averaging=False, retry_overfit=False):
    """Fit every candidate and keep the best: (net_, n_iter, curve, fitted, (chosen
    sizes, the factor of its training prior), results, mixture); ``mixture`` is None,
    or with ``averaging`` the candidates ((sizes, fit) per row of ``results``, None
    where skipped) and their weights (:mod:`._averaging`).

    ``prepare(sizes, solver, prior_scale)`` → the architecture's pipeline (``_base``:
    ``train``, ``laplace``, ``callbacks``); ``scorers``: the classifier's held-out NLLs
    (None for the regressor); ``offset(fitted)``: the evidence's offset into the units
    of y. ``retry_overfit`` (multilabel y): the retry of :func:`run_candidates`.
    """
    sizes = candidates(value, X.shape[1], n_outputs)
    fit_rows, held_out = validation_split(len(X), s.validation_fraction, seed,
                                          labels=y_model if stratify else None)
    by_evidence = len(held_out) < MIN_HELD_OUT_ROWS
    if by_evidence:
        fit_rows = np.arange(len(X))
    Xf, yf = X[fit_rows], y_model[fit_rows]
    wf = None if sample_weight is None else sample_weight[fit_rows]
    w_val = None if sample_weight is None else sample_weight[held_out]
    row_losses, plugins = [], []  # the candidates' held-out plug-in NLLs (losing rule)
    watch = tuning == "online" and not by_evidence and not averaging and s.tol is not None
    patience, min_epochs = losing_patience(s, len(Xf))

    def fit_one(c, scale=1.0):
        # the linear model's MAP is a convex problem: L-BFGS solves it (Adam's default
        # epochs often stop short of it)
        pipe = prepare(c, "lbfgs" if c == () and s.solver == "adam" else None, scale)
        validation = None
        if tuning == "cv" and not by_evidence:
            validation = (X[held_out], y_model[held_out], w_val)
        callbacks = list(pipe.callbacks(yf, wf))
        if watch and plugins:  # behind the best smaller candidate, it stops (module doc)
            callbacks.append(losing.LosingCandidate(
                X[held_out], y_model[held_out], pipe.likelihood.name,
                min(plugins), patience, s.tol, w_val,
                min_epochs=min_epochs))
        name = f"hidden_layer_sizes={c}" + (f" at {scale:g}× the prior" if scale != 1 else "")
        net_, n_iter, curve = pipe.train(
            Xf, yf, sample_weight=wf, callbacks=callbacks,
            what=f"{name}: MAP training on {len(Xf)} of {len(X)} rows")
        stop = losing.detach(net_)
        if stop is not None and stop.stopped_:
            s.log(f"{name}: stopped after {n_iter} epochs: its held-out NLL (MAP plug-in) "
                  f"{stop.best_nll_:.4f} did not improve for {patience} epochs, behind the "
                  f"smaller candidates' {stop.reference:.4f}")
        fitted = pipe.laplace(net_, X=Xf, y_model=yf, sample_weight=wf,
                              validation=validation)
        evidence = evidence_at_optimum(fitted, s, yf, wf) + offset(fitted)
        if watch:
            p = next(net_.module_.parameters())
            plugins.append(losing.plugin_nll(
                net_.module_, torch.as_tensor(X[held_out]).to(p.device, p.dtype),
                y_model[held_out], pipe.likelihood.name, fitted.hyper.sigma, w_val))
        nll = np.nan
        if averaging and not by_evidence:  # per row: the stacking weights'
            row_losses.append(held_out_losses(
                fitted, torch.tensor(X[held_out], dtype=torch.float64, device=fitted.device),
                torch.as_tensor(y_model[held_out], device=fitted.device), scorers,
                per_cell=False))
        if not by_evidence:
            nll = fitted.report.get("validation_nll")
            if nll is None:
                device = fitted.device
                nll = held_out_nll(
                    fitted, torch.tensor(X[held_out], dtype=torch.float64, device=device),
                    torch.as_tensor(y_model[held_out], device=device), w_val, scorers)
        stopped = stop is not None and stop.stopped_
        return (net_, n_iter, curve, fitted), fitted.subset.n_params, nll, evidence, stopped

    retry = retry_overfit and tuning == "cv" and not averaging
    fits, rows = run_candidates(s, sizes, X.shape[1], n_outputs, by_evidence, fit_one,
                                retry=retry)
    best, results = summarize(sizes, rows, by_evidence, s.prior_precision)
    mixture = None
    if averaging:
        done = [i for i, fit in enumerate(fits) if fit is not None]
        weights = np.zeros(len(rows))
        weights[done] = (averaging_.evidence_weights(results["log_evidence"][done])
                         if by_evidence else averaging_.stacking_weights(
                             -np.stack(row_losses, axis=1), w_val))
        mixture = [(c, fit) for c, fit in zip(sizes, fits)], weights
    return (*fits[best], (rows[best][0], rows[best][5]), results, mixture)
