"""The scoreboard of the default estimators: ``python -m benchmarks defaults``."""

import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from sklearn.dummy import DummyClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sklaplace import LaplaceClassifier, LaplaceRegressor
from benchmarks import defaults, shift
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
        "--no-shift",
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
    assert "two-sided" in text and "mean top-label confidence" not in text  # --no-shift
    assert len(records) == 2 * 6 and not any("error" in r for r in records)
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


# ----------------------------------------------------------------------------- two-sided

TINY_LA = '{"max_epochs": 5, "hidden_layer_sizes": [8]}'


def _mean_of(cell):
    return float(cell.split(" ± ")[0])


def test_tiny_two_sided_run_has_every_column_and_rebuilds_from_json(tmp_path):
    out, saved, prefix = tmp_path / "board.md", tmp_path / "board.json", tmp_path / "fig"
    args = build_parser().parse_args([
        "defaults", "--datasets", "iris", "diabetes", "--splits", "2", "--shift-splits", "1",
        "--max-rows", "150", "--quiet", "--methods", "LA", "linear", "ensemble",
        "--laplace-params", TINY_LA, "--out", str(out), "--json", str(saved),
        "--figure", str(prefix)])
    records = args._main(args)
    text = out.read_text()
    assert not any("error" in r for r in records)
    ran = ("LA", "MAP", "linear", "ensemble")
    titles = shift.SHIFT_TITLES
    conf = _cells(text, f"classification — {titles['classification']['shift_conf']}")
    auroc = _cells(text, f"classification — {titles['classification']['unseen_auroc']}")
    for m in ran:
        assert 1 / 3 <= _mean_of(conf[("iris", m)]) <= 1  # top label of three classes
        assert 0 <= _mean_of(auroc[("iris", m)]) <= 1
        assert 0 <= _mean_of(_cells(text, "classification — NLL")[("iris", m)])
        for metric, title in titles["regression"].items():
            value = _mean_of(_cells(text, f"regression — {title}")[("diabetes", m)])
            assert np.isfinite(value)
            if metric == "extrap_cov90":
                assert 0 <= value <= 1
    # the shifted confidence comes with every in-distribution split, the extra fits with 1
    assert {r["split"] for r in records if "shift_conf" in r} == {0, 1}
    extra = [r for r in records if "protocol" in r]
    assert {r["split"] for r in extra} == {0}
    assert {(r["dataset"], r["protocol"]) for r in extra} == {
        ("iris", "unseen"), ("diabetes", "extrapolation"), ("iris", "cluster"),
        ("diabetes", "cluster")}
    assert {r["split"] for r in records if "corrupt_nll" in r} == {0, 1}
    for r in extra:
        if r["protocol"] == "extrapolation":
            assert r["extrap_nll"] == pytest.approx((r["extrap_nll_up"]
                                                     + r["extrap_nll_down"]) / 2)
    for label in ("(A)", "(C)", "(D)", "(E)", "(F)", "(G)", "(H)", "(A′)", "(C′)", "(D′)",
                  "(E′)"):
        assert any(line.startswith(("- PASS " + label, "- FAIL " + label))
                   for line in text.splitlines()), label
    assert "- n/a (B)" in text  # MLP was not run
    assert "### targets" in text and "(e) LA fit time" in text  # the old targets stay
    for task in ("classification", "regression"):
        assert (tmp_path / f"fig_{task}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    again = tmp_path / "again.md"
    args = build_parser().parse_args(["defaults", "--from-json", str(saved), "--quiet",
                                      "--out", str(again)])
    assert args._main(args) == records
    body = text.split("### classification — NLL")[1]
    assert again.read_text().split("### classification — NLL")[1] == body


def test_the_ensemble_regressor_is_the_mixture_of_its_members():
    rng = np.random.RandomState(0)
    means, stds = rng.normal(size=(5, 7)), rng.uniform(0.1, 2, size=(5, 7))
    mean, std = shift.mixture_moments(means, stds)
    direct_mean = means.mean(0)
    direct_var = (stds**2 + means**2).mean(0) - direct_mean**2
    np.testing.assert_allclose(mean, direct_mean)
    np.testing.assert_allclose(std**2, direct_var, rtol=1e-10)

    X = rng.normal(size=(40, 2))
    y = X[:, 0] + 0.1 * rng.normal(size=40)
    ens = shift.MLPEnsembleRegressor(random_state=3).fit(X, y)
    assert [m.regressor_.random_state for m in ens.members_] == [3, 4, 5, 6, 7]
    got_mean, got_std = ens.predict(X[:5], return_std=True)
    member_means = np.array([m.predict(X[:5]) for m in ens.members_])
    member_var = np.array([m.std_**2 for m in ens.members_])[:, None]
    np.testing.assert_allclose(got_mean, member_means.mean(0))
    np.testing.assert_allclose(
        got_std**2, (member_var + member_means**2).mean(0) - member_means.mean(0)**2,
        rtol=1e-8)


def test_the_ensemble_classifier_averages_its_members_probabilities():
    rng = np.random.RandomState(1)
    X = rng.normal(size=(60, 2))
    y = np.where(X[:, 0] > 0, "b", "a")
    ens = shift.MLPEnsembleClassifier(n_members=3, random_state=0).fit(X, y)
    proba = ens.predict_proba(X)
    np.testing.assert_allclose(proba, np.mean([m.predict_proba(X) for m in ens.members_], 0))
    assert list(ens.classes_) == ["a", "b"] and set(ens.predict(X)) <= {"a", "b"}


def test_the_pc1_splits_test_on_the_top_and_bottom_fifth():
    rng = np.random.RandomState(2)
    t = rng.normal(size=100)
    t -= t.mean()
    c = rng.normal(size=100)
    c -= c.mean() + t * (t @ c) / (t @ t)  # uncorrelated with t: PC 1 is a and b's direction
    X = pd.DataFrame({"a": t, "b": -2 * t + 5, "c": c, "name": ["x"] * 100})
    splits = shift.pc1_splits(X)
    order = np.argsort(t)
    bottom, top = set(order[:20]), set(order[-20:])
    tests = {frozenset(splits[d][1]) for d in ("up", "down")}
    assert tests == {frozenset(top), frozenset(bottom)}  # PC 1's sign is arbitrary
    for train, test in splits.values():
        assert len(test) == 20 and sorted([*train, *test]) == list(range(100))


def test_shifted_pipeline_multiplies_the_scaled_features():
    X, y = defaults.load_dataset("iris")
    pipe = defaults.make_pipeline(LogisticRegression()).fit(X, y)
    before = pipe.predict_proba(X)
    shifted = shift.shifted_pipeline(pipe)
    expected = pipe[-1].predict_proba(3 * pipe[:-1].transform(X))
    np.testing.assert_allclose(shifted.predict_proba(X), expected)
    np.testing.assert_allclose(pipe.predict_proba(X), before)  # the original is untouched
    got = shift.shift_metrics("classification", "linear", pipe, X)
    assert got == {"linear": {"shift_conf": pytest.approx(expected.max(1).mean())}}
    assert shift.shift_metrics("regression", "linear", pipe, X) == {}


def test_unseen_class_leaves_out_the_last_class_and_a_constant_confidence_scores_half():
    assert shift.held_out_class(np.array([2, 0, 1, 1])) == 2
    assert shift.held_out_class(np.array(["b", "a", "b"])) is None
    X, y = defaults.load_dataset("iris")
    train, test = defaults.split_indices(y, "classification", 1, 0)[0]
    records = shift.unseen_records(
        "iris", X, y, train, test,
        {"uniform": DummyClassifier(strategy="uniform"), "linear": LogisticRegression()},
        0, Counter())
    got = {r["method"]: r["unseen_auroc"] for r in records}
    assert got["uniform"] == 0.5  # every row has confidence 1/2: two classes were trained
    assert 0 <= got["linear"] <= 1
    assert all(r["protocol"] == "unseen" for r in records)


def test_two_sided_targets_count_the_sets_that_meet_them():
    def cell(**metrics):
        return {k: (v, 0.0, 2) for k, v in metrics.items()}

    agg = {("iris", "LA"): cell(nll=0.215, shift_conf=0.70, unseen_auroc=0.80),
           ("iris", "MAP"): cell(nll=0.20, shift_conf=0.75, unseen_auroc=0.75),
           ("iris", "MLP"): cell(nll=0.25), ("iris", "linear"): cell(nll=0.22),
           ("iris", "ensemble"): cell(nll=0.19, shift_conf=0.95, unseen_auroc=0.90),
           ("diabetes", "LA"): cell(nll=5.5, extrap_nll=5.6),
           ("diabetes", "MAP"): cell(nll=5.5, extrap_nll=5.7),
           ("diabetes", "MLP"): cell(nll=6.0), ("diabetes", "linear"): cell(nll=5.4,
                                                                               extrap_nll=5.5),
           ("diabetes", "ensemble"): cell(nll=7.0, extrap_nll=7.0)}
    sets = ["iris", "diabetes"]
    lines = [line for line in shift.targets(agg, sets) if line.startswith("- ")]
    verdict = {line.split()[2]: line.split()[1] for line in lines}
    # iris: 0.215 ≤ 0.20 + 0.01 fails, diabetes ties
    assert verdict == {"(A)": "FAIL", "(B)": "FAIL", "(C)": "PASS", "(D)": "PASS",
                       "(E)": "PASS", "(F)": "FAIL", "(A′)": "FAIL", "(C′)": "PASS",
                       "(D′)": "FAIL", "(E′)": "PASS",
                       "(G)": "n/a", "(H)": "n/a", "(H′)": "n/a"}  # no such columns here
    assert "1/2 — misses: iris" in lines[0]
    agg[("iris", "LA")] = cell(nll=0.209, shift_conf=0.735, unseen_auroc=0.765)
    verdict = {line.split()[2]: line.split()[1] for line in shift.targets(agg, sets)
               if line.startswith("- ")}
    assert verdict["(A)"] == "PASS"  # within the 0.01 allowance
    assert verdict["(C)"] == "FAIL" and verdict["(D)"] == "FAIL"  # a 0.015 margin is too small
    del agg[("diabetes", "LA")]["extrap_nll"]
    lines = shift.targets(agg, sets)
    assert any(line.startswith("- n/a (E)") for line in lines)


def test_in_range_corruption_takes_half_of_each_row_from_one_training_row():
    from benchmarks import subpop

    rng = np.random.RandomState(0)
    X_tr = pd.DataFrame({"a": rng.normal(size=30), "b": rng.normal(size=30),
                         "c": rng.choice(["x", "y"], size=30), "d": rng.normal(size=30),
                         "e": rng.normal(size=30)})
    X_te = X_tr.iloc[:10].assign(a=100.0, b=100.0, d=100.0, e=100.0, c="z")
    out = subpop.corrupt(X_te, X_tr, seed=0)
    assert list(out.columns) == list(X_te.columns) and len(out) == 10
    for i in range(10):
        changed = [c for c in X_te.columns if out.iloc[i][c] != X_te.iloc[i][c]]
        assert len(changed) == 3  # ceil(5 / 2)
        donors = [j for j in range(30)
                  if all(X_tr.iloc[j][c] == out.iloc[i][c] for c in changed)]
        assert donors  # all from one training row
    assert (X_te["a"] == 100.0).all()  # the test rows are not modified


def test_the_held_out_cluster_is_never_trained_on():
    from benchmarks import subpop

    X, y = defaults.load_dataset("iris")
    train = np.arange(0, 150, 2)
    for k in range(3):
        fit_rows, test = subpop.held_out_cluster("iris", X, y, train, k)
        assert not set(fit_rows) & set(test)
        assert set(fit_rows) <= set(train)
        assert set(np.unique(y[test])) <= set(np.unique(y[fit_rows]))
        assert 0.05 * 150 <= len(test) <= 0.4 * 150
    got = subpop.corruption_metrics("classification", "linear",
                                    defaults.make_pipeline(LogisticRegression()).fit(X, y),
                                    X, y, X, seed=0)
    assert set(got) == {"linear"} and got["linear"]["corrupt_nll"] > 0


def test_a_mixture_prediction_is_scored_by_its_own_density_and_interval():
    from scipy import stats

    from sklaplace.distributions import NormalMixturePrediction

    rng = np.random.RandomState(0)
    y = rng.normal(size=20)
    mu, sd = rng.normal(size=(20, 2)), rng.uniform(0.5, 2, (20, 2))
    dist = NormalMixturePrediction(mu, sd**2, np.zeros_like(mu), [0.3, 0.7])
    scores = defaults.score("regression", y, defaults.WithDensity(dist.mean, dist.std, dist))
    nll = -np.mean(np.log(stats.norm.pdf(y[:, None], mu, sd) @ [0.3, 0.7]))
    assert np.isclose(scores["nll"], nll, rtol=1e-12)
    low, high = dist.interval(0.9)
    assert scores["coverage90"] == np.mean((low <= y) & (y <= high))
    one = NormalMixturePrediction(mu[:, :1], sd[:, :1] ** 2, np.zeros((20, 1)), [1.0])
    gaussian = defaults.score("regression", y, (one.mean, one.std))
    assert np.isclose(defaults.score("regression", y, defaults.WithDensity(
        one.mean, one.std, one))["nll"], gaussian["nll"], rtol=1e-12)


def test_an_interrupted_run_keeps_the_sets_it_finished(tmp_path, monkeypatch):
    saved = tmp_path / "board.json"
    finished = []

    def run_dataset(name, *args, **kwargs):
        if finished:
            raise KeyboardInterrupt  # Ctrl-C during the second set
        finished.append(name)
        return [{"dataset": name, "method": "LA", "split": 0, "nll": 0.5}], {}

    monkeypatch.setattr(defaults, "run_dataset", run_dataset)
    monkeypatch.setattr(defaults, "_warm_up", lambda: None)
    args = build_parser().parse_args(["defaults", "--datasets", "iris", "wine", "--quiet",
                                      "--json", str(saved)])
    with pytest.raises(KeyboardInterrupt):
        args._main(args)
    kept = json.loads(saved.read_text())
    assert kept["records"] == [{"dataset": "iris", "method": "LA", "split": 0, "nll": 0.5}]
    assert "partial: 1 of 2 sets" in kept["header"]
    assert not (tmp_path / "board.json.tmp").exists()
