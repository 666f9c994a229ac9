"""LaplaceClassifier's targets: class labels encoded, with the class weights as row weights."""

import numpy as np
from sklearn.preprocessing import LabelEncoder
from sklearn.utils.class_weight import compute_sample_weight
from sklearn.utils.multiclass import check_classification_targets

from ._validation import check_fit_weight, validate_numeric, without_zero_weights

#: ``check_X_y``'s arguments of a single-label fit's X and y, in memory and on each
#: partition of a dask collection.
FIT_CHECKS = {"dtype": [np.float64, np.float32]}


def encoded_targets(estimator, X, y, sample_weight, task):
    """(X, label indices, row weights, classes, likelihood name, outputs per row) of a
    single-label fit; ``task``: the first ``partial_fit`` call's (its classes). Rows of
    weight 0 are dropped; ``class_weight`` multiplies into ``sample_weight``."""
    X, y = validate_numeric(estimator, X, y, **FIT_CHECKS)
    sample_weight = check_fit_weight(sample_weight, X)
    check_classification_targets(y)
    encoder = LabelEncoder().fit(y if task is None else task.classes)
    classes = encoder.classes_
    if len(classes) < 2:
        raise ValueError(
            "LaplaceClassifier needs at least two classes in y; got one class "
            f"({classes[0]!r})."
        )
    if estimator.class_weight is not None:
        per_row = compute_sample_weight(estimator.class_weight, y)
        sample_weight = per_row if sample_weight is None else sample_weight * per_row
        sample_weight = check_fit_weight(sample_weight, X)
    single_logit = len(classes) == 2 and estimator.net is None
    X, y_index, sample_weight = without_zero_weights(X, encoder.transform(y), sample_weight)
    return (X, y_index, sample_weight, classes, "bernoulli" if single_logit else "categorical",
            1 if single_logit else len(classes))
