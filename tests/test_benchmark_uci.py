"""The UCI benchmark runner in quick mode: tables with the expected rows and finite numbers."""

import csv
import math

import pytest

from benchmarks import uci
from benchmarks.__main__ import build_parser, main


def test_uci_quick_mode(tmp_path, data_dir, capsys, monkeypatch):
    cache = tmp_path / "cache"
    out_csv = tmp_path / "table.csv"
    argv = ["uci", "--quick", "--quiet", "--cache-dir", str(cache), "--out", str(out_csv),
            "--data-dir", str(data_dir)]
    rows = main(argv)

    expected = {("regression", d, m) for d in uci.QUICK_DATASETS["regression"]
                for m in uci.REGRESSION_METHODS}
    expected |= {("classification", d, m) for d in uci.QUICK_DATASETS["classification"]
                 for m in uci.CLASSIFICATION_METHODS}
    assert {(r["protocol"], r["dataset"], r["method"]) for r in rows} == expected
    for r in rows:
        assert r["n_splits"] == 1
        metrics = ("nll", "rmse") if r["protocol"] == "regression" else ("nll", "acc", "ece")
        for metric in metrics:
            assert math.isfinite(r[f"{metric}_mean"]), (r["dataset"], r["method"], metric)
        if r["protocol"] == "classification":
            assert 0 <= r["acc_mean"] <= 1 and 0 <= r["ece_mean"] <= 1
        if r["method"] == "map":  # every dataset here has a printed MAP value
            assert math.isfinite(r["paper_nll_mean"]) and r["nll_flag"] == "1 split"

    # gp on all training rows is the full GLM predictive: same δ, same numbers
    by_key = {(r["dataset"], r["method"]): r for r in rows}
    for d in uci.QUICK_DATASETS["classification"]:
        assert by_key[(d, "gp")]["nll_mean"] == pytest.approx(by_key[(d, "glm")]["nll_mean"],
                                                              rel=1e-6)

    # the ELBO rows are the VI fits of their base row at the δ of the largest ELBO
    cells = {(r["dataset"], r["method"]): r
             for r in uci.Cache(cache, uci.Config(**uci.QUICK)).results("classification")}
    for d in uci.QUICK_DATASETS["classification"]:
        for elbo_method, base_method in uci.ELBO_METHODS.items():
            base, by_elbo = cells[(d, base_method)], cells[(d, elbo_method)]
            assert by_elbo["test_nll_grid"] == base["test_nll_grid"]
            best = max(range(len(by_elbo["elbo_grid"])), key=by_elbo["elbo_grid"].__getitem__)
            assert by_elbo["nll"] == base["test_nll_grid"][best]
            assert by_elbo["prior_precision"] == float(uci.Config(**uci.QUICK).deltas("classification", d)[best])

    # the Monte Carlo rows predict from the fits of their base row (other numbers, the same
    # grid) and pick their own δ by the validation NLL of that predictive
    for d in uci.QUICK_DATASETS["classification"]:
        for mc_method, base_method in uci.MC_METHODS.items():
            base, by_mc = cells[(d, base_method)], cells[(d, mc_method)]
            assert len(by_mc["test_nll_grid"]) == len(base["test_nll_grid"])
            assert by_mc["test_nll_grid"] != base["test_nll_grid"]
            assert all(math.isfinite(v) for v in by_mc["test_nll_grid"])
            best = min(range(len(by_mc["val_nll_grid"])), key=by_mc["val_nll_grid"].__getitem__)
            assert by_mc["nll"] == by_mc["test_nll_grid"][best]

    with open(out_csv, newline="") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == len(expected)
    for col in ("protocol", "dataset", "method", "paper_column", "n_splits", "nll_mean",
                "nll_se", "paper_nll_mean", "nll_flag", "acc_mean", "ece_mean"):
        assert col in table[0]
    assert "| yacht | map | MAP | 1 |" in capsys.readouterr().out

    # --report rebuilds the same table from the cache without training anything;
    # --resume finds every result cached and runs nothing either.
    out_md = tmp_path / "table.md"
    again = main(argv[:-4] + ["--report", "--out", str(out_md), "--data-dir", str(data_dir)])
    assert [(r["dataset"], r["method"], r["nll_mean"]) for r in again] == [
        (r["dataset"], r["method"], r["nll_mean"]) for r in rows]
    assert "| glass | glm | glm |" in out_md.read_text()
    stamps = {p: p.stat().st_mtime_ns for p in cache.rglob("split_*.json")}
    assert len(stamps) == len(expected)
    main(argv[:-4] + ["--resume", "--out", str(out_md), "--data-dir", str(data_dir)])
    assert {p: p.stat().st_mtime_ns for p in cache.rglob("split_*.json")} == stamps

    # per-split CSV: one row per cached cell, with the chosen δ; a figure per protocol
    per_split, figure = tmp_path / "splits.csv", tmp_path / "nll.png"
    main(argv[:-4] + ["--report", "--splits-csv", str(per_split), "--figure", str(figure),
                      "--data-dir", str(data_dir)])
    with open(per_split, newline="") as fh:
        split_table = list(csv.DictReader(fh))
    assert len(split_table) == len(expected)
    by_cell = {(r["protocol"], r["dataset"], r["method"]): r for r in split_table}
    for r in rows:
        cell = by_cell[(r["protocol"], r["dataset"], r["method"])]
        assert cell["split"] == "0"
        assert float(cell["nll"]) == pytest.approx(r["nll_mean"])
        assert float(cell["prior_precision"]) > 0 and float(cell["seconds"]) >= 0
    for protocol in uci.PROTOCOLS:
        png = tmp_path / f"nll_{protocol}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # the same table from the per-split CSV; a later file's cell replaces an earlier one's
    from_csv = main(["uci", "--quiet", "--report", "--from-splits-csv", str(per_split)])
    assert ({(r["dataset"], r["method"], r["nll_mean"]) for r in from_csv}
            == {(r["dataset"], r["method"], r["nll_mean"]) for r in rows})
    changed = tmp_path / "changed.csv"
    with open(changed, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(split_table[0]))
        writer.writeheader()
        writer.writerow({**split_table[0], "nll": "12.5"})
    merged = main(["uci", "--quiet", "--report", "--from-splits-csv", str(per_split),
                   str(changed)])
    first = split_table[0]
    assert [r["nll_mean"] for r in merged
            if (r["protocol"], r["dataset"], r["method"]) == (
                first["protocol"], first["dataset"], first["method"])] == [12.5]
    assert len(merged) == len(rows)
    with pytest.raises(SystemExit, match="--report"):
        main(["uci", "--from-splits-csv", str(per_split)])

    # after a code change the cache tag moves: --report finds nothing, unless the old tag is
    # named with --cache-tag
    tags = {p: uci.Config(**uci.QUICK, seed=0).tag(p) for p in uci.PROTOCOLS}
    monkeypatch.setattr(uci, "source_hash", lambda: "other-code")
    report = argv[:-4] + ["--report", "--data-dir", str(data_dir)]
    assert main(report) == []
    old = main(report + sum((["--cache-tag", tags[p]] for p in uci.PROTOCOLS), []))
    assert [(r["dataset"], r["method"], r["nll_mean"]) for r in old] == [
        (r["dataset"], r["method"], r["nll_mean"]) for r in rows]
    with pytest.raises(SystemExit, match="--report"):
        main(argv[:-4] + ["--cache-tag", tags["regression"], "--data-dir", str(data_dir)])


