"""
Noise that depends on the input: aleatoric and epistemic std
============================================================

``y = sin 3x + ε`` with ``σ(x) = 0.05 + 0.4·|x|``, x uniform on [−1, 1], 2,000 training rows.
``LaplaceRegressor(noise="heteroscedastic")`` trains a net whose two outputs are the
natural parameters of the Gaussian (η₁ = μ/σ² and the log precision −log σ²), fits the
Laplace approximation over both heads and predicts, per row, the aleatoric variance
σ²(x) and the epistemic variance of the mean (``predict_dist``). The default
(``noise="homoscedastic"``) has one σ for every row.

Run it as ``python examples/plot_heteroscedastic.py [--plot heteroscedastic.png]``.

The script prints, on 2,000 test rows from the same distribution, the median relative
error of the fitted aleatoric std against the true σ(x), the Gaussian NLL of both
predictives, the coverage of their central 90 % intervals and the RMSE of their means
against sin 3x (had the variance absorbed what the mean should learn, the
heteroscedastic mean would be the worse one); the figure shows the two stds of the
heteroscedastic fit against x (with σ(x) and the homoscedastic σ), beyond the training
range too.
"""

import argparse
import time

import numpy as np

from sklaplace import LaplaceRegressor
from sklaplace.metrics import gaussian_nll, interval_coverage


def make_data(n, rng):
    x = rng.uniform(-1, 1, (n, 1))
    sigma = 0.05 + 0.4 * np.abs(x[:, 0])
    return x, np.sin(3 * x[:, 0]) + sigma * rng.randn(n), sigma


def main(plot=None):
    rng = np.random.RandomState(0)
    X, y, _ = make_data(2000, rng)
    X_test, y_test, sigma_test = make_data(2000, rng)
    fits = {}
    for noise in ("homoscedastic", "heteroscedastic"):
        start = time.perf_counter()
        fits[noise] = LaplaceRegressor(noise=noise, random_state=0).fit(X, y)
        print(f"{noise}: fit in {time.perf_counter() - start:.1f} s")
    for noise, reg in fits.items():
        mean, std = reg.predict(X_test, return_std=True)
        dist = reg.predict_dist(X_test)
        error = np.median(np.abs(np.sqrt(dist.aleatoric_var) - sigma_test) / sigma_test)
        coverage, _ = interval_coverage(y_test, mean, std, confidence=0.9)
        rmse = np.sqrt(np.mean((mean - np.sin(3 * X_test[:, 0])) ** 2))
        print(f"{noise:>16}: test NLL {gaussian_nll(y_test, mean, std):.3f}, 90 % interval "
              f"coverage {coverage:.3f}, median relative error of the aleatoric std "
              f"{error:.3f}, RMSE of the mean against sin 3x {rmse:.4f}")

    figure = std_figure(fits, X, y)
    if plot:
        figure.savefig(plot, dpi=120, bbox_inches="tight")
        print(f"figure written to {plot}")


def std_figure(fits, X, y):
    """The heteroscedastic fit with its 90 % band, and the stds against x."""
    import matplotlib.pyplot as plt

    grid = np.linspace(-1.5, 1.5, 301)[:, None]
    dist = fits["heteroscedastic"].predict_dist(grid)
    homo = fits["homoscedastic"].predict_dist(grid)
    fig, (ax_fit, ax_std) = plt.subplots(2, 1, figsize=(6, 6.5), sharex=True)
    ax_fit.scatter(X[:, 0], y, s=2, color="0.6", label="training rows")
    ax_fit.plot(grid[:, 0], dist.mean, color="C0", label="predictive mean")
    ax_fit.fill_between(grid[:, 0], dist.mean - 1.645 * dist.std, dist.mean + 1.645 * dist.std,
                        color="C0", alpha=0.25, label="90 % interval (heteroscedastic)")
    ax_fit.legend(loc="upper left", fontsize=8)
    ax_fit.set_ylabel("y")
    ax_std.plot(grid[:, 0], 0.05 + 0.4 * np.abs(grid[:, 0]), "k--", label="true σ(x)")
    ax_std.plot(grid[:, 0], np.sqrt(dist.aleatoric_var), color="C0",
                label="aleatoric std (heteroscedastic)")
    ax_std.plot(grid[:, 0], np.sqrt(dist.epistemic_var), color="C1",
                label="epistemic std (heteroscedastic)")
    ax_std.plot(grid[:, 0], np.sqrt(homo.aleatoric_var), color="C2", alpha=0.7,
                label="σ (homoscedastic)")
    for edge in (-1, 1):
        ax_std.axvline(edge, color="0.8", lw=0.8)
    ax_std.set_xlabel("x (training range [−1, 1])")
    ax_std.set_ylabel("std")
    ax_std.legend(loc="upper center", fontsize=8)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="aleatoric and epistemic std of a "
                                                 "heteroscedastic Laplace regressor")
    parser.add_argument("--plot", metavar="PNG", help="write the figure here")
    main(parser.parse_args().plot)

    import matplotlib.pyplot as plt

    plt.show()
