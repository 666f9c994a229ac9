"""The default network of the Laplace estimators, for skorch nets of your own.

``LaplaceClassifier(net=None)`` / ``LaplaceRegressor(net=None)`` build this MLP; use it
in a ``skorch.NeuralNetClassifier`` / ``NeuralNetRegressor`` to train a net yourself and
fit only the Laplace approximation afterwards (``FrozenEstimator``).
"""

from ._laplace.nets import MLP

__all__ = ["MLP"]
