"""The parameter rules of LaplaceClassifier and LaplaceRegressor, and the data checks.

Owns every rule on the estimators' parameters: ``PARAMETER_CONSTRAINTS`` (shared),
``CLASSIFIER_CONSTRAINTS``, ``REGRESSOR_CONSTRAINTS`` (scikit-learn's
``_parameter_constraints``: ``_fit_context`` checks them first and raises on the first
violation); :func:`check_params`, every other rule that needs no data (array values,
the device, the net, combinations, ``partial_fit``'s), all checked, then one
``ValueError``; :func:`partial_fit_available`, where ``partial_fit`` exists. And the
value and data checks the estimators share (``check_positive``, ``positive_array``,
``check_seed``, ``validate_numeric``, ``validate_predict_X``, ``check_fit_weight``,
``without_zero_weights``). Rules that need the data or the trained net stay there.
"""

import numbers
import warnings
from numbers import Integral, Real

import numpy as np
import torch
from skorch import NeuralNet
from sklearn.frozen import FrozenEstimator
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import check_array, check_non_negative, validate_data

from .._laplace import nets
from ._averaging import partial_fit_reasons, problems as averaging_problems
from ._selection import size_problems

#: The link approximations of the classifier's GLM predictive (``link_approx``).
LINKS = ("probit", "bridge", "mc")


def _at_least(low):
    return [Interval(Integral, low, None, closed="left")]


_POSITIVE = [Interval(Real, 0, None, closed="neither")]
_NON_NEGATIVE = Interval(Real, 0, None, closed="left")

#: scikit-learn's parameter validation (``_fit_context`` runs it on ``fit``); the
#: cross-parameter rules and the array-valued parameters are in ``check_params``.
PARAMETER_CONSTRAINTS = {
    "net": "no_validation",  # None, a skorch net or FrozenEstimator: check_params
    "hidden_layer_sizes": "no_validation",  # "auto" or tuple(s) of ints: check_params
    "model_averaging": ["boolean"],
    "max_epochs": _at_least(1),
    "lr": _POSITIVE,
    "batch_size": _at_least(1) + [StrOptions({"auto"})],
    "tol": [_NON_NEGATIVE, None],
    "n_iter_no_change": _at_least(1),
    "solver": [StrOptions({"adam", "lbfgs"})],
    "prior_precision": "no_validation",  # a positive float or 1-D array: positive_array
    "prior_structure": [StrOptions({"scalar", "layerwise", "diag"})],
    "hyperparameter_tuning": [StrOptions({"auto", "evidence", "online", "cv"}), None],
    "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
    "subset_of_weights": [StrOptions({"auto", "all", "last_layer", "subnetwork"})],
    "hessian_structure": [StrOptions({"auto", "full", "diag", "kron", "lowrank"})],
    "subnetwork": "no_validation",  # with subset_of_weights: check_params
    "lowrank_rank": _at_least(1) + [None],
    "curvature": [StrOptions({"ggn", "ef"})],
    "pred_type": [StrOptions({"glm", "nn", "gp"})],
    "gp_subset_size": _at_least(1) + [None],
    "refine": [StrOptions({"laplace", "vi"}), None],
    "n_samples": _at_least(1),
    "extrapolation_variance": [StrOptions({"auto"}), _NON_NEGATIVE, None],
    "temperature": _POSITIVE,
    "online_frequency": _at_least(1) + [StrOptions({"converged"})], "online_burn_in": _at_least(0),
    "online_steps": _at_least(1) + [None],
    "online_lr": _POSITIVE, "online_curvature": [StrOptions({"every", "doubling"})],
    "device": "no_validation",  # a torch device that exists here: check_params
    "memory": [None, str, HasMethods(["cache"])],
    "random_state": ["random_state"],
    "verbose": _at_least(0),
}

CLASSIFIER_CONSTRAINTS = {
    **PARAMETER_CONSTRAINTS,
    "link_approx": [StrOptions(set(LINKS))],
    "class_weight": [dict, StrOptions({"balanced"}), None],
}

REGRESSOR_CONSTRAINTS = {
    **PARAMETER_CONSTRAINTS,
    "sigma_noise": "no_validation",  # a positive float or 1-D array: check_params
    "noise": [StrOptions({"homoscedastic", "heteroscedastic"})],  # its rules: _regressor_noise
    "normalize_y": ["boolean"],
}

# scikit-learn's Interval(Integral) takes bools (True == 1): not a count here
_COUNTS = tuple(name for name, rule in {**CLASSIFIER_CONSTRAINTS, **REGRESSOR_CONSTRAINTS}.items()
                if not isinstance(rule, str) and any(
                    isinstance(c, Interval) and c.type is Integral for c in rule))


