"""sklaplace.estimators._validation: every parameter rule checked in one pass, one error for all.

A single problem gives the message ``fit`` gave before the rules were gathered (the
messages below are copied from it); several give one ValueError listing each. Only
estimators are built: no data, no training.
"""

import re
import warnings

import numpy as np
import pytest
import torch
from skorch import NeuralNetClassifier, NeuralNetRegressor
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.utils._param_validation import (InvalidParameterError,
                                             validate_parameter_constraints)
from torch import nn

from sklaplace import LaplaceClassifier, LaplaceRegressor
from sklaplace._laplace.nets import MLP
from sklaplace.estimators._validation import (CLASSIFIER_CONSTRAINTS, REGRESSOR_CONSTRAINTS, check_params,
                                   check_positive, check_seed, parameter_problems,
                                   partial_fit_available, positive_array)

BOTH = (LaplaceClassifier, LaplaceRegressor)
CUDA = torch.cuda.is_available()


def _clf_net(**params):
    params = {"criterion": nn.CrossEntropyLoss, **params}
    return NeuralNetClassifier(MLP, module__n_features=3, module__n_outputs=3, **params)


def _reg_net(**params):
    params = {"criterion": nn.MSELoss, **params}
    return NeuralNetRegressor(MLP, module__n_features=3, module__n_outputs=1, **params)


def _message(estimator, **kwargs):
    """check_params' error message, or None when it accepts the parameters."""
    try:
        check_params(estimator, **kwargs)
    except ValueError as error:
        assert type(error) is ValueError  # not scikit-learn's InvalidParameterError
        return str(error)
    return None


REFINE = "(the GLM's Gaussian, full or diagonal, with its exact Hessian)"
PRIOR = "prior_precision must be a positive finite float or a 1-D array of them, got "
SIGMA = "sigma_noise must be a positive finite float or a 1-D array of them, got "
SIZES = ("hidden_layer_sizes must be a tuple of positive integers, 'auto' or a list of such "
         "tuples (the candidates), got ")
SUBNET = "subnetwork must be a positive int or a list of parameter names, got "
NET_TYPE = ("net must be None, a skorch NeuralNet (NeuralNetClassifier, NeuralNetRegressor, "
            "...) or sklearn.frozen.FrozenEstimator(trained_net); got ")
UNINITIALIZED = ("net=FrozenEstimator(...) needs an initialized, trained skorch net; got an "
                 "uninitialized {}. Fit it first.")
SOLVER = ("solver='lbfgs' applies to the default MLP (net=None); a skorch net trains with its "
          "own optimizer (set optimizer=torch.optim.LBFGS on the net).")
DECAY = ("The net's optimizer has weight_decay=0.001; set it to 0. sklaplace adds the Gaussian "
         "prior (prior_precision) to the loss itself, and weight decay would count it twice.")
SETTINGS = ("The net's criterion settings ['criterion__label_smoothing'] would be ignored: "
            "sklaplace trains with its own loss (the likelihood of the criterion's class plus "
            "the prior) and fits the LA on that likelihood. Weigh classes or rows with "
            "class_weight or sample_weight on the estimator instead.")
ONLINE_FROZEN = ("hyperparameter_tuning='online' trains the network; it cannot be used with "
                 "a FrozenEstimator net.")

