"""``EvidenceCurveDisplay``: the log evidence and the held-out NLL against the prior
precision δ, with the chosen δ marked (re-exported by :mod:`sklaplace.plotting`)."""

import numpy as np
from sklearn.metrics import log_loss
from sklearn.utils.validation import check_is_fitted

from ._display import _pyplot
from .._multilabel import multilabel_nll
from ..metrics import gaussian_nll
from ..ood import _last_step

#: The default δ values: the range of evidence tuning, 10⁻⁴ … 10⁴, in 41 steps.
DEFAULT_PRIOR_PRECISIONS = np.logspace(-4, 4, 41)


def _held_out_nll(estimator, X_val, y_val):
    """Mean NLL of the held-out rows: log loss (classifier; multilabel: the labels' Bernoulli
    NLLs summed per row, as ``"cv"`` tuning scores them) or Gaussian NLL (regressor)."""
    if hasattr(estimator, "predict_proba"):
        proba = estimator.predict_proba(X_val)
        if estimator.laplace_.likelihood.multilabel:
            return float(multilabel_nll(proba, y_val).mean())
        return float(log_loss(y_val, proba, labels=estimator.classes_))
    mean, std = estimator.predict(X_val, return_std=True)
    return float(gaussian_nll(np.asarray(y_val, dtype=float).reshape(mean.shape), mean, std))


class EvidenceCurveDisplay:
    """Log evidence and held-out NLL against the prior precision, the chosen one marked.

    The picture behind the choice of δ: the Laplace log evidence of the fit at each δ
    (``log_evidence(prior_precision=δ)``, at the fitted σ for a regressor) and, given
    held-out rows, their mean negative log-likelihood under the predictive at each δ
    (the same net and curvature, only the prior changes; the estimator is not modified).

    Parameters
    ----------
    prior_precisions : ndarray of shape (n_values,)
        The δ values, increasing.
    log_evidence : ndarray of shape (n_values,)
        The log evidence at each δ.
    validation_nll : ndarray of shape (n_values,) or None
        The mean held-out NLL at each δ, or None without held-out rows.
    prior_precision : float
        The estimator's ``prior_precision_``, marked on the plot.
    estimator_name : str, default=None
        Shown in the title if given.

    Attributes
    ----------
    line_ : matplotlib Line2D
        The log evidence curve.
    nll_line_ : matplotlib Line2D or None
        The held-out NLL curve (on ``ax_nll_``), None without held-out rows.
    chosen_line_ : matplotlib Line2D
        The vertical line at the chosen δ.
    ax_ : matplotlib Axes
        Axes of the log evidence.
    ax_nll_ : matplotlib Axes or None
        The twin Axes of the held-out NLL (its own scale), None without held-out rows.
    figure_ : matplotlib Figure
        Figure containing the curves.

    See Also
    --------
    sklaplace.LaplaceClassifier.log_evidence : The log evidence at a given δ.
    sklaplace.LaplaceRegressor.log_evidence : The same for the regressor.
    """

    def __init__(self, prior_precisions, log_evidence, validation_nll, prior_precision, *,
                 estimator_name=None):
        self.prior_precisions = prior_precisions
        self.log_evidence = log_evidence
        self.validation_nll = validation_nll
        self.prior_precision = prior_precision
        self.estimator_name = estimator_name

    def plot(self, ax=None, *, name=None):
        """Draw the curves on a logarithmic δ axis.

        Parameters
        ----------
        ax : matplotlib Axes, default=None
            Axes to plot on; a new figure is created if None.
        name : str, default=None
            Title; defaults to ``estimator_name``.

        Returns
        -------
        display : EvidenceCurveDisplay
            The display, with the plot drawn (``ax_``, ``figure_``, ...).
        """
        plt = _pyplot(f"{type(self).__name__}.plot")
        if ax is None:
            _, ax = plt.subplots()
        self.ax_, self.figure_ = ax, ax.figure
        (self.line_,) = ax.plot(self.prior_precisions, self.log_evidence, "C0-",
                                label="log evidence")
        ax.set(xscale="log", xlabel="prior precision δ", ylabel="log evidence")
        self.chosen_line_ = ax.axvline(self.prior_precision, color="k", linestyle="--",
                                       label=f"chosen δ = {self.prior_precision:.3g}")
        handles = [self.line_, self.chosen_line_]
        self.ax_nll_ = self.nll_line_ = None
        if self.validation_nll is not None:
            self.ax_nll_ = ax.twinx()
            (self.nll_line_,) = self.ax_nll_.plot(self.prior_precisions, self.validation_nll,
                                                  "C1-", label="held-out NLL")
            self.ax_nll_.set_ylabel("held-out NLL")
            handles.insert(1, self.nll_line_)
        ax.legend(handles=handles, loc="best")
        name = self.estimator_name if name is None else name
        if name is not None:
            ax.set_title(name)
        return self

    @classmethod
    def from_estimator(cls, estimator, X_val=None, y_val=None, prior_precisions=None, ax=None):
        """Compute and plot the curves of a fitted Laplace estimator.

        Parameters
        ----------
        estimator : fitted LaplaceClassifier, LaplaceRegressor or Pipeline ending in one
            Its ``prior_precision_`` must be a single value (``prior_structure="scalar"``).
        X_val : array-like of shape (n_val, n_features), default=None
            Held-out inputs (transformed by a Pipeline's earlier steps); with ``y_val``.
        y_val : array-like of shape (n_val,) or (n_val, n_targets), default=None
            Held-out targets; without them only the log evidence is drawn.
        prior_precisions : array-like of shape (n_values,), default=None
            The δ values; None: 41 values from 10⁻⁴ to 10⁴ (the range of evidence
            tuning) and ``prior_precision_``.
        ax : matplotlib Axes, default=None
            Axes to plot on; a new figure is created if None.

        Returns
        -------
        display : EvidenceCurveDisplay
            The display, with the plot drawn.

        Raises
        ------
        ValueError
            If ``prior_precision_`` is not a single value, only one of ``X_val`` and
            ``y_val`` is given, or ``prior_precisions`` holds a value that is not positive.
        """
        _pyplot(f"{cls.__name__}.from_estimator")
        last = _last_step(estimator)
        check_is_fitted(last)
        chosen = np.asarray(last.prior_precision_, dtype=float)
        if chosen.ndim != 0:
            raise ValueError(
                "EvidenceCurveDisplay draws a single prior precision; this fit has one per "
                "parameter group (prior_structure or an array prior_precision). Refit with "
                "prior_structure='scalar' and a float prior_precision.")
        if (X_val is None) != (y_val is None):
            raise ValueError("Give both X_val and y_val for the held-out NLL, or neither.")
        if prior_precisions is None:
            values = np.union1d(DEFAULT_PRIOR_PRECISIONS, [float(chosen)])
        else:
            values = np.sort(np.asarray(prior_precisions, dtype=float).ravel())
            if values.size == 0 or not np.all(np.isfinite(values)) or np.any(values <= 0):
                raise ValueError("prior_precisions must be positive, finite values; got "
                                 f"{np.asarray(prior_precisions).tolist()!r}.")
        log_ev = np.array([last.log_evidence(prior_precision=float(v)) for v in values])
        nll = None
        if X_val is not None:
            if last is not estimator and len(estimator) > 1:
                X_val = estimator[:-1].transform(X_val)
            nll = np.array([_held_out_nll(last._with_prior(float(v)), X_val, y_val)
                            for v in values])
        display = cls(values, log_ev, nll, float(chosen),
                      estimator_name=type(last).__name__)
        return display.plot(ax=ax)