def test_parser_has_uci_subcommand():
    args = build_parser().parse_args(["uci", "--splits", "0,2-3", "--protocol", "regression"])
    assert args.splits == [0, 2, 3] and args.protocol == "regression"


def test_seeds_are_pinned_by_name_not_position():
    from benchmarks.uci import CLASSIFICATION_DATASETS, UCI_REGRESSION, dataset_seed

    # the published tables' seeds: the position each set had when they were run
    for names in (UCI_REGRESSION, CLASSIFICATION_DATASETS):
        assert [dataset_seed(n) for n in names] == list(range(len(names)))
    # a new set gets a seed from its name alone, outside the pinned range
    assert dataset_seed("abalone") == dataset_seed("abalone") >= 100


def test_cache_tag_changes_with_the_code(monkeypatch):
    import benchmarks.uci as uci

    cfg = uci.Config()
    before = cfg.tag("regression")
    monkeypatch.setattr(uci, "source_hash", lambda: "edited")
    assert cfg.tag("regression") != before


def test_compare_flag_says_which_way():
    from benchmarks.uci import compare_flag

    assert compare_flag("nll", 1.0, 0.01, 1.01, 0.01) == "ok"
    assert compare_flag("nll", 0.5, 0.01, 1.0, 0.01) == "better"
    assert compare_flag("ece", 0.2, 0.01, 0.1, 0.01) == "worse"
    assert compare_flag("acc", 0.9, 0.01, 0.8, 0.01) == "better"
    assert compare_flag("acc", 0.7, float("nan"), 0.8, 0.01) == "1 split"  # no s.e.
    assert compare_flag("nll", float("nan"), float("nan"), 0.8, 0.01) == "—"