# (parameters, today's message) of the rules both estimators share
SHARED = [
    (dict(refine="laplace", hessian_structure="kron"),
     f"refine='laplace' needs hessian_structure in ['auto', 'full', 'diag'] {REFINE}, got 'kron'."),
    (dict(refine="vi", curvature="ef"),
     f"refine='vi' needs curvature in ['ggn'] {REFINE}, got 'ef'."),
    (dict(refine="vi", pred_type="gp"),
     f"refine='vi' needs pred_type in ['glm', 'nn'] {REFINE}, got 'gp'."),
    (dict(max_epochs=True), "max_epochs must be an int, got True."),
    (dict(lowrank_rank=True), "lowrank_rank must be an int, got True."),
    (dict(online_burn_in=False), "online_burn_in must be an int, got False."),
    (dict(verbose=True), "verbose must be an int, got True."),
    (dict(hidden_layer_sizes=(0,)),
     SIZES + "(0,)."),
    (dict(hidden_layer_sizes=5), SIZES + "5."),
    (dict(hidden_layer_sizes=(True,)),
     SIZES + "(True,)."),
    (dict(prior_precision=-1.0), PRIOR + "-1.0."),
    (dict(prior_precision="high"), PRIOR + "'high'."),
    (dict(prior_precision=[[1.0, 2.0]]), PRIOR + "[[1.0, 2.0]]."),
    (dict(prior_precision=True), PRIOR + "True."),
    (dict(device="tpu"), "device must be a torch device such as 'cpu' or 'cuda', got 'tpu'."),
    (dict(subset_of_weights="subnetwork"),
     "subset_of_weights='subnetwork' needs subnetwork= (an int S or a list of parameter names)."),
    (dict(subset_of_weights="subnetwork", subnetwork="layers.0.weight"),
     SUBNET + "'layers.0.weight'."),
    (dict(subset_of_weights="subnetwork", subnetwork=0), SUBNET + "0."),
    (dict(subset_of_weights="subnetwork", subnetwork=True), SUBNET + "True."),
    (dict(subset_of_weights="subnetwork", subnetwork=5, hessian_structure="lowrank"),
     "subset_of_weights='subnetwork' supports hessian_structure 'full' or 'diag' only, got "
     "'lowrank'."),
    (dict(hessian_structure="kron", prior_structure="diag"),
     "prior_structure='diag' is not supported with hessian_structure='kron' (the Kronecker "
     "eigenbasis needs one prior per weight tensor); use 'scalar' or 'layerwise'."),
    (dict(hyperparameter_tuning="online", subset_of_weights="last_layer"),
     "hyperparameter_tuning='online' needs subset_of_weights='all' (online evidence training "
     "only works over all weights), got 'last_layer'."),
    (dict(net="mlp"), NET_TYPE + "str."),
    (dict(net=LogisticRegression()), NET_TYPE + "LogisticRegression."),
    (dict(net=FrozenEstimator(LaplaceClassifier())),
     "net=FrozenEstimator(...) needs a trained skorch net; got a LaplaceClassifier. To reuse "
     "the net a fitted one trained, pass FrozenEstimator(estimator.net_)."),
    (dict(net=FrozenEstimator(LogisticRegression())), UNINITIALIZED.format("LogisticRegression")),
]
if not CUDA:
    SHARED.append((dict(device="cuda"), (
        "device is 'cuda' but torch has no CUDA device of that index here (torch "
        f"{torch.__version__}, cuda available: False, 0 device(s)); use device='cpu'.")))
