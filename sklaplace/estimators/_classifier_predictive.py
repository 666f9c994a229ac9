"""The classifier's predictive: class probabilities from the fitted Laplace approximation.

The GLM predictive's logit Gaussian N(f(x), J(x) Σ J(x)ᵀ) per row chunk
(``laplace_.per_chunk``), then the link (``link_approx``: the mean-field probit, the
Laplace bridge or Monte Carlo) by blocks of rows; ``pred_type="nn"``: the softmax of the
net at weight samples. The same links score the held-out rows of ``"cv"`` tuning
(:meth:`_held_out_scorers`). ``LaplaceClassifier`` inherits these methods.
"""

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted

from . import _averaging as averaging
from .._laplace.fitted import by_rows, generator
from ._dask import lazy_on_dask, refuse_dask
from .._laplace.workflow import torch_entry_point
from ._threads import thread_policy
from .._multilabel import MultilabelPrediction, multilabel_nll, multilabel_probit_proba
from ..distributions import LogitGaussianPrediction, binary_probit_proba, probit_link


def _label_nll(proba, y):
    """−log of the probability of each row's label (``y`` encoded, a tensor)."""
    picked = proba[np.arange(len(proba)), y.cpu().numpy().astype(int)]
    return -np.log(np.maximum(picked, np.finfo(float).tiny))


@dataclass(frozen=True)
class Link:
    """The link of one fit: logit moments (tensors) → class probabilities.

    ``approx``: ``link_approx``; ``single_logit``: one Bernoulli logit (else one per
    class); ``n_samples`` and ``seed``: the draws of ``"mc"`` (the fit's prediction seed);
    ``multilabel``: one Bernoulli logit per label (an indicator matrix), each label's
    probability from its own logit.
    """

    approx: str
    single_logit: bool
    n_samples: int
    seed: int
    multilabel: bool = False

    def dist(self, mean, cov, link=None, samples=None):
        """The logit Gaussian of the moments under ``link`` (default ``approx``)."""
        if self.multilabel:
            return MultilabelPrediction(
                logit_mean=mean.cpu().numpy(), logit_cov=cov.cpu().numpy(),
                link=self.approx if link is None else link, n_samples=self.n_samples,
                seed=self.seed, logit_samples=None if samples is None else samples.cpu().numpy())
        if self.single_logit:  # one Bernoulli logit f ↦ the two logits (−f/2, f/2)
            mean = torch.cat([-mean / 2, mean / 2], dim=1)
            v = cov[:, 0, 0] / 4
            cov = torch.stack([torch.stack([v, -v], -1), torch.stack([-v, v], -1)], -2)
            if samples is not None:
                samples = torch.cat([-samples / 2, samples / 2], dim=2)
        return LogitGaussianPrediction(
            logit_mean=mean.cpu().numpy(), logit_cov=cov.cpu().numpy(),
            link=self.approx if link is None else link, n_samples=self.n_samples,
            seed=self.seed, single_logit=self.single_logit,
            logit_samples=None if samples is None else samples.cpu().numpy(),
        )

    def sampled_dist(self, samples):
        """The predictive of logit draws (S, n, C) of sampled weights (``link="nn"``)."""
        mean = samples.mean(0)
        centered = samples - mean
        cov = torch.einsum("snc,snd->ncd", centered, centered) / max(1, len(samples) - 1)
        return self.dist(mean, cov, "nn", samples)

    def row_bytes(self, n_outputs, n_draws=None):
        """Bytes per row the link allocates (numpy float64): the logit covariance, its
        square root and their temporaries, and the (draws, C) logits of ``"mc"`` (or of
        ``n_draws`` weight samples), their softmax and its temporaries."""
        C = max(2, n_outputs)
        if n_draws is None:
            n_draws = self.n_samples if self.approx == "mc" else 0
        return 32 * C * (C + n_draws)

    def proba(self, mean, cov):
        """Predictive probabilities of the GLM moments of a block of rows."""
        if self.approx == "probit":
            # dist(mean, cov).proba() without building the logit Gaussian: same numbers.
            mean, cov = mean.cpu().numpy(), cov.cpu().numpy()
            if self.multilabel:
                return multilabel_probit_proba(mean, np.diagonal(cov, axis1=1, axis2=2))
            if self.single_logit:
                return binary_probit_proba(mean[:, 0], np.maximum(cov[:, 0, 0], 0.0))
            return probit_link(mean, cov)
        return self.dist(mean, cov).proba()

    def proba_by_rows(self, mean, cov):
        """:meth:`proba` of any number of rows, by blocks within the prediction chunk."""
        return by_rows(self.proba, (mean, cov), self.row_bytes(mean.shape[1]))

    def scorers(self):
        """NLLs of held-out labels under the GLM moments' and the logit draws' predictive
        (multilabel: summed over the labels of a row)."""
        if self.multilabel:
            return (lambda f, cov, y: multilabel_nll(self.proba_by_rows(f, cov), y.cpu()),
                    lambda samples, y: multilabel_nll(self.sampled_dist(samples).proba(),
                                                      y.cpu()))
        return (lambda f, cov, y: _label_nll(self.proba_by_rows(f, cov), y),
                lambda samples, y: _label_nll(self.sampled_dist(samples).proba(), y))