# ---------------------------------------------------------------- values and data
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


def check_fit_weight(sample_weight, X):
    """``sample_weight`` (a scalar or one finite, non-negative weight per row) as float64 with
    a positive sum; None stays None. Public checks: scikit-learn's private ones change."""
    if sample_weight is None:
        return None
    if isinstance(sample_weight, numbers.Number):
        sample_weight = np.full(X.shape[0], sample_weight, dtype=np.float64)
    sample_weight = check_array(sample_weight, ensure_2d=False, dtype=np.float64,
                                input_name="sample_weight")
    if sample_weight.shape != (X.shape[0],):
        raise ValueError(f"sample_weight has shape {sample_weight.shape}, not ({X.shape[0]},).")
    check_non_negative(sample_weight, "`sample_weight`")
    if not sample_weight.sum() > 0:
        raise ValueError("sample_weight must hold a non-zero weight (its sum must be positive).")
    return sample_weight


def without_zero_weights(X, y, sample_weight):
    """The rows of positive weight: a zero weight is a row that is not there (its target
    may be a sentinel such as 1e20, which would still overflow training's float32 loss)."""
    if sample_weight is None or np.all(sample_weight > 0):
        return X, y, sample_weight
    keep = sample_weight > 0
    return X[keep], y[keep], sample_weight[keep]


# ---------------------------------------------------------------- the parameter rules
def check_params(estimator, *, continual=False, n_outputs=None):
    """Check every rule of :func:`parameter_problems` on ``estimator``; one ValueError.

    At the start of ``fit`` (after ``_fit_context``'s constraints) and of each
    ``partial_fit`` call (``continual=True``); ``n_outputs``: y's outputs, to check a
    regressor's ``sigma_noise`` against them too.
    """
    problems = parameter_problems(
        estimator.get_params(deep=False), type(estimator).__name__,
        estimator._likelihood_kinds, continual=continual, n_outputs=n_outputs)
    raise_problems(type(estimator).__name__, problems)


def raise_problems(name, problems):
    """Raise one ValueError for ``problems`` (messages): the message itself for one, else
    ``"<name> got <n> invalid parameter settings:"`` and a bulleted line per problem."""
    if problems:
        raise ValueError(problems[0] if len(problems) == 1 else (
            f"{name} got {len(problems)} invalid parameter settings:\n"
            + "\n".join(f"- {p}" for p in problems)))


def parameter_problems(params, name, likelihood_kinds, *, continual=False, n_outputs=None):
    """The messages of all the rules ``params`` (``get_params(deep=False)`` of the
    estimator class ``name``, whose likelihoods are ``likelihood_kinds``) break; [] if none.

    Values beyond the constraints' reach (counts given as bools, ``hidden_layer_sizes``,
    ``prior_precision``, ``device``, ``sigma_noise``), the combinations (``refine``,
    ``subnetwork``, ``"kron"`` with a diagonal prior, ``"online"``, ``"cv"`` with a vector
    σ), the net (type, frozen and initialized, criterion, optimizer, device, solver) and,
    with ``continual``, ``partial_fit``'s. Raises nothing; may warn (the criterion
    settings of a frozen net, which its LA ignores).
    """
    p = params
    problems = _refine_problems(p, name, likelihood_kinds)
    problems += [f"{key} must be an int, got {p[key]!r}." for key in _COUNTS
                 if isinstance(p.get(key), bool)]
    problems += size_problems(p["hidden_layer_sizes"]) + averaging_problems(p, continual)
    problems += _failures((positive_array, "prior_precision", p["prior_precision"]),
                          (nets.check_device_name, p["device"], "device"))
    problems += _combination_problems(p)
    problems += _net_problems(p, name, likelihood_kinds)
    if "sigma_noise" in p:
        problems += _sigma_problems(p, continual, n_outputs)
    if continual and _is(p.get("class_weight"), "balanced"):
        problems.append(
            "class_weight='balanced' is not supported for partial_fit (the class counts "
            "of tasks to come are unknown); pass a dict, or sample_weight.")
    return problems


def _is(value, *options):
    """Whether ``value`` is one of the strings ``options`` (safe for any value)."""
    return isinstance(value, str) and value in options


def _failures(*checks):
    """The ValueError messages of the calls ``(function, *args)`` that raise one."""
    messages = []
    for function, *args in checks:
        try:
            function(*args)
        except ValueError as error:
            messages.append(str(error))
    return messages


