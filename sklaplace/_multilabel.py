"""The multilabel predictive: one Gaussian logit per label, one sigmoid each.

A multilabel fit of :class:`~sklaplace.LaplaceClassifier` (``y`` an indicator matrix of
``L`` labels) has one Bernoulli likelihood per label; its GLM predictive is a Gaussian
over the ``L`` logits of a row, N(f(x), J(x) Σ J(x)ᵀ). Each label's probability is the
expected sigmoid of its own logit (the per-label marginal, mean and variance), by the
probit ``σ(μ / √(1 + π v / 8))``, by Monte Carlo, or from the logits of sampled weights.
The cross-label covariance is kept (the labels share the net's weights) and enters the
joint draws of :meth:`MultilabelPrediction.sample`, not the per-label probabilities.
Re-exported by :mod:`sklaplace.distributions`.
"""

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy.special import entr, expit
from sklearn.utils import check_random_state

from ._checks import _check_n_samples
from .distributions._links import _psd_sqrt
from .distributions._scipy_like import _RowsMixin

_LINKS = ("probit", "mc", "nn")


def multilabel_probit_proba(logit_mean, logit_var):
    """Probit approximation of each label's expected sigmoid; shape (n, L).

    ``p_l = sigmoid(μ_l / sqrt(1 + π v_l / 8))`` approximates ``E[sigmoid(f_l)]`` under
    ``f_l ~ N(μ_l, v_l)``, label by label.

    Parameters
    ----------
    logit_mean : array-like of shape (n_samples, n_labels)
        Means of the logits.
    logit_var : array-like of shape (n_samples, n_labels)
        Variances of the logits (negative values count as 0).

    Returns
    -------
    proba : ndarray of shape (n_samples, n_labels)
        Approximate predictive probability of each label.
    """
    var = np.maximum(np.asarray(logit_var, dtype=np.float64), 0.0)
    return expit(np.asarray(logit_mean, dtype=np.float64) / np.sqrt(1.0 + np.pi / 8.0 * var))


def _binary_entropy(p):
    """Entropy in nats of Bernoulli probabilities ``p``, elementwise."""
    return entr(p) + entr(1.0 - p)


def label_entropy(proba):
    """Entropy in nats of rows of independent labels of probabilities ``proba`` (n, L):
    the labels' Bernoulli entropies summed; shape (n,)."""
    return _binary_entropy(proba).sum(axis=1)


def multilabel_nll(proba, y):
    """Per-row negative log-likelihood of indicator rows ``y`` (n, L) under the per-label
    probabilities ``proba`` (n, L): the Bernoulli NLLs summed over the labels."""
    tiny = np.finfo(float).tiny
    y = np.asarray(y, dtype=np.float64)
    return -(y * np.log(np.maximum(proba, tiny))
             + (1.0 - y) * np.log(np.maximum(1.0 - proba, tiny))).sum(axis=1)


