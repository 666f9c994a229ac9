"""``partial_fit``'s orchestration: one task after another (the maths: ``_laplace.continual``).

The estimators' ``partial_fit`` methods are here (:class:`ClassifierPartialFit`,
:class:`RegressorPartialFit`). The first call is ``fit`` with the continual choices (:class:`~._laplace.continual.Task`
given to ``BaseLaplace._fit``: all weights, a full / diagonal / Kronecker posterior,
``"auto"`` tuning by the evidence). A later call (or one after ``fit``) trains the net
from θ*_{t−1} under the prior N(θ*_{t−1}, Λ_{t−1}⁻¹), fits the LA of the task with the
earlier tasks' posterior as its prior and stores the new
:class:`~._laplace.fitted.FittedLaplace` (:func:`fit_next_task`).
"""

import functools

import numpy as np
import torch
from sklearn.base import _fit_context, clone
from sklearn.utils.class_weight import compute_sample_weight
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets, is_multilabel

from .._laplace import policy
from ._fitting import fit_laplace
from .._laplace import nets
from .._laplace.continual import STRUCTURES, Task, TaskPrior
from .._laplace.convergence import training_curve
from .._laplace.hyperparameters import Hyperparameters
from .._laplace.prior import tensor_sizes
from ._base import keeps_state_on_failure
from .._laplace.workflow import torch_entry_point
from ._threads import thread_policy
from ._selection import candidates
from ._training import prepare_net, settings_of, with_batch_rows
from ._validation import (check_fit_weight, check_params, check_seed, partial_fit_available,
                          validate_numeric, without_zero_weights)


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
            f"hidden_layer_sizes={estimator.hidden_layer_sizes!r} but the network of "
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
    if s.net is None and candidates(s.hidden_layer_sizes, X.shape[1], 1) is not None:
        s.hidden_layer_sizes = estimator.hidden_layer_sizes_  # the earlier tasks' choice
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
            with_batch_rows(s, clone(net), len(X)), X, y_model, likelihood=fitted.likelihood.name,
            temperature=estimator.temperature, sigma_noise=np.asarray(sigma_train),
            prior_precision=train_hyper.for_training(tensor_sizes(estimator.net_.module_)),
            seed=seed, sample_weight=sample_weight,
            prior=TaskPrior(theta_prev, fitted.posterior, scale),
            init_module=estimator.net_.module_, tol=estimator.tol,
            n_iter_no_change=estimator.n_iter_no_change)
        net_.module_.eval()
        n_iter, curve = training_curve(net_)
    task = Task(previous=fitted.posterior, prior_mean=theta_prev, n_previous=n_previous,
                n_tasks=n_tasks, outside=fitted.outside)
    new = fit_laplace(
        s, net_, fitted.likelihood, X, y_model,
        Hyperparameters.of(estimator.prior_precision, sigma0), tuning=tuning,
        prediction_seed=fitted.prediction_seed,
        check_outputs=functools.partial(estimator._check_outputs, fitted.likelihood,
                                        fitted.n_outputs),
        targets=fitted.targets, sample_weight=sample_weight, task=task)
    return estimator._store(net_, n_iter, curve, new)


# ---------------------------------------------------------------- the estimators' method
class ClassifierPartialFit:
    """``partial_fit`` of :class:`~sklaplace.LaplaceClassifier` (a mixin)."""

    @available_if(partial_fit_available)
    @_fit_context(prefer_skip_nested_validation=True)
    @keeps_state_on_failure
    @thread_policy
    @torch_entry_point
    def partial_fit(self, X, y, classes=None, sample_weight=None):
        """Continual learning: fit on the first call, update the posterior on later ones.

        The posterior of the earlier calls (tasks) is the prior of this one
        (Laplace Redux, App. C.4): the net starts at their MAP θ*_{t−1} and is
        trained to the MAP under N(θ*_{t−1}, (s·Σ_{t'<t} H_{t'} + δI)⁻¹), the
        task's curvature at the new MAP is added to the earlier tasks' (exactly
        for ``"diag"`` and ``"full"``, summed Kronecker factors for ``"kron"``)
        and δ is re-tuned on the task's evidence p(D_t | D_<t), which is then
        ``log_evidence_``. The first call is ``fit`` over all weights with a
        full (when cheap), Kronecker or diagonal posterior and ``"auto"`` tuning
        meaning ``"evidence"``; a call after ``fit`` continues from that fit.
        Each call trains ``max_epochs`` epochs (a ``FrozenEstimator`` net keeps
        its weights: only the curvature accumulates). Available over all weights
        with ``hessian_structure`` ``"auto"``, ``"full"``, ``"diag"`` or
        ``"kron"``, ``hyperparameter_tuning`` ``"auto"``, ``"evidence"`` or
        None, and no ``refine``. See the README's section on continual learning.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data of this task.
        y : array-like of shape (n_samples,)
            Labels, all in ``classes``.
        classes : array-like of shape (n_classes,), default=None
            All the labels of every task; required on the first call (as in
            ``SGDClassifier.partial_fit``), and if given later equal to ``classes_``.
        sample_weight : array-like of shape (n_samples,), default=None
            Row weights of this task (see ``fit``); ``class_weight="balanced"`` is
            not supported here (a dict is).

        Returns
        -------
        self : LaplaceClassifier
            The updated estimator.

        Raises
        ------
        ValueError
            If ``classes`` is missing on the first call or disagrees with
            ``classes_``, a label is not in ``classes``,
            ``class_weight="balanced"``, or ``y`` or the fit is multilabel.
        """
        first = is_first_call(self)
        if is_multilabel(y) or not first and self.laplace_.likelihood.multilabel:
            raise ValueError(
                "partial_fit takes one class label per row; multilabel (an indicator matrix "
                "y) is fitted by fit only.")
        X_checked, y_checked = validate_numeric(self, X, y, reset=first,
                                                dtype=[np.float64, np.float32])
        check_classification_targets(y_checked)
        known = check_classes(self, classes, y_checked, first)
        if first:
            return self._fit_rows(X, y, sample_weight, task=Task(classes=known))
        sample_weight = check_fit_weight(sample_weight, X_checked)
        if self.class_weight is not None:
            per_row = compute_sample_weight(self.class_weight, y_checked)
            sample_weight = check_fit_weight(
                per_row if sample_weight is None else sample_weight * per_row, X_checked)
        X_checked, y_index, sample_weight = without_zero_weights(
            X_checked, np.searchsorted(known, y_checked), sample_weight)
        return fit_next_task(self, X_checked, y_index, sample_weight)


