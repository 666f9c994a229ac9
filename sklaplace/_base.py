"""What LaplaceClassifier and LaplaceRegressor share: fit, LA, tuning, GLM moments.

``fit`` validates, trains a copy of the skorch net to the MAP (or keeps a
frozen one), builds the Laplace approximation on the chosen weights and
structure, and tunes the prior precision (and σ) by the evidence.  Prediction
runs net at the MAP → Jacobians → posterior → distribution objects.

Prior precisions are given and reported in *whole-net form*: a float, one
value per parameter tensor, or one per parameter.  Internally the Laplace
weights see a 0-d tensor (scalar) or one value per Laplace weight.
"""

import copy
import functools
import numbers
import pickle
import threading
import time
import warnings
from numbers import Integral, Real

import numpy as np
import torch
from scipy.optimize import minimize_scalar
from sklearn.base import BaseEstimator, clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.frozen import FrozenEstimator
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, check_memory, validate_data

from ._laplace import continual, nets, progress, workflow
from ._laplace.convergence import training_curve
from ._laplace.curvature import (compute_posterior, default_lowrank_rank, jacobian_bytes,
                                 memory_budget, progress_to)
from ._laplace.evidence import Evidence, curvature_scale, maximize_evidence
from ._laplace.holdout import (LOG10_PRIOR_GRID, one_standard_error_choice, validation_split,
                               grid_variances, warn_at_grid_bound,
                               variance_path)
from ._laplace import likelihoods
from ._laplace.online import OnlineEvidence
from ._laplace.prior import (PriorGroups, constant_per_tensor, expand_prior, subset_prior,
                             tensor_sizes)
from ._laplace.subsets import AllWeights, LastLayer, Subnetwork, _to_module
from ._threads import seeded

AUTO_FULL_MAX_PARAMS = 5000
AUTO_LAST_LAYER_FULL_MAX = 2000
# Largest prediction buffer per row chunk: cache-sized on the CPU; on CUDA larger chunks
# keep the device busy (fewer kernel launches), within its memory budget.
PREDICT_CHUNK_BYTES = 2**26
CUDA_PREDICT_CHUNK_BYTES = 2**30
# Time guard of the full / low-rank structures: flop counts at an assumed float64 rate
# (a conservative figure for a 2-core laptop; BLAS peaks are higher on bigger machines).
ASSUMED_FLOPS = 2e10
# The same for the warning on a CUDA device (a data-centre GPU's float64 rate, discounted);
# the "auto" policy keeps the CPU figure, so the same data give the same structure anywhere.
ASSUMED_CUDA_FLOPS = 2e12
TIME_BUDGET_SECONDS = 120.0
# "auto" takes the full structure over all weights up to this estimated time.
AUTO_FULL_SECONDS = 2.0

_EVIDENCE_LOCK = threading.Lock()

def _at_least(low):
    return [Interval(Integral, low, None, closed="left")]


_POSITIVE = [Interval(Real, 0, None, closed="neither")]

#: scikit-learn's parameter validation (``_fit_context`` runs it on ``fit``); the
#: cross-parameter rules and the array-valued parameters are in ``_check_params``.
PARAMETER_CONSTRAINTS = {
    "net": "no_validation",  # None, a skorch net or FrozenEstimator: _prepare_net names it
    "hidden_layer_sizes": "no_validation",  # a tuple of positive ints: _check_params
    "max_epochs": _at_least(1),
    "lr": _POSITIVE,
    "batch_size": _at_least(1),
    "tol": [Interval(Real, 0, None, closed="left"), None],
    "n_iter_no_change": _at_least(1),
    "solver": [StrOptions({"adam", "lbfgs"})],
    "prior_precision": "no_validation",  # a positive float or 1-D array: positive_array
    "prior_structure": [StrOptions({"scalar", "layerwise", "diag"})],
    "hyperparameter_tuning": [StrOptions({"auto", "evidence", "online", "cv"}), None],
    "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
    "subset_of_weights": [StrOptions({"auto", "all", "last_layer", "subnetwork"})],
    "hessian_structure": [StrOptions({"auto", "full", "diag", "kron", "lowrank"})],
    "subnetwork": "no_validation",  # with subset_of_weights: _check_params
    "lowrank_rank": _at_least(1) + [None],
    "curvature": [StrOptions({"ggn", "ef"})],
    "pred_type": [StrOptions({"glm", "nn", "gp"})],
    "gp_subset_size": _at_least(1) + [None],
    "refine": [StrOptions({"laplace", "vi"}), None],
    "n_samples": _at_least(1),
    "temperature": _POSITIVE,
    "online_frequency": _at_least(1),
    "online_burn_in": _at_least(0),
    "online_steps": _at_least(1) + [None],
    "online_lr": _POSITIVE,
    "device": "no_validation",  # a torch device that exists here: nets.check_device_name
    "memory": [None, str, HasMethods(["cache"])],
    "random_state": ["random_state"],
    "verbose": _at_least(0),
}


def check_positive(name, value, integer=False, allow_none=False, allow_zero=False):
    if value is None and allow_none:
        return
    kind = numbers.Integral if integer else numbers.Real
    ok = isinstance(value, kind) and not isinstance(value, bool) and (
        isinstance(value, numbers.Integral) or np.isfinite(value))  # ints beyond int64 too
    if not ok or not (value >= 0 if allow_zero else value > 0):
        what = "integer" if integer else "number"
        sign = "non-negative" if allow_zero else "positive"
        raise ValueError(f"{name} must be a {sign} {what}, got {value!r}.")


def positive_array(name, value):
    """A positive finite float or 1-D array of them, as a float array (bools refused)."""
    try:
        given = np.asarray(value)
        arr = None if given.dtype.kind in "bOSU" and not _all_reals(given) else given.astype(float)
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.ndim > 1 or arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(
            f"{name} must be a positive finite float or a 1-D array of them, got {value!r}."
        )
    return arr


def _all_reals(values):
    """Whether an object array holds real numbers only (no bools, no strings)."""
    return values.dtype.kind == "O" and all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values.ravel())


def check_seed(name, value):
    """``check_random_state`` with an error that names the argument."""
    try:
        return check_random_state(value)
    except ValueError:
        raise ValueError(
            f"{name} must be None, an int or a numpy RandomState, got {value!r}."
        ) from None


def validate_numeric(estimator, X, y="no_validation", **kwargs):
    """``validate_data`` whose errors on non-numeric (string, object) data name X or y."""
    try:
        return validate_data(estimator, X, y, **kwargs)
    except (TypeError, ValueError) as error:
        text = str(error)
        if "could not convert" not in text and "argument must be" not in text:
            raise
        try:
            np.asarray(X, dtype=float)
        except (TypeError, ValueError):
            raise type(error)(
                "X must contain numeric features only (encode strings and categories first, "
                f"e.g. with OneHotEncoder); {text}"
            ) from error
        raise type(error)(f"y must be numeric for {type(estimator).__name__}; {text}") from error


_FLOAT_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))


def validate_predict_X(estimator, X):
    """``validate_data(estimator, X, reset=False)`` for prediction, short for plain arrays.

    A non-empty, finite, 2-D float64/float32 ndarray with the fitted number of columns,
    for an estimator fitted without feature names, is what validate_data returns
    unchanged; its generic checks (dataframe and array-API detection, ≈60 µs) cost
    more than the last-layer predictive of a few hundred rows, so such X skip them.
    Anything else (other types or dtypes, wrong shape, non-finite values, fitted
    feature names) goes through validate_data, with its errors and warnings.
    """
    if (type(X) is np.ndarray and X.dtype in _FLOAT_DTYPES and X.ndim == 2
            and X.shape[0] > 0 and X.shape[1] == estimator.n_features_in_
            and not hasattr(estimator, "feature_names_in_")
            and np.isfinite(X).all()):
        return X
    return np.asarray(validate_numeric(estimator, X, reset=False, dtype=[np.float64, np.float32]))


