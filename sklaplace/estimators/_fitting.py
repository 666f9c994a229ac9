"""The Laplace approximation of ``fit``: curvature → posterior → tune → FittedLaplace.

Reads the estimator's parameters (``s``, see :mod:`._training`), takes the trained
net and the data and returns a :class:`~._laplace.fitted.FittedLaplace`; it never
writes to the estimator (``BaseLaplace.fit`` stores the result).

- :func:`resolve_subset`: the weights and structure of the LA (:mod:`._policy`);
- :func:`fit_laplace`: the Laplace approximation on the trained net: subset and
  structure (:mod:`._policy`), curvature and evidence, the tuner of
  ``hyperparameter_tuning_`` (:mod:`._laplace.tuning`, the online callback's
  values, or the earlier tasks' posterior as prior in ``partial_fit``), the GP
  predictive or refinement, and the :class:`~._laplace.fitted.FittedLaplace`.
"""

import copy
import dataclasses
import functools
import numbers
import time
import warnings

import numpy as np
import torch
from sklearn.frozen import FrozenEstimator

from .._laplace import policy
from .._laplace import natural, nets, progress
from .._laplace import tuning as tuners
from .._laplace.continual import task_evidence
from .._laplace.curvature import (compute_posterior, default_lowrank_rank, jacobian_bytes,
                                 memory_budget, progress_to)
from .._laplace.evidence import Evidence, curvature_scale
from .._laplace.fitted import FittedLaplace
from .._laplace.hyperparameters import Hyperparameters
from .._laplace.outside import RangeKernel, choose_variance
from .._laplace.prior import tensor_sizes
from .._laplace.refine import refine_posterior
from .._laplace.refined_evidence import refine_and_tune
from .._laplace.subsets import AllWeights, LastLayer, Subnetwork
from ._training import all_linear, online_callback, online_result


# ---------------------------------------------------------------- subset and structure
def subnetwork_indices(s, likelihood, module, X, y, out_scale, hyper, weight=None,
                       diag_of=None):
    """Indices of the S weights of largest marginal variance under a diagonal LA
    (``diag_of(subset)``: that LA's curvature, where the rows are not in ``X``)."""
    spec = s.subnetwork
    if isinstance(spec, numbers.Integral) and not isinstance(spec, bool):
        everything = AllWeights(module)
        if not 0 < spec <= everything.n_params:
            raise ValueError(
                f"subnetwork={spec} must be between 1 and the number of weights "
                f"({everything.n_params})."
            )
        diag = (diag_of(everything) if diag_of is not None else
                compute_posterior("diag", everything, likelihood, X, y, out_scale, s.curvature,
                                  weight=weight))
        scale = hyper.scale(likelihood.has_noise, s.curvature, s.temperature)
        var = diag.with_prior(hyper.delta(everything), scale).marginal_variance()
        return torch.argsort(var.cpu(), descending=True)[:spec].numpy()
    return Subnetwork.indices_from_names(module, list(spec))


