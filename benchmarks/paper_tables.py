"""The papers' printed UCI numbers (copied from ``seeds/DIGEST.md`` §2.2–2.3), as data.

Every value is ``(mean, standard error)`` exactly as printed.  Keys are the
papers' column names; :data:`REGRESSION_COLUMNS` / :data:`CLASSIFICATION_COLUMNS`
map the runner's method names to them (``None``: no printed counterpart).

* Regression: Immer et al. (ICML 2021), "Scalable marginal likelihood
  estimation ...", Table C2 (test NLL, 1×50 ReLU) and the diagonal column
  ``diagGGN-Bayes`` of Table C3.  MAP, VI and Laplace are cross-validated;
  the GGN/EF/KFAC/diag columns come from *online* marginal-likelihood training
  (Alg. 1), "-Bayes" with the Laplace (GLM) predictive of that structure.
* Classification: Immer et al. (AISTATS 2021), "Improving predictions of
  Bayesian neural nets via local linearization", Table 1 = B2a (test NLL),
  B2b (accuracy) and B2c (ECE, 10 bins), 2×50 tanh, δ chosen per method on
  validation NLL.
"""

from types import MappingProxyType


def _rows(text, columns, scale=1.0):
    table = {}
    for line in text.strip().splitlines():
        name, *cells = line.split()
        row = {}
        for col, cell in zip(columns, cells):
            mean, se = cell.replace("−", "-").split("±")
            row[col] = (float(mean) * scale, float(se) * scale)
        table[name] = MappingProxyType(row)
    return MappingProxyType(table)


_C2_COLUMNS = ("MAP", "VI", "Laplace", "GGN-Bayes", "GGN-MAP", "EF-Bayes", "EF-MAP",
               "KFAC-Bayes", "KFAC-MAP")
_C2 = """
boston 2.71±0.10 2.58±0.03 2.57±0.05 2.68±0.12 2.69±0.13 2.60±0.09 2.62±0.12 2.70±0.08 2.70±0.09
concrete 3.17±0.04 3.17±0.01 3.05±0.04 3.06±0.05 3.06±0.05 3.07±0.04 3.07±0.04 3.13±0.06 3.13±0.06
energy 1.02±0.05 1.42±0.01 0.82±0.03 0.54±0.11 0.55±0.11 0.78±0.13 0.73±0.15 0.54±0.02 0.53±0.02
kin8nm −1.09±0.01 −0.87±0.00 −1.23±0.01 −1.14±0.01 −1.14±0.01 −1.13±0.01 −1.14±0.01 −1.13±0.01 −1.13±0.01
naval −5.75±0.05 −3.82±0.02 −6.40±0.06 −6.61±0.03 −6.93±0.03 −6.21±0.05 −6.92±0.04 −6.32±0.05 −6.88±0.05
power 2.82±0.01 2.86±0.01 2.83±0.01 2.78±0.02 2.78±0.02 2.78±0.01 2.78±0.01 2.78±0.02 2.78±0.02
wine 0.98±0.02 0.96±0.01 0.97±0.02 0.94±0.02 0.93±0.02 0.94±0.01 0.93±0.02 0.94±0.02 0.94±0.02
yacht 2.30±0.02 1.67±0.01 1.01±0.05 3.51±0.62 5.89±1.25 1.29±0.17 2.43±0.61 1.48±0.07 1.48±0.07
"""  # noqa: E501
_C3_COLUMNS = ("diagGGN-Bayes", "diagGGN-MAP", "diagEF-Bayes", "diagEF-MAP")
_C3 = """
boston 2.84±0.05 2.84±0.05 2.90±0.03 2.89±0.03
concrete 3.13±0.04 3.13±0.04 3.11±0.02 3.11±0.02
energy 0.70±0.03 0.69±0.03 0.88±0.05 0.85±0.05
kin8nm −1.14±0.01 −1.13±0.01 −1.13±0.01 −1.13±0.01
naval −6.17±0.05 −6.91±0.08 −5.83±0.06 −6.95±0.04
power 2.79±0.02 2.79±0.02 2.79±0.01 2.79±0.01
wine 0.96±0.01 0.95±0.02 0.98±0.01 0.96±0.02
yacht 2.91±0.04 2.90±0.04 3.16±0.02 3.15±0.02
"""


def _merge(*tables):
    out = {}
    for table in tables:
        for name, row in table.items():
            out.setdefault(name, {}).update(row)
    return MappingProxyType({k: MappingProxyType(v) for k, v in out.items()})


#: Table C2 + C3 test NLL (nats, original target units), by data set and column.
REGRESSION_NLL = _merge(_rows(_C2, _C2_COLUMNS), _rows(_C3, _C3_COLUMNS))