@dataclass(frozen=True, eq=False)
class MultilabelPrediction(_RowsMixin):
    """Gaussian predictive over the logits of a multilabel Laplace classifier.

    One logit per label and one sigmoid per logit. :meth:`proba` is each label's
    predictive probability from its logit's mean and variance; the covariance across
    labels (the labels share the net's weights) enters only the joint draws of
    :meth:`sample`. ``dist[rows]`` selects rows (an integer keeps the row axis) and
    ``len(dist)`` is the number of rows. The single-label concepts of
    :class:`LogitGaussianPrediction` (the Laplace bridge's Dirichlet and its top-k
    sets) have no multilabel meaning: :meth:`dirichlet` raises.

    Parameters
    ----------
    logit_mean : ndarray of shape (n_samples, n_labels)
        Mean of the logits.
    logit_cov : ndarray of shape (n_samples, n_labels, n_labels)
        Covariance of the logits (positive semi-definite).
    link : {"probit", "mc", "nn"}, default="probit"
        How :meth:`proba` integrates each sigmoid: the probit, Monte Carlo over the
        logit Gaussian, or the average sigmoid of ``logit_samples`` (logits of sampled
        weights).
    n_samples : int, default=100
        Number of Monte Carlo draws for ``"mc"`` and for :meth:`mutual_information`.
    seed : int, default=0
        Prediction seed of the Monte Carlo draws, shared by all rows.
    logit_samples : ndarray of shape (n_draws, n_samples, n_labels), default=None
        Logits computed from weight samples; required for ``link="nn"``.
    """

    logit_mean: np.ndarray
    logit_cov: np.ndarray
    link: str = "probit"
    n_samples: int = 100
    seed: int = 0
    logit_samples: np.ndarray = None

    _ROW_FIELDS = ("logit_mean", "logit_cov")
    _DRAW_FIELDS = ("logit_samples",)

    def __post_init__(self):
        mean = np.asarray(self.logit_mean, dtype=np.float64)
        cov = np.asarray(self.logit_cov, dtype=np.float64)
        if mean.ndim != 2 or cov.shape != (*mean.shape, mean.shape[1]):
            raise ValueError(
                "logit_mean must have shape (n, L) and logit_cov shape (n, L, L); "
                f"got {mean.shape} and {cov.shape}.")
        if self.link not in _LINKS:
            raise ValueError(
                f"link must be one of {_LINKS} for a multilabel predictive, got {self.link!r}.")
        _check_n_samples(self.n_samples)
        object.__setattr__(self, "logit_mean", mean)
        object.__setattr__(self, "logit_cov", cov)
        if self.logit_samples is not None:
            samples = np.asarray(self.logit_samples, dtype=np.float64)
            if samples.ndim != 3 or samples.shape[1:] != mean.shape:
                raise ValueError(
                    f"logit_samples must have shape (S, {mean.shape[0]}, {mean.shape[1]}), "
                    f"got {samples.shape}.")
            object.__setattr__(self, "logit_samples", samples)
        elif self.link == "nn":
            raise ValueError('link="nn" requires logit_samples.')

    @property
    def logit_var(self):
        """Variance of each label's logit, the diagonal of ``logit_cov``; shape (n, L)."""
        return np.diagonal(self.logit_cov, axis1=1, axis2=2).copy()

    @cached_property
    def _marginal_draws(self):
        """Sigmoids of draws of each logit, shape (n, S, L): ``logit_samples``, or each
        label's marginal N(μ_l, v_l) at ``n_samples`` standard normals shared by all rows
        and labels (common random numbers)."""
        if self.logit_samples is not None:
            return expit(np.swapaxes(self.logit_samples, 0, 1))
        z = np.random.default_rng(self.seed).standard_normal(self.n_samples)
        std = np.sqrt(np.maximum(self.logit_var, 0.0))
        return expit(self.logit_mean[:, None, :] + z[None, :, None] * std[:, None, :])

    def proba(self):
        """Predictive probability of each label under ``link``; shape (n, L).

        Returns
        -------
        proba : ndarray of shape (n_samples, n_labels)
            The expected sigmoid of each label's logit.
        """
        if self.link == "probit":
            return multilabel_probit_proba(self.logit_mean, self.logit_var)
        return self._marginal_draws.mean(axis=1)

    def entropy(self):
        """Entropy in nats of the predictive label vector; shape (n,).

        The sum over the labels of each one's Bernoulli entropy under :meth:`proba`: the
        entropy of the labels taken as independent given the row.

        Returns
        -------
        entropy : ndarray of shape (n_samples,)
            Total predictive uncertainty of each row.
        """
        return label_entropy(self.proba())

    def mutual_information(self):
        """Epistemic uncertainty ``H[E p] − E[H p]`` summed over the labels; shape (n,).

        Both terms of each label come from the same draws of its logit (``logit_samples``
        when given, else ``n_samples`` draws from ``seed``), so each label's term is never
        negative.

        Returns
        -------
        mutual_information : ndarray of shape (n_samples,)
            Mutual information in nats between the labels and the logits.
        """
        p = self._marginal_draws
        per_label = _binary_entropy(p.mean(axis=1)) - _binary_entropy(p).mean(axis=1)
        return np.maximum(per_label, 0.0).sum(axis=1)

    def sample(self, n_samples=1, random_state=None):
        """Draw logits from ``N(logit_mean, logit_cov)`` (jointly over the labels).

        Parameters
        ----------
        n_samples : int, default=1
            Number of draws.
        random_state : int, RandomState instance or None, default=None
            Seed or generator, as in scikit-learn.

        Returns
        -------
        samples : ndarray of shape (n_samples, n, L)
            Draws of the logits of each row.
        """
        n_samples = _check_n_samples(n_samples)
        rng = check_random_state(random_state)
        z = rng.standard_normal((n_samples, *self.logit_mean.shape))
        return self.logit_mean + np.einsum("nij,snj->sni", _psd_sqrt(self.logit_cov), z)

    def dirichlet(self):
        """Not defined for multilabel predictions: always raises.

        The Laplace bridge maps a Gaussian over the logits of one softmax to a Dirichlet
        over its classes, whose probabilities sum to one; the labels of a row do not.

        Raises
        ------
        ValueError
            Always.
        """
        raise ValueError(
            "dirichlet() (the Laplace bridge) and its top_k_sets model one class per row; a "
            "multilabel predictive has one sigmoid per label. Use proba() for each label's "
            "probability, or sample() for joint draws of the logits.")