def resolve_subset(s, likelihood, module, net_module, X, y, out_scale, n_out, hyper, holds,
                   weight=None, task=None, n_rows=None, diag_of=None):
    """(subset, kind, structure) of the LA: ``partial_fit`` keeps all weights and the
    earlier tasks' structure; otherwise :func:`_policy.choose_subset` and
    :func:`_policy.finish_structure` (a last layer the LA cannot read: "auto" takes
    all weights, diagonal). ``holds``: whether Kronecker factors can hold the prior.
    Rows in parts (``diag_of`` given): ``X`` probes the net, ``n_rows`` counts all rows,
    ``diag_of`` gives a subnetwork's diagonal curvature, and the full structure's cost
    is the P × P route's (:func:`._laplace.policy.full_structure_seconds`)."""
    n_all = sum(tensor_sizes(module))
    n_rows = X.shape[0] if n_rows is None else n_rows
    fits = jacobian_bytes(n_rows, n_out, n_all) <= memory_budget(X.device)
    if task is not None:  # partial_fit: all weights
        subset = AllWeights(module)
        if task.previous is not None:  # the same (continual.fit_next_task checked it)
            return subset, "all", task.previous.structure
        if s.hessian_structure != "auto":
            return subset, "all", s.hessian_structure
        structure = policy.all_weights_structure(all_linear(module, X), X.shape[0], n_out,
                                                 n_all, fits)
        return subset, "all", policy.kron_or_diag(structure, s.refine, holds)
    kind, structure = policy.choose_subset(
        s.subset_of_weights, s.hessian_structure, n_rows, n_out, n_all,
        lambda: all_linear(module, X), fits, kernel=diag_of is None)
    if kind == "all":
        subset = AllWeights(module)
    elif kind == "last_layer":
        # a frozen net's module is the user's own (which the user may train on): the
        # fitted LA keeps a copy of the weights it was fitted on, as for all weights
        last = (copy.deepcopy(net_module).eval() if isinstance(s.net, FrozenEstimator)
                else net_module)
        try:
            subset = LastLayer(last, X)
        except ValueError:  # a head the last-layer LA cannot read: "auto" takes all weights
            if s.subset_of_weights != "auto" or s.hessian_structure != "auto":
                raise
            kind, subset, structure = "all", AllWeights(module), "diag"
    else:
        subset = Subnetwork(module, subnetwork_indices(s, likelihood, module, X, y, out_scale,
                                                       hyper, weight, diag_of))
    structure = policy.finish_structure(kind, structure, subset.n_params, s.hessian_structure,
                                        s.refine, holds)
    return subset, kind, structure


# ---------------------------------------------------------------- the LA
def gp_curvature(s, subset, likelihood, X, y, out_scale, weight, seed):
    """The GP with kernel J(x) δ⁻¹ J(x')ᵀ conditioned on M training rows, each standing
    for N/M rows (GLM paper §3.5), as the posterior structure of its curvature.

    Its predictive is K** − K*M S (I + Sᵀ K_MM S)⁻¹ Sᵀ K_M* with S Sᵀ = Λ — by
    Woodbury the full GLM predictive of the curvature of those M rows weighted by
    N/M, computed through the M·C × M·C kernel when M·C < P (determinant lemma).
    With M = N it equals the weight-space full GLM predictive exactly.
    """
    n = len(X)
    size = n if s.gp_subset_size is None else min(int(s.gp_subset_size), n)
    rows = np.sort(np.random.RandomState(seed).choice(n, size, replace=False))
    w = torch.ones(n, dtype=torch.float64, device=X.device) if weight is None else weight
    scaled = w[rows] * (w.sum() / w[rows].sum())  # the subset carries all the data's weight
    s.log(f"GP predictive on {size} of {n} rows")
    return compute_posterior("full", subset, likelihood, X[rows], y[rows], out_scale,
                             s.curvature, weight=scaled)


def _values(hyper):
    return hyper.prior_precision, hyper.sigma


def _build_posterior(structure, subset, likelihood, X, y, curvature, rank, out_scale,
                     weight=None):
    return compute_posterior(structure, subset, likelihood, X, y, out_scale, curvature, rank,
                             weight=weight)


