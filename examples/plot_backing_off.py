"""
A posterior that backs off where the data change
================================================

A trained network is as confident far from its training data as near it: its
logits grow linearly along every direction, so the softmax saturates. The
Laplace approximation puts a Gaussian over the weights around the trained ones
and predicts with the average over it; where the data constrained the weights
the average is the trained network's prediction, and away from them the
uncertainty about the weights widens the predictive.

Two toy problems show it. A regressor fitted on two clusters of inputs: its
predictive band widens in the gap between them and beyond them, where the
noise level alone (what the trained network knows) would keep it flat. A
classifier fitted on two interleaved half-moons: the trained network's
confidence is near 1 almost everywhere, the Laplace predictive's falls towards
one half away from the rows it was trained on.
"""

# %%
# Regression: the band widens where there are no training rows
# -------------------------------------------------------------
# ``predict(X, return_std=True)`` returns the predictive standard deviation,
# the noise σ and the uncertainty about the weights together, as
# ``GaussianProcessRegressor`` does.

import matplotlib.pyplot as plt
import numpy as np
import torch
from sklearn.datasets import make_moons

from sklaplace import LaplaceClassifier, LaplaceRegressor

rng = np.random.RandomState(0)
x = np.concatenate([rng.uniform(-3, -1, 40), rng.uniform(1, 3, 40)])
y = np.sin(2 * x) + 0.1 * rng.randn(len(x))
reg = LaplaceRegressor(hidden_layer_sizes=(50,), tol=None, random_state=0).fit(x[:, None], y)

grid = np.linspace(-6, 6, 400)
mean, std = reg.predict(grid[:, None], return_std=True)
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.fill_between(grid, mean - 2 * std, mean + 2 * std, alpha=0.3, label="Laplace: mean ± 2 std")
ax.plot(grid, mean, label="predictive mean (the trained network)")
ax.plot(x, y, "k.", markersize=4, label="training rows")
ax.axhspan(-2 * reg.sigma_noise_, 2 * reg.sigma_noise_, color="grey", alpha=0.15,
           label="± 2 σ of the noise alone")
ax.set_ylim(-4, 4)
ax.set_xlabel("x")
ax.set_ylabel("y")
ax.legend(loc="lower left", fontsize=8)
ax.set_title("LaplaceRegressor on two clusters of inputs")
fig.tight_layout()
print(f"noise σ {reg.sigma_noise_:.3f}; predictive std at x = 0: "
      f"{std[np.argmin(abs(grid))]:.2f}, at x = 6: {std[-1]:.2f}")

# %%
# Classification: confidence falls away from the data
# ---------------------------------------------------
# The trained network's own probabilities (a sigmoid of its logit) beside two
# Laplace predictives (``predict_proba``, the probit approximation of the
# average over the weight posterior), on a grid five times as wide as the data:
#
# - the defaults: the prior precision δ chosen on held-out rows, and
#   ``extrapolation_variance="auto"``, a variance that is zero on the training
#   rows' range and grows beyond it;
# - the weight posterior alone: δ chosen by the evidence, no added variance.

X, labels = make_moons(n_samples=200, noise=0.15, random_state=0)
X = (X - X.mean(0)) / X.std(0)
clf = LaplaceClassifier(hidden_layer_sizes=(50,), random_state=0).fit(X, labels)
weights_only = LaplaceClassifier(hidden_layer_sizes=(50,), hyperparameter_tuning="evidence",
                                 extrapolation_variance=0, random_state=0).fit(X, labels)
print(f"defaults: δ = {clf.prior_precision_:.3g} ({clf.hyperparameter_tuning_}), "
      f"extrapolation variance {clf.extrapolation_variance_:.3g}; "
      f"weight posterior alone: δ = {weights_only.prior_precision_:.3g} (evidence)")

xx, yy = np.meshgrid(np.linspace(-6, 6, 121), np.linspace(-6, 6, 121))
rows = np.column_stack([xx.ravel(), yy.ravel()])
with torch.no_grad():  # the MAP network: one logit, its sigmoid
    logit = clf.net_.module_(torch.as_tensor(rows, dtype=torch.float32)).numpy()[:, 0]
confidences = {"trained network (MAP)": np.maximum(1 / (1 + np.exp(-logit)),
                                                   1 / (1 + np.exp(logit))),
               "Laplace, defaults": clf.predict_proba(rows).max(1),
               "Laplace, weight posterior alone": weights_only.predict_proba(rows).max(1)}

fig, axes = plt.subplots(1, 3, figsize=(12, 4), sharey=True, layout="constrained")
for ax, (title, confidence) in zip(axes, confidences.items()):
    image = ax.contourf(xx, yy, confidence.reshape(xx.shape), levels=np.linspace(0.5, 1, 11),
                        cmap="viridis")
    ax.scatter(*X.T, c=labels, cmap="coolwarm", s=6, edgecolors="none")
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("feature 1")
axes[0].set_ylabel("feature 2")
fig.colorbar(image, ax=axes, label="top-label probability", shrink=0.9)
for title, confidence in confidences.items():
    print(f"{title}: mean confidence on the grid {confidence.mean():.3f}")

# %%
# Here the held-out rows left no room for a broader weight posterior (δ at the
# top of its grid, as the warning says): the defaults back off through the
# variance outside the training range, which is zero where the training rows
# are. The evidence's broader posterior lowers the confidence less, and also
# along the boundary between the classes, wherever the data leave the weights
# free. :doc:`/user_guide/laplace` says what each part of the predictive does.

plt.show()