def _build_posterior(structure, subset, likelihood, X, y, curvature, rank, out_scale,
                     weight=None):
    return compute_posterior(structure, subset, likelihood, X, y, out_scale, curvature, rank,
                             weight=weight)


def check_fit_weight(sample_weight, X):
    """``sample_weight`` validated by scikit-learn (length, finite, non-negative) as
    float64, with a positive sum; None stays None (the unweighted fit)."""
    if sample_weight is None:
        return None
    from sklearn.utils.validation import _check_sample_weight

    sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64,
                                         ensure_non_negative=True,
                                         allow_all_zero_weights=True)
    if not sample_weight.sum() > 0:
        raise ValueError(
            "sample_weight must contain at least one non-zero weight (its sum must be positive).")
    return sample_weight


def without_zero_weights(X, y, sample_weight):
    """The rows of positive weight: a zero weight is a row that is not there (its target
    may be a sentinel such as 1e20, which would still overflow training's float32 loss)."""
    if sample_weight is None or np.all(sample_weight > 0):
        return X, y, sample_weight
    keep = sample_weight > 0
    return X[keep], y[keep], sample_weight[keep]


def weighted_spread(values, weight=None, axis=None):
    """``np.std(values, axis)``, or the std under row weights (the rows' duplication)."""
    values = np.asarray(values)
    if weight is None:
        return np.std(values, axis=axis)
    w = np.asarray(weight, dtype=float)
    if axis is None:
        w = np.broadcast_to(w.reshape(len(w), *[1] * (values.ndim - 1)), values.shape).ravel()
        values = values.ravel()
    else:
        w = w.reshape(len(w), *[1] * (values.ndim - 1))
    mean = np.sum(w * values, axis=axis) / np.sum(w, axis=axis)
    centered = values - (mean if axis is None else np.expand_dims(mean, axis))
    return np.sqrt(np.sum(w * centered**2, axis=axis) / np.sum(w, axis=axis))


def full_structure_seconds(n_rows, n_out, n_params, flops_per_second=ASSUMED_FLOPS):
    """Estimated seconds to build and eigendecompose a full curvature of P weights.

    N·C ≥ P: Σ_n J_nᵀ Λ_n J_n costs N·C·P² and the P × P eigendecomposition about
    10·P³ (tridiagonalization plus eigenvectors); N·C < P: the N·C × N·C kernel
    costs (N·C)²·P to build, 10·(N·C)³ to decompose and (N·C)²·P for the vectors.
    """
    m = n_rows * n_out
    flops = m * n_params**2 + 10 * n_params**3 if m >= n_params else 2 * m**2 * n_params + 10 * m**3
    return flops / flops_per_second


def all_weights_structure(all_linear, n_rows, n_out, n_params, fits=True):
    """``hessian_structure="auto"`` over all weights: the full GGN when it is estimated
    within AUTO_FULL_SECONDS and its Jacobians fit the memory budget; else Kronecker
    factors when every trainable tensor sits in an ``nn.Linear``; else the diagonal."""
    if fits and full_structure_seconds(n_rows, n_out, n_params) <= AUTO_FULL_SECONDS:
        return "full"
    return "kron" if all_linear else "diag"


def _auto_structure(module, X, n_out, n_params, fits):
    """``"auto"``: (subset, structure) by the estimated cost of the full curvature.

    All weights as :func:`all_weights_structure`, except that a net the diagonal
    would be left with takes the last layer instead.
    """
    structure = all_weights_structure(_all_linear(module, X), X.shape[0], n_out, n_params, fits)
    return ("all", structure) if structure != "diag" else ("last_layer", "auto")


def _at_prior(posterior, delta, s):
    """``posterior`` at a scalar prior precision ``delta`` and curvature scale ``s``."""
    return posterior.with_prior(torch.tensor(float(delta), dtype=torch.float64),
                                torch.tensor(float(s), dtype=torch.float64))


def _scaled_moments(mean, v, c_of, sigma):
    """GLM held-out moments at σ: the mean and c(σ)·v (``_held_out_gaussian``)."""
    return mean, c_of(sigma) * v


def _all_linear(module, X):
    """Whether Kronecker factors can read the net: every trainable tensor in an
    ``nn.Linear`` run once per forward pass on one input row per data row (probed in
    eval mode on two rows of ``X``)."""
    training = module.training
    module.eval()
    try:
        x = X[:2] if torch.is_tensor(X) else _to_module(torch.tensor(np.array(X[:2])), module)
        return AllWeights(module).factored_on(x)
    finally:
        module.train(training)


def output_width(module, X):
    """Number of outputs per row of ``module`` (run in eval mode on two rows of ``X``)."""
    training = module.training
    module.eval()
    try:
        with torch.no_grad():
            x = _to_module(torch.tensor(np.array(X[:2])), module)  # a copy: X may be read-only
            out = module(x)
    finally:
        module.train(training)
    return int(out.reshape(x.shape[0], -1).shape[1])