# ---------------------------------------------------------------- the targets of a fit
def multilabel_targets(estimator, X, y, sample_weight):
    """(X, y as a float64 (n, L) indicator, sample_weight) of a multilabel ``fit``, rows of
    zero weight dropped; refuses what has no multilabel meaning (``class_weight``)."""
    from .estimators._validation import check_fit_weight, validate_numeric, without_zero_weights

    X, y = validate_numeric(estimator, X, y, multi_output=True,
                            dtype=[np.float64, np.float32])
    y = np.asarray(y.toarray() if hasattr(y, "toarray") else y)
    if not np.isin(y, (0, 1)).all():
        raise ValueError(
            "A multilabel y must be an indicator matrix of 0 and 1 (one column per label, "
            f"as MLPClassifier takes); got the values {np.unique(y)[:10].tolist()}.")
    if estimator.link_approx == "bridge":
        raise ValueError(
            "link_approx='bridge' (the Laplace bridge's Dirichlet over the classes of one "
            "softmax) has no multilabel meaning; y is an indicator matrix: use 'probit' or "
            "'mc', applied to each label's logit.")
    if estimator.class_weight is not None:
        raise ValueError(
            "class_weight weighs the classes of a single label per row; y is an indicator "
            "matrix (multilabel), whose rows have several labels. Weigh rows with "
            "sample_weight instead.")
    sample_weight = check_fit_weight(sample_weight, X)
    return without_zero_weights(X, y.astype(np.float64), sample_weight)


def accepts_indicator(estimator):
    """Whether a ``fit`` of these parameters takes an indicator y (the ``multi_label``
    tag): not with what a multilabel fit refuses by parameter (``link_approx="bridge"``,
    ``class_weight``, ``model_averaging``, a net whose criterion is not BCEWithLogitsLoss)."""
    from sklearn.frozen import FrozenEstimator

    from ._laplace import nets

    if (estimator.link_approx == "bridge" or estimator.class_weight is not None
            or estimator.model_averaging):
        return False
    net = estimator.net.estimator if isinstance(estimator.net, FrozenEstimator) else estimator.net
    if net is None:
        return True
    try:
        return nets.likelihood_of(net) in ("bernoulli", "multilabel")
    except (ValueError, AttributeError):  # fit names the criterion problem
        return False


def multilabel_likelihood(name):
    """The likelihood of a multilabel fit whose net's criterion stands for ``name``
    (None: the default MLP)."""
    from ._laplace import likelihoods

    if name == "categorical":
        raise ValueError(
            "y is an indicator matrix (multilabel) but the net's criterion CrossEntropyLoss "
            "models one class per row; use BCEWithLogitsLoss with one output per label.")
    return likelihoods.get("multilabel")


# Documented and shown as sklaplace.distributions.<name>, where users import it (the class
# keeps its module, as DirichletPrediction does: its source is found there).
multilabel_probit_proba.__module__ = "sklaplace.distributions"