def test_eta_extrapolates_from_the_cells_done(monkeypatch):
    import benchmarks.uci as uci

    clock = iter([0.0, 60.0])
    monkeypatch.setattr(uci.time, "perf_counter", lambda: next(clock))
    eta = uci.ETA(10)
    assert str(eta) == "0/10 cells"
    eta.done(2)  # 2 cells in 60 s: 8 left take 4 minutes
    assert str(eta) == "2/10 cells, ETA 4.0 min"


def test_peer_methods_match_ours_on_the_same_net(data_dir):
    # la_full_peer: laplace-torch's post-hoc full LA on the same MAP net and the same
    # standardized targets; its evidence optimum and GLM predictive (σ² added) are ours
    pytest.importorskip("laplace")
    cfg = uci.Config(**uci.QUICK)
    res = uci.run_regression_split("yacht", 0, ["la_full", "la_full_peer", "la_kron",
                                                "la_kron_peer"], cfg, data_dir=data_dir)
    ours, peer = res["la_full"], res["la_full_peer"]
    assert "error" not in peer and "error" not in res["la_kron_peer"], res
    assert peer["log_evidence"] == pytest.approx(ours["log_evidence"], abs=0.05)
    assert peer["sigma_noise"] == pytest.approx(ours["sigma_noise"], rel=0.02)
    assert peer["nll"] == pytest.approx(ours["nll"], abs=0.02)
    assert peer["rmse"] == pytest.approx(ours["rmse"], rel=1e-5)  # same net, same mean
    # Kron: the same once laplace-torch's evidence is differentiable in σ (patched)
    kron, kron_peer = res["la_kron"], res["la_kron_peer"]
    assert kron_peer["log_evidence"] == pytest.approx(kron["log_evidence"], abs=0.05)
    assert kron_peer["nll"] == pytest.approx(kron["nll"], abs=0.02)


def test_peer_methods_without_laplace_torch_are_error_records(monkeypatch, data_dir):
    import sys

    monkeypatch.setitem(sys.modules, "laplace", None)  # import laplace → ImportError
    res = uci.run_regression_split("yacht", 0, ["la_full_peer"], uci.Config(**uci.QUICK),
                                   data_dir=data_dir)
    assert "laplace-torch is not installed" in res["la_full_peer"]["error"]


def test_peer_methods_only_when_named(tmp_path):
    assert not set(uci.PEER_METHODS) & set(uci.REGRESSION_METHODS)  # not in the default run
    rows = main(["uci", "--protocol", "regression", "--datasets", "yacht", "--methods", "map",
                 "la_full_peer", "la_kron_peer", "--report", "--cache-dir", str(tmp_path)])
    assert rows == []  # accepted (nothing cached), not "unknown method(s)"


def test_peer_kron_evidence_is_differentiable_in_sigma_once_patched():
    # laplace-torch 0.3 scales its Kronecker factors with math.pow, which drops the
    # σ-dependence of the log det from the gradient; differentiable_kron_scaling fixes it
    laplace = pytest.importorskip("laplace")
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    X = torch.randn(40, 3, dtype=torch.float64)
    y = X.sum(1, keepdim=True) + 0.1 * torch.randn(40, 1, dtype=torch.float64)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(),
                                torch.nn.Linear(8, 1)).double()
    la = laplace.Laplace(model, "regression", subset_of_weights="all", hessian_structure="kron")
    la.fit(DataLoader(TensorDataset(X, y), batch_size=40))
    prior = torch.full((4,), 2.0, dtype=torch.float64)

    def value(log_sigma):
        return la.log_marginal_likelihood(prior.clone(), log_sigma.exp())

    h = 1e-6
    with torch.no_grad():
        numeric = (float(value(torch.tensor(math.log(0.3) + h, dtype=torch.float64)))
                   - float(value(torch.tensor(math.log(0.3) - h, dtype=torch.float64)))) / (2 * h)
    with uci.differentiable_kron_scaling():
        log_sigma = torch.tensor(math.log(0.3), dtype=torch.float64, requires_grad=True)
        (grad,) = torch.autograd.grad(value(log_sigma), log_sigma)
    assert float(grad) == pytest.approx(numeric, rel=1e-5)


def test_selected_never_picks_a_nan_criterion():
    # min/max over rows with a NaN criterion first returned that row
    from benchmarks.uci import _selected

    rows = [(float("nan"), 0.1, {"nll": 9.0}), (0.5, 1.0, {"nll": 0.4}), (0.7, 10.0, {"nll": 0.3})]
    assert _selected(rows, "val_nll", min, 0.0)["prior_precision"] == 1.0
    assert _selected(rows, "elbo", max, 0.0)["prior_precision"] == 10.0
