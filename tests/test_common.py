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
    # max_epochs=20 on 50 rows is 20 Adam steps: too few to fit the noisy blobs at all; with
    # 300 epochs every configuration predicts the heavy class on 100 % of the rows
    # (test_class_weight_check_passes_with_enough_training below).
    "check_class_weight_classifiers":
        "20 Adam steps (the SMALL configuration) cannot fit the check's unscaled noisy blobs",
}


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=lambda est: SAMPLE_WEIGHT_XFAIL)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_class_weight_check_passes_with_enough_training():
    from sklearn.utils.estimator_checks import check_class_weight_classifiers

    check_class_weight_classifiers(
        "LaplaceClassifier", LaplaceClassifier(hidden_layer_sizes=(10,), max_epochs=300,
                                               random_state=0))