def fit_laplace(s, net, likelihood, X, y_model, hyper0, *, tuning, prediction_seed,
                check_outputs, targets=None, sample_weight=None, validation=None, chosen=None,
                task=None, scorers=None):
    """The Laplace approximation of the trained ``net`` on (X, y_model), tuned by
    ``tuning`` from ``hyper0`` (or at the ``chosen`` hyperparameters of a held-out
    pass); a :class:`FittedLaplace`.

    ``validation``: the held-out (X, y, w) of ``"cv"``'s choice pass; ``task``: the
    ``partial_fit`` task (its earlier posterior is the prior); ``targets``: the
    regressor's standardization; ``scorers``: the classifier's held-out NLLs.
    """
    module = copy.deepcopy(net.module_)  # a float64 copy on the trained net's device:
    device = nets.module_device(net.module_)  # untrained parameters stay constants
    module = module.to(device, torch.float64).eval()
    Xt = torch.tensor(np.ascontiguousarray(X), dtype=torch.float64, device=device)
    yt = torch.as_tensor(np.ascontiguousarray(y_model), device=device)
    wt = None if sample_weight is None else torch.as_tensor(sample_weight,
                                                            dtype=torch.float64, device=device)
    # Rows in the evidence's normalizer: N, or Σ w (integer weights = duplicated rows).
    n_rows = len(Xt) if wt is None else float(wt.sum())
    with torch.no_grad():
        n_out = module(Xt[:1]).reshape(1, -1).shape[1]
    check_outputs(n_out)
    sigma_init = hyper0.sigma
    vector_sigma = likelihood.has_noise and hyper0.vector_sigma
    out_scale = (1.0 / sigma_init if vector_sigma
                 else torch.ones(n_out, dtype=torch.float64)).to(device)
    # one answer for the "auto" choice and the refusal of an explicit kron
    holds = policy.kron_holds_prior(s.prior_structure, s.prior_precision,
                                    tensor_sizes(net.module_))
    subset, kind, structure = resolve_subset(s, likelihood, module, net.module_, Xt, yt,
                                             out_scale, n_out, hyper0, holds, wt, task)
    if structure == "kron" and not holds:
        raise ValueError(
            "hessian_structure='kron' needs one prior precision per weight or bias tensor: "
            "use prior_structure 'scalar' or 'layerwise' and a prior_precision that is a "
            "float or has one value per parameter tensor, or another hessian_structure."
        )
    if structure in ("full", "lowrank"):
        policy.check_time(structure, len(Xt), n_out, subset.n_params, device.type, s.log)
    rank = None
    if structure == "lowrank":
        rank = s.lowrank_rank or default_lowrank_rank(subset.n_params)
    with torch.no_grad():
        f = subset.forward(Xt)
    if not torch.isfinite(f).all() or not torch.isfinite(subset.theta).all():
        raise ValueError(
            "The network's weights or outputs on the training data are not finite, so the "
            "curvature would be too; check the trained net (lr, feature scaling)."
        )

    # the curvature at another per-output σ (a partial of a module function: it pickles)
    build = functools.partial(_build_posterior, structure, subset, likelihood, Xt, yt,
                              s.curvature, rank, weight=wt)

    s.log(f"Laplace approximation: {kind} weights ({subset.n_params}), {structure} "
          f"{s.curvature.upper()} on {len(Xt)} rows ...")
    start = time.perf_counter()
    with progress_to(s.log if s.verbose else None):
        posterior = build(out_scale)
    s.log(f"curvature and decomposition done in {time.perf_counter() - start:.2f} s")
    evidence = Evidence.at_fit(posterior, subset.theta.detach(), likelihood, f, yt, wt,
                               s.temperature, s.curvature, rebuild=build if vector_sigma else None)
    # partial_fit: the earlier tasks' posterior is the prior (continual.py)
    evidence = task_evidence(evidence, task, n_rows)

    heads, head_scale = natural.evidence_heads(likelihood, subset, structure, n_out, f, wt)

    def by_evidence(sigma, on=None, start=None):  # from the given prior (or start), σ
        return tuners.by_evidence(evidence if on is None else on, subset, s.prior_structure,
                                  s.prior_precision if start is None else start, sigma,
                                  y_model, sample_weight, heads=heads, head_log_scale=head_scale)

    report = {}
    hyper = hyper0  # the tuners below each return a Hyperparameters
    tuning_start = time.perf_counter()
    if chosen is not None:
        hyper = chosen
    elif validation is not None:
        hyper, report["validation_nll"] = _tune_on_held_out(
            s, likelihood, evidence, subset, structure, Xt, yt, wt, out_scale, n_out,
            validation, y_model, sample_weight, prediction_seed, scorers, sigma_init)
    elif tuning == "evidence":
        hyper = by_evidence(sigma_init)
    elif tuning == "online":
        hyper, report["evidence_history"] = online_choice(s, net, targets, n_rows, kind,
                                                          structure, by_evidence, sigma_init)
        if heads is not None:  # one δ per group, or the evidence's: then per head
            hyper = by_evidence(hyper.sigma, start=hyper.prior_precision)
    if chosen is None and tuning is not None:
        how = "held-out NLL" if validation is not None else tuning
        s.log(f"tuning ({how}) in {time.perf_counter() - tuning_start:.2f} s")
    s.log(f"prior_precision_ = {np.array2string(np.asarray(hyper.prior_precision), precision=4)}")
    if vector_sigma:  # the curvature depends on a per-output σ: recompute it at the optimum
        evidence.posterior = evidence.posterior_for(hyper.sigma)
        out_scale = (1.0 / hyper.sigma).to(device)  # GP and refinement: the tuned noise
    scale = hyper.scale(likelihood.has_noise, s.curvature, s.temperature)
    pred_subset = subset
    if s.pred_type == "gp":
        posterior = gp_curvature(s, subset, likelihood, Xt, yt, out_scale, wt,
                                 prediction_seed).with_prior(hyper.delta(subset), scale)
    else:
        posterior = evidence.posterior.with_prior(hyper.delta(subset), scale)
    if s.refine is not None and validation is None:  # not on the "cv" choice pass
        with progress.stage(s.log, f"refinement ({s.refine})"):
            prior, sigma, pred_subset, posterior, info, evidence = refine_and_tune(
                s.refine, subset, structure, likelihood, Xt, yt, wt, n_out,
                hyper.prior_precision, hyper.sigma, vector_sigma, evidence.rebuild,
                scale_of=lambda sg: float(hyper.scale(likelihood.has_noise, s.curvature,
                                                      s.temperature, sg)),
                tune=(lambda ev, sg: _values(by_evidence(sg, on=ev))) if tuning == "evidence"
                else None,
                temperature=s.temperature, seed=prediction_seed, log=s.log)
        hyper = Hyperparameters.of(prior, sigma)
        report.update(refine_objective_init=info["objective_init"],
                      refine_objective=info["objective"], refine_n_iter=info["n_iter"])
    fitted = FittedLaplace(
        likelihood=likelihood, subset=pred_subset, posterior=posterior, evidence=evidence,
        hyper=hyper, kind=kind, structure=structure, tuning=tuning, n_outputs=n_out,
        curvature=s.curvature, temperature=s.temperature, prediction_seed=prediction_seed,
        targets=targets,
        refined=s.refine is not None and validation is None, report=report,
        task_rows=None if task is None else task.n_previous + n_rows,
        n_tasks=0 if task is None else task.n_tasks + 1)
    # (a regression's "auto" is 0: the jackknife choice needs the classifier's scorers)
    hyper, outside = _outside_variance(s, hyper, tuning, task, validation, fitted.glm_moments,
                                       Xt, yt, wt, None if likelihood.regression else scorers)
    return dataclasses.replace(fitted, hyper=hyper, outside=outside)


