"""``OODHistogramDisplay``: histograms of the OOD scores of in- and out-of-distribution
inputs (re-exported by :mod:`sklaplace.plotting`)."""

import numpy as np

from ._display import _axes, _estimator_name, _pyplot
from ..ood import ood_scores


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
