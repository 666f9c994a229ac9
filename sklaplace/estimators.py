"""LaplaceClassifier and LaplaceRegressor: scikit-learn plumbing around the LA.

``fit`` validates the data, trains a copy of the skorch net to the MAP (or
keeps a frozen one), fits the Laplace approximation on the chosen weights and
structure, and tunes the prior precision (and σ) by the evidence.  Prediction
runs estimator → net at the MAP → Jacobians → posterior → distribution object.
"""

import copy
import functools
import numbers

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, clone
from sklearn.frozen import FrozenEstimator
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from . import nets
from .curvature import (
    DEFAULT_MEMORY_BUDGET,
    compute_posterior,
    default_lowrank_rank,
    jacobian_bytes,
)
from .distributions import LogitGaussianPrediction, NormalPrediction
from .evidence import Evidence, maximize_evidence
from .likelihoods import LIKELIHOODS
from .subsets import AllWeights, LastLayer, Subnetwork, named_params

AUTO_FULL_MAX_PARAMS = 5000
AUTO_LAST_LAYER_FULL_MAX = 2000
PREDICT_CHUNK_BYTES = 2**26

_CHOICES = {
    "prior_structure": ("scalar", "layerwise", "diag"),
    "hyperparameter_tuning": ("evidence", "online", None),
    "subset_of_weights": ("auto", "all", "last_layer", "subnetwork"),
    "hessian_structure": ("auto", "full", "diag", "kron", "lowrank"),
    "curvature": ("ggn", "ef"),
    "pred_type": ("glm", "nn"),
    "link_approx": ("probit", "bridge", "mc"),
}


def _check_choice(name, value):
    allowed = _CHOICES[name]
    if not any(value is a or (isinstance(value, str) and value == a) for a in allowed):
        raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}.")


def _check_positive(name, value, integer=False, allow_none=False):
    if value is None and allow_none:
        return
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind) or not value > 0:
        what = "a positive integer" if integer else "a positive number"
        raise ValueError(f"{name} must be {what}, got {value!r}.")


def _positive_array(name, value):
    arr = np.asarray(value, dtype=float) if not isinstance(value, str) else None
    if arr is None or arr.ndim > 1 or arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(
            f"{name} must be a positive finite float or a 1-D array of them, got {value!r}."
        )
    return arr


def _build_posterior(structure, subset, likelihood, X, y, curvature, rank, out_scale):
    return compute_posterior(structure, subset, likelihood, X, y, out_scale, curvature, rank)