def online_choice(s, net, targets, n_rows, kind, structure, by_evidence, sigma_init):
    """(Hyperparameters, history) of ``"online"`` tuning: the values training ended with;
    the evidence after training where no update was made (a warning) or where the LA
    that predicts is not the one the updates tuned. ``by_evidence(σ)``: that tuner."""
    callback = online_callback(net)
    hyper, history = online_result(s, callback, targets, n_rows)
    if not history:
        warnings.warn(
            "hyperparameter_tuning='online' made no update: training ran "
            f"{len(net.history)} epochs, fewer than online_burn_in + "
            f"online_frequency = {s.online_burn_in} + {s.online_frequency}. The "
            "prior (and σ) were tuned post hoc by the evidence instead; raise max_epochs "
            "or lower online_frequency / online_burn_in.",
            UserWarning,
        )
        hyper = by_evidence(sigma_init)
    elif (kind, structure) != ("all", callback.hessian_structure):
        # The LA that predicts is not the one the updates tuned (a net not made of
        # nn.Linear layers beyond the full budget: the last layer, full): δ (and σ)
        # re-tuned on its evidence. On two BatchNorm regressors this gave test NLL
        # 5.44 / 1.48 against 5.47 / 1.52 with the online δ and 5.53 / 1.58 for the
        # diagonal LA over all weights the updates used (3 splits each).
        hyper = by_evidence(hyper.sigma)
    return hyper, history


