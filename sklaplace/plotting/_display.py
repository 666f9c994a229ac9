"""What the Displays share: matplotlib, imported only when something is drawn; the Axes
to draw on; the name of an estimator (the last step of a Pipeline) for the legend."""

from ..ood import _last_step


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