class _BaseLaplace(BaseEstimator):
    """Shared fit / posterior / prediction machinery (not public)."""

    _likelihood_kinds = ()

    # ------------------------------------------------------------ validation
    def _validate_params(self):
        for name in ("prior_structure", "hyperparameter_tuning", "subset_of_weights",
                     "hessian_structure", "curvature", "pred_type"):
            _check_choice(name, getattr(self, name))
        if hasattr(self, "link_approx"):
            _check_choice("link_approx", self.link_approx)
        for name in ("max_epochs", "batch_size", "n_samples"):
            _check_positive(name, getattr(self, name), integer=True)
        _check_positive("lr", self.lr)
        _check_positive("temperature", self.temperature)
        _check_positive("lowrank_rank", self.lowrank_rank, integer=True, allow_none=True)
        sizes = self.hidden_layer_sizes
        if not isinstance(sizes, (tuple, list)) or not all(
            isinstance(h, numbers.Integral) and not isinstance(h, bool) and h > 0 for h in sizes
        ):
            raise ValueError(
                f"hidden_layer_sizes must be a tuple of positive integers, got {sizes!r}."
            )
        _positive_array("prior_precision", self.prior_precision)
        if self.subset_of_weights == "subnetwork":
            if self.subnetwork is None:
                raise ValueError(
                    "subset_of_weights='subnetwork' needs subnetwork= (an int S or a list of "
                    "parameter names)."
                )
            if self.hessian_structure not in ("auto", "full", "diag"):
                raise ValueError(
                    "subset_of_weights='subnetwork' supports hessian_structure 'full' or "
                    f"'diag' only, got {self.hessian_structure!r}."
                )
        if self.hessian_structure == "kron" and self.prior_structure == "diag":
            raise ValueError(
                "prior_structure='diag' is not supported with hessian_structure='kron' "
                "(the Kronecker eigenbasis needs one prior per weight tensor); use "
                "'scalar' or 'layerwise'."
            )
        if self.hyperparameter_tuning == "online":
            if self.subset_of_weights not in ("auto", "all"):
                raise ValueError(
                    "hyperparameter_tuning='online' needs subset_of_weights='all' (online "
                    f"evidence training only works over all weights), got "
                    f"{self.subset_of_weights!r}."
                )
            if isinstance(self.net, FrozenEstimator):
                raise ValueError(
                    "hyperparameter_tuning='online' trains the network; it cannot be used "
                    "with a FrozenEstimator net."
                )

    # ------------------------------------------------------------ the network
    def _prepare_net(self, n_features, n_outputs):
        """Return (uninitialized net copy or None, frozen fitted net or None, likelihood)."""
        net = self.net
        if net is None:
            return (
                nets.default_net(n_features, n_outputs, self.hidden_layer_sizes,
                                 self.max_epochs, self.lr, self.batch_size),
                None,
                None,
            )
        if isinstance(net, FrozenEstimator):
            inner = net.estimator
            if not hasattr(inner, "initialized_") or not getattr(inner, "initialized_", False):
                raise ValueError(
                    "net=FrozenEstimator(...) needs an initialized, trained skorch net; "
                    f"got an uninitialized {type(inner).__name__}. Fit it first."
                )
            return None, inner, nets.likelihood_of(inner)
        from skorch import NeuralNet

        if not isinstance(net, NeuralNet):
            raise ValueError(
                "net must be None, a skorch NeuralNet (NeuralNetClassifier, "
                "NeuralNetRegressor, ...) or sklearn.frozen.FrozenEstimator(trained_net); "
                f"got {type(net).__name__}."
            )
        likelihood = nets.likelihood_of(net)
        nets.check_no_weight_decay(net)
        copy_ = clone(net)
        for key in [k for k in vars(copy_) if k.startswith("criterion__")]:
            delattr(copy_, key)
        return copy_, None, likelihood

    def _training_prior(self, module_names_sizes):
        """The prior precision of MAP training: float or one value per parameter."""
        arr = np.asarray(self.prior_precision, dtype=float)
        if arr.ndim == 0:
            return float(arr)
        return self._expand_prior(arr, module_names_sizes)

    @staticmethod
    def _expand_prior(arr, sizes):
        """Per-group (one per parameter tensor) or per-parameter → per-parameter."""
        arr = np.asarray(arr, dtype=float)
        if arr.ndim == 0:
            return np.full(int(np.sum(sizes)), float(arr))
        if arr.size == len(sizes):
            return np.repeat(arr, sizes)
        if arr.size == int(np.sum(sizes)):
            return arr.copy()
        raise ValueError(
            f"prior_precision has {arr.size} values; expected a float, one value per "
            f"parameter tensor ({len(sizes)}, weights and biases of each layer) or one per "
            f"parameter ({int(np.sum(sizes))})."
        )

    # ------------------------------------------------------------ fit
    def _fit(self, X, y_model, likelihood_default, n_outputs, y_scale=None):
        """Train (or take) the net, fit the LA and tune. ``y_model``: targets in model units."""
        self._validate_params()
        rng = check_random_state(self.random_state)
        train_seed, self._prediction_seed = (int(s) for s in rng.randint(0, 2**31 - 1, size=2))
        net, frozen, likelihood = self._prepare_net(X.shape[1], n_outputs)
        likelihood = likelihood or likelihood_default
        if likelihood not in self._likelihood_kinds:
            raise ValueError(
                f"The net's criterion gives a {likelihood} likelihood, which "
                f"{type(self).__name__} does not support."
            )
        self._likelihood_name = likelihood
        sigma0 = self._initial_sigma(n_outputs)
        if frozen is not None:
            self.net_ = frozen
        else:
            module_probe = None
            if self.net is not None and not isinstance(self.prior_precision, numbers.Real):
                module_probe = net.initialize().module_
            sizes = (
                [p.numel() for _, p in named_params(module_probe)]
                if module_probe is not None
                else self._default_param_sizes(X.shape[1], n_outputs)
            )
            callbacks = self._online_callbacks(sizes) if self.hyperparameter_tuning == "online" else ()
            self.net_ = nets.train_map(
                net, X, self._y_for_training(y_model, likelihood),
                likelihood=likelihood, temperature=self.temperature,
                sigma_noise=np.asarray(sigma0, dtype=float), seed=train_seed,
                prior_precision=self._training_prior(sizes), callbacks=callbacks,
            )
        self._fit_laplace(X, y_model, likelihood, sigma0, y_scale)
        return self

    def _default_param_sizes(self, n_features, n_outputs):
        sizes, d_in = [], n_features
        for h in (*self.hidden_layer_sizes, n_outputs):
            sizes += [h * d_in, h]
            d_in = h
        return sizes

    def _online_callbacks(self, sizes):
        raise ValueError("hyperparameter_tuning='online' is not available yet.")

    def _y_for_training(self, y_model, likelihood):
        if likelihood == "categorical":
            return y_model.astype(np.int64)
        if likelihood == "bernoulli":
            return y_model.astype(np.float32)
        return y_model.reshape(y_model.shape[0], -1)

    def _initial_sigma(self, n_outputs):
        return 1.0

    # ------------------------------------------------------------ the LA
    def _la_module(self):
        module = copy.deepcopy(self.net_.module_).to(torch.float64).eval()
        for p in module.parameters():
            p.requires_grad_(True)
        return module

    def _resolve_subset(self, module, X, n_out):
        subset_kind, structure = self.subset_of_weights, self.hessian_structure
        n_all = sum(p.numel() for _, p in named_params(module))
        if subset_kind == "auto":
            fits = jacobian_bytes(X.shape[0], n_out, n_all) <= DEFAULT_MEMORY_BUDGET
            if structure in ("auto", "full") and n_all <= AUTO_FULL_MAX_PARAMS and fits:
                subset_kind = "all"
            elif structure == "auto" or structure == "full":
                subset_kind = "last_layer"
            else:
                subset_kind = "all"
        if subset_kind == "all":
            subset = AllWeights(module)
        elif subset_kind == "last_layer":
            subset = LastLayer(module, X[:2])
        else:
            subset = Subnetwork(module, self._subnetwork_indices(module, X))
        if structure == "auto":
            if subset_kind == "last_layer":
                structure = "full" if subset.n_params <= AUTO_LAST_LAYER_FULL_MAX else "kron"
            else:
                structure = "full"
        return subset, subset_kind, structure

    def _subnetwork_indices(self, module, X):
        spec = self.subnetwork
        if isinstance(spec, numbers.Integral) and not isinstance(spec, bool):
            subset = AllWeights(module)
            if not 0 < spec <= subset.n_params:
                raise ValueError(
                    f"subnetwork={spec} must be between 1 and the number of weights "
                    f"({subset.n_params})."
                )
            diag = compute_posterior("diag", subset, self._likelihood(), X, self._y_fit,
                                     self._out_scale, self.curvature)
            delta = torch.as_tensor(self._subset_prior(subset, self.prior_precision))
            var = diag.set_prior(delta, self._scale_for(self._sigma_tensor(self._sigma_init))).marginal_variance()
            return torch.argsort(var, descending=True)[:spec].numpy()
        if isinstance(spec, (list, tuple)) and all(isinstance(s, str) for s in spec) and spec:
            return Subnetwork.indices_from_names(module, list(spec))
        raise ValueError(
            f"subnetwork must be a positive int or a list of parameter names, got {spec!r}."
        )

    def _likelihood(self):
        return LIKELIHOODS[self._likelihood_name]()

    def _sigma_tensor(self, sigma):
        return torch.as_tensor(np.asarray(sigma, dtype=float), dtype=torch.float64)

    def _scale_for(self, sigma):
        if self._likelihood_name == "gaussian" and sigma.dim() == 0:
            return 1.0 / (sigma**2 * self.temperature)
        return torch.tensor(1.0 / self.temperature, dtype=torch.float64)

    def _subset_prior(self, subset, prior):
        """Whole-net prior (float or array) → 0-d tensor or per-Laplace-weight vector."""
        arr = np.asarray(prior, dtype=float)
        if arr.ndim == 0:
            return torch.tensor(float(arr), dtype=torch.float64)
        sizes = [p.numel() for _, p in named_params(subset.module)]
        return torch.as_tensor(self._expand_prior(arr, sizes)[subset.whole_index])

    def _fit_laplace(self, X, y_model, likelihood_name, sigma0, y_scale):
        module = self._la_module()
        Xt = torch.tensor(np.asarray(X), dtype=torch.float64)
        likelihood = self._likelihood()
        n_out = module(Xt[:1]).reshape(1, -1).shape[1]
        self._check_outputs(n_out)
        yt = torch.as_tensor(np.ascontiguousarray(y_model))
        self._y_fit = yt
        self._sigma_init = sigma0
        sigma_t = self._sigma_tensor(sigma0)
        vector_sigma = likelihood_name == "gaussian" and sigma_t.dim() > 0
        self._out_scale = (1.0 / sigma_t if vector_sigma else torch.ones(n_out, dtype=torch.float64))
        subset, subset_kind, structure = self._resolve_subset(module, Xt, n_out)
        rank = None
        if structure == "lowrank":
            rank = self.lowrank_rank or default_lowrank_rank(subset.n_params)
        self._subset = subset
        self.subset_of_weights_ = subset_kind
        self.hessian_structure_ = structure
        self.n_params_ = int(subset.n_params)

        build = functools.partial(_build_posterior, structure, subset, likelihood, Xt, yt,
                                  self.curvature, rank)
        posterior = build(self._out_scale)
        with torch.no_grad():
            f = subset.forward(Xt)
        if likelihood_name == "gaussian":
            sse = ((yt.reshape(f.shape) - f) ** 2).sum(0)
            evidence = Evidence(posterior, subset.theta.detach(), self.temperature, Xt.shape[0],
                                sse=sse, rebuild=build if vector_sigma else None)
        else:
            nll = likelihood.nll(f, yt).sum().item()
            evidence = Evidence(posterior, subset.theta.detach(), self.temperature, Xt.shape[0],
                                nll=nll)
        self._evidence = evidence
        prior = self.prior_precision if not isinstance(self.prior_precision, np.ndarray) else self.prior_precision
        sigma = sigma_t
        if self.hyperparameter_tuning == "evidence":
            prior, sigma = self._tune(evidence, subset, prior, sigma_t, y_model)
        elif self.hyperparameter_tuning == "online":
            prior, sigma = self._online_result(subset)
        self.prior_precision_ = prior if np.ndim(prior) == 0 and not isinstance(prior, float) else prior
        if np.ndim(self.prior_precision_) == 0:
            self.prior_precision_ = float(self.prior_precision_)
        else:
            self.prior_precision_ = np.asarray(self.prior_precision_, dtype=float)
        delta = self._subset_prior(subset, self.prior_precision_)
        self._sigma_fit = sigma
        if vector_sigma and not torch.equal(sigma, sigma_t):
            posterior = evidence.posterior_for(sigma)
            evidence.posterior = posterior
        self._posterior = posterior.set_prior(delta, self._scale_for(sigma))
        with torch.no_grad():
            log_ev = evidence(delta, sigma)
        self.log_evidence_ = float(log_ev) + self._evidence_offset(y_scale, Xt.shape[0])
        self._set_sigma_attr(sigma, y_scale)
        # Drop what only fitting needed.
        del self._y_fit
        self._evidence_data = None

    def _check_outputs(self, n_out):
        pass

    def _evidence_offset(self, y_scale, n):
        return 0.0

    def _set_sigma_attr(self, sigma, y_scale):
        pass

    def _tune(self, evidence, subset, prior, sigma, y_model):
        structure = self.prior_structure
        whole_sizes = [p.numel() for _, p in named_params(subset.module)]
        start = self._subset_prior(subset, prior)
        if structure == "scalar":
            log0 = [float(torch.log(start).mean())]
            inverse = None

            def expand(values):
                return values[0]
        else:
            if structure == "layerwise":
                groups, inverse = np.unique(subset.group_index, return_inverse=True)
            else:
                groups, inverse = np.arange(subset.n_params), np.arange(subset.n_params)
            start_vec = start.expand(subset.n_params) if start.dim() == 0 else start
            log0 = [float(torch.log(start_vec[inverse == g]).mean()) for g in range(len(groups))]
            inverse_t = torch.as_tensor(inverse)

            def expand(values):
                return values[inverse_t]

        tune_sigma = evidence.gaussian
        log_sigma0 = np.log(sigma.numpy()) if evidence.gaussian else None
        floor = None
        if tune_sigma:
            floor = 1e-3 * np.maximum(np.std(np.asarray(y_model).reshape(len(y_model), -1), axis=0), 1e-12)
            floor = floor.mean() if sigma.dim() == 0 else floor
        log_delta, log_sigma = maximize_evidence(evidence, log0, expand, log_sigma0, floor,
                                                 tune_sigma)
        values = np.exp(log_delta)
        if structure == "scalar":
            tuned = float(values[0])
        else:
            whole = self._expand_prior(np.asarray(prior, dtype=float), whole_sizes)
            whole[subset.whole_index] = values[inverse]
            if structure == "layerwise":
                offsets = np.concatenate([[0], np.cumsum(whole_sizes)])
                tuned = whole[offsets[:-1]]
            else:
                tuned = whole
        new_sigma = (torch.as_tensor(np.exp(log_sigma), dtype=torch.float64)
                     if evidence.gaussian else sigma)
        return tuned, new_sigma

    # ------------------------------------------------------------ evidence
    def _log_evidence(self, prior_precision, sigma):
        check_is_fitted(self)
        subset = self._subset
        prior = self.prior_precision_ if prior_precision is None else prior_precision
        _positive_array("prior_precision", prior)
        delta = self._subset_prior(subset, prior)
        with torch.no_grad():
            return float(self._evidence(delta, sigma))

    # ------------------------------------------------------------ prediction
    def _X_tensor(self, X):
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        return torch.tensor(np.asarray(X), dtype=torch.float64)

    def _chunks(self, n, n_out):
        size = max(1, PREDICT_CHUNK_BYTES // (8 * max(1, n_out) * self._subset.n_params))
        return [slice(s, min(s + size, n)) for s in range(0, n, size)]

    def _glm_moments(self, Xt):
        """MAP outputs (n, C) and functional covariance J Σ Jᵀ (n, C, C)."""
        means, covs = [], []
        with torch.no_grad():
            n_out = self._posterior_outputs()
            for sl in self._chunks(Xt.shape[0], n_out):
                f, J = self._subset.jacobians(Xt[sl])
                means.append(f)
                covs.append(self._posterior.functional_variance(J))
        return torch.cat(means), torch.cat(covs)

    def _posterior_outputs(self):
        return self._n_model_outputs

    def _generator(self, seed=None):
        gen = torch.Generator()
        gen.manual_seed(self._prediction_seed if seed is None else seed)
        return gen

    def _nn_samples(self, Xt, n_samples, generator):
        """Network outputs at weight samples θ* + ε, ε ~ N(0, Σ): (S, n, C)."""
        with torch.no_grad():
            eps = self._posterior.sample(n_samples, generator)
            theta = self._subset.theta + eps
            return torch.stack([self._subset.forward(Xt, t) for t in theta])

    def _function_samples(self, Xt, n_samples, random_state):
        seed = check_random_state(random_state).randint(0, 2**31 - 1)
        gen = self._generator(seed)
        if self.pred_type == "nn":
            return self._nn_samples(Xt, n_samples, gen)
        with torch.no_grad():
            eps = self._posterior.sample(n_samples, gen)
            out = []
            for sl in self._chunks(Xt.shape[0], self._n_model_outputs):
                f, J = self._subset.jacobians(Xt[sl])
                out.append(f[None] + torch.einsum("ncp,sp->snc", J, eps))
            return torch.cat(out, dim=1)

    def _check_n_samples(self, n_samples):
        _check_positive("n_samples", n_samples, integer=True)

    def _log_evidence_doc(self):
        pass

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.non_deterministic = False
        return tags


_COMMON_PARAMS_DOC = """
    net : skorch NeuralNet, FrozenEstimator or None, default=None
        The network. ``None`` builds a tanh MLP sized from the data
        (``hidden_layer_sizes``, trained with Adam). A skorch net (with
        criterion ``CrossEntropyLoss``, ``BCEWithLogitsLoss`` or ``MSELoss``) is
        copied and trained to the MAP inside ``fit``; ``FrozenEstimator(net)``
        keeps a trained net's weights and fits only the Laplace approximation.
    hidden_layer_sizes : tuple of int, default=(50,)
        Hidden widths of the default MLP (``net=None`` only).
    max_epochs : int, default=200
        Training epochs of the default MLP.
    lr : float, default=1e-2
        Adam learning rate of the default MLP.
    batch_size : int, default=128
        Mini-batch size of the default MLP.
    prior_precision : float or array-like, default=1.0
        Precision δ of the Gaussian prior N(0, δ⁻¹I): a float, one value per
        parameter tensor (weight and bias of each layer) or one per parameter.
        It is the prior of MAP training and the start of evidence tuning.
    prior_structure : {"scalar", "layerwise", "diag"}, default="scalar"
        Granularity of the prior precision that evidence tuning uses.
    hyperparameter_tuning : {"evidence", "online"} or None, default="evidence"
        ``"evidence"`` maximises the Laplace log evidence after training,
        bounded to log10 δ ∈ [−4, 4]; ``None`` keeps the given values.
    subset_of_weights : {"auto", "all", "last_layer", "subnetwork"}, default="auto"
        The weights under the Laplace approximation. ``"auto"``: all weights
        with the full structure up to 5,000 parameters (within the memory
        budget), else the last layer (full up to 2,000 weights, else kron).
    hessian_structure : {"auto", "full", "diag", "kron", "lowrank"}, default="auto"
        Structure of the curvature and posterior.
    subnetwork : int, list of str or None, default=None
        With ``subset_of_weights="subnetwork"``: the number S of weights with the
        largest marginal variance under a diagonal LA, or parameter names.
    lowrank_rank : int or None, default=None
        Rank k of the ``"lowrank"`` structure; ``None`` uses min(P, 100).
    curvature : {"ggn", "ef"}, default="ggn"
        Generalized Gauss-Newton or empirical Fisher.
    pred_type : {"glm", "nn"}, default="glm"
        Linearized (GLM) predictive, or sampling weights and running the net.
    n_samples : int, default=100
        Samples of the ``"mc"`` link and of ``pred_type="nn"``.
    temperature : float, default=1.0
        The log-likelihood is divided by T in the MAP objective, the curvature
        and the evidence."""


class LaplaceClassifier(ClassifierMixin, _BaseLaplace):
    __doc__ = (
        """Neural network classifier with a Laplace approximation posterior.

    Trains a skorch net to the MAP (the prior as weight decay), fits a Gaussian
    posterior around it from the curvature and predicts with the linearized
    (GLM) predictive.

    Parameters
    ----------"""
        + _COMMON_PARAMS_DOC
        + """
    link_approx : {"probit", "bridge", "mc"}, default="probit"
        Approximation of the expected softmax / sigmoid under the Gaussian over
        logits: (extended) probit, Laplace-bridge Dirichlet mean, or Monte Carlo.
    memory : None, str or joblib.Memory, default=None
        Cache of the trained MAP network.
    random_state : int, RandomState or None, default=None
        Seeds initialization, batches and the prediction seed of MC draws.

    Attributes
    ----------
    net_ : skorch NeuralNet
        The fitted network.
    classes_ : ndarray of shape (n_classes,)
    prior_precision_ : float or ndarray
        Prior precision after tuning (whole-net form, as the parameter).
    subset_of_weights_ : str
    hessian_structure_ : str
    n_params_ : int
        Number of weights under the Laplace approximation.
    log_evidence_ : float
        Laplace log marginal likelihood of the fit.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only with pandas input.

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> from sklaplace import LaplaceClassifier
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> clf = make_pipeline(StandardScaler(), LaplaceClassifier(max_epochs=20, random_state=0))
    >>> clf.fit(X, y).predict_proba(X[:2]).shape
    (2, 2)
    """
    )

    _likelihood_kinds = ("categorical", "bernoulli")

    def __init__(self, net=None, *, hidden_layer_sizes=(50,), max_epochs=200, lr=1e-2,
                 batch_size=128, prior_precision=1.0, prior_structure="scalar",
                 hyperparameter_tuning="evidence", subset_of_weights="auto",
                 hessian_structure="auto", subnetwork=None, lowrank_rank=None, curvature="ggn",
                 pred_type="glm", link_approx="probit", n_samples=100, temperature=1.0,
                 memory=None, random_state=None):
        self.net = net
        self.hidden_layer_sizes = hidden_layer_sizes
        self.max_epochs = max_epochs
        self.lr = lr
        self.batch_size = batch_size
        self.prior_precision = prior_precision
        self.prior_structure = prior_structure
        self.hyperparameter_tuning = hyperparameter_tuning
        self.subset_of_weights = subset_of_weights
        self.hessian_structure = hessian_structure
        self.subnetwork = subnetwork
        self.lowrank_rank = lowrank_rank
        self.curvature = curvature
        self.pred_type = pred_type
        self.link_approx = link_approx
        self.n_samples = n_samples
        self.temperature = temperature
        self.memory = memory
        self.random_state = random_state

    def fit(self, X, y):
        """Train the network to the MAP, fit the Laplace approximation and tune it.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Class labels (any type).

        Returns
        -------
        self : LaplaceClassifier
        """
        X, y = validate_data(self, X, y, dtype=[np.float64, np.float32])
        check_classification_targets(y)
        encoder = LabelEncoder().fit(y)
        self.classes_ = encoder.classes_
        if len(self.classes_) < 2:
            raise ValueError(
                f"LaplaceClassifier needs at least two classes in y; got one class "
                f"({self.classes_[0]!r})."
            )
        y_enc = encoder.transform(y)
        n_classes = len(self.classes_)
        binary = n_classes == 2
        self._n_model_outputs = 1 if (binary and self.net is None) else n_classes
        default = "bernoulli" if (binary and self.net is None) else "categorical"
        return self._fit(X, y_enc, default, self._n_model_outputs)

    def _check_outputs(self, n_out):
        expected = 1 if self._likelihood_name == "bernoulli" else len(self.classes_)
        if n_out != expected:
            raise ValueError(
                f"The network outputs {n_out} values per row but the "
                f"{self._likelihood_name} likelihood with {len(self.classes_)} classes needs "
                f"{expected}."
            )
        self._n_model_outputs = n_out

    def log_evidence(self, prior_precision=None):
        """Laplace log marginal likelihood at the fitted or given prior precision.

        Parameters
        ----------
        prior_precision : float or array-like, default=None
            ``None`` uses ``prior_precision_``.

        Returns
        -------
        log_evidence : float
        """
        return self._log_evidence(prior_precision, None)

    def predict_dist(self, X):
        """The Gaussian over logits of the Laplace predictive.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        dist : LogitGaussianPrediction
            ``proba()`` equals ``predict_proba(X)``.
        """
        check_is_fitted(self)
        Xt = self._X_tensor(X)
        samples = None
        if self.pred_type == "nn":
            samples = self._nn_samples(Xt, self.n_samples, self._generator())
            mean = samples.mean(0)
            centered = samples - mean
            cov = torch.einsum("snc,snd->ncd", centered, centered) / max(1, self.n_samples - 1)
            link = "nn"
        else:
            mean, cov = self._glm_moments(Xt)
            link = self.link_approx
        single = self._likelihood_name == "bernoulli"
        if single:
            # One Bernoulli logit f ↦ the two logits (−f/2, f/2).
            mean = torch.cat([-mean / 2, mean / 2], dim=1)
            v = cov[:, 0, 0] / 4
            cov = torch.stack([torch.stack([v, -v], -1), torch.stack([-v, v], -1)], -2)
            if samples is not None:
                samples = torch.cat([-samples / 2, samples / 2], dim=2)
        return LogitGaussianPrediction(
            logit_mean=mean.numpy(), logit_cov=cov.numpy(), link=link,
            n_samples=self.n_samples, seed=self._prediction_seed, single_logit=single,
            logit_samples=None if samples is None else samples.numpy(),
        )

    def predict_proba(self, X):
        """Laplace predictive class probabilities, columns in ``classes_`` order.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
        """
        check_is_fitted(self)
        return self.predict_dist(X).proba()

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def decision_function(self, X):
        """Log-odds of the Laplace predictive.

        Binary: log p₁ − log p₀, shape (n_samples,); multi-class: log ``predict_proba``.
        """
        log_proba = self.predict_log_proba(X)
        if len(self.classes_) == 2:
            return log_proba[:, 1] - log_proba[:, 0]
        return log_proba

    def predict(self, X):
        """Class with the largest Laplace predictive probability."""
        check_is_fitted(self)
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    def sample_functions(self, X, n_samples=1, random_state=None):
        """Logit functions drawn from the posterior: (n_samples, n_rows, n_outputs).

        GLM: f(x, θ*) + J(x)(θ − θ*); ``pred_type="nn"``: f(x, θ).
        """
        check_is_fitted(self)
        self._check_n_samples(n_samples)
        return self._function_samples(self._X_tensor(X), n_samples, random_state).numpy()


class LaplaceRegressor(RegressorMixin, _BaseLaplace):
    __doc__ = (
        """Neural network regressor with a Laplace approximation posterior.

    Trains a skorch net to the MAP of a Gaussian likelihood (the prior as
    weight decay), fits a Gaussian posterior around it and predicts with the
    closed-form linearized (GLM) predictive, N(f(x), J Σ Jᵀ + σ²).

    Parameters
    ----------"""
        + _COMMON_PARAMS_DOC
        + """
    sigma_noise : float or array-like, default=1.0
        Observation noise σ (one per output allowed); tuned by the evidence
        unless ``hyperparameter_tuning=None``.
    normalize_y : bool, default=False
        Standardize the targets internally; all outputs are in original units.
    memory : None, str or joblib.Memory, default=None
        Cache of the trained MAP network.
    random_state : int, RandomState or None, default=None
        Seeds initialization, batches and the prediction seed.

    Attributes
    ----------
    net_ : skorch NeuralNet
    prior_precision_ : float or ndarray
    sigma_noise_ : float or ndarray
        Observation noise after tuning, in the units of y.
    subset_of_weights_ : str
    hessian_structure_ : str
    n_params_ : int
    log_evidence_ : float
    n_features_in_ : int
    feature_names_in_ : ndarray of str

    Examples
    --------
    >>> from sklearn.datasets import load_diabetes
    >>> from sklaplace import LaplaceRegressor
    >>> X, y = load_diabetes(return_X_y=True)
    >>> reg = LaplaceRegressor(max_epochs=20, normalize_y=True, random_state=0).fit(X, y)
    >>> mean, std = reg.predict(X[:3], return_std=True)
    >>> mean.shape, std.shape
    ((3,), (3,))
    """
    )

    _likelihood_kinds = ("gaussian",)

    def __init__(self, net=None, *, hidden_layer_sizes=(50,), max_epochs=200, lr=1e-2,
                 batch_size=128, prior_precision=1.0, prior_structure="scalar",
                 hyperparameter_tuning="evidence", subset_of_weights="auto",
                 hessian_structure="auto", subnetwork=None, lowrank_rank=None, curvature="ggn",
                 pred_type="glm", n_samples=100, temperature=1.0, sigma_noise=1.0,
                 normalize_y=False, memory=None, random_state=None):
        self.net = net
        self.hidden_layer_sizes = hidden_layer_sizes
        self.max_epochs = max_epochs
        self.lr = lr
        self.batch_size = batch_size
        self.prior_precision = prior_precision
        self.prior_structure = prior_structure
        self.hyperparameter_tuning = hyperparameter_tuning
        self.subset_of_weights = subset_of_weights
        self.hessian_structure = hessian_structure
        self.subnetwork = subnetwork
        self.lowrank_rank = lowrank_rank
        self.curvature = curvature
        self.pred_type = pred_type
        self.n_samples = n_samples
        self.temperature = temperature
        self.sigma_noise = sigma_noise
        self.normalize_y = normalize_y
        self.memory = memory
        self.random_state = random_state

    def fit(self, X, y):
        """Train the network to the MAP, fit the Laplace approximation and tune it.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets)

        Returns
        -------
        self : LaplaceRegressor
        """
        X, y = validate_data(self, X, y, dtype=[np.float64, np.float32], multi_output=True,
                             y_numeric=True)
        y = np.asarray(y, dtype=np.float64)
        self._y_ndim = y.ndim
        y2 = y.reshape(y.shape[0], -1)
        sigma = _positive_array("sigma_noise", self.sigma_noise)
        if sigma.ndim == 1 and sigma.size not in (1, y2.shape[1]):
            raise ValueError(
                f"sigma_noise has {sigma.size} values but y has {y2.shape[1]} outputs."
            )
        if not isinstance(self.normalize_y, (bool, np.bool_)):
            raise ValueError(f"normalize_y must be a bool, got {self.normalize_y!r}.")
        if self.normalize_y:
            self._y_mean = y2.mean(0)
            self._y_std = np.where(y2.std(0) > 0, y2.std(0), 1.0)
        else:
            self._y_mean = np.zeros(y2.shape[1])
            self._y_std = np.ones(y2.shape[1])
        self._n_model_outputs = y2.shape[1]
        y_model = (y2 - self._y_mean) / self._y_std
        return self._fit(X, y_model, "gaussian", y2.shape[1], y_scale=self._y_std)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def _check_outputs(self, n_out):
        if n_out != self._n_model_outputs:
            raise ValueError(
                f"The network outputs {n_out} values per row but y has "
                f"{self._n_model_outputs} outputs."
            )

    def _initial_sigma(self, n_outputs):
        sigma = np.asarray(self.sigma_noise, dtype=float)
        if sigma.ndim == 1 and sigma.size == 1:
            sigma = sigma.reshape(())
        if sigma.ndim == 1:
            return sigma / self._y_std
        if self.normalize_y and n_outputs > 1 and np.ptp(self._y_std) > 0:
            return np.full(n_outputs, float(sigma)) / self._y_std
        return float(sigma) / float(self._y_std[0]) if n_outputs == 1 else float(sigma) / self._y_std.mean()

    def _evidence_offset(self, y_scale, n):
        # Change of variables y = μ + s·y_model: log p(y) = log p(y_model) − N Σ log s.
        return -n * float(np.log(y_scale).sum())

    def _set_sigma_attr(self, sigma, y_scale):
        s = sigma.numpy() * (y_scale if sigma.dim() > 0 else y_scale.mean())
        self.sigma_noise_ = float(s) if np.ndim(s) == 0 else np.asarray(s)

    def _sigma_model(self, sigma_noise):
        """σ in original units → model units (tensor)."""
        s = np.asarray(sigma_noise, dtype=float)
        if s.ndim == 0:
            return torch.tensor(float(s) / float(self._y_std.mean()), dtype=torch.float64)
        return torch.as_tensor(s / self._y_std, dtype=torch.float64)

    def log_evidence(self, prior_precision=None, sigma_noise=None):
        """Laplace log marginal likelihood at the fitted or given hyperparameters.

        Parameters
        ----------
        prior_precision : float or array-like, default=None
            ``None`` uses ``prior_precision_``.
        sigma_noise : float or array-like, default=None
            In the units of y; ``None`` uses ``sigma_noise_``.

        Returns
        -------
        log_evidence : float
        """
        check_is_fitted(self)
        sigma = self.sigma_noise_ if sigma_noise is None else sigma_noise
        _positive_array("sigma_noise", sigma)
        if np.ndim(sigma) != np.ndim(self.sigma_noise_):
            raise ValueError(
                f"sigma_noise must have the form of sigma_noise_ ({np.shape(self.sigma_noise_)})."
            )
        n = self._evidence.n_rows
        return self._log_evidence(prior_precision, self._sigma_model(sigma)) + self._evidence_offset(
            self._y_std, n
        )

    def _output_moments(self, X):
        """Predictive mean, epistemic and aleatoric variance in original units."""
        Xt = self._X_tensor(X)
        if self.pred_type == "nn":
            samples = self._nn_samples(Xt, self.n_samples, self._generator())
            mean, var = samples.mean(0), samples.var(0, correction=1 if self.n_samples > 1 else 0)
        else:
            mean, cov = self._glm_moments(Xt)
            var = torch.diagonal(cov, dim1=1, dim2=2).clamp_min(0)
        sigma = self._sigma_fit.expand(mean.shape[1]).numpy()
        mean = mean.numpy() * self._y_std + self._y_mean
        var = var.numpy() * self._y_std**2
        noise = np.broadcast_to((sigma * self._y_std) ** 2, var.shape)
        if self._y_ndim == 1:
            mean, var, noise = mean[:, 0], var[:, 0], noise[:, 0]
        return mean, var, noise

    def predict_dist(self, X):
        """Normal predictive distribution per row (and output), in the units of y.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        dist : NormalPrediction
        """
        check_is_fitted(self)
        mean, var, noise = self._output_moments(X)
        return NormalPrediction(mean=mean, epistemic_var=var, aleatoric_var=np.array(noise))

    def predict(self, X, return_std=False):
        """Predictive mean, and optionally the predictive std (including σ).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool, default=False

        Returns
        -------
        mean : ndarray of shape (n_samples,) or (n_samples, n_targets)
        std : ndarray, same shape, only with ``return_std=True``
        """
        check_is_fitted(self)
        mean, var, noise = self._output_moments(X)
        if return_std:
            return mean, np.sqrt(var + noise)
        return mean

    def sample_functions(self, X, n_samples=1, random_state=None):
        """Functions drawn from the posterior, in the units of y (no noise added).

        Returns
        -------
        samples : ndarray of shape (n_samples, n_rows, n_outputs)
        """
        check_is_fitted(self)
        self._check_n_samples(n_samples)
        f = self._function_samples(self._X_tensor(X), n_samples, random_state).numpy()
        return f * self._y_std + self._y_mean
