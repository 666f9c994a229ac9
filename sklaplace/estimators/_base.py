"""What LaplaceClassifier and LaplaceRegressor share: a scikit-learn shell over a fit.

``fit`` is a short sequence — validate → resolve the policy → train → curvature →
posterior → tune → store — whose steps live in their own modules
(:mod:`._validation`, :mod:`._policy`, :mod:`._training`, :mod:`._fitting`,
:mod:`._laplace.tuning`); it produces one immutable
:class:`~._laplace.fitted.FittedLaplace`, stored as ``laplace_``, which prediction
reads (as ``GaussianProcessRegressor`` is a shell over ``kernel_``, ``L_`` and
``alpha_``).  The public fitted attributes (``prior_precision_``, ``log_evidence_``,
…) are copied from it when it is stored, nowhere else.

Prior precisions are given and reported in *whole-net form*: a float, one value per
parameter tensor, or one per parameter (:mod:`._laplace.hyperparameters`).
"""

import copy
import dataclasses
import functools
import types
import warnings

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.frozen import FrozenEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.frozen import FrozenEstimator
from sklearn.utils.validation import check_is_fitted

from . import _averaging as averaging
from .._laplace import policy
from ._dask import is_dask
from . import _selection as selection
from . import _warmup as warmup
from ._fitting import fit_laplace
from .._laplace import likelihoods, tuning, workflow
from .._laplace.hyperparameters import Hyperparameters
from .._laplace.holdout import validation_split
from ._training import online_callbacks, output_width, param_sizes, prepare_net, settings_of
from ._training import train
from ._validation import (PARAMETER_CONSTRAINTS, check_params, check_positive, check_seed,
                          positive_array, validate_predict_X)

#: Fitted attributes one fit sets only in some configurations: removed before a new fit.
_OPTIONAL_FITTED = ("validation_nll_", "evidence_history_", "refine_objective_init_",
                    "refine_objective_", "refine_n_iter_", "n_tasks_",
                    "model_selection_results_", "model_weights_", "estimators_")


def keeps_state_on_failure(fit):
    """Decorate ``fit``/``partial_fit``: a call that raises leaves the estimator as it was
    (fitted by the earlier call, or not fitted), never half updated: a refit failing in
    training or in the LA left the new ``classes_`` beside the old net and posterior."""

    @functools.wraps(fit)
    def wrapper(self, *args, **kwargs):
        state = dict(self.__dict__)
        try:
            return fit(self, *args, **kwargs)
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(state)
            raise

    return wrapper