def _refine_problems(p, name, likelihood_kinds):
    if p["refine"] is None:
        return []
    problems = [
        f"refine={p['refine']!r} needs {key} in {list(allowed)} (the GLM's Gaussian, full or "
        f"diagonal, with its exact Hessian), got {p[key]!r}."
        for key, allowed in (("hessian_structure", ("auto", "full", "diag")),
                             ("curvature", ("ggn",)), ("pred_type", ("glm", "nn")))
        if not _is(p[key], *allowed)]
    if _is(p["hyperparameter_tuning"], "cv") and "gaussian" in likelihood_kinds:
        # the held-out choice of σ with refinement is not implemented; scoring the
        # unrefined predictive instead drifts to the largest δ (the LA collapsed onto the
        # MAP), a prior under which the refined mean shrinks towards θ = 0, far from θ*
        problems.append(
            f"refine={p['refine']!r} does not combine with hyperparameter_tuning='cv' in "
            f"{name}; use hyperparameter_tuning='evidence', 'online' (what 'auto' means) "
            "or None.")
    return problems


def _combination_problems(p):
    problems = []
    if isinstance(p.get("extrapolation_variance"), Real) and p["extrapolation_variance"] > 0 \
            and _is(p["pred_type"], "nn"):  # (the term is not a weight)
        problems.append("extrapolation_variance > 0 needs pred_type 'glm' or 'gp'.")
    if _is(p["subset_of_weights"], "subnetwork"):
        spec = p["subnetwork"]
        count = isinstance(spec, numbers.Integral) and not isinstance(spec, bool) and spec > 0
        names = isinstance(spec, (list, tuple)) and len(spec) > 0 and all(
            isinstance(s, str) for s in spec)
        if spec is None:
            problems.append(
                "subset_of_weights='subnetwork' needs subnetwork= (an int S or a list of "
                "parameter names).")
        elif not (count or names):
            problems.append(
                f"subnetwork must be a positive int or a list of parameter names, got {spec!r}.")
        if not _is(p["hessian_structure"], "auto", "full", "diag"):
            problems.append(
                "subset_of_weights='subnetwork' supports hessian_structure 'full' or 'diag' "
                f"only, got {p['hessian_structure']!r}.")
    if _is(p["hessian_structure"], "kron") and _is(p["prior_structure"], "diag"):
        problems.append(
            "prior_structure='diag' is not supported with hessian_structure='kron' (the "
            "Kronecker eigenbasis needs one prior per weight tensor); use 'scalar' or "
            "'layerwise'.")
    if _is(p["hyperparameter_tuning"], "online"):
        if not _is(p["subset_of_weights"], "auto", "all"):
            problems.append(
                "hyperparameter_tuning='online' needs subset_of_weights='all' (online evidence "
                f"training only works over all weights), got {p['subset_of_weights']!r}.")
        if isinstance(p["net"], FrozenEstimator):
            problems.append(
                "hyperparameter_tuning='online' trains the network; it cannot be used with a "
                "FrozenEstimator net.")
    return problems


def _net_problems(p, name, likelihood_kinds):
    """The rules on ``net`` (``_prepare_net`` builds it after): a skorch net to train, or
    a FrozenEstimator of a trained one, whose criterion is a likelihood of the estimator."""
    net = p["net"]
    if net is None:
        return []
    if isinstance(net, FrozenEstimator):
        return _frozen_problems(net.estimator, name, likelihood_kinds)
    if not isinstance(net, NeuralNet):
        return [
            "net must be None, a skorch NeuralNet (NeuralNetClassifier, NeuralNetRegressor, "
            f"...) or sklearn.frozen.FrozenEstimator(trained_net); got {type(net).__name__}."]
    problems = []
    if not _is(p["solver"], "adam"):
        problems.append(
            f"solver={p['solver']!r} applies to the default MLP (net=None); a skorch net "
            "trains with its own optimizer (set optimizer=torch.optim.LBFGS on the net).")
    problems += _likelihood_problems(net, name, likelihood_kinds)
    settings = nets.criterion_settings(net)
    if settings:
        problems.append(
            f"The net's criterion settings {settings} would be ignored: sklaplace trains "
            "with its own loss (the likelihood of the criterion's class plus the prior) and "
            "fits the LA on that likelihood. Weigh classes or rows with class_weight or "
            "sample_weight on the estimator instead.")
    problems += _failures((nets.check_no_weight_decay, net), (nets.check_device, net))
    problems += _device_problem(p["device"], net)
    return problems


