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


# MAP training is minibatch Adam: duplicated rows change the batches and the steps per
# epoch (and "cv" splits other rows), so weights equal repetition only in the objective;
# with the MAP frozen they do exactly (tests/test_sample_weight.py).
SAMPLE_WEIGHT_XFAIL = {
    "check_sample_weight_equivalence_on_dense_data":
        "stochastic MAP training: weights equal duplicated rows in the objective, not per step",
}


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=lambda est: SAMPLE_WEIGHT_XFAIL)
def test_sklearn_compatible(estimator, check):
    check(estimator)
