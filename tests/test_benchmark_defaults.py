"""The scoreboard of the default estimators: ``python -m benchmarks defaults``."""

import numpy as np
import pytest
from sklearn.dummy import DummyClassifier
from sklearn.metrics import log_loss
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sklaplace import LaplaceClassifier, LaplaceRegressor
from benchmarks import defaults
from benchmarks.__main__ import build_parser
from sklaplace.metrics import gaussian_nll


def _cells(text, title):
    """{(row, column): cell} of the markdown table under the heading ``title``."""
    block = text.split(f"### {title}\n\n")[1].split("\n\n")[0].splitlines()
    head = [c.strip() for c in block[0].strip("|").split("|")]
    out = {}
    for line in block[2:]:
        row = [c.strip() for c in line.strip("|").split("|")]
        out.update({(row[0], col): cell for col, cell in zip(head[1:], row[1:])})
    return out


def test_tiny_run_writes_one_row_per_set_and_one_column_per_method(tmp_path):
    out = tmp_path / "board.md"
    args = build_parser().parse_args([
        "defaults", "--datasets", "iris", "--splits", "2", "--max-rows", "150", "--quiet",
        "--laplace-params", '{"max_epochs": 5, "hidden_layer_sizes": [8]}', "--out", str(out)])
    records = args._main(args)
    text = out.read_text()
    assert "### regression" not in text and "### targets" in text
    for metric in defaults.METRICS["classification"]:
        cells = _cells(text, f"classification — {defaults.METRIC_TITLES[metric]}")
        assert set(cells) == {("iris", m) for m in defaults.METHODS["classification"]}
        for cell in cells.values():
            mean, se = (float(v) for v in cell.split(" ± "))
            assert np.isfinite(mean) and np.isfinite(se) and se >= 0
    assert len(records) == 2 * 5 and not any("error" in r for r in records)
    assert {r["split"] for r in records} == {0, 1}


def test_a_uniform_predictor_gets_exactly_its_scores():
    records, _ = defaults.run_dataset(
        "wine", 2, 2000, log=lambda _: None,
        estimators=lambda task, seed: {"uniform": DummyClassifier(strategy="uniform")})
    X, y = defaults.load_dataset("wine")
    for r, (_, test) in zip(records, defaults.split_indices(y, "classification", 2,
                                                            defaults.name_seed("wine"))):
        acc = np.mean(y[test] == 0)  # argmax of a tie is the first class
        assert r["nll"] == pytest.approx(np.log(3))
        assert r["acc"] == pytest.approx(acc)
        assert r["ece"] == pytest.approx(abs(acc - 1 / 3))


def test_map_column_is_the_sigmoid_of_the_nets_single_logit():
    la = LaplaceClassifier(max_epochs=5, hidden_layer_sizes=(8,))
    records, _ = defaults.run_dataset(
        "breast_cancer", 1, 2000, log=lambda _: None,
        estimators=lambda task, seed: {"LA": la.set_params(random_state=seed)})
    got = {r["method"]: r for r in records}
    X, y = defaults.load_dataset("breast_cancer")
    train, test = defaults.split_indices(y, "classification", 1,
                                         defaults.name_seed("breast_cancer"))[0]
    pipe = make_pipeline(StandardScaler(), la).fit(X.iloc[train], y[train])
    Xt = pipe[0].transform(X.iloc[test])
    logit = pipe[-1].net_.predict(Xt.astype(np.float32)).ravel().astype(float)
    p1 = 1 / (1 + np.exp(-logit))
    assert got["MAP"]["nll"] == pytest.approx(log_loss(y[test], p1), rel=1e-6)
    assert got["LA"]["nll"] == pytest.approx(log_loss(y[test], pipe.predict_proba(X.iloc[test])))
    assert got["LA"]["nll"] != pytest.approx(got["MAP"]["nll"])
    assert 0 < got["MAP"]["seconds"] < got["LA"]["seconds"]


def test_map_column_of_the_regressor_is_in_the_units_of_y():
    reg = LaplaceRegressor(max_epochs=5, hidden_layer_sizes=(8,), normalize_y=True)
    records, _ = defaults.run_dataset(
        "diabetes", 1, 2000, log=lambda _: None,
        estimators=lambda task, seed: {"LA": reg.set_params(random_state=seed)})
    got = {r["method"]: r for r in records}
    X, y = defaults.load_dataset("diabetes")
    train, test = defaults.split_indices(y, "regression", 1, defaults.name_seed("diabetes"))[0]
    pipe = make_pipeline(StandardScaler(), reg).fit(X.iloc[train], y[train])
    mean = pipe.predict(X.iloc[test])  # the GLM mean is the net's output
    sigma = pipe[-1].sigma_noise_
    # the MAP's plug-in std is the LA's own noise, in the units of y
    dist = pipe[-1].predict_dist(pipe[0].transform(X.iloc[test]))
    np.testing.assert_allclose(dist.aleatoric_var, sigma**2, rtol=1e-10)
    assert got["MAP"]["nll"] == pytest.approx(gaussian_nll(y[test], mean, sigma), rel=1e-4)
    assert got["MAP"]["rmse"] == pytest.approx(np.sqrt(np.mean((y[test] - mean) ** 2)), rel=1e-4)
    assert got["MAP"]["rmse"] == pytest.approx(got["LA"]["rmse"], rel=1e-4)


def test_targets_count_the_sets_that_meet_them():
    def cell(nll, ece=0.1, seconds=1.0):
        return {"nll": (nll, 0.0, 2), "ece": (ece, 0.0, 2), "seconds": (seconds, 0.0, 2)}

    agg = {("iris", "LA"): cell(0.20, ece=0.05, seconds=2.0), ("iris", "MAP"): cell(0.30),
           ("iris", "MLP"): cell(0.25), ("iris", "linear"): cell(0.22),
           ("iris", "HGB"): cell(0.195),
           ("wine", "LA"): cell(0.50, ece=0.2, seconds=4.0), ("wine", "MAP"): cell(0.40),
           ("wine", "MLP"): cell(0.30), ("wine", "linear"): cell(0.60),
           ("wine", "HGB"): cell(0.10)}
    lines = defaults.targets(agg, ["iris", "wine"])
    assert lines[0].startswith("- FAIL (a)") and "1/2 — misses: wine" in lines[0]
    assert lines[1].startswith("- FAIL (b)") and "1/2" in lines[1]
    assert lines[2].startswith("- FAIL (c)") and "misses: wine" in lines[2]
    assert lines[3].startswith("- FAIL (d)") and "1/2 — misses: wine" in lines[3]
    assert lines[4].startswith("- FAIL (e)") and "misses: wine" in lines[4]
    agg[("wine", "LA")] = cell(0.10, ece=0.01, seconds=3.0)
    assert all(line.startswith("- PASS") for line in defaults.targets(agg, ["iris", "wine"]))
    agg[("iris", "LA")] = cell(0.30 * (1 + 1e-5), ece=0.05, seconds=2.0)  # a float tie with MAP
    assert defaults.targets(agg, ["iris", "wine"])[0].startswith("- PASS (a)")
    agg[("iris", "LA")] = cell(0.30 * (1 + 1e-3), ece=0.05, seconds=2.0)
    assert defaults.targets(agg, ["iris", "wine"])[0].startswith("- FAIL (a)")
