"""sklaplace: Laplace approximations for neural networks as scikit-learn estimators."""

from .distributions import DirichletPrediction, LogitGaussianPrediction, NormalPrediction
from .estimators import LaplaceClassifier, LaplaceRegressor
from .posterior import WeightPosterior
from ._pipeline import predict_dist
from ._estimator_checks import expected_failed_checks

__version__ = "0.1.0"

__all__ = [
    "LaplaceClassifier",
    "LaplaceRegressor",
    "NormalPrediction",
    "LogitGaussianPrediction",
    "DirichletPrediction",
    "WeightPosterior",
    "predict_dist",
    "expected_failed_checks",
]
