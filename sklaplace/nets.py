"""The default network of the Laplace estimators, for skorch nets of your own.

``LaplaceClassifier(net=None)`` / ``LaplaceRegressor(net=None)`` build this MLP; use it
in a ``skorch.NeuralNetClassifier`` / ``NeuralNetRegressor`` to train a net yourself and
fit only the Laplace approximation afterwards (``FrozenEstimator``), and the criterion
of a net for ``LaplaceRegressor(noise="heteroscedastic")``.
"""

from ._laplace.nets import MLP, HeteroscedasticGaussianNLLLoss

__all__ = ["MLP", "HeteroscedasticGaussianNLLLoss"]
