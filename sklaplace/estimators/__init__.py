"""The estimators and their fit pipeline: the scikit-learn shell around ``sklaplace._laplace``.

``LaplaceClassifier`` and ``LaplaceRegressor`` (also importable from ``sklaplace``) validate
their parameters and data, choose the architecture and the "auto" settings, train the net to
the MAP, fit the Laplace approximation and store one fitted object that the prediction
methods read. The maths lives in ``sklaplace._laplace``, which imports nothing from here.
"""

from .classifier import LaplaceClassifier
from .regressor import LaplaceRegressor

__all__ = ["LaplaceClassifier", "LaplaceRegressor"]