CLASSIFIER = [
    (dict(net=FrozenEstimator(_clf_net())), UNINITIALIZED.format("NeuralNetClassifier")),
    (dict(net=_clf_net(device="cpu"), device="cpu:0"),
     "device='cpu:0' applies to the default MLP (net=None); the given skorch net has "
     "device='cpu'. Set the device on the skorch net instead."),
    (dict(hyperparameter_tuning="online", net=FrozenEstimator(_clf_net().initialize())),
     ONLINE_FROZEN),
    (dict(net=NeuralNetClassifier(MLP)),  # skorch's NLLLoss on probabilities
     "The net's criterion NLLLoss has no likelihood sklaplace knows; criterion must be "
     "CrossEntropyLoss, BCEWithLogitsLoss, MSELoss or "
     "sklaplace.nets.HeteroscedasticGaussianNLLLoss (skorch's default NLLLoss on "
     "probabilities is not supported: output logits)."),
    (dict(net=_clf_net(optimizer__weight_decay=1e-3)), DECAY),
    (dict(net=_clf_net(criterion__label_smoothing=0.2)), SETTINGS),
    (dict(net=_clf_net(), solver="lbfgs"), SOLVER),
    (dict(net=_clf_net(device="tpu")),
     "The net's device must be a torch device such as 'cpu' or 'cuda', got 'tpu'."),
    (dict(net=_reg_net()),
     "The net's criterion gives a gaussian likelihood, which LaplaceClassifier does not support."),
]
REGRESSOR = [
    (dict(net=FrozenEstimator(_reg_net())), UNINITIALIZED.format("NeuralNetRegressor")),
    (dict(refine="vi", hyperparameter_tuning="cv"),
     "refine='vi' does not combine with hyperparameter_tuning='cv' in LaplaceRegressor; use "
     "hyperparameter_tuning='evidence', 'online' (what 'auto' means) or None."),
    (dict(sigma_noise=0.0), SIGMA + "0.0."),
    (dict(sigma_noise="loud"), SIGMA + "'loud'."),
    (dict(sigma_noise=True), SIGMA + "True."),
    (dict(sigma_noise=[[1.0]]), SIGMA + "[[1.0]]."),
    (dict(sigma_noise=[1.0, 2.0], hyperparameter_tuning="cv"),
     "hyperparameter_tuning='cv' tunes one sigma_noise for all outputs; give a scalar "
     "sigma_noise."),
    (dict(net=_clf_net()),
     "The net's criterion gives a categorical likelihood, which LaplaceRegressor does not "
     "support."),
    (dict(net=_reg_net(optimizer__weight_decay=1e-3)), DECAY),
    (dict(net=_reg_net(), solver="lbfgs"), SOLVER),
    (dict(hyperparameter_tuning="online", net=FrozenEstimator(_reg_net().initialize())),
     ONLINE_FROZEN),
]


def _id(params):
    return ",".join(f"{k}={type(v).__name__ if k == 'net' else v}" for k, v in params.items())


def _single_cases():
    for cls, cases in ((LaplaceClassifier, SHARED + CLASSIFIER),
                       (LaplaceRegressor, SHARED + REGRESSOR)):
        for params, message in cases:
            yield pytest.param(cls, params, message, id=f"{cls.__name__[7:]}-{_id(params)}")


@pytest.mark.parametrize("cls, params, message", list(_single_cases()))
def test_one_bad_setting_gives_its_own_message(cls, params, message):
    assert _message(cls(**params)) == message


@pytest.mark.parametrize("cls, params, kwargs, message", [
    (LaplaceRegressor, dict(sigma_noise=[1.0, 2.0]), dict(n_outputs=1),
     "sigma_noise has 2 values but y has 1 outputs."),
    (LaplaceRegressor, dict(sigma_noise=[1.0, 2.0]), dict(continual=True, n_outputs=2),
     "partial_fit needs one sigma_noise for all outputs (the curvature of the earlier tasks "
     "is kept at unit noise); got an array."),
    (LaplaceClassifier, dict(class_weight="balanced"), dict(continual=True),
     "class_weight='balanced' is not supported for partial_fit (the class counts of tasks to "
     "come are unknown); pass a dict, or sample_weight."),
], ids=["sigma-outputs", "partial-fit-sigma", "partial-fit-balanced"])
def test_rules_of_the_outputs_and_of_partial_fit(cls, params, kwargs, message):
    assert _message(cls(**params), **kwargs) == message
    assert _message(cls(**params)) is None  # fit without n_outputs: nothing to say


def _listed(name, messages):
    return (f"{name} got {len(messages)} invalid parameter settings:\n"
            + "\n".join(f"- {m}" for m in messages))