def _outside_variance(s, hyper, tuning, task, validation, moments, X, y, weight, scorers):
    """(``hyper`` with σ² of the variance outside the training range, its kernel or None)
    (:mod:`._laplace.outside`; ``moments``: the fit's GLM moments of rows, by row chunks):
    ``extrapolation_variance`` as given; with "auto", the
    first task's σ² in a later ``partial_fit`` task (its rows are gone), else the
    jackknife choice on the training rows where the classifier's fit tunes δ (GLM and GP
    predictives, unrefined; not on ``"cv"``'s held-out pass); else 0 — the regressor's
    "auto" too: a Gaussian's NLL grows with log σ² without bound where a class
    probability's cost stops at log C, and the choice made the extrapolation NLL worse
    on 4 of 9 sets (docs/defaults.md). In ``partial_fit`` the range covers every task."""
    given = getattr(s, "extrapolation_variance", None)
    earlier = None if task is None else task.outside
    kernel = None
    if given != "auto":
        variance = float(given or 0.0)
    elif earlier is not None:
        variance = earlier.variance
    elif (validation is None and scorers is not None and s.pred_type != "nn"
          and s.refine is None and tuning is not None):
        kernel = RangeKernel.of(X, weight)  # (rows of zero weight were dropped before fit)
        with torch.no_grad():
            variance = choose_variance(kernel, X, y, weight, moments, scorers[0])
    else:
        variance = 0.0
    if variance == 0:
        return hyper.with_outside_variance(0.0), None
    kernel = (kernel or RangeKernel.of(X, weight)).with_variance(variance)
    if earlier is not None:
        kernel = kernel.covering(earlier)
    return hyper.with_outside_variance(variance), kernel


def _tune_on_held_out(s, likelihood, evidence, subset, structure, X, y, weight, out_scale,
                      n_out, validation, y_model, w_fit, seed, scorers, sigma_init):
    """(Hyperparameters, held-out NLL) of ``"cv"``'s choice pass: the refined predictive's
    with ``refine``; else the predictive that will be used (the GP's with
    ``pred_type="gp"``)."""
    X_val, y_val, w_val = validation  # (one σ: check_params refused a vector sigma_noise)
    Xv = torch.as_tensor(np.ascontiguousarray(X_val), dtype=torch.float64, device=X.device)
    yv = torch.as_tensor(np.ascontiguousarray(y_val), device=X.device)
    sampled = s.pred_type == "nn"
    if s.refine is not None:
        scale = float(curvature_scale(likelihood.has_noise, s.curvature, s.temperature,
                                      sigma_init))

        def refine_at(delta):
            refined, posterior, _ = refine_posterior(
                s.refine, structure, subset, likelihood, X, y, weight, delta, scale,
                out_scale, n_out, random_state=seed)
            return refined, posterior

        return tuners.by_held_out_refined(refine_at, subset, Xv, yv, w_val, sigma_init,
                                      sampled=sampled,
                                          n_samples=s.n_samples, seed=seed, scorers=scorers,
                                          log=s.log if s.verbose else None)
    scored = (gp_curvature(s, subset, likelihood, X, y, out_scale, weight, seed)
              if s.pred_type == "gp" else evidence.posterior)
    return tuners.by_held_out(evidence, scored, subset, Xv, yv, w_val, y_model, w_fit, sigma_init,
                              sampled=sampled, n_samples=s.n_samples, seed=seed,
                              scorers=scorers)