_B2_COLUMNS = ("MAP", "MFVI", "bnn", "glm", "glm-diag", "glm-refine", "glm-refine-d")
_B2A = """
australian 0.31±0.01 0.34±0.01 0.42±0.00 0.32±0.02 0.33±0.01 0.32±0.02 0.31±0.01
cancer 0.11±0.02 0.11±0.01 0.19±0.00 0.10±0.01 0.11±0.01 0.11±0.01 0.12±0.02
ionosphere 0.35±0.02 0.41±0.01 0.50±0.00 0.29±0.01 0.35±0.01 0.35±0.05 0.32±0.03
glass 0.95±0.03 1.06±0.01 1.41±0.00 0.86±0.01 0.99±0.01 0.98±0.07 0.83±0.02
vehicle 0.420±0.007 0.504±0.006 0.885±0.002 0.428±0.005 0.618±0.003 0.402±0.007 0.432±0.005
waveform 0.335±0.004 0.393±0.003 0.516±0.002 0.339±0.004 0.388±0.003 0.335±0.004 0.364±0.008
digits 0.094±0.003 0.219±0.004 0.875±0.002 0.250±0.002 0.409±0.002 0.150±0.002 0.149±0.008
satellite 0.230±0.002 0.307±0.002 0.482±0.001 0.241±0.001 0.327±0.002 0.227±0.002 0.248±0.002
"""  # noqa: E501
_B2B = """
australian .884±.010 .885±.008 .887±.009 .883±.009 .885±.009 .888±.008 .886±.008
cancer .971±.004 .969±.003 .972±.003 .969±.003 .969±.003 .971±.003 .971±.003
ionosphere .887±.006 .879±.007 .866±.009 .887±.009 .883±.008 .891±.007 .892±.005
glass .684±.010 .534±.013 .459±.009 .678±.013 .666±.013 .675±.015 .669±.012
vehicle .827±.005 .717±.003 .712±.003 .828±.005 .814±.006 .824±.005 .820±.005
waveform .855±.003 .861±.003 .858±.003 .854±.003 .852±.004 .853±.003 .849±.003
digits .974±.001 .951±.002 .924±.001 .964±.001 .960±.001 .966±.001 .970±.001
satellite .916±.001 .891±.001 .842±.001 .915±.001 .910±.001 .917±.001 .911±.001
"""
_B2C = """
australian .056±.004 .099±.005 .185±.008 .055±.005 .094±.007 .060±.005 .050±.003
cancer .033±.002 .033±.002 .127±.003 .033±.002 .053±.003 .027±.003 .027±.003
ionosphere .092±.004 .155±.009 .238±.008 .089±.003 .131±.006 .081±.004 .081±.004
glass .192±.008 .140±.008 .175±.009 .159±.007 .222±.012 .170±.007 .160±.005
vehicle .064±.003 .058±.002 .266±.003 .078±.003 .210±.005 .052±.002 .071±.002
waveform .041±.002 .134±.002 .233±.003 .049±.002 .109±.004 .038±.001 .049±.002
digits .016±.001 .091±.002 .478±.001 .141±.000 .256±.001 .054±.001 .027±.000
satellite .018±.001 .033±.001 .125±.001 .037±.001 .118±.001 .019±.001 .022±.001
"""

#: Table 1 / B2 (2×50 tanh): metric ("nll", "acc", "ece") → data set → column → (mean, se).
CLASSIFICATION = MappingProxyType({
    "nll": _rows(_B2A, _B2_COLUMNS),
    "acc": _rows(_B2B, _B2_COLUMNS),
    "ece": _rows(_B2C, _B2_COLUMNS),
})

#: Runner method → Table C2/C3 column (None: no printed counterpart).
REGRESSION_COLUMNS = MappingProxyType({
    "map": "MAP",
    "la_full": "Laplace",
    "la_full_scalar": "Laplace",
    "la_kron": None,
    "la_diag": None,
    "online_full": "GGN-Bayes",
    "online_full_scalar": "GGN-Bayes",
    "online_kron": "KFAC-Bayes",
    "online_diag": "diagGGN-Bayes",
})

#: Runner method → Table 1/B2 column (None: no printed counterpart).
CLASSIFICATION_COLUMNS = MappingProxyType({
    "map": "MAP",
    "glm": "glm",
    "glm_diag": "glm-diag",
    "bnn": "bnn",
    "la_evidence": None,
    "online_kron": None,
    "glm_refine": "glm-refine",
    "glm_refine_diag": "glm-refine-d",
    "glm_refine_laplace": None,  # the paper's refine columns are VI
    "glm_refine_laplace_diag": None,
    "gp": "glm",  # the GP predictive on all rows is the full GLM predictive
    "glm_refine_elbo": None,  # δ by the ELBO, not by validation NLL as in the paper
    "glm_refine_diag_elbo": None,
    "glm_refine_mc": "glm-refine",  # the paper's predictive: Monte Carlo on the logits
    "glm_refine_diag_mc": "glm-refine-d",
    "gp_mc": "glm",
})

#: Our data set name → the paper's row name.
PAPER_ROW = MappingProxyType({
    "breast_cancer": "cancer",
    "breast_cancer_wdbc": "cancer",
})

#: Data sets whose rows are not the paper's: compared, but marked "not comparable".
NOT_COMPARABLE = MappingProxyType({
    "waveform": "generated data (same distribution, not the paper's rows)",
    "breast_cancer_wdbc": "scikit-learn's WDBC (569 x 30); the paper's cancer row is LIBSVM's "
                          "683-row breast-cancer_scale (its code, preds/datasets.py)",
})


def paper_value(protocol, dataset, method, metric="nll"):
    """(column, (mean, se)) printed for our method, or (column or None, None)."""
    columns = REGRESSION_COLUMNS if protocol == "regression" else CLASSIFICATION_COLUMNS
    column = columns.get(method)
    if column is None:
        return None, None
    row = PAPER_ROW.get(dataset, dataset)
    if protocol == "regression":
        if metric != "nll":
            return column, None
        table = REGRESSION_NLL
    else:
        table = CLASSIFICATION.get(metric, {})
    return column, table.get(row, {}).get(column)