def regressor_partial_fit_available(estimator):
    """:func:`partial_fit_available`, and not with a noise per row (its LA is not
    implemented for continual learning)."""
    if getattr(estimator, "noise", "homoscedastic") == "heteroscedastic":
        raise AttributeError("partial_fit (continual learning) is not available with "
                             "noise='heteroscedastic'.")
    return partial_fit_available(estimator)


class RegressorPartialFit:
    """``partial_fit`` of :class:`~sklaplace.LaplaceRegressor` (a mixin)."""

    @available_if(regressor_partial_fit_available)
    @_fit_context(prefer_skip_nested_validation=True)
    @keeps_state_on_failure
    @thread_policy
    @torch_entry_point
    def partial_fit(self, X, y, sample_weight=None):
        """Continual learning: fit on the first call, update the posterior on later ones.

        The posterior of the earlier calls (tasks) is the prior of this one
        (Laplace Redux, App. C.4): the net starts at their MAP θ*_{t−1} and is
        trained to the MAP under N(θ*_{t−1}, (s·Σ_{t'<t} H_{t'} + δI)⁻¹), the
        task's curvature at the new MAP is added to the earlier tasks' (exactly
        for ``"diag"`` and ``"full"``, summed Kronecker factors for ``"kron"``)
        and δ and σ are re-tuned on the task's evidence p(D_t | D_<t), which is
        then ``log_evidence_``. For a net without hidden layer and
        ``hessian_structure="full"`` every step is exact: the posterior equals
        that of one fit on all tasks' rows (``"diag"`` and ``"kron"`` carry
        an approximation of the earlier tasks' curvature into the next MAP,
        so they are not). The curvature and structure stay those of the
        first call; a call that fails leaves the estimator as it was. The
        first call is ``fit`` over all weights with a full (when cheap),
        Kronecker or diagonal posterior and ``"auto"`` tuning meaning
        ``"evidence"``; a call after ``fit`` continues from that fit. The
        targets are standardized (``normalize_y``) as on the first call. Each
        call trains ``max_epochs`` epochs (a ``FrozenEstimator`` net keeps its
        weights). Available over all weights with ``hessian_structure``
        ``"auto"``, ``"full"``, ``"diag"`` or ``"kron"``,
        ``hyperparameter_tuning`` ``"auto"``, ``"evidence"`` or None, one
        ``sigma_noise`` and no ``refine``. See the README's section on continual learning.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data of this task.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Target values of this task, with the outputs of the first call.
        sample_weight : array-like of shape (n_samples,), default=None
            Row weights of this task (see ``fit``).

        Returns
        -------
        self : LaplaceRegressor
            The updated estimator.

        Raises
        ------
        ValueError
            If ``y`` has another number of outputs than on the first call.
        """
        if is_first_call(self):
            return self._fit_rows(X, y, sample_weight, task=Task())
        X, y = validate_numeric(self, X, y, reset=False, dtype=[np.float64, np.float32],
                                multi_output=True, y_numeric=True)
        y2 = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
        targets = self.laplace_.targets
        if y2.shape[1] != targets.mean.size:
            raise ValueError(
                f"y has {y2.shape[1]} outputs but the earlier tasks had {targets.mean.size}.")
        sample_weight = check_fit_weight(sample_weight, X)
        X, y2, sample_weight = without_zero_weights(X, y2, sample_weight)
        y_model = targets.to_model(y2)  # the units of the first task
        fit_next_task(self, X, y_model, sample_weight)
        return self._record_scaling()
