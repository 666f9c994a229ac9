"""``partial_fit``'s orchestration: one task after another (the maths: ``_laplace.continual``).

The first call is ``fit`` with the continual choices (:class:`~._laplace.continual.Task`
given to ``BaseLaplace._fit``: all weights, a full / diagonal / Kronecker posterior,
``"auto"`` tuning by the evidence). A later call (or one after ``fit``) trains the net
from θ*_{t−1} under the prior N(θ*_{t−1}, Λ_{t−1}⁻¹), fits the LA of the task with the
earlier tasks' posterior as its prior and stores the new
:class:`~._laplace.fitted.FittedLaplace` (:func:`fit_next_task`).
"""

import functools

import numpy as np
import torch
from sklearn.base import clone

from . import _policy as policy
from ._fitting import fit_laplace
from ._laplace import nets
from ._laplace.continual import STRUCTURES, Task, TaskPrior
from ._laplace.convergence import training_curve
from ._laplace.hyperparameters import Hyperparameters
from ._laplace.prior import tensor_sizes
from ._training import prepare_net, settings_of
from ._validation import check_params, check_seed


def is_first_call(estimator):
    """Whether ``partial_fit`` starts from scratch (nothing fitted yet)."""
    return "laplace_" not in estimator.__dict__


def check_classes(estimator, classes, y, first):
    """Classes of a classifier's ``partial_fit`` call, as ``SGDClassifier`` checks them.

    ``classes`` is required on the first call and, when given later, must equal
    ``classes_``; every label of ``y`` must be one of them.  Returns the sorted classes.
    """
    if first:
        if classes is None:
            raise ValueError(
                "classes must be passed on the first call to partial_fit (all the labels "
                "of every task to come, as in SGDClassifier.partial_fit).")
        known = np.unique(np.asarray(classes))
    else:
        known = estimator.classes_
        if classes is not None and not np.array_equal(np.unique(np.asarray(classes)), known):
            raise ValueError(
                f"classes={classes!r} is not the same as on the first call to partial_fit "
                f"(or in fit), classes_={known!r}.")
    unseen = np.setdiff1d(np.asarray(y), known)
    if unseen.size:
        after_fit = not first and "n_tasks_" not in estimator.__dict__
        raise ValueError(
            f"y contains labels {unseen.tolist()!r} that are not in classes {known.tolist()!r} "
            + ("seen by fit (partial_fit after fit continues with fit's classes; fit on all "
               "the labels, or start over with partial_fit(X, y, classes=all labels))."
               if after_fit else "given to the first partial_fit call."))
    return known


def _shapes(module):
    return {name: tuple(t.shape) for name, t in module.state_dict().items()}


def check_same_architecture(estimator, net, frozen):
    """Refuse a later ``partial_fit`` call whose network differs from the earlier tasks'
    (the parameters' names and shapes): ``hidden_layer_sizes`` for the default MLP,
    ``net`` otherwise."""
    before = _shapes(estimator.net_.module_)
    if frozen is not None:
        module = frozen.module_
    else:
        with torch.random.fork_rng(devices=[]):
            module = clone(net).initialize().module_
    now = _shapes(module)
    if now == before:
        return
    earlier = estimator.net_.get_params().get("module__hidden_layer_sizes")
    if estimator.net is None and isinstance(estimator.net_.module_, nets.MLP) and earlier:
        raise ValueError(
            f"hidden_layer_sizes={tuple(estimator.hidden_layer_sizes)!r} but the network of "
            f"the earlier tasks has hidden_layer_sizes={tuple(earlier)!r}; partial_fit keeps "
            "one architecture (refit to change it).")
    changed = sorted(set(now) ^ set(before) | {k for k in set(now) & set(before)
                                               if now[k] != before[k]})
    detail = ", ".join(f"{k}: {before.get(k)} → {now.get(k)}" for k in changed[:4])
    raise ValueError(
        f"net: its module's parameters differ from those of the earlier tasks' network "
        f"({detail}{', ...' if len(changed) > 4 else ''}); partial_fit keeps one "
        "architecture (refit to change it).")