def _device_problem(device, net):
    """``device`` is the default MLP's: a given net keeps its own (valid ones compared)."""
    given = net.get_params().get("device")
    if _failures((nets.check_device_name, device, "device"),
                 (nets.check_device_name, given or "cpu")) or str(torch.device(device)) in (
                     "cpu", str(torch.device(given or "cpu"))):
        return []
    return [f"device={device!r} applies to the default MLP (net=None); the given skorch net "
            f"has device={given!r}. Set the device on the skorch net instead."]


def _frozen_problems(inner, name, likelihood_kinds):
    if hasattr(type(inner), "_likelihood_kinds"):  # a LaplaceClassifier / LaplaceRegressor
        return [
            f"net=FrozenEstimator(...) needs a trained skorch net; got a "
            f"{type(inner).__name__}. To reuse the net a fitted one trained, pass "
            "FrozenEstimator(estimator.net_)."]
    is_net = isinstance(inner, NeuralNet)
    settings = nets.criterion_settings(inner) if is_net else []
    if settings:
        warnings.warn(
            f"The frozen net's criterion settings {settings} are not part of the "
            "LA's likelihood, which is that of the criterion's class; weigh classes "
            "or rows with class_weight or sample_weight on the estimator.", UserWarning)
    problems = []
    if not getattr(inner, "initialized_", False):
        problems.append(
            "net=FrozenEstimator(...) needs an initialized, trained skorch net; got an "
            f"uninitialized {type(inner).__name__}. Fit it first.")
    if is_net:
        problems += _likelihood_problems(inner, name, likelihood_kinds)
    elif not problems:  # initialized, but not a skorch net
        problems.append(f"net=FrozenEstimator(...) needs a trained skorch net; got a "
                        f"{type(inner).__name__}.")
    return problems


def _likelihood_problems(net, name, likelihood_kinds):
    try:
        likelihood = nets.likelihood_of(net)
    except ValueError as error:
        return [str(error)]
    if likelihood not in likelihood_kinds:
        return [f"The net's criterion gives a {likelihood} likelihood, which {name} does "
                "not support."]
    return []


def _sigma_problems(p, continual, n_outputs):
    """The regressor's ``sigma_noise``: positive values, one per output (or one), a scalar
    for ``"cv"`` (one held-out σ) and for ``partial_fit`` (unit-noise curvature kept)."""
    problems = _failures((positive_array, "sigma_noise", p["sigma_noise"]))
    if not problems:
        size = np.size(p["sigma_noise"])
        if n_outputs is not None and size not in (1, n_outputs):
            problems.append(f"sigma_noise has {size} values but y has {n_outputs} outputs.")
        if size > 1 and _is(p["hyperparameter_tuning"], "cv"):
            problems.append(
                "hyperparameter_tuning='cv' tunes one sigma_noise for all outputs; give a "
                "scalar sigma_noise.")
    if continual and np.size(p["sigma_noise"]) > 1:
        problems.append(
            "partial_fit needs one sigma_noise for all outputs (the curvature of the earlier "
            "tasks is kept at unit noise); got an array.")
    return problems


# ---------------------------------------------------------------- partial_fit
def partial_fit_available(estimator):
    """``available_if`` check of ``partial_fit``: AttributeError (``hasattr`` False, as for
    ``MLPClassifier(solver="lbfgs")``) naming what to change where it is not supported."""
    reasons = partial_fit_reasons(estimator)
    if estimator.subset_of_weights not in ("auto", "all"):
        reasons.append(f"subset_of_weights={estimator.subset_of_weights!r} (use 'all')")
    if estimator.hessian_structure not in ("auto", "full", "diag", "kron"):
        reasons.append(f"hessian_structure={estimator.hessian_structure!r} "
                       "(use 'full', 'diag' or 'kron')")
    if estimator.hyperparameter_tuning in ("cv", "online"):
        reasons.append(f"hyperparameter_tuning={estimator.hyperparameter_tuning!r} "
                       "(use 'evidence', 'auto' or None)")
    if estimator.pred_type == "gp":
        reasons.append("pred_type='gp' (use 'glm' or 'nn')")
    if getattr(estimator, "refine", None) is not None:
        # refinement's GLM has the prior N(0, δ⁻¹), not the earlier tasks' posterior
        reasons.append(f"refine={estimator.refine!r} (use None)")
    if reasons:
        raise AttributeError(
            "partial_fit (continual learning) needs the Laplace approximation over all "
            "weights with a full, diagonal or Kronecker posterior and no held-out or online "
            "tuning; not available with " + ", ".join(reasons) + ".")
    return True
