"""scikit-learn's estimator checks on several configurations."""

from sklearn.utils.estimator_checks import parametrize_with_checks

from sklaplace import LaplaceClassifier, LaplaceRegressor

SMALL = dict(hidden_layer_sizes=(10,), max_epochs=20, random_state=0)

ESTIMATORS = [
    LaplaceClassifier(**SMALL),
    LaplaceRegressor(**SMALL),
    LaplaceClassifier(subset_of_weights="all", hessian_structure="full", **SMALL),
    LaplaceRegressor(hessian_structure="diag", curvature="ef", **SMALL),
    LaplaceClassifier(hessian_structure="diag", curvature="ef", **SMALL),
    LaplaceClassifier(subset_of_weights="last_layer", hessian_structure="kron",
                      link_approx="mc", n_samples=20, **SMALL),
    LaplaceRegressor(subset_of_weights="last_layer", hessian_structure="kron", pred_type="nn",
                     n_samples=20, **SMALL),
]


@parametrize_with_checks(ESTIMATORS)
def test_sklearn_compatible(estimator, check):
    check(estimator)