def _check_continuable(estimator, fitted):
    """Refuse to continue a fit that is no all-weights full / diagonal / Kronecker
    Laplace posterior, or with another structure or curvature than the earlier tasks'."""
    previous = fitted.posterior
    if fitted.kind != "all" or previous.structure not in STRUCTURES:
        raise ValueError(
            "partial_fit continues a posterior over all weights with a full, diagonal or "
            f"Kronecker structure; this estimator was fitted with subset_of_weights_="
            f"{fitted.kind!r}, hessian_structure_={fitted.structure!r}. Start over with "
            "partial_fit, or fit with subset_of_weights='all' and hessian_structure 'full', "
            "'diag' or 'kron'.")
    if fitted.refined:
        raise ValueError(
            "partial_fit continues a Laplace posterior; this estimator was fitted with refine "
            "(a refined GLM posterior). Fit again without refine, or start over with "
            "partial_fit.")
    for name, value, earlier in (
            ("hessian_structure", estimator.hessian_structure, previous.structure),
            ("curvature", estimator.curvature, fitted.evidence.curvature)):
        if value != earlier and not (name == "hessian_structure" and value == "auto"):
            raise ValueError(
                f"{name}={value!r} but the posterior of the earlier tasks has {earlier!r}; "
                f"partial_fit keeps one {name} (refit to change it).")


def fit_next_task(estimator, X, y_model, sample_weight=None):
    """A later ``partial_fit`` call on one task (``y_model`` in model units).

    Trains the net from θ*_{t−1} under the prior N(θ*_{t−1}, Λ_{t−1}⁻¹) (a frozen net
    keeps its weights), adds the task's curvature at θ*_t to the earlier tasks' and
    re-tunes δ (and σ) on the task's evidence p(D_t | D_<t). (``partial_fit`` keeps
    the estimator as it was when this raises.)
    """
    check_params(estimator, continual=True)
    fitted = estimator.laplace_
    _check_continuable(estimator, fitted)
    s = settings_of(estimator)
    n_previous = (fitted.task_rows if fitted.task_rows is not None
                  else float(fitted.evidence.n_rows))
    n_tasks = fitted.n_tasks or 1
    tuning = policy.continual_tuning(estimator.hyperparameter_tuning)
    # Training (and the start of tuning) at the previous σ; None keeps the given values.
    sigma_train = float(fitted.hyper.sigma)
    sigma0 = estimator._initial_sigma() if tuning is None else sigma_train
    theta_prev = fitted.subset.theta.detach().clone()
    net, frozen, _ = prepare_net(s, X.shape[1], fitted.n_outputs)
    check_same_architecture(estimator, net, frozen)
    net_, n_iter, curve = estimator.net_, estimator.n_iter_, estimator.loss_curve_
    if frozen is None:
        rng = check_seed("random_state", estimator.random_state)
        seed = int(rng.randint(0, 2**31 - 1, size=n_tasks + 3)[-1])
        train_hyper = Hyperparameters.of(fitted.hyper.prior_precision, sigma_train)
        scale = fitted.scale(train_hyper.sigma)
        estimator._log(f"task {n_tasks + 1}: MAP training from the previous posterior's mean")
        net_ = nets.train_map(
            clone(net), X, y_model, likelihood=fitted.likelihood.name,
            temperature=estimator.temperature, sigma_noise=np.asarray(sigma_train),
            prior_precision=train_hyper.for_training(tensor_sizes(estimator.net_.module_)),
            seed=seed, sample_weight=sample_weight,
            prior=TaskPrior(theta_prev, fitted.posterior, scale),
            init_module=estimator.net_.module_, tol=estimator.tol,
            n_iter_no_change=estimator.n_iter_no_change)
        net_.module_.eval()
        n_iter, curve = training_curve(net_)
    task = Task(previous=fitted.posterior, prior_mean=theta_prev, n_previous=n_previous,
                n_tasks=n_tasks)
    new = fit_laplace(
        s, net_, fitted.likelihood, X, y_model,
        Hyperparameters.of(estimator.prior_precision, sigma0), tuning=tuning,
        prediction_seed=fitted.prediction_seed,
        check_outputs=functools.partial(estimator._check_outputs, fitted.likelihood,
                                        fitted.n_outputs),
        targets=fitted.targets, sample_weight=sample_weight, task=task)
    return estimator._store(net_, n_iter, curve, new)
