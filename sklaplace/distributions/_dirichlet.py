"""``DirichletPrediction``: a Dirichlet over the class probabilities (re-exported by
:mod:`sklaplace.distributions`), e.g. the Laplace bridge of a Gaussian over the logits."""

from dataclasses import dataclass

import numpy as np
from scipy import stats
from scipy.special import digamma, gammaln, softmax
from sklearn.utils import check_random_state

from .._checks import _check_confidence, _check_n_samples
from ._scipy_like import _RowsMixin


@dataclass(frozen=True, eq=False)
class DirichletPrediction(_RowsMixin):
    """Dirichlet over class probabilities, e.g. from the Laplace bridge.

    ``dist[rows]`` (an integer, a slice, a boolean mask or an index array) is the Dirichlet
    of those rows (an integer keeps the row axis); ``len(dist)`` is the number of rows.

    Parameters
    ----------
    alpha : ndarray of shape (n_samples, n_classes)
        Positive concentration parameters.
    """

    alpha: np.ndarray

    _ROW_FIELDS = ("alpha",)

    def __post_init__(self):
        alpha = np.asarray(self.alpha, dtype=np.float64)
        if alpha.ndim != 2:
            raise ValueError(f"alpha must have shape (n_samples, n_classes), got {alpha.shape}.")
        if not (np.all(np.isfinite(alpha)) and np.all(alpha > 0)):
            raise ValueError("alpha must be finite and positive.")
        object.__setattr__(self, "alpha", alpha)

    @property
    def precision(self):
        """Precision ``alpha_0``, the row sum of ``alpha``; shape (n_samples,)."""
        return self.alpha.sum(axis=1)

    @property
    def mean(self):
        """Expected class probabilities ``alpha / alpha_0``; shape (n_samples, n_classes)."""
        return self.alpha / self.precision[:, None]

    @property
    def var(self):
        """Marginal variances of the class probabilities; shape (n_samples, n_classes)."""
        mean = self.mean  # α_k (α_0 − α_k) / (α_0² (α_0 + 1)), without squaring α_0
        return mean * (1.0 - mean) / (self.precision[:, None] + 1.0)

    def marginal(self, k):
        """Marginal of class ``k``: frozen ``scipy.stats.beta(alpha_k, alpha_0 - alpha_k)``.

        Parameters
        ----------
        k : int
            Column index of the class.

        Returns
        -------
        beta : scipy.stats.rv_continuous frozen distribution
            The Beta marginal of the probability of class ``k``, one per row.
        """
        a_k = self.alpha[:, k]
        return stats.beta(a_k, self.precision - a_k)

    def entropy(self):
        """Differential entropy of the Dirichlet of each row; shape (n_samples,).

        Returns
        -------
        entropy : ndarray of shape (n_samples,)
            Differential entropy in nats.
        """
        alpha, a0 = self.alpha, self.precision
        n_classes = alpha.shape[1]
        log_beta = gammaln(alpha).sum(axis=1) - gammaln(a0)
        return (
            log_beta
            + (a0 - n_classes) * digamma(a0)
            - ((alpha - 1.0) * digamma(alpha)).sum(axis=1)
        )

    def sample(self, n_samples=1, random_state=None):
        """Draw probability vectors.

        Normalized gamma draws, computed in log space with
        ``Gamma(a) = Gamma(a + 1) * U**(1 / a)`` so that small concentrations do not
        underflow to all-zero rows.

        Parameters
        ----------
        n_samples : int, default=1
            Number of draws.
        random_state : int, RandomState instance or None, default=None
            Seed or generator, as in scikit-learn.

        Returns
        -------
        samples : ndarray of shape (n_samples, n_rows, n_classes)
            Rows sum to one.

        Raises
        ------
        ValueError
            If ``n_samples`` is not a positive integer.
        """
        n_samples = _check_n_samples(n_samples)
        rng = check_random_state(random_state)
        size = (n_samples, *self.alpha.shape)
        log_gamma = np.log(rng.standard_gamma(self.alpha + 1.0, size=size))
        log_gamma += np.log1p(-rng.uniform(size=size)) / self.alpha
        return softmax(log_gamma, axis=-1)

    def top_k_sets(self, confidence=0.95):
        """Uncertainty-aware top-k sets (Hobbhahn et al., Alg. 1).

        Classes are sorted by ``alpha``. Starting from the top class, class ``i`` is
        added while the upper ``1 - T/2`` quantile of its Beta marginal exceeds the
        lower ``T/2`` quantile of class ``i - 1``, with ``T = 1 - confidence``.

        Parameters
        ----------
        confidence : float, default=0.95
            In (0, 1).

        Returns
        -------
        mask : ndarray of bool, shape (n_samples, n_classes)
            Set membership in the original column order.

        Raises
        ------
        ValueError
            If ``confidence`` is not in (0, 1).
        """
        tail = (1.0 - _check_confidence(confidence)) / 2.0
        n_rows, n_classes = self.alpha.shape
        order = np.argsort(-self.alpha, axis=1, kind="stable")
        sorted_alpha = np.take_along_axis(self.alpha, order, axis=1)
        rest = self.precision[:, None] - sorted_alpha
        keep = np.zeros((n_rows, n_classes), dtype=bool)
        keep[:, 0] = True
        if n_classes > 1:
            lower = stats.beta.ppf(tail, sorted_alpha[:, :-1], rest[:, :-1])
            upper = stats.beta.ppf(1.0 - tail, sorted_alpha[:, 1:], rest[:, 1:])
            keep[:, 1:] = np.logical_and.accumulate(upper > lower, axis=1)
        mask = np.empty_like(keep)
        np.put_along_axis(mask, order, keep, axis=1)
        return mask