@pytest.mark.parametrize("cls, params, expected", [
    # a bad subnetwork spec beside a structure subnetworks lack: both
    (LaplaceClassifier, dict(subset_of_weights="subnetwork", subnetwork="x",
                             hessian_structure="kron"),
     [SUBNET + "'x'.", "subset_of_weights='subnetwork' supports hessian_structure 'full' or "
      "'diag' only, got 'kron'."]),
    # refine breaks two rules (the first used to hide the second) and a third elsewhere
    (LaplaceClassifier, dict(refine="vi", curvature="ef", pred_type="gp", prior_precision=-1.0),
     [f"refine='vi' needs curvature in ['ggn'] {REFINE}, got 'ef'.",
      f"refine='vi' needs pred_type in ['glm', 'nn'] {REFINE}, got 'gp'.", PRIOR + "-1.0."]),
    (LaplaceRegressor, dict(refine="vi", hyperparameter_tuning="cv", sigma_noise=[1.0, 2.0]),
     ["refine='vi' does not combine with hyperparameter_tuning='cv' in LaplaceRegressor; use "
      "hyperparameter_tuning='evidence', 'online' (what 'auto' means) or None.",
      "hyperparameter_tuning='cv' tunes one sigma_noise for all outputs; give a scalar "
      "sigma_noise."]),
    (LaplaceRegressor, dict(max_epochs=True, hidden_layer_sizes=(0,), sigma_noise=-1.0),
     ["max_epochs must be an int, got True.",
      SIZES + "(0,).", SIGMA + "-1.0."]),
    # three things wrong with one net
    (LaplaceClassifier, dict(net=_clf_net(optimizer__weight_decay=1e-3,
                                          criterion__label_smoothing=0.2), solver="lbfgs"),
     [SOLVER, SETTINGS, DECAY]),
    (LaplaceClassifier, dict(net=FrozenEstimator(_clf_net()), hyperparameter_tuning="online"),
     [ONLINE_FROZEN, UNINITIALIZED.format("NeuralNetClassifier")]),
], ids=["subnetwork", "refine", "refine-cv-sigma", "counts-sizes-sigma", "net", "frozen"])
def test_several_bad_settings_are_all_reported_at_once(cls, params, expected):
    assert _message(cls(**params)) == _listed(cls.__name__, expected)


def test_a_device_refused_is_not_also_compared_with_the_nets():
    # "tpu" is not a device: one problem, not a second about the net's device
    message = _message(LaplaceClassifier(_clf_net(device="cpu"), device="tpu"))
    assert message == "device must be a torch device such as 'cpu' or 'cuda', got 'tpu'."


@pytest.mark.parametrize("cls", BOTH)
@pytest.mark.parametrize("params", [
    dict(),
    dict(refine="laplace", hessian_structure="diag"),
    dict(refine="vi", pred_type="nn", hyperparameter_tuning="evidence"),
    dict(subset_of_weights="subnetwork", subnetwork=5, hessian_structure="full"),
    dict(subset_of_weights="subnetwork", subnetwork=["layers.0.weight"], hessian_structure="diag"),
    dict(hessian_structure="kron", prior_structure="layerwise"),
    dict(hyperparameter_tuning="online", subset_of_weights="all"),
    dict(prior_precision=[1.0, 2.0, 3.0, 4.0], prior_structure="layerwise"),
    dict(hidden_layer_sizes=[], online_burn_in=0, lowrank_rank=None, verbose=2),
    dict(subnetwork="ignored unless subset_of_weights='subnetwork'"),
], ids=_id)
def test_valid_settings_pass(cls, params):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _message(cls(**params)) is None
        assert _message(cls(**params), continual=True) is None


@pytest.mark.parametrize("cls, params, kwargs", [
    (LaplaceRegressor, dict(sigma_noise=[1.0, 2.0]), dict(n_outputs=2)),
    (LaplaceRegressor, dict(sigma_noise=[3.0]), dict(n_outputs=4, continual=True)),
    (LaplaceClassifier, dict(refine="laplace", hyperparameter_tuning="cv"), {}),
    (LaplaceClassifier, dict(class_weight="balanced"), {}),
    (LaplaceClassifier, dict(class_weight={0: 2.0}), dict(continual=True)),
    (LaplaceClassifier, dict(net=_clf_net(device="cpu"), device="cpu"), {}),
    (LaplaceClassifier, dict(net=NeuralNetClassifier(MLP, criterion=nn.BCEWithLogitsLoss)), {}),
    (LaplaceClassifier, dict(net=FrozenEstimator(_clf_net().initialize())), {}),
    (LaplaceRegressor, dict(net=_reg_net(optimizer__weight_decay=0.0)), {}),
    (LaplaceRegressor, dict(net=FrozenEstimator(_reg_net().initialize()),
                            hyperparameter_tuning="cv"), {}),
])
def test_valid_settings_of_one_estimator_pass(cls, params, kwargs):
    assert _message(cls(**params), **kwargs) is None