class BaseLaplace(BaseEstimator):
    """Shared shell; subclasses set ``_likelihood_kinds`` and the target handling."""

    _likelihood_kinds = ()

    _parameter_constraints = PARAMETER_CONSTRAINTS

    # ------------------------------------------------------------ fit
    def _fit(self, X, y_model, likelihood_default, n_outputs, targets=None, sample_weight=None,
             task=None):
        """Validate, train (or take) the net, fit the LA, tune and store; ``y_model`` is
        in model units (``targets``: the regressor's standardization).

        With ``hyperparameter_tuning="cv"`` the LA runs twice, as scikit-learn's
        ``*CV`` estimators with ``refit=True``: on ``1 − validation_fraction`` of
        the rows to choose δ (and σ) by held-out NLL, then on all rows with them;
        the training of the second pass continues the first's (one training).
        ``sample_weight`` (validated, or None) multiplies each row's log-likelihood
        in training, curvature, evidence and the held-out NLL (split with the rows).
        ``task``: the ``partial_fit`` task of a first call (:mod:`._continual`).
        """
        check_params(self, continual=task is not None)
        s = settings_of(self)
        rng = check_seed("random_state", self.random_state)
        train_seed, prediction_seed = (int(v) for v in rng.randint(0, 2**31 - 1, size=2))
        auto = (s.net is None and task is None
                and selection.candidates(s.hidden_layer_sizes, X.shape[1], n_outputs) is not None)
        # the heteroscedastic default MLP: the selection of its mean-first phase (_warmup)
        hetero = auto and likelihood_default == "heteroscedastic"
        auto = auto and likelihood_default != "heteroscedastic"
        if s.net is None and not hetero:  # partial_fit keeps one architecture over its tasks
            s.hidden_layer_sizes = (s.hidden_layer_sizes if auto
                                    else selection.one_architecture(s.hidden_layer_sizes))
        frozen = s.net.estimator if isinstance(s.net, FrozenEstimator) else None
        tuning_ = self._resolve_tuning(len(X), frozen, task)
        prepare = functools.partial(
            self._pipeline, s, X, n_outputs, likelihood_default, tuning_, targets,
            train_seed, prediction_seed)
        if auto:
            pipe = prepare(())  # the likelihood and the scorers, the same for every candidate
            if self.model_averaging and pipe.likelihood.multilabel:
                raise ValueError("model_averaging=True does not support multilabel y (an "
                                 "indicator matrix); use model_averaging=False.")
            split_seed = int(rng.randint(0, 2**31 - 1))
            stratify = not (pipe.likelihood.regression or pipe.likelihood.multilabel)
            *fit, (sizes, scale), results, mixture = selection.select(
                s, s.hidden_layer_sizes, X, y_model, n_outputs, sample_weight,
                tuning=tuning_, seed=split_seed, stratify=stratify, prepare=prepare,
                scorers=pipe.scorers, offset=self._evidence_offset,
                averaging=self.model_averaging,
                retry_overfit=pipe.likelihood.multilabel)

            def refit(sizes, fit, scale=1.0):
                pipe_ = self._pipeline(s, X, n_outputs, likelihood_default, tuning_, targets,
                                       train_seed, prediction_seed, sizes, "lbfgs" if sizes
                                       == () and s.solver == "adam" else None, scale)
                return self._refit(pipe_, fit, X, y_model, sample_weight)

            if mixture is not None:
                return averaging.store(self, *mixture, results, refit)
            self._store(*refit(sizes, fit, scale))
            self.hidden_layer_sizes_, self.model_selection_results_ = sizes, results
            return self
        mean_start = results = None
        if hetero:  # the one-σ mean's candidates, as the default's: then its sizes
            split_seed = int(rng.randint(0, 2**31 - 1))
            s.hidden_layer_sizes, mean_start, results = warmup.select_mean(
                s, X, y_model, sample_weight, tuning_, split_seed, functools.partial(
                    self._pipeline, s, X, n_outputs // 2, "gaussian", tuning_, targets,
                    train_seed, prediction_seed), self._evidence_offset)
        pipe = prepare(s.hidden_layer_sizes if s.net is None else None)
        chosen = init = None
        if tuning_ == "cv":
            fit_rows, held_out = validation_split(
                len(X), self.validation_fraction,
                split_seed if hetero else int(rng.randint(0, 2**31 - 1)),
                labels=None if pipe.likelihood.regression or pipe.likelihood.multilabel
                else y_model)
            w_fit, w_val = ((None, None) if sample_weight is None
                            else (sample_weight[fit_rows], sample_weight[held_out]))
            first_net, *_ = pipe.train(X[fit_rows], y_model[fit_rows], sample_weight=w_fit,
                                       mean_start=mean_start,
                                       what=f"MAP training on {len(fit_rows)} of {len(X)} rows "
                                            f"({len(held_out)} held out to tune δ)")
            first = pipe.laplace(first_net, X=X[fit_rows], y_model=y_model[fit_rows],
                                 sample_weight=w_fit,
                                 validation=(X[held_out], y_model[held_out], w_val))
            chosen, init = first.hyper, None if pipe.frozen is not None else first_net.module_
            self._log(f"refit on all {len(X)} rows with the held-out choice, training "
                      "warm-started from the net of the held-out pass")
        net_, n_iter, curve = pipe.train(X, y_model, sample_weight=sample_weight,
                                         init_module=init, mean_start=mean_start,
                                         callbacks=pipe.callbacks(y_model, sample_weight),
                                         what=f"MAP training on all {len(X)} rows")
        fitted = pipe.laplace(net_, X=X, y_model=y_model, sample_weight=sample_weight,
                              chosen=chosen, task=task)
        if chosen is not None:  # the held-out NLL of the choice, on the refit's object
            fitted = dataclasses.replace(fitted, report={
                **fitted.report, "validation_nll": first.report["validation_nll"]})
        self._store(net_, n_iter, curve, fitted)
        self.hidden_layer_sizes_ = s.hidden_layer_sizes if s.net is None else None
        if results is not None:
            self.model_selection_results_ = results
        return self

    def _refit(self, pipe, first, X, y_model, sample_weight):
        """The chosen candidate trained on, warm, on all rows, its LA at the selection
        pass's held-out δ ("cv"; "online" tunes again during that training)."""
        fitted = first[3]
        chosen = fitted.hyper if fitted.tuning == "cv" else None
        nll = fitted.report.get("validation_nll")
        net_, n_iter, curve = pipe.train(X, y_model, sample_weight=sample_weight,
                                         init_module=first[0].module_,
                                         callbacks=pipe.callbacks(y_model, sample_weight),
                                         what=f"MAP training on all {len(X)} rows")
        refit = pipe.laplace(net_, X=X, y_model=y_model, sample_weight=sample_weight,
                             chosen=chosen)
        if chosen is not None:  # the held-out NLL of the choice, on the refit's object
            refit = dataclasses.replace(refit, report={**refit.report, "validation_nll": nll})
        return net_, n_iter, curve, refit

    def _pipeline(self, s, X, n_outputs, likelihood_default, tuning_, targets, train_seed,
                  prediction_seed, sizes, solver=None, prior_scale=1.0):
        """One architecture's steps (the default MLP of ``sizes`` trained by ``solver``,
        or ``s.net``): ``train``, ``laplace`` (:func:`fit_laplace`), ``callbacks``;
        ``prior_scale`` multiplies the prior precision of MAP training (a selection's
        stronger weight decay, :mod:`._selection`)."""
        if sizes is not None:
            s = types.SimpleNamespace(**{**vars(s), "hidden_layer_sizes": tuple(sizes),
                                         "solver": solver or s.solver})
        if prior_scale != 1.0:
            s = types.SimpleNamespace(**{**vars(s), "prior_precision": prior_scale
                                         * np.asarray(s.prior_precision, dtype=float)})
        net, frozen, likelihood = prepare_net(s, X.shape[1], n_outputs)
        # (check_params refused a net whose likelihood the estimator does not support)
        likelihood = self._likelihood(likelihood, likelihood_default)
        check_outputs = functools.partial(self._check_outputs, likelihood, n_outputs)
        hyper0 = Hyperparameters.of(s.prior_precision, self._initial_sigma())
        if frozen is not None:
            sizes, linear, width = None, None, output_width(frozen.module_, X)
            check_outputs(width)
        else:
            sizes, linear, width = param_sizes(s, net, X, n_outputs, check_outputs)
        scorers = self._held_out_scorers(likelihood, prediction_seed)

        def callbacks(y_model, sample_weight):
            return (online_callbacks(s, likelihood, sizes, linear, y_model, width,
                                     sample_weight) if tuning_ == "online" else ())

        return types.SimpleNamespace(
            likelihood=likelihood, frozen=frozen, scorers=scorers, callbacks=callbacks,
            laplace=functools.partial(
                fit_laplace, s, likelihood=likelihood, hyper0=hyper0, tuning=tuning_,
                prediction_seed=prediction_seed, check_outputs=check_outputs,
                targets=targets, scorers=scorers),
            train=functools.partial(train, s, net, frozen, likelihood=likelihood,
                                    hyper=hyper0, sizes=sizes, seed=train_seed))

    def _fit_any(self, X, y, sample_weight=None):
        """``fit``'s body: in memory (``_fit_rows``), or on dask collections, whose rows
        stay in their partitions (:mod:`._dask_sequence`)."""
        if is_dask(X) or is_dask(y):
            if sample_weight is not None:
                raise ValueError("sample_weight is not supported on dask input: fit on dask "
                                 "collections takes unweighted rows.")
            from ._dask_sequence import fit_dask  # the rows stay on the workers

            return fit_dask(self, X, y)
        return self._fit_rows(X, y, sample_weight)

    def _resolve_tuning(self, n_rows, frozen, task):
        """``hyperparameter_tuning_`` (:mod:`._policy`), warning on "cv" with a frozen net."""
        if task is not None:  # partial_fit: no held-out data
            return policy.continual_tuning(self.hyperparameter_tuning)
        value = (self._default_tuning(n_rows) if self.hyperparameter_tuning == "auto"
                 else self.hyperparameter_tuning)
        if value == "cv" and frozen is not None:
            warnings.warn(
                "hyperparameter_tuning='cv' with a FrozenEstimator net: the net was trained "
                "before fit, most likely on the rows held out here, so their NLL is in-sample "
                "and favours the largest prior precision. Use hyperparameter_tuning='evidence' "
                "(the default for frozen nets) or hold out rows the net never saw.",
                UserWarning)
        return value

    def _store(self, net_, n_iter, loss_curve, fitted):
        """Store a fit: ``net_``, its training curve, ``laplace_`` and the public fitted
        attributes read from it."""
        for stale in _OPTIONAL_FITTED:
            self.__dict__.pop(stale, None)
        self.net_, self.n_iter_, self.loss_curve_ = net_, n_iter, loss_curve
        self.laplace_ = fitted
        self.hyperparameter_tuning_ = fitted.tuning
        self.subset_of_weights_, self.hessian_structure_ = fitted.kind, fitted.structure
        self.n_params_ = int(fitted.subset.n_params)
        self.prior_precision_ = fitted.hyper.prior_precision
        self.extrapolation_variance_ = fitted.hyper.outside_variance
        self.log_evidence_ = (fitted.log_evidence(None, fitted.hyper.sigma)
                              + self._evidence_offset(fitted))
        for key, value in fitted.report.items():
            setattr(self, f"{key}_", value)
        if fitted.n_tasks:
            self.n_tasks_ = fitted.n_tasks
        self._store_sigma(fitted)
        return self

    def _log(self, message):
        if self.verbose:
            print(f"[{type(self).__name__}] {message}", flush=True)

    # hooks of the targets (the subclasses override them)
    def _default_tuning(self, n_rows):
        """What ``hyperparameter_tuning="auto"`` means (see the estimators' docstrings)."""
        raise NotImplementedError

    def _held_out_scorers(self, likelihood, seed):
        return None

    def _likelihood(self, name, default):
        """The likelihood of the net's criterion ``name`` (None: the default MLP's)."""
        return likelihoods.get(name or default)

    def _initial_sigma(self):
        return 1.0

    def _check_outputs(self, likelihood, n_outputs, n_out):
        pass

    def _evidence_offset(self, fitted):
        return 0.0

    def _store_sigma(self, fitted):
        pass

    # ------------------------------------------------------------ evidence
    def _log_evidence_for_selection(self):
        """The log evidence of the fit as a model-selection score (``evidence_scorer``).

        With δ chosen by the evidence (or online, or given) it is ``log_evidence_``.
        With ``"cv"`` it is the evidence at its own optimum δ: at the held-out choice
        the ½δ‖θ‖² term of a large δ would score the prior, not the model (hidden width
        (2,) beat (50,) by 21,000 nats at δ = 1e4).
        """
        averaging.refuse(self, "The evidence as a model-selection score")
        if self.hyperparameter_tuning_ != "cv":
            return float(self.log_evidence_)
        fitted = self.laplace_
        if fitted.evidence.gaussian:
            raise ValueError(
                "evidence_scorer scores the evidence, and this regressor's prior_precision_ "
                "and sigma_noise_ were chosen by held-out NLL (hyperparameter_tuning='cv'): "
                "use hyperparameter_tuning='evidence' (or 'online') in the searched "
                "estimator, or a held-out scorer such as 'neg_mean_squared_error'.")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            hyper = tuning.by_evidence(fitted.evidence, fitted.subset, self.prior_structure,
                                       self.prior_precision, None, None)
        return self._log_evidence(hyper.prior_precision, None)

    def _log_evidence(self, prior_precision, sigma):
        check_is_fitted(self)
        averaging.refuse(self, "log_evidence")
        if prior_precision is not None:
            positive_array("prior_precision", prior_precision)
        return self.laplace_.log_evidence(prior_precision, sigma)

    def _with_prior(self, prior_precision):
        """A shallow copy of the fitted estimator that predicts at another prior precision.

        The copy shares the net, the subset and the curvature; only its prediction
        posterior (``FittedLaplace.with_prior``) and ``prior_precision_`` differ, σ stays
        the fitted one, and ``self`` is not changed. Refused under ``refine``, whose
        refined mean and covariance depend on δ (a refinement per value).
        """
        check_is_fitted(self)
        averaging.refuse(self, "A prediction at another prior precision")
        if self.refine is not None:
            raise ValueError(
                f"refine={self.refine!r}: the refined posterior depends on the prior precision, "
                "so predictions at another value need a refit; use refine=None.")
        positive_array("prior_precision", prior_precision)
        new = copy.copy(self)
        new.laplace_ = self.laplace_.with_prior(prior_precision)
        new.prior_precision_ = new.laplace_.hyper.prior_precision
        return new

    @property
    def posterior_(self):
        """The Gaussian posterior over the Laplace weights at the fitted hyperparameters.

        Returns
        -------
        posterior : WeightPosterior
            Mean, covariance (a ``LinearOperator``), sampling, log density and the net
            at given weights; see :class:`sklaplace.posterior.WeightPosterior`.
        """
        check_is_fitted(self)
        averaging.refuse(self, "posterior_")
        from ..posterior import WeightPosterior

        return WeightPosterior(self)

    # ------------------------------------------------------------ prediction
    def _X_tensor(self, X):
        X = validate_predict_X(self, X)
        device = self.laplace_.device
        if X.dtype == np.float64 and X.flags.c_contiguous and X.flags.writeable:
            # shared, not copied, on the CPU: prediction never writes into X
            return torch.from_numpy(X).to(device)
        return torch.tensor(np.ascontiguousarray(X), dtype=torch.float64, device=device)

    def _function_samples(self, X, n_samples, random_state):
        """Functions from the posterior: GLM f + J(θ − θ*), or the net at θ."""
        check_is_fitted(self)
        check_positive("n_samples", n_samples, integer=True)
        rng = check_seed("random_state", random_state)
        if averaging.averaged(self):
            return averaging.function_samples(self, X, n_samples, rng)
        Xt = self._X_tensor(X)
        seed = rng.randint(0, 2**31 - 1)
        return self.laplace_.function_samples(Xt, n_samples, seed, self.pred_type == "nn")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags

    # pickles: the fitted tensors in a torch blob, mapped to the CPU where CUDA is absent
    def __getstate__(self):
        return workflow.pack_state(super().__getstate__(), self.get_params(deep=False))

    def __setstate__(self, state):
        state = workflow.unpack_state(state, type(self).__name__)
        if "_posterior" in state and "laplace_" not in state:
            raise ValueError(
                f"This {type(self).__name__} was pickled by an earlier sklaplace, whose "
                "fitted state had another layout (before the fitted Laplace approximation "
                "became one object, laplace_); refit it with this version.")
        state.setdefault("extrapolation_variance", 0.0)  # pickled before the parameters
        state.setdefault("model_averaging", False)
        if "laplace_" in state:
            state.setdefault("extrapolation_variance_", 0.0)
        super().__setstate__(state)
