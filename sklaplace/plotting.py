"""Display objects for calibration and OOD diagnostics, in the style of scikit-learn's.

Each Display stores the computed values, draws them with ``plot(ax=None, ...)`` and is
usually built with ``from_estimator`` or ``from_predictions`` / ``from_scores``, like
:class:`sklearn.calibration.CalibrationDisplay`. matplotlib is optional and imported only
when something is drawn.
"""

import numpy as np

from .metrics import regression_calibration_curve, reliability_curve
from .ood import _final_step, _last_step, ood_scores
from ._evidence_curve import EvidenceCurveDisplay

__all__ = ["ReliabilityDisplay", "RegressionCalibrationDisplay", "OODHistogramDisplay",
           "EvidenceCurveDisplay"]


def _pyplot(caller):
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(f"{caller} requires matplotlib; pip install matplotlib") from exc
    return plt


def _axes(ax, caller):
    plt = _pyplot(caller)
    if ax is None:
        _, ax = plt.subplots()
    return ax, ax.figure




def _estimator_name(estimator):
    return type(_last_step(estimator)).__name__


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


_KIND_LABELS = {
    "max_proba": "1 - max probability",
    "entropy": "predictive entropy (nats)",
    "mutual_information": "mutual information (nats)",
    "dirichlet_precision": "-log Dirichlet precision",
    "std": "predictive std",
}


class OODHistogramDisplay:
    """Histograms of OOD scores for in-distribution and out-of-distribution inputs.

    Scores follow :func:`~sklaplace.metrics.ood_scores`: higher means more likely OOD, so
    a good detector puts the OOD histogram to the right.

    Parameters
    ----------
    scores_in : ndarray of shape (n_in,)
        Scores of in-distribution inputs.
    scores_out : ndarray of shape (n_out,)
        Scores of out-of-distribution inputs.
    kind : str, default=None
        The score kind, used for the x-axis label.
    estimator_name : str, default=None
        Shown in the title if given.

    Attributes
    ----------
    bars_ : list of two matplotlib BarContainer
        The in-distribution and the OOD histogram, in that order (the patches that
        :meth:`~matplotlib.axes.Axes.hist` returns; BarContainers for the default
        ``histtype``).
    ax_ : matplotlib Axes
        Axes with the histograms.
    figure_ : matplotlib Figure
        Figure containing the histograms.

    See Also
    --------
    sklaplace.metrics.ood_scores : The scores plotted here.
    sklaplace.metrics.ood_detection_metrics : AUROC, AUPR and FPR at 95 % TPR of the scores.
    """

    def __init__(self, scores_in, scores_out, *, kind=None, estimator_name=None):
        self.scores_in = scores_in
        self.scores_out = scores_out
        self.kind = kind
        self.estimator_name = estimator_name

    def plot(
        self,
        ax=None,
        *,
        name=None,
        bins=30,
        density=True,
        labels=("in-distribution", "out-of-distribution"),
        **kwargs,
    ):
        """Plot both histograms on shared bins.

        Parameters
        ----------
        ax : matplotlib Axes, default=None
            Axes to plot on; a new figure is created if None.
        name : str, default=None
            Title; defaults to ``estimator_name``.
        bins : int or array-like, default=30
            Number of shared bins over the range of all scores, or the bin edges.
        density : bool, default=True
            Normalize each histogram to unit area (the sets may differ in size).
        labels : tuple of two str, default=("in-distribution", "out-of-distribution")
            Legend labels.
        **kwargs : dict
            Passed to both :meth:`matplotlib.axes.Axes.hist` calls.

        Returns
        -------
        display : OODHistogramDisplay
            The display, with the plot drawn (``ax_``, ``figure_``).
        """
        self.ax_, self.figure_ = _axes(ax, f"{type(self).__name__}.plot")
        scores_in = np.asarray(self.scores_in, dtype=float).ravel()
        scores_out = np.asarray(self.scores_out, dtype=float).ravel()
        edges = np.histogram_bin_edges(np.concatenate([scores_in, scores_out]), bins=bins)
        hist_kwargs = {"alpha": 0.5, "density": density}
        hist_kwargs.update(kwargs)
        self.bars_ = []
        for scores, label in zip((scores_in, scores_out), labels):
            _, _, bars = self.ax_.hist(scores, bins=edges, label=label, **hist_kwargs)
            self.bars_.append(bars)
        self.ax_.legend(loc="best")
        xlabel = "OOD score" + (f": {_KIND_LABELS.get(self.kind, self.kind)}" if self.kind else "")
        self.ax_.set(xlabel=xlabel, ylabel="Density" if density else "Count")
        name = self.estimator_name if name is None else name
        if name is not None:
            self.ax_.set_title(name)
        return self

    @classmethod
    def from_scores(cls, scores_in, scores_out, *, kind=None, name=None, ax=None, **kwargs):
        """Plot histograms of precomputed scores.

        Parameters
        ----------
        scores_in : array-like of shape (n_in,)
            Scores of in-distribution inputs.
        scores_out : array-like of shape (n_out,)
            Scores of out-of-distribution inputs.
        kind : str, default=None
            The score kind, for the axis label.
        name : str, default=None
            Title.
        ax : matplotlib Axes, default=None
            Axes to plot on; a new figure is created if None.
        **kwargs : dict
            Passed to :meth:`plot` (``bins``, ``density``, ``labels``, hist keywords).

        Returns
        -------
        display : OODHistogramDisplay
            The display, with the plot drawn (``ax_``, ``figure_``).
        """
        _pyplot(f"{cls.__name__}.from_scores")
        disp = cls(
            np.asarray(scores_in, dtype=float),
            np.asarray(scores_out, dtype=float),
            kind=kind,
            estimator_name=name,
        )
        return disp.plot(ax=ax, **kwargs)

    @classmethod
    def from_estimator(
        cls, estimator, X_in, X_out, *, kind="max_proba", name=None, ax=None, **kwargs
    ):
        """Plot histograms of :func:`~sklaplace.metrics.ood_scores` on two input sets.

        Parameters
        ----------
        estimator : fitted Laplace estimator or Pipeline ending in one
            Gives the scores through :func:`~sklaplace.metrics.ood_scores`.
        X_in : array-like of shape (n_in, n_features)
            In-distribution inputs.
        X_out : array-like of shape (n_out, n_features)
            Out-of-distribution inputs.
        kind : str, default="max_proba"
            Score kind, see :func:`~sklaplace.metrics.ood_scores`.
        name : str, default=None
            Title; defaults to the class name of the (last) estimator.
        ax : matplotlib Axes, default=None
            Axes to plot on; a new figure is created if None.
        **kwargs : dict
            Passed to :meth:`plot`.

        Returns
        -------
        display : OODHistogramDisplay
            The display, with the plot drawn (``ax_``, ``figure_``).
        """
        _pyplot(f"{cls.__name__}.from_estimator")
        scores_in = ood_scores(estimator, X_in, kind=kind)
        scores_out = ood_scores(estimator, X_out, kind=kind)
        name = _estimator_name(estimator) if name is None else name
        return cls.from_scores(scores_in, scores_out, kind=kind, name=name, ax=ax, **kwargs)