class ClassifierPredictive:
    """Prediction methods of :class:`~sklaplace.LaplaceClassifier` (a mixin)."""

    @refuse_dask
    @thread_policy
    @torch_entry_point
    def predict_dist(self, X):
        """The Gaussian over logits of the Laplace predictive.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input samples.

        Returns
        -------
        dist : LogitGaussianPrediction, MultilabelPrediction or CategoricalMixturePrediction
            ``dist.proba()`` equals ``predict_proba(X)``. Multilabel: a
            ``MultilabelPrediction``, the Gaussian over the labels' logits with
            one sigmoid per label. ``model_averaging=True``: the mixture of the
            candidates' predictives.
        """
        check_is_fitted(self)
        if averaging.averaged(self):
            return averaging.classifier_dist(self, X)
        Xt, fitted = self._X_tensor(X), self.laplace_
        if self.pred_type == "nn":
            samples = fitted.nn_samples(Xt, self.n_samples, generator(fitted.prediction_seed))
            return self._link().sampled_dist(samples)
        mean, cov = fitted.glm_moments(Xt)
        return self._link().dist(mean, cov)

    @property
    def _multilabel(self):
        """Whether the fit is multilabel (one sigmoid per label of an indicator y)."""
        return self.laplace_.likelihood.multilabel

    def _link(self, likelihood=None, seed=None):
        """The :class:`Link` of the fit (or of ``likelihood`` and ``seed`` during one)."""
        fitted = self.__dict__.get("laplace_")
        likelihood = fitted.likelihood if likelihood is None else likelihood
        return Link(self.link_approx, likelihood.single_logit, self.n_samples,
                    fitted.prediction_seed if seed is None else seed, likelihood.multilabel)

    @lazy_on_dask
    @thread_policy
    @torch_entry_point
    def predict_proba(self, X):
        """Laplace predictive class probabilities, columns in ``classes_`` order.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input samples.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Predictive probability of each class; rows sum to 1. Multilabel:
            each label's probability (rows need not sum to 1).
        """
        check_is_fitted(self)
        if averaging.averaged(self):
            return averaging.proba(self, X)
        Xt, fitted, link = self._X_tensor(X), self.laplace_, self._link()
        if self.pred_type in ("glm", "gp"):
            # moments per row chunk (their buffers freed but the (rows, C, C) covariance),
            # then the link by blocks of those rows within the chunk size again
            C = fitted.n_outputs
            return fitted.per_chunk(Xt, link.proba_by_rows, 8 * C * C)
        link_bytes = link.row_bytes(fitted.n_outputs, self.n_samples)
        return fitted.nn_per_chunk(Xt, lambda s: link.sampled_dist(s).proba(), self.n_samples,
                                   link_bytes)

    @lazy_on_dask
    @torch_entry_point
    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input samples.

        Returns
        -------
        log_proba : ndarray of shape (n_samples, n_classes)
            Log predictive probability of each class (``-inf`` where it is 0).
        """
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    @lazy_on_dask
    @torch_entry_point
    def decision_function(self, X):
        """Compute the log-odds of the Laplace predictive.

        Binary: log p₁ − log p₀, shape (n_samples,); multi-class: ``predict_log_proba``;
        multilabel: the mean of each label's logit (of the GLM predictive, or of the
        sampled nets' logits), shape (n_samples, n_labels), positive where the probit
        probability exceeds 0.5.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input samples.

        Returns
        -------
        scores : ndarray of shape (n_samples,) or (n_samples, n_classes)
            Log-odds of ``classes_[1]`` for two classes, the logit means per
            label for a multilabel fit, else the log probabilities.
        """
        check_is_fitted(self)
        if self._multilabel:
            return self.predict_dist(X).logit_mean
        log_proba = self.predict_log_proba(X)
        if len(self.classes_) == 2:
            return log_proba[:, 1] - log_proba[:, 0]
        return log_proba

    @lazy_on_dask
    @thread_policy
    @torch_entry_point
    def predict(self, X):
        """Predict the class of largest Laplace predictive probability.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input samples.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,) or (n_samples, n_labels)
            Predicted class labels, from ``classes_``; multilabel: the indicator
            matrix of the labels whose probability exceeds 0.5.
        """
        check_is_fitted(self)
        if self._multilabel:  # the indicator matrix, as MLPClassifier's
            return (self.predict_proba(X) > 0.5).astype(int)
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    @refuse_dask
    @thread_policy
    @torch_entry_point
    def sample_functions(self, X, n_samples=1, random_state=None):
        """Draw logit functions from the posterior.

        GLM: f(x, θ*) + J(x)(θ − θ*); ``pred_type="nn"``: f(x, θ).
        ``model_averaging=True``: each draw from one candidate, drawn by its weight.

        Parameters
        ----------
        X : array-like of shape (n_rows, n_features)
            Input samples.
        n_samples : int, default=1
            Number of functions drawn.
        random_state : int, RandomState instance or None, default=None
            Seed of the draws, as in scikit-learn.

        Returns
        -------
        samples : ndarray of shape (n_samples, n_rows, n_outputs)
            The logits of each drawn function at each row (one output for a
            Bernoulli likelihood, else one per class).
        """
        return self._function_samples(X, n_samples, random_state).cpu().numpy()

    @refuse_dask
    @thread_policy
    @torch_entry_point
    def sample_proba(self, X, n_samples=100, random_state=None):
        """Draw class probabilities from the posterior predictive.

        Each draw is one function from the posterior (:meth:`sample_functions`: the
        GLM f(x, θ*) + J(x)(θ − θ*), or the net at θ with ``pred_type="nn"``) through
        the softmax (sigmoid for one Bernoulli logit or per label), the same function
        on every row: draws are joint over the rows, as a committee of networks
        would give, which batch strategies such as BatchBALD need. Their mean is the
        Monte Carlo predictive (``link_approx="mc"``), not the probit's
        approximation of it. This is the method scikit-activeml's BALD strategies
        call (``sample_predictions_method_name="sample_proba"``).

        Parameters
        ----------
        X : array-like of shape (n_rows, n_features)
            Input samples.
        n_samples : int, default=100
            Number of draws.
        random_state : int, RandomState instance or None, default=None
            Seed of the draws, as in scikit-learn.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_rows, n_classes)
            The class probabilities of each draw, columns in ``classes_`` order
            (multilabel: each label's probability, (n_samples, n_rows, n_labels)).
        """
        logits = self._function_samples(X, n_samples, random_state)
        if self._multilabel:
            return torch.sigmoid(logits).cpu().numpy()
        if self.laplace_.likelihood.single_logit:
            p1 = torch.sigmoid(logits[..., 0])
            return torch.stack([torch.sigmoid(-logits[..., 0]), p1], dim=-1).cpu().numpy()
        return torch.softmax(logits, dim=-1).cpu().numpy()

    @thread_policy
    @torch_entry_point
    def log_evidence(self, prior_precision=None):
        """Laplace log marginal likelihood at the fitted or given prior precision.

        Parameters
        ----------
        prior_precision : float or array-like, default=None
            Whole-net form as the constructor parameter; ``None`` uses
            ``prior_precision_``.

        Returns
        -------
        log_evidence : float
            The Laplace approximation of log p(y | X) at that prior precision
            (after ``partial_fit``: of the last task given the earlier ones).
        """
        return self._log_evidence(prior_precision, None)

    def _held_out_scorers(self, likelihood, seed):
        """NLLs of held-out labels under this fit's link (:meth:`Link.scorers`)."""
        return self._link(likelihood, seed).scorers()
