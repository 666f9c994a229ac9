"""Display objects for calibration and OOD diagnostics, in the style of scikit-learn's.

Each Display stores the computed values, draws them with ``plot(ax=None, ...)`` and is
usually built with ``from_estimator`` or ``from_predictions`` / ``from_scores``, like
:class:`sklearn.calibration.CalibrationDisplay`. matplotlib is optional and imported only
when something is drawn.
"""

import numpy as np

from ._display import _axes, _estimator_name, _pyplot
from ._evidence_curve import EvidenceCurveDisplay
from ._ood_histogram import OODHistogramDisplay
from ..metrics import regression_calibration_curve, reliability_curve
from ..ood import _final_step, _last_step

__all__ = ["ReliabilityDisplay", "RegressionCalibrationDisplay", "OODHistogramDisplay",
           "EvidenceCurveDisplay"]


def _plot_identity(ax, label):
    """Draw the y = x reference line once per Axes."""
    if label not in ax.get_legend_handles_labels()[1]:
        ax.plot([0, 1], [0, 1], "k:", label=label)


def _plot_curve(display, x, y, *, ax, name, ref_line, marker, kwargs, xlabel, ylabel):
    """A calibration curve on the unit square with the diagonal; sets line_, ax_, figure_."""
    display.ax_, display.figure_ = _axes(ax, f"{type(display).__name__}.plot")
    name = display.estimator_name if name is None else name
    line_kwargs = {"marker": marker, "linestyle": "-"}
    if name is not None:
        line_kwargs["label"] = name
    line_kwargs.update(kwargs)
    if ref_line:
        _plot_identity(display.ax_, "Perfectly calibrated")
    (display.line_,) = display.ax_.plot(x, y, **line_kwargs)
    if display.ax_.get_legend_handles_labels()[1]:
        display.ax_.legend(loc="lower right")
    display.ax_.set(xlabel=xlabel, ylabel=ylabel, xlim=(-0.02, 1.02), ylim=(-0.02, 1.02))
    return display