def fill_rows(out, part, rows, n_rows):
    """Write the result ``part`` of the row slice ``rows`` into ``out`` (arrays, or tuples
    of arrays; torch or numpy), allocated for all ``n_rows`` rows on the first chunk.

    Chunked predictions write into one output instead of concatenating a list of
    parts: no small allocations stay behind between the chunks' large temporaries, so
    the allocator reuses their memory instead of growing the heap chunk by chunk.
    """
    if isinstance(part, tuple):
        return tuple(fill_rows(o, p, rows, n_rows)
                     for o, p in zip((None,) * len(part) if out is None else out, part))
    if out is None:
        shape = (n_rows, *part.shape[1:])
        out = (torch.empty(shape, dtype=part.dtype, device=part.device)
               if isinstance(part, torch.Tensor) else np.empty(shape, dtype=part.dtype))
    out[rows] = part
    return out


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
    """Shared machinery; subclasses set ``_likelihood_kinds`` and the target handling."""

    _likelihood_kinds = ()

    _parameter_constraints = PARAMETER_CONSTRAINTS

    # ------------------------------------------------------------ validation
    def _check_params(self):
        """The rules scikit-learn's constraints cannot state (``_parameter_constraints``
        is checked by ``_fit_context`` before): array values, the device and the
        combinations of parameters."""
        self._validate_refine()
        for name, constraints in self._parameter_constraints.items():
            # scikit-learn's Interval(Integral) takes bools (True == 1): not a count here
            if isinstance(getattr(self, name), bool) and any(
                    isinstance(c, Interval) and c.type is Integral for c in constraints
                    if not isinstance(c, str)):
                raise ValueError(f"{name} must be an int, got {getattr(self, name)!r}.")
        sizes = self.hidden_layer_sizes
        if not isinstance(sizes, (tuple, list)) or not all(
            isinstance(h, numbers.Integral) and not isinstance(h, bool) and h > 0 for h in sizes
        ):
            raise ValueError(f"hidden_layer_sizes must be a tuple of positive integers, got {sizes!r}.")
        positive_array("prior_precision", self.prior_precision)
        nets.check_device_name(self.device, "device")
        fraction = self.validation_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real) or not (
                0 < fraction < 1):
            raise ValueError(
                f"validation_fraction must be a float in (0, 1), got {fraction!r}.")
        if self.subset_of_weights == "subnetwork":
            spec = self.subnetwork
            if spec is None:
                raise ValueError(
                    "subset_of_weights='subnetwork' needs subnetwork= (an int S or a list of "
                    "parameter names)."
                )
            count = isinstance(spec, numbers.Integral) and not isinstance(spec, bool) and spec > 0
            names = isinstance(spec, (list, tuple)) and len(spec) > 0 and all(
                isinstance(s, str) for s in spec)
            if not (count or names):
                raise ValueError(
                    f"subnetwork must be a positive int or a list of parameter names, got {spec!r}."
                )
            if self.hessian_structure not in ("auto", "full", "diag"):
                raise ValueError(
                    "subset_of_weights='subnetwork' supports hessian_structure 'full' or 'diag' "
                    f"only, got {self.hessian_structure!r}."
                )
        if self.hessian_structure == "kron" and self.prior_structure == "diag":
            raise ValueError(
                "prior_structure='diag' is not supported with hessian_structure='kron' (the "
                "Kronecker eigenbasis needs one prior per weight tensor); use 'scalar' or "
                "'layerwise'."
            )
        if self.hyperparameter_tuning == "online":
            if self.subset_of_weights not in ("auto", "all"):
                raise ValueError(
                    "hyperparameter_tuning='online' needs subset_of_weights='all' (online evidence "
                    f"training only works over all weights), got {self.subset_of_weights!r}."
                )
            if isinstance(self.net, FrozenEstimator):
                raise ValueError(
                    "hyperparameter_tuning='online' trains the network; it cannot be used with a "
                    "FrozenEstimator net."
                )

    def _validate_refine(self):
        if self.refine is None:
            return
        for name, value, allowed in (
                ("hessian_structure", self.hessian_structure, ("auto", "full", "diag")),
                ("curvature", self.curvature, ("ggn",)),
                ("pred_type", self.pred_type, ("glm", "nn"))):
            if value not in allowed:
                raise ValueError(
                    f"refine={self.refine!r} needs {name} in {list(allowed)} (the GLM's "
                    f"Gaussian, full or diagonal, with its exact Hessian), got {value!r}.")
        if self.hyperparameter_tuning == "cv" and "gaussian" in self._likelihood_kinds:
            # the held-out choice of σ with refinement is not implemented; scoring the
            # unrefined predictive instead drifts to the largest δ (the LA collapsed onto the
            # MAP), a prior under which the refined mean shrinks towards θ = 0, far from θ*
            raise ValueError(
                f"refine={self.refine!r} does not combine with hyperparameter_tuning='cv' in "
                f"{type(self).__name__}; use hyperparameter_tuning='evidence', 'online' "
                "(what 'auto' means) or None.")

    # ------------------------------------------------------------ the network
    def _prepare_net(self, n_features, n_outputs):
        """(uninitialized net copy or None, frozen fitted net or None, likelihood or None)."""
        net = self.net
        if net is None:
            # skorch's epoch table from verbose=2 on; verbose=1 shows a progress indication
            return (nets.default_net(n_features, n_outputs, self.hidden_layer_sizes,
                                     self.max_epochs, self.lr, self.batch_size,
                                     int(self.verbose >= 2), device=self.device,
                                     solver=self.solver),
                    None, None)
        from skorch import NeuralNet

        if isinstance(net, FrozenEstimator):
            inner = net.estimator
            if isinstance(inner, BaseLaplace):
                raise ValueError(
                    f"net=FrozenEstimator(...) needs a trained skorch net; got a "
                    f"{type(inner).__name__}. To reuse the net a fitted one trained, pass "
                    "FrozenEstimator(estimator.net_).")
            settings = nets.criterion_settings(inner) if isinstance(inner, NeuralNet) else []
            if settings:
                warnings.warn(
                    f"The frozen net's criterion settings {settings} are not part of the "
                    "LA's likelihood, which is that of the criterion's class; weigh classes "
                    "or rows with class_weight or sample_weight on the estimator.",
                    UserWarning)
            if not getattr(inner, "initialized_", False):
                raise ValueError(
                    "net=FrozenEstimator(...) needs an initialized, trained skorch net; got an "
                    f"uninitialized {type(inner).__name__}. Fit it first."
                )
            return None, inner, nets.likelihood_of(inner)
        if self.solver != "adam" and isinstance(net, NeuralNet):
            raise ValueError(
                f"solver={self.solver!r} applies to the default MLP (net=None); a skorch net "
                "trains with its own optimizer (set optimizer=torch.optim.LBFGS on the net).")
        if not isinstance(net, NeuralNet):
            raise ValueError(
                "net must be None, a skorch NeuralNet (NeuralNetClassifier, NeuralNetRegressor, "
                f"...) or sklearn.frozen.FrozenEstimator(trained_net); got {type(net).__name__}."
            )
        likelihood = nets.likelihood_of(net)
        settings = nets.criterion_settings(net)
        if settings:
            raise ValueError(
                f"The net's criterion settings {settings} would be ignored: sklaplace trains "
                "with its own loss (the likelihood of the criterion's class plus the prior) and "
                "fits the LA on that likelihood. Weigh classes or rows with class_weight or "
                "sample_weight on the estimator instead.")
        nets.check_no_weight_decay(net)
        nets.check_device(net)
        if str(torch.device(self.device)) != "cpu" and str(torch.device(self.device)) != str(
                torch.device(net.get_params().get("device") or "cpu")):
            raise ValueError(
                f"device={self.device!r} applies to the default MLP (net=None); the given "
                f"skorch net has device={net.get_params().get('device')!r}. Set the device on "
                "the skorch net instead.")
        net_copy = clone(net)
        for key in [k for k in vars(net_copy) if k.startswith("criterion__")]:
            delattr(net_copy, key)
        return net_copy, None, likelihood

    def _param_sizes(self, net, X, n_outputs):
        """Sizes of the trainable parameter tensors of the net to be trained.

        A user's net is initialized once (on a copy, with the global RNG restored)
        to check its output width against the task before any training.
        """
        self._all_linear = True  # the default MLP: nn.Linear layers only
        if self.net is None:
            sizes, d_in = [], X.shape[1]
            for h in (*self.hidden_layer_sizes, n_outputs):
                sizes += [h * d_in, h]
                d_in = h
            return sizes
        with seeded(None):  # torch's global generator, under the lock of threaded fits
            module = clone(net).initialize().module_
        self._check_outputs(output_width(module, X))
        self._all_linear = _all_linear(module, X)
        return tensor_sizes(module)

    # ------------------------------------------------------------ fit
    def _fit(self, X, y_model, likelihood_default, n_outputs, y_scale, sample_weight=None):
        """Train (or take) the net, fit the LA and tune; ``y_model`` is in model units.

        With ``hyperparameter_tuning="cv"`` the LA runs twice, as scikit-learn's
        ``*CV`` estimators with ``refit=True``: on ``1 − validation_fraction`` of
        the rows to choose δ (and σ) by held-out NLL, then on all rows with them;
        the training of the second pass continues the first's (one training).
        ``sample_weight`` (validated, or None) multiplies each row's log-likelihood
        in training, curvature, evidence and the held-out NLL (split with the rows).
        """
        self._check_params()
        for stale in ("validation_nll_", "evidence_history_", "refine_objective_init_",
                      "refine_objective_", "refine_n_iter_",  # of an earlier fit, other tuning
                      "n_tasks_", "_continual_rows"):  # or of earlier partial_fit calls
            self.__dict__.pop(stale, None)
        rng = check_seed("random_state", self.random_state)
        train_seed, self._prediction_seed = (int(s) for s in rng.randint(0, 2**31 - 1, size=2))
        net, frozen, likelihood = self._prepare_net(X.shape[1], n_outputs)
        self.hyperparameter_tuning_ = (self._default_tuning(len(X))
                                       if self.hyperparameter_tuning == "auto"
                                       else self.hyperparameter_tuning)
        if self.hyperparameter_tuning_ == "cv" and frozen is not None:
            warnings.warn(
                "hyperparameter_tuning='cv' with a FrozenEstimator net: the net was trained "
                "before fit, most likely on the rows held out here, so their NLL is in-sample "
                "and favours the largest prior precision. Use hyperparameter_tuning='evidence' "
                "(the default for frozen nets) or hold out rows the net never saw.",
                UserWarning)
        if continual.current_task(self) is not None:  # partial_fit: no held-out data
            self.hyperparameter_tuning_ = continual.resolve_tuning(self.hyperparameter_tuning)
        likelihood = likelihood or likelihood_default
        if likelihood not in self._likelihood_kinds:
            raise ValueError(
                f"The net's criterion gives a {likelihood} likelihood, which "
                f"{type(self).__name__} does not support."
            )
        self._likelihood = likelihoods.get(likelihood)
        sigma0 = self._initial_sigma(n_outputs)
        if frozen is not None:
            self._check_outputs(output_width(frozen.module_, X))
            sizes = None
        else:
            sizes = self._param_sizes(net, X, n_outputs)
        chosen = None
        if self.hyperparameter_tuning_ == "cv":
            fit_rows, held_out = validation_split(
                len(X), self.validation_fraction, int(rng.randint(0, 2**31 - 1)),
                labels=None if self._likelihood.has_noise else y_model)
            w_fit, w_val = ((None, None) if sample_weight is None
                            else (sample_weight[fit_rows], sample_weight[held_out]))
            self._train(net, frozen, X[fit_rows], y_model[fit_rows], sizes, sigma0, train_seed,
                        w_fit, what=f"MAP training on {len(fit_rows)} of {len(X)} rows "
                                    f"({len(held_out)} held out to tune δ)")
            self._fit_laplace(X[fit_rows], y_model[fit_rows], sigma0, y_scale,
                              validation=(X[held_out], y_model[held_out], w_val),
                              sample_weight=w_fit)
            chosen = self.prior_precision_, self._sigma_fit
            self._log(f"refit on all {len(X)} rows with the held-out choice, training "
                      "warm-started from the net of the held-out pass")
        # "cv": the refit's training starts at the net trained on the fit rows (the same
        # objective over more rows), so it is a short continuation, not a second training
        self._train(net, frozen, X, y_model, sizes, sigma0, train_seed, sample_weight,
                    init_module=None if chosen is None or frozen is not None
                    else self.net_.module_,
                    what=f"MAP training on all {len(X)} rows")
        self._fit_laplace(X, y_model, sigma0, y_scale, chosen=chosen, sample_weight=sample_weight)
        return self

    def _train(self, net, frozen, X, y_model, sizes, sigma0, seed, sample_weight=None,
               init_module=None, what="MAP training"):
        """``net_``: the frozen net, or a copy of ``net`` trained to the MAP on (X, y)
        (starting from the weights of ``init_module`` when given).

        ``verbose``: one line ``what`` with the epochs and the time, and the epochs'
        progress while it runs longer than a few seconds (``_laplace.progress``)."""
        if frozen is not None:
            self._log(f"{what}: none, the FrozenEstimator's net keeps its weights")
            # skorch leaves a net in train mode after fit; the LA reads it in inference mode
            # (dropout off, batch-norm statistics fixed), as skorch's own predict sets it
            frozen.module_.eval()
            self.net_ = frozen
            self.n_iter_, self.loss_curve_ = training_curve(frozen)
            return
        online = self.hyperparameter_tuning_ == "online"
        train = check_memory(self.memory).cache(nets.train_map)
        extra = {} if sample_weight is None else {"sample_weight": sample_weight}
        if init_module is not None:
            extra["init_module"] = init_module
        shown = progress.Progress(net.max_epochs, what, self._log) if self.verbose else None
        token = progress.show_epochs(shown)
        try:
            self.net_ = train(
                clone(net), X, y_model, likelihood=self._likelihood.name,
                default_dtype=str(torch.get_default_dtype()),  # in the memory cache's key
                temperature=self.temperature,
                sigma_noise=np.asarray(sigma0, dtype=float),
                prior_precision=self._training_prior(sizes), seed=seed,
                callbacks=self._online_callbacks(sizes, y_model, sample_weight) if online else (),
                tol=self.tol, n_iter_no_change=self.n_iter_no_change, **extra,
            )
        except pickle.PicklingError as error:
            if self.memory is None:
                raise
            raise ValueError(
                "memory= keys the MAP training on a hash of its arguments, and the net's "
                f"parameters cannot be pickled ({error.args[0]}). Use memory=None, or module "
                "parameters that pickle (no lambdas or local functions).") from error
        finally:
            seconds = progress.stop_epochs(token, shown)
        self._log(f"{what}: {len(self.net_.history)} epochs in {seconds:.2f} s")
        self.net_.module_.eval()  # inference mode from here on, as skorch's predict leaves it
        self.n_iter_, self.loss_curve_ = training_curve(self.net_)

    def _training_prior(self, sizes):
        arr = np.asarray(self.prior_precision, dtype=float)
        return float(arr) if arr.ndim == 0 else expand_prior(arr, sizes)

    def _online_callbacks(self, sizes, y_model, sample_weight=None):
        structure = self.hessian_structure
        if structure == "auto":  # the final LA takes the same (_resolve_subset)
            structure = self._kron_or_diag(all_weights_structure(
                self._all_linear, len(y_model), self._n_model_outputs, sum(sizes)), sizes)
        gaussian = self._likelihood.has_noise
        return [OnlineEvidence(
            self._likelihood.name, hessian_structure=structure, curvature=self.curvature,
            prior_structure=self.prior_structure, frequency=self.online_frequency,
            burn_in=self.online_burn_in, n_steps=self.online_steps, lr=self.online_lr,
            temperature=self.temperature, lowrank_rank=self.lowrank_rank,
            sigma_floor=1e-3 * float(weighted_spread(y_model, sample_weight)) if gaussian else 0.0,
            sample_weight=sample_weight,
        )]

    # ------------------------------------------------------------ the LA
    @property
    def _la_device(self):
        """The device of the trained net's parameters: where the LA runs."""
        return nets.module_device(self.net_.module_)

    def _la_module(self):
        """A float64 copy of the trained module on its own device: the LA runs there.

        Parameters that do not require gradients were not trained: they stay constants
        (not under the posterior, no prior), as in laplace-torch.
        """
        return copy.deepcopy(self.net_.module_).to(self._la_device, torch.float64).eval()

    def _resolve_subset(self, module, X, y, out_scale, n_out, weight=None):
        if continual.current_task(self) is not None:  # partial_fit: all weights
            return continual.resolve_subset(self, module, X, n_out)
        kind, structure = self.subset_of_weights, self.hessian_structure
        n_all = sum(tensor_sizes(module))
        fits = jacobian_bytes(X.shape[0], n_out, n_all) <= memory_budget(X.device)
        if kind == "all" and structure == "auto":
            structure = all_weights_structure(_all_linear(module, X), X.shape[0], n_out, n_all, fits)
        if kind == "auto":
            if structure == "full":
                kind = "all" if n_all <= AUTO_FULL_MAX_PARAMS and fits else "last_layer"
            elif structure == "auto":
                kind, structure = _auto_structure(module, X, n_out, n_all, fits)
            else:
                kind = "all"
        if kind == "all":
            subset = AllWeights(module)
        elif kind == "last_layer":
            try:
                subset = LastLayer(self._last_layer_module(), X)
            except ValueError:  # a head the last-layer LA cannot read: "auto" takes all weights
                if self.subset_of_weights != "auto" or self.hessian_structure != "auto":
                    raise
                kind, subset, structure = "all", AllWeights(module), "diag"
        else:
            subset = Subnetwork(module, self._subnetwork_indices(module, X, y, out_scale, weight))
        if structure == "auto":
            small = kind != "last_layer" or subset.n_params <= AUTO_LAST_LAYER_FULL_MAX
            structure = "full" if small else "kron"
        if self.hessian_structure == "auto":
            structure = self._kron_or_diag(structure, tensor_sizes(self.net_.module_))
        return subset, kind, structure

    def _last_layer_module(self):
        """The module the last-layer LA reads: a copy of a frozen net (the user's own, which
        the user may train on; the fitted LA keeps the weights it was fitted on, as the
        all-weights LA does on its float64 copy), the trained ``net_``'s module otherwise."""
        module = self.net_.module_
        return copy.deepcopy(module).eval() if isinstance(self.net, FrozenEstimator) else module

    def _kron_or_diag(self, structure, sizes):
        """An "auto" structure the settings support: the diagonal instead of kron under
        ``refine`` or a prior that varies within a weight tensor (``sizes``: the net's)."""
        if structure == "kron" and (self.refine is not None or not self._kron_holds_prior(sizes)):
            return "diag"
        return structure

    def _kron_holds_prior(self, sizes):
        """Whether the prior is one value per weight tensor, as Kronecker factors need
        (``sizes``: the net's tensor sizes, or the module)."""
        return self.prior_structure != "diag" and constant_per_tensor(self.prior_precision, sizes)

    def _subnetwork_indices(self, module, X, y, out_scale, weight=None):
        """Indices of the S weights of largest marginal variance under a diagonal LA."""
        spec = self.subnetwork
        if isinstance(spec, numbers.Integral) and not isinstance(spec, bool):
            everything = AllWeights(module)
            if not 0 < spec <= everything.n_params:
                raise ValueError(
                    f"subnetwork={spec} must be between 1 and the number of weights "
                    f"({everything.n_params})."
                )
            diag = compute_posterior("diag", everything, self._likelihood, X, y, out_scale,
                                     self.curvature, weight=weight)
            delta = subset_prior(self.prior_precision, everything)
            sigma = torch.as_tensor(self._initial_sigma(out_scale.numel()), dtype=torch.float64)
            var = diag.with_prior(delta, self._curvature_scale(sigma)).marginal_variance()
            return torch.argsort(var.cpu(), descending=True)[:spec].numpy()
        if isinstance(spec, (list, tuple)) and spec and all(isinstance(s, str) for s in spec):
            return Subnetwork.indices_from_names(module, list(spec))
        raise ValueError(f"subnetwork must be a positive int or a list of parameter names, got {spec!r}.")

    def _curvature_scale(self, sigma):
        return curvature_scale(self._likelihood.has_noise, self.curvature, self.temperature, sigma)

    def _fit_laplace(self, X, y_model, sigma0, y_scale, validation=None, chosen=None,
                     sample_weight=None):
        module = self._la_module()
        device = self._la_device
        Xt = torch.tensor(np.ascontiguousarray(X), dtype=torch.float64, device=device)
        yt = torch.as_tensor(np.ascontiguousarray(y_model), device=device)
        wt = None if sample_weight is None else torch.as_tensor(sample_weight,
                                                                dtype=torch.float64, device=device)
        # Rows in the evidence's normalizer: N, or Σ w (integer weights = duplicated rows).
        n_rows = len(Xt) if wt is None else float(wt.sum())
        likelihood = self._likelihood
        with torch.no_grad():
            n_out = module(Xt[:1]).reshape(1, -1).shape[1]
        self._check_outputs(n_out)
        sigma_init = torch.as_tensor(np.asarray(sigma0, dtype=float), dtype=torch.float64)
        vector_sigma = likelihood.has_noise and sigma_init.dim() > 0
        out_scale = (1.0 / sigma_init if vector_sigma
                     else torch.ones(n_out, dtype=torch.float64)).to(device)
        subset, kind, structure = self._resolve_subset(module, Xt, yt, out_scale, n_out, wt)
        if structure == "kron" and not self._kron_holds_prior(self.net_.module_):
            raise ValueError(
                "hessian_structure='kron' needs one prior precision per weight or bias tensor: "
                "use prior_structure 'scalar' or 'layerwise' and a prior_precision that is a "
                "float or has one value per parameter tensor, or another hessian_structure."
            )
        if structure in ("full", "lowrank"):
            self._check_time(structure, len(Xt), n_out, subset.n_params)
        rank = None
        if structure == "lowrank":
            rank = self.lowrank_rank or default_lowrank_rank(subset.n_params)
        self._subset = subset
        self.subset_of_weights_, self.hessian_structure_ = kind, structure
        self.n_params_ = int(subset.n_params)

        with torch.no_grad():
            f = subset.forward(Xt)
        if not torch.isfinite(f).all() or not torch.isfinite(subset.theta).all():
            raise ValueError(
                "The network's weights or outputs on the training data are not finite, so the "
                "curvature would be too; check the trained net (lr, feature scaling)."
            )
        build = functools.partial(_build_posterior, structure, subset, likelihood, Xt, yt,
                                  self.curvature, rank, weight=wt)
        theta = subset.theta.detach()
        self._log(f"Laplace approximation: {kind} weights ({subset.n_params}), {structure} "
                  f"{self.curvature.upper()} on {len(Xt)} rows ...")
        start = time.perf_counter()
        with progress_to(self._log if self.verbose else None):
            posterior = build(out_scale)
        self._log(f"curvature and decomposition done in {time.perf_counter() - start:.2f} s")
        evidence = Evidence.at_fit(posterior, theta, likelihood, f, yt, wt, self.temperature,
                                   self.curvature, rebuild=build if vector_sigma else None)
        # partial_fit: the earlier tasks' posterior is the prior (continual.py)
        evidence = continual.task_evidence(evidence, continual.current_task(self), n_rows)

        prior, sigma = self.prior_precision, sigma_init
        tuning_start = time.perf_counter()
        if chosen is not None:
            prior, sigma = chosen
        elif validation is not None:
            if vector_sigma:
                raise ValueError(
                    "hyperparameter_tuning='cv' tunes one sigma_noise for all outputs; give a "
                    "scalar sigma_noise.")
            if self.refine is not None:
                prior, sigma = self._tune_refined_on_held_out(
                    structure, likelihood, Xt, yt, wt, sigma_init, out_scale, n_out,
                    *validation)
            else:  # scores the predictive that will be used: the GP's with pred_type="gp"
                scored = (self._gp_curvature(subset, likelihood, Xt, yt, out_scale, wt)
                          if self.pred_type == "gp" else evidence.posterior)
                prior, sigma = self._tune_on_held_out(evidence, scored, subset, *validation,
                                                      y_model, sample_weight)
            sigma = sigma_init if sigma is None else sigma
        elif self.hyperparameter_tuning_ == "evidence":
            prior, sigma = self._tune(evidence, subset, sigma_init, y_model, sample_weight)
        elif self.hyperparameter_tuning_ == "online":
            prior, sigma = self._online_result(y_scale, n_rows)
            if not self.evidence_history_:
                warnings.warn(
                    "hyperparameter_tuning='online' made no update: training ran "
                    f"{len(self.net_.history)} epochs, fewer than online_burn_in + "
                    f"online_frequency = {self.online_burn_in} + {self.online_frequency}. The "
                    "prior (and σ) were tuned post hoc by the evidence instead; raise max_epochs "
                    "or lower online_frequency / online_burn_in.",
                    UserWarning,
                )
                prior, sigma = self._tune(evidence, subset, sigma_init, y_model, sample_weight)
            elif (kind, structure) != ("all", self._online_callback().hessian_structure):
                # The LA that predicts is not the one the updates tuned (a net not made of
                # nn.Linear layers beyond the full budget: the last layer, full): δ (and σ)
                # re-tuned on its evidence. On two BatchNorm regressors this gave test NLL
                # 5.44 / 1.48 against 5.47 / 1.52 with the online δ and 5.53 / 1.58 for the
                # diagonal LA over all weights the updates used (3 splits each).
                prior, sigma = self._tune(evidence, subset, sigma, y_model, sample_weight)
        arr = np.asarray(prior, dtype=float)
        self.prior_precision_ = float(arr) if arr.ndim == 0 else arr
        if chosen is None and self.hyperparameter_tuning_ is not None:
            how = "held-out NLL" if validation is not None else self.hyperparameter_tuning_
            self._log(f"tuning ({how}) in {time.perf_counter() - tuning_start:.2f} s")
        self._log(f"prior_precision_ = {np.array2string(arr, precision=4)}")
        delta = subset_prior(self.prior_precision_, subset)
        if vector_sigma:  # the curvature depends on a per-output σ: recompute it at the optimum
            evidence.posterior = evidence.posterior_for(sigma)
        self._evidence = evidence
        self._sigma_fit = sigma
        self._posterior = evidence.posterior.with_prior(delta, self._curvature_scale(sigma))
        if vector_sigma:  # GP and refinement: the per-output noise tuning chose
            out_scale = (1.0 / sigma).to(device)
        if self.pred_type == "gp":
            self._posterior = self._gp_posterior(subset, likelihood, Xt, yt, out_scale, wt,
                                                 delta, sigma)
        if self.refine is not None and validation is None:  # not on the "cv" choice pass
            with progress.stage(self._log, f"refinement ({self.refine})"):
                evidence, delta, sigma = self._refine(structure, likelihood, Xt, yt, wt, sigma,
                                                      vector_sigma, n_out, evidence.rebuild,
                                                      y_model, sample_weight)
        with torch.no_grad():
            log_ev = float(evidence(delta, sigma))
        self.log_evidence_ = log_ev + self._evidence_offset(y_scale, n_rows)
        self._set_sigma_attr(sigma, y_scale)

    def _gp_posterior(self, subset, likelihood, X, y, out_scale, weight, delta, sigma):
        """The functional Laplace (GLM paper §3.5): :meth:`_gp_curvature` with the prior."""
        return self._gp_curvature(subset, likelihood, X, y, out_scale, weight).with_prior(
            delta, self._curvature_scale(sigma))

    def _gp_curvature(self, subset, likelihood, X, y, out_scale, weight):
        """The GP with kernel J(x) δ⁻¹ J(x')ᵀ conditioned on M training rows, each standing
        for N/M rows (GLM paper §3.5), as the posterior structure of its curvature.

        Its predictive is K** − K*M S (I + Sᵀ K_MM S)⁻¹ Sᵀ K_M* with S Sᵀ = Λ — by
        Woodbury the full GLM predictive of the curvature of those M rows weighted by
        N/M, computed through the M·C × M·C kernel when M·C < P (determinant lemma).
        With M = N it equals the weight-space full GLM predictive exactly.
        """
        n = len(X)
        size = n if self.gp_subset_size is None else min(int(self.gp_subset_size), n)
        rows = np.sort(np.random.RandomState(self._prediction_seed).choice(n, size, replace=False))
        w = torch.ones(n, dtype=torch.float64, device=X.device) if weight is None else weight
        scaled = w[rows] * (w.sum() / w[rows].sum())  # the subset carries all the data's weight
        self._log(f"GP predictive on {size} of {n} rows")
        return compute_posterior("full", subset, likelihood, X[rows], y[rows], out_scale,
                                 self.curvature, weight=scaled)

    def _refine(self, structure, likelihood, X, y, weight, sigma, vector_sigma, n_out, rebuild,
                y_model, sample_weight):
        """GLM posterior refinement (``refine``, see :mod:`sklaplace._laplace.refine`) at the
        chosen prior and noise, or with ``"evidence"`` tuning at the prior and noise tuned
        at the refined mode (:mod:`sklaplace._laplace.refined_evidence`); replaces the
        prediction subset, posterior, evidence and hyperparameters. Returns (evidence,
        δ of the Laplace weights, σ)."""
        from ._laplace.refined_evidence import refine_and_tune

        base = self._subset
        prior, sigma, self._subset, self._posterior, info, evidence = refine_and_tune(
            self, base, structure, likelihood, X, y, weight, n_out, self.prior_precision_,
            sigma, vector_sigma, rebuild, y_model, sample_weight,
            tune=self.hyperparameter_tuning_ == "evidence")
        arr = np.asarray(prior, dtype=float)
        self.prior_precision_ = float(arr) if arr.ndim == 0 else arr
        self._evidence, self._sigma_fit = evidence, sigma
        self.refine_objective_init_ = info["objective_init"]
        self.refine_objective_ = info["objective"]
        self.refine_n_iter_ = info["n_iter"]
        return evidence, subset_prior(self.prior_precision_, base), sigma

    def _check_time(self, structure, n_rows, n_out, n_params):
        """Warn before a full / low-rank curvature estimated beyond the time budget."""
        rate = ASSUMED_FLOPS if self._la_device.type == "cpu" else ASSUMED_CUDA_FLOPS
        seconds = full_structure_seconds(n_rows, n_out, n_params, rate)
        self._log(f"{structure} curvature of {n_params} weights on {n_rows} rows × {n_out} "
                  f"outputs: estimated {seconds:.3g} s")
        if seconds > TIME_BUDGET_SECONDS:
            warnings.warn(
                f"The {structure} curvature of {n_params} weights on {n_rows} rows × {n_out} "
                f"outputs is estimated at {seconds:.0f} s (beyond the {TIME_BUDGET_SECONDS:.0f} s "
                f"budget at an assumed {rate:.0e} float64 flop/s). Cheaper options: "
                "hessian_structure='kron' or 'diag', or subset_of_weights='last_layer'.",
                UserWarning,
            )

    def _log(self, message):
        if self.verbose:
            print(f"[{type(self).__name__}] {message}", flush=True)

    def _tune(self, evidence, subset, sigma, y_model, sample_weight=None):
        """Bounded maximisation of the evidence; returns (whole-net prior, σ tensor)."""
        groups = PriorGroups(self.prior_structure, subset)
        log0 = groups.log_start(subset_prior(self.prior_precision, subset)).numpy()
        log_sigma0 = floor = ceiling = None
        if evidence.gaussian:
            log_sigma0 = np.log(sigma.cpu().numpy())
            # the scale of σ: the targets' spread, or the MAP's residuals where they are larger
            # (a task of constant targets after another, in partial_fit)
            spread = weighted_spread(np.asarray(y_model).reshape(len(y_model), -1),
                                     sample_weight, axis=0)
            rms = np.sqrt(evidence.sse.cpu().numpy() / evidence.n_rows)
            spread = np.maximum(np.maximum(spread, rms), 1e-12)
            floor, ceiling = 1e-3 * spread, 10 * spread
            if sigma.dim() == 0:
                floor, ceiling = floor.mean(), ceiling.max()
        log_delta, log_sigma = maximize_evidence(evidence, log0, groups.expand, log_sigma0, floor,
                                                 sigma_ceiling=ceiling)
        if evidence.gaussian:
            sigma = torch.as_tensor(np.exp(log_sigma), dtype=torch.float64)
        return groups.to_whole(np.exp(log_delta), self.prior_precision), sigma

    def _tune_on_held_out(self, evidence, posterior, subset, X_val, y_val, w_val, y_model,
                          w_fit=None):
        """Scalar δ (and σ) by held-out NLL over the grid (one-SE rule, broad side) of the
        predictive of
        ``posterior`` (its curvature, without prior); (δ, σ tensor).

        ``pred_type="nn"`` scores the sampled net over the whole decades of the grid,
        the same draws z for every δ (common random numbers). With row weights the
        held-out NLL and its standard error are those of the rows duplicated by their
        weights (weighted means, Σ w rows)."""
        Xv = torch.as_tensor(np.ascontiguousarray(X_val), dtype=torch.float64,
                             device=self._la_device)
        yv = torch.as_tensor(np.ascontiguousarray(y_val), device=self._la_device)
        sampled = self.pred_type == "nn"
        deltas = 10.0 ** (LOG10_PRIOR_GRID[::4] if sampled else LOG10_PRIOR_GRID)
        with torch.no_grad():
            if not sampled:
                f, J = subset.jacobians(Xv)
                variance = variance_path(posterior, J)
            if not evidence.gaussian:
                scale = float(evidence.scale(None))
                if sampled:
                    losses = [self._held_out_nll_of_samples(
                        self._draw_outputs(_at_prior(posterior, d, scale), subset, Xv), yv)
                        for d in deltas]
                else:
                    losses = [self._held_out_nll(f, cov, yv)
                              for cov in grid_variances(variance, deltas, scale, J)]
                losses = np.array(losses)
                chosen = one_standard_error_choice(losses, w_val)
                warn_at_grid_bound(chosen, deltas)
                self.validation_nll_ = float(np.average(losses[chosen], weights=w_val))
                return float(deltas[chosen]), None
            # Gaussian: Σ(δ, σ) = c·(H + ρI)⁻¹ with c = 1/s(σ) and ρ = c·δ, so one
            # variance (one set of draws ε₁ ~ N(0, (H + ρI)⁻¹)) per ρ serves every σ,
            # searched in 1-D per ρ.
            floor = 1e-3 * max(float(weighted_spread(y_model, w_fit)), 1e-12)
            n_out = yv.reshape(len(yv), -1).shape[1]
            w_cells = None if w_val is None else np.repeat(w_val, n_out)

            def c_of(sigma):
                return 1.0 / float(evidence.scale(torch.tensor(sigma, dtype=torch.float64)))

            fits = []
            covs = None if sampled else iter(grid_variances(variance, deltas, 1.0, J))
            for rho in deltas:
                if sampled:
                    eps = _at_prior(posterior, rho, 1.0).sample(self.n_samples,
                                                                self._generator())
                    moments = functools.partial(self._sampled_moments, subset, Xv, eps, c_of)
                else:
                    f_np = f.cpu().numpy().ravel()
                    v = torch.diagonal(next(covs), dim1=1, dim2=2).clamp_min(0)
                    v = v.cpu().numpy().ravel()
                    moments = functools.partial(_scaled_moments, f_np, v, c_of)
                fits.append(self._held_out_gaussian(moments, yv, floor, w_cells))
        chosen = one_standard_error_choice([losses for losses, _ in fits], w_cells)
        warn_at_grid_bound(chosen, deltas, name="prior_precision / s(sigma_noise)")
        losses, sigma = fits[chosen]
        self.validation_nll_ = float(np.average(losses, weights=w_cells))
        sigma_t = torch.tensor(sigma, dtype=torch.float64)
        return float(deltas[chosen] * evidence.scale(sigma_t)), sigma_t

    def _draw_outputs(self, posterior, subset, Xv):
        """The net at θ* + ε on ``Xv`` for the n_samples draws ε ~ N(0, Σ) of the prediction
        seed (the draws ``predict`` makes with ``pred_type="nn"``): (S, n, C)."""
        eps = posterior.sample(self.n_samples, self._generator())
        return torch.stack([subset.forward(Xv, subset.theta + e) for e in eps])

    def _sampled_moments(self, subset, Xv, eps, c_of, sigma):
        """Mean and variance (flattened, numpy) of the net at θ* + √c(σ)·ε₁ over the draws."""
        root = np.sqrt(c_of(sigma))
        samples = torch.stack([subset.forward(Xv, subset.theta + root * e) for e in eps])
        var = samples.var(0, correction=int(len(eps) > 1))
        return samples.mean(0).cpu().numpy().ravel(), var.cpu().numpy().ravel()

    def _tune_refined_on_held_out(self, structure, likelihood, X, y, weight, sigma, out_scale,
                                  n_out, X_val, y_val, w_val):
        """Scalar δ by the held-out NLL of the *refined* predictive (the sampled net's with
        ``pred_type="nn"``; one-SE rule) over the whole decades of the grid, one refinement
        each; (δ, None). Scoring the unrefined
        predictive would pick the width of another posterior: with the MAP-ward one-SE
        rule often δ = 1e4, under which the refined mean shrinks towards θ = 0."""
        from ._laplace.refine import refine_posterior

        Xv = torch.as_tensor(np.ascontiguousarray(X_val), dtype=torch.float64,
                             device=self._la_device)
        yv = torch.as_tensor(np.ascontiguousarray(y_val), device=self._la_device)
        deltas = 10.0 ** LOG10_PRIOR_GRID[::4]
        scale = float(self._curvature_scale(sigma))
        losses = []
        shown = progress.Progress(len(deltas), "held-out tuning of the refined predictive",
                                  self._log) if self.verbose else None
        for value in deltas:
            if shown is not None:
                shown.update(unit="decade of δ")
            refined, posterior, _ = refine_posterior(
                self.refine, structure, self._subset, likelihood, X, y, weight,
                subset_prior(float(value), self._subset), scale, out_scale, n_out,
                random_state=self._prediction_seed)
            with torch.no_grad():
                if self.pred_type == "nn":  # the net at draws around the refined mean
                    losses.append(self._held_out_nll_of_samples(
                        self._draw_outputs(posterior, refined, Xv), yv))
                else:
                    losses.append(self._held_out_nll(*refined.moments(Xv, posterior), yv))
        if shown is not None:
            shown.close()
        chosen = one_standard_error_choice(losses, w_val)
        warn_at_grid_bound(chosen, deltas)
        self.validation_nll_ = float(np.average(losses[chosen], weights=w_val))
        self._log(f"refined held-out NLL per decade of δ: {np.round(np.mean(losses, 1), 4)}")
        return float(deltas[chosen]), None

    def _held_out_gaussian(self, moments, y, floor, weight=None):
        """Per-cell held-out Gaussian NLL at the best σ (bounded 1-D search); ``moments(σ)``
        gives the predictive mean and epistemic variance (flattened); (losses (n·C,), σ)."""
        y = y.cpu().numpy().ravel()

        def losses(log_sigma):
            sigma = np.exp(log_sigma)
            mean, v = moments(sigma)
            var = v + sigma**2
            return 0.5 * (np.log(2 * np.pi * var) + (y - mean) ** 2 / var)

        r2 = (y - moments(floor)[0]) ** 2
        upper = np.log(10 * max(np.sqrt(np.average(r2, weights=weight)), floor))
        total = (lambda t: losses(t).sum()) if weight is None else (lambda t: losses(t) @ weight)
        result = minimize_scalar(total, bounds=(np.log(floor), upper),
                                 method="bounded", options={"xatol": 1e-6})
        return losses(result.x), float(np.exp(result.x))

    def _online_callback(self):
        return next(cb for _, cb in self.net_.callbacks_ if isinstance(cb, OnlineEvidence))

    def _online_result(self, y_scale, n_rows):
        """Hyperparameters of the best online update (whole-net form) and the history."""
        callback = self._online_callback()
        offset = self._evidence_offset(y_scale, n_rows)
        self.evidence_history_ = [
            {**h, "log_evidence": h["log_evidence"] + offset,
             "sigma_noise": None if h["sigma_noise"] is None else self._sigma_original(
                 torch.as_tensor(h["sigma_noise"]))}
            for h in callback.history_
        ]
        crit = self.net_.criterion_
        delta = torch.as_tensor(crit.prior_precision, dtype=torch.float64).cpu()
        best = [h for h in callback.history_ if h["epoch"] == callback.best_epoch_]
        if delta.dim() == 0:
            prior = float(delta)
        elif self.prior_structure == "layerwise" and best:
            prior = best[0]["prior_precision"]
        else:
            prior = delta.numpy()
        return prior, torch.as_tensor(crit.sigma_noise, dtype=torch.float64).cpu()

    def _default_tuning(self, n_rows):
        """What ``hyperparameter_tuning="auto"`` means (see the estimators' docstrings)."""
        raise NotImplementedError

    # hooks for the targets (the regressor overrides them)
    def _initial_sigma(self, n_outputs):
        return 1.0

    def _check_outputs(self, n_out):
        pass

    def _evidence_offset(self, y_scale, n_rows):
        return 0.0

    def _set_sigma_attr(self, sigma, y_scale):
        pass

    # ------------------------------------------------------------ evidence
    def _log_evidence_for_selection(self):
        """The log evidence of the fit as a model-selection score (``evidence_scorer``).

        With δ chosen by the evidence (or online, or given) it is ``log_evidence_``.
        With ``"cv"`` it is the evidence at its own optimum δ: at the held-out choice
        the ½δ‖θ‖² term of a large δ would score the prior, not the model (hidden width
        (2,) beat (50,) by 21,000 nats at δ = 1e4).
        """
        if self.hyperparameter_tuning_ != "cv":
            return float(self.log_evidence_)
        if self._evidence.gaussian:
            raise ValueError(
                "evidence_scorer scores the evidence, and this regressor's prior_precision_ "
                "and sigma_noise_ were chosen by held-out NLL (hyperparameter_tuning='cv'): "
                "use hyperparameter_tuning='evidence' (or 'online') in the searched "
                "estimator, or a held-out scorer such as 'neg_mean_squared_error'.")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            prior, _ = self._tune(self._evidence, self._subset, None, None)
        return self._log_evidence(prior, None)

    def _log_evidence(self, prior_precision, sigma):
        check_is_fitted(self)
        prior = self.prior_precision_ if prior_precision is None else prior_precision
        positive_array("prior_precision", prior)
        delta = subset_prior(prior, self._subset)
        # A per-parameter prior fills caches of the posterior: one thread at a time.
        with _EVIDENCE_LOCK, torch.no_grad():
            return float(self._evidence(delta, sigma))

    def _with_prior(self, prior_precision):
        """A shallow copy of the fitted estimator that predicts at another prior precision.

        The copy shares the net, the subset and the curvature; only its prediction
        posterior (``with_prior``) and ``prior_precision_`` differ, σ stays the fitted one,
        and ``self`` is not changed. Refused under ``refine``, whose refined mean and
        covariance depend on δ (a refinement per value).
        """
        check_is_fitted(self)
        if self.refine is not None:
            raise ValueError(
                f"refine={self.refine!r}: the refined posterior depends on the prior precision, "
                "so predictions at another value need a refit; use refine=None.")
        positive_array("prior_precision", prior_precision)
        new = copy.copy(self)
        delta = subset_prior(prior_precision, self._subset)
        new._posterior = self._posterior.with_prior(delta, self._curvature_scale(self._sigma_fit))
        arr = np.asarray(prior_precision, dtype=float)
        new.prior_precision_ = float(arr) if arr.ndim == 0 else arr
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
        from .posterior import WeightPosterior

        return WeightPosterior(self)

    # ------------------------------------------------------------ prediction
    def _X_tensor(self, X):
        X = validate_predict_X(self, X)
        device = self._la_device
        if X.dtype == np.float64 and X.flags.c_contiguous and X.flags.writeable:
            # shared, not copied, on the CPU: prediction never writes into X
            return torch.from_numpy(X).to(device)
        return torch.tensor(np.ascontiguousarray(X), dtype=torch.float64, device=device)

    def _row_chunks(self, n_rows, moments=False, extra_row_bytes=0):
        """Row slices whose buffers (the subset's and posterior's per row, plus
        ``extra_row_bytes``, e.g. the link's) fit the prediction chunk of the device."""
        per_row = self._subset.row_bytes(self._n_model_outputs, moments, self._posterior)
        size = max(1, self._chunk_bytes() // (per_row + extra_row_bytes))
        return [slice(s, min(s + size, n_rows)) for s in range(0, n_rows, size)]

    def _chunk_bytes(self):
        """The prediction chunk: cache-sized on the CPU, larger on CUDA (within its budget)."""
        device = self._la_device
        return PREDICT_CHUNK_BYTES if device.type == "cpu" else min(
            CUDA_PREDICT_CHUNK_BYTES, memory_budget(device) // 4)

    def _glm_moments(self, Xt):
        """MAP outputs (n, C) and functional covariance J Σ Jᵀ (n, C, C)."""
        return self._per_chunk(Xt, lambda f, cov: (f, cov))

    def _per_chunk(self, Xt, fn, extra_row_bytes=0):
        """``fn(f, cov)`` of the GLM moments of each row chunk, concatenated by rows.

        Jacobians, functional covariance and ``fn`` (a link, the variances) run on one
        chunk at a time: only ``fn``'s results (arrays, or tuples of them) exist for all
        rows. ``extra_row_bytes``: what ``fn`` allocates per row, in the chunk's budget.
        """
        out = None
        with torch.no_grad():
            for sl in self._row_chunks(len(Xt), True, extra_row_bytes):
                part = fn(*self._subset.moments(Xt[sl], self._posterior))
                out = fill_rows(out, part, sl, len(Xt))
        return out

    def _by_rows(self, fn, arrays, row_bytes):
        """``fn(*arrays)`` over blocks of rows of ``arrays`` whose ``row_bytes`` per row fit
        the CPU's prediction chunk (links run in numpy), concatenated by rows."""
        n, size = len(arrays[0]), max(1, PREDICT_CHUNK_BYTES // row_bytes)
        if n <= size:
            return fn(*arrays)
        out = None
        for start in range(0, n, size):
            rows = slice(start, min(start + size, n))
            out = fill_rows(out, fn(*(a[rows] for a in arrays)), rows, n)
        return out

    def _nn_per_chunk(self, Xt, fn, extra_row_bytes=0):
        """``fn(samples)`` of the network outputs (S, rows, C) at ``n_samples`` weight
        samples, per row chunk, concatenated by rows; the weight samples are drawn once
        (the prediction seed), so the result does not depend on the chunks."""
        with torch.no_grad():
            eps = self._posterior.sample(self.n_samples, self._generator())
        # per row: the outputs at every sample and what fn makes of them (the network's
        # activations exist for one sample at a time)
        per_row = 8 * self.n_samples * self._n_model_outputs + extra_row_bytes
        size, n, out = max(1, self._chunk_bytes() // per_row), len(Xt), None
        for start in range(0, n, size):
            rows = slice(start, min(start + size, n))
            out = fill_rows(out, fn(self._nn_samples(Xt[rows], self.n_samples, None, eps)),
                            rows, n)
        return out

    def _generator(self, seed=None):
        gen = torch.Generator()
        gen.manual_seed(self._prediction_seed if seed is None else seed)
        return gen

    def _nn_samples(self, Xt, n_samples, generator, eps=None):
        """Network outputs at weight samples θ* + ε, ε ~ N(0, Σ) (or the given ``eps``):
        (S, n, C)."""
        with torch.no_grad():
            if eps is None:
                eps = self._posterior.sample(n_samples, generator)
            return torch.stack([self._subset.forward(Xt, self._subset.theta + e) for e in eps])

    def _function_samples(self, X, n_samples, random_state):
        """Functions from the posterior: GLM f + J(θ − θ*), or the net at θ."""
        check_is_fitted(self)
        check_positive("n_samples", n_samples, integer=True)
        Xt = self._X_tensor(X)
        gen = self._generator(check_seed("random_state", random_state).randint(0, 2**31 - 1))
        if self.pred_type == "nn":
            return self._nn_samples(Xt, n_samples, gen)
        with torch.no_grad():
            eps = self._posterior.sample(n_samples, gen)
            out = []
            for sl in self._row_chunks(len(Xt)):
                f, J = self._subset.jacobians(Xt[sl])
                out.append(f[None] + torch.einsum("ncp,sp->snc", J, eps))
            return torch.cat(out, dim=1)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags

    # pickles: the fitted tensors in a torch blob, mapped to the CPU where CUDA is absent
    def __getstate__(self):
        return workflow.pack_state(super().__getstate__(), self.get_params(deep=False))

    def __setstate__(self, state):
        super().__setstate__(workflow.unpack_state(state, type(self).__name__))