def test_the_criterion_settings_of_a_frozen_net_warn_and_pass():
    net = _clf_net(criterion__label_smoothing=0.2).initialize()
    with pytest.warns(UserWarning, match="criterion settings"):
        assert _message(LaplaceClassifier(FrozenEstimator(net))) is None


def test_an_initialized_object_that_is_not_a_skorch_net_is_refused():
    class Fitted(LogisticRegression):
        initialized_ = True

    assert _message(LaplaceRegressor(FrozenEstimator(Fitted()))) == (
        "net=FrozenEstimator(...) needs a trained skorch net; got a Fitted.")


@pytest.mark.parametrize("params", [
    dict(hessian_structure=np.array(["kron", "full"]), refine="vi", subset_of_weights=None),
    dict(hyperparameter_tuning=["online"], subset_of_weights="subnetwork", subnetwork=object()),
    dict(device=object(), prior_precision=object(), hidden_layer_sizes=(np.inf,)),
    dict(net=FrozenEstimator(object()), solver=None, refine="newton"),
    dict(net=_clf_net(), device=3, solver=np.array([1])),
])
def test_any_values_give_messages_never_other_errors(params):
    # values _parameter_constraints refuses first: the rules still only collect messages
    problems = parameter_problems({**LaplaceRegressor().get_params(), **params},
                                  "LaplaceRegressor", ("gaussian",), continual=True, n_outputs=2)
    assert problems and all(isinstance(p, str) for p in problems)


@pytest.mark.parametrize("cls, constraints", [(LaplaceClassifier, CLASSIFIER_CONSTRAINTS),
                                              (LaplaceRegressor, REGRESSOR_CONSTRAINTS)])
def test_constraints_cover_every_parameter(cls, constraints):
    params = cls().get_params(deep=False)
    assert set(constraints) == set(params)
    assert set(constraints) == set(cls._parameter_constraints)
    validate_parameter_constraints(constraints, params, caller_name=cls.__name__)
    bad = "class_weight" if cls is LaplaceClassifier else "normalize_y"
    with pytest.raises(InvalidParameterError, match=f"'{bad}' parameter of {cls.__name__}"):
        validate_parameter_constraints(constraints, {**params, bad: "yes"},
                                       caller_name=cls.__name__)


def test_check_params_takes_the_estimator_or_its_parameters():
    est = LaplaceRegressor(sigma_noise=-1.0, prior_precision=0.0)
    problems = parameter_problems(est.get_params(deep=False), "LaplaceRegressor", ("gaussian",))
    assert problems == [PRIOR + "0.0.", SIGMA + "-1.0."]
    assert _message(est) == _listed("LaplaceRegressor", problems)


def test_partial_fit_available():
    assert partial_fit_available(LaplaceClassifier())
    with pytest.raises(AttributeError, match=re.escape(
            "not available with subset_of_weights='last_layer' (use 'all'), refine='vi' "
            "(use None).")):
        partial_fit_available(LaplaceRegressor(subset_of_weights="last_layer", refine="vi"))


def test_value_helpers_keep_their_messages():
    assert positive_array("x", [1, 2]).dtype == float
    with pytest.raises(ValueError, match=re.escape("x must be a positive finite float or a "
                                                   "1-D array of them, got [0].")):
        positive_array("x", [0])
    with pytest.raises(ValueError, match="n must be a positive integer, got 1.5."):
        check_positive("n", 1.5, integer=True)
    with pytest.raises(ValueError, match="seed must be None, an int or a numpy RandomState"):
        check_seed("seed", "x")