class ReliabilityDisplay:
    """Top-label reliability diagram of a classifier.

    Plots the accuracy against the mean confidence (max predicted probability) in each
    non-empty confidence bin; a calibrated classifier lies on the diagonal. Create it with
    :meth:`from_estimator` or :meth:`from_predictions`.

    Parameters
    ----------
    confidence : ndarray of shape (n_bins,)
        Mean confidence per bin.
    accuracy : ndarray of shape (n_bins,)
        Accuracy per bin.
    counts : ndarray of shape (n_bins,)
        Number of samples per bin.
    estimator_name : str, default=None
        Name used in the legend. If None, no label is shown.

    Attributes
    ----------
    line_ : matplotlib Line2D
        The reliability curve.
    ax_ : matplotlib Axes
        Axes with the curve.
    figure_ : matplotlib Figure
        Figure containing the curve.

    See Also
    --------
    sklaplace.metrics.reliability_curve : The binned confidence and accuracy plotted here.
    sklaplace.metrics.expected_calibration_error : The calibration error of the same bins.
    """

    def __init__(self, confidence, accuracy, counts, *, estimator_name=None):
        self.confidence = confidence
        self.accuracy = accuracy
        self.counts = counts
        self.estimator_name = estimator_name

    def plot(self, ax=None, *, name=None, ref_line=True, **kwargs):
        """Plot the reliability curve.

        Parameters
        ----------
        ax : matplotlib Axes, default=None
            Axes to plot on; a new figure is created if None.
        name : str, default=None
            Legend label; defaults to ``estimator_name``.
        ref_line : bool, default=True
            Draw the diagonal of perfect calibration.
        **kwargs : dict
            Passed to :meth:`matplotlib.axes.Axes.plot`.

        Returns
        -------
        display : ReliabilityDisplay
            The display, with the plot drawn (``ax_``, ``figure_``).
        """
        return _plot_curve(self, self.confidence, self.accuracy, ax=ax, name=name,
                           ref_line=ref_line, marker="s", kwargs=kwargs,
                           xlabel="Confidence (top-label probability)", ylabel="Accuracy")

    @classmethod
    def from_predictions(
        cls,
        y_true,
        y_prob,
        *,
        n_bins=10,
        strategy="uniform",
        labels=None,
        sample_weight=None,
        name=None,
        ax=None,
        ref_line=True,
        **kwargs,
    ):
        """Plot a reliability diagram from labels and predicted probabilities.

        Parameters
        ----------
        y_true : array-like of shape (n_samples,)
            True labels: the columns of ``y_prob`` are the sorted labels of ``labels``, else
            of ``y_true`` (as in :func:`sklearn.metrics.log_loss`); integers
            ``0 .. n_classes-1`` without ``labels`` are column indices.
        y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
            Predicted probabilities; 1-D means P(class 1) of a binary problem.
        n_bins : int, default=10
            Number of confidence bins.
        strategy : {"uniform", "quantile"}, default="uniform"
            Equal-width or equal-mass bins, see :func:`~sklaplace.metrics.reliability_curve`.
        labels : array-like of shape (n_classes,), default=None
            The labels of the columns of ``y_prob`` (in sorted order), e.g. ``classes_``.
        sample_weight : array-like of shape (n_samples,), default=None
            Sample weights: bins hold weight instead of counts.
        name : str, default=None
            Legend label.
        ax : matplotlib Axes, default=None
            Axes to plot on; a new figure is created if None.
        ref_line : bool, default=True
            Draw the diagonal of perfect calibration.
        **kwargs : dict
            Passed to :meth:`matplotlib.axes.Axes.plot`.

        Returns
        -------
        display : ReliabilityDisplay
            The display, with the plot drawn (``ax_``, ``figure_``).
        """
        _pyplot(f"{cls.__name__}.from_predictions")
        confidence, accuracy, counts = reliability_curve(
            y_true, y_prob, n_bins=n_bins, strategy=strategy, labels=labels,
            sample_weight=sample_weight,
        )
        disp = cls(confidence, accuracy, counts, estimator_name=name)
        return disp.plot(ax=ax, ref_line=ref_line, **kwargs)

    @classmethod
    def from_estimator(
        cls,
        estimator,
        X,
        y,
        *,
        n_bins=10,
        strategy="uniform",
        sample_weight=None,
        name=None,
        ax=None,
        ref_line=True,
        **kwargs,
    ):
        """Plot a reliability diagram of a fitted classifier on data.

        Parameters
        ----------
        estimator : fitted classifier or Pipeline ending in one
            Needs ``predict_proba`` and ``classes_`` (of the last step for a Pipeline).
        X : array-like of shape (n_samples, n_features)
            Inputs.
        y : array-like of shape (n_samples,)
            True labels, in the values of ``classes_``.
        n_bins : int, default=10
            Number of confidence bins.
        strategy : {"uniform", "quantile"}, default="uniform"
            Equal-width or equal-mass bins.
        sample_weight : array-like of shape (n_samples,), default=None
            Sample weights: bins hold weight instead of counts.
        name : str, default=None
            Legend label; defaults to the class name of the (last) estimator.
        ax : matplotlib Axes, default=None
            Axes to plot on; a new figure is created if None.
        ref_line : bool, default=True
            Draw the diagonal of perfect calibration.
        **kwargs : dict
            Passed to :meth:`matplotlib.axes.Axes.plot`.

        Returns
        -------
        display : ReliabilityDisplay
            The display, with the plot drawn (``ax_``, ``figure_``).
        """
        _pyplot(f"{cls.__name__}.from_estimator")
        final = _last_step(estimator)
        classes = np.asarray(final.classes_)
        y = np.asarray(y)
        y_idx = np.clip(np.searchsorted(classes, y), 0, len(classes) - 1)
        if not np.all(classes[y_idx] == y):
            unknown = np.setdiff1d(y, classes)
            raise ValueError(f"y contains labels not in the estimator's classes_: {unknown}.")
        y_prob = estimator.predict_proba(X)
        name = _estimator_name(estimator) if name is None else name
        return cls.from_predictions(
            y_idx,
            y_prob,
            n_bins=n_bins,
            strategy=strategy,
            sample_weight=sample_weight,
            name=name,
            ax=ax,
            ref_line=ref_line,
            **kwargs,
        )


class RegressionCalibrationDisplay:
    """Quantile calibration curve of a Gaussian regressor (Kuleshov et al., 2018).

    Plots the observed fraction of targets below the predicted ``p``-quantile against
    ``p``. A calibrated regressor lies on the diagonal; a curve flatter than the diagonal
    (above it for ``p < 0.5``, below it for ``p > 0.5``) means predictive intervals that are
    too narrow (over-confidence), a steeper one intervals that are too wide.

    Parameters
    ----------
    expected : ndarray of shape (n_levels,)
        Levels ``p_j``.
    observed : ndarray of shape (n_levels,)
        Observed frequencies of ``y <= F^{-1}(p_j)``.
    estimator_name : str, default=None
        Name used in the legend. If None, no label is shown.

    Attributes
    ----------
    line_ : matplotlib Line2D
        The calibration curve.
    ax_ : matplotlib Axes
        Axes with the curve.
    figure_ : matplotlib Figure
        Figure containing the curve.

    See Also
    --------
    sklaplace.metrics.regression_calibration_curve : The curve plotted here.
    sklaplace.metrics.regression_calibration_error : The calibration error of that curve.
    """

    def __init__(self, expected, observed, *, estimator_name=None):
        self.expected = expected
        self.observed = observed
        self.estimator_name = estimator_name

    def plot(self, ax=None, *, name=None, ref_line=True, **kwargs):
        """Plot the calibration curve.

        Parameters
        ----------
        ax : matplotlib Axes, default=None
            Axes to plot on; a new figure is created if None.
        name : str, default=None
            Legend label; defaults to ``estimator_name``.
        ref_line : bool, default=True
            Draw the diagonal of perfect calibration.
        **kwargs : dict
            Passed to :meth:`matplotlib.axes.Axes.plot`.

        Returns
        -------
        display : RegressionCalibrationDisplay
            The display, with the plot drawn (``ax_``, ``figure_``).
        """
        return _plot_curve(self, self.expected, self.observed, ax=ax, name=name,
                           ref_line=ref_line, marker="o", kwargs=kwargs,
                           xlabel="Expected proportion below the predicted quantile",
                           ylabel="Observed proportion")

    @classmethod
    def from_predictions(
        cls, y_true, mean, std, *, n_levels=10, sample_weight=None, name=None, ax=None,
        ref_line=True, **kwargs
    ):
        """Plot the calibration curve from targets and Gaussian predictions.

        Parameters
        ----------
        y_true : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Targets.
        mean : array-like of the shape of ``y_true``
            Predictive means.
        std : array-like broadcastable to the shape of ``y_true``
            Predictive standard deviations (> 0).
        n_levels : int, default=10
            Number of levels ``p_j = (j - 1/2) / n_levels``.
        sample_weight : array-like of shape (n_samples,), default=None
            Sample weights (one per row): weighted observed frequencies.
        name : str, default=None
            Legend label.
        ax : matplotlib Axes, default=None
            Axes to plot on; a new figure is created if None.
        ref_line : bool, default=True
            Draw the diagonal of perfect calibration.
        **kwargs : dict
            Passed to :meth:`matplotlib.axes.Axes.plot`.

        Returns
        -------
        display : RegressionCalibrationDisplay
            The display, with the plot drawn (``ax_``, ``figure_``).
        """
        _pyplot(f"{cls.__name__}.from_predictions")
        expected, observed = regression_calibration_curve(
            y_true, mean, std, n_levels=n_levels, sample_weight=sample_weight
        )
        disp = cls(expected, observed, estimator_name=name)
        return disp.plot(ax=ax, ref_line=ref_line, **kwargs)

    @classmethod
    def from_estimator(
        cls, estimator, X, y, *, n_levels=10, sample_weight=None, name=None, ax=None,
        ref_line=True, **kwargs
    ):
        """Plot the calibration curve of a fitted regressor on data.

        Parameters
        ----------
        estimator : fitted regressor or Pipeline ending in one
            Its (last step's) ``predict(X, return_std=True)`` gives mean and std.
        X : array-like of shape (n_samples, n_features)
            Inputs.
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Targets.
        n_levels : int, default=10
            Number of levels ``p_j = (j - 1/2) / n_levels``.
        sample_weight : array-like of shape (n_samples,), default=None
            Sample weights (one per row): weighted observed frequencies.
        name : str, default=None
            Legend label; defaults to the class name of the (last) estimator.
        ax : matplotlib Axes, default=None
            Axes to plot on; a new figure is created if None.
        ref_line : bool, default=True
            Draw the diagonal of perfect calibration.
        **kwargs : dict
            Passed to :meth:`matplotlib.axes.Axes.plot`.

        Returns
        -------
        display : RegressionCalibrationDisplay
            The display, with the plot drawn (``ax_``, ``figure_``).
        """
        _pyplot(f"{cls.__name__}.from_estimator")
        final, Xt = _final_step(estimator, X)
        mean, std = final.predict(Xt, return_std=True)
        name = type(final).__name__ if name is None else name
        return cls.from_predictions(
            y, mean, std, n_levels=n_levels, sample_weight=sample_weight, name=name, ax=ax,
            ref_line=ref_line, **kwargs
        )
