"""The "auto" policy as pure functions of sizes, parameters and the net's probe (no training)."""

import numpy as np
import pytest

from sklaplace._laplace import policy


@pytest.mark.parametrize("n_rows, prior_structure, frozen, refine, expected", [
    (200, "scalar", False, None, "cv"),
    (40, "scalar", False, None, "evidence"),  # 8 held-out rows, fewer than 10
    (200, "layerwise", False, None, "evidence"),
    (200, "scalar", True, None, "evidence"),
    (200, "scalar", False, "laplace", "evidence"),
])
def test_classifier_tuning(n_rows, prior_structure, frozen, refine, expected):
    assert policy.classifier_tuning(n_rows, 0.2, prior_structure, frozen, refine) == expected


def test_classifier_tuning_needs_enough_held_out_rows():
    assert policy.classifier_tuning(46, 0.2, "scalar", False, None) == "cv"  # ⌈9.2⌉ = 10 rows
    assert policy.classifier_tuning(45, 0.2, "scalar", False, None) == "evidence"  # 9 rows


@pytest.mark.parametrize("frozen, sigma_size, epochs, subset, expected", [
    (False, 1, 200, "auto", "online"),
    (False, 1, 200, "all", "online"),
    (False, 1, 200, "last_layer", "evidence"),
    (False, 1, 4, "auto", "evidence"),  # fewer epochs than burn-in + frequency
    (False, 2, 200, "auto", "evidence"),  # per-output σ
    (True, 1, 200, "auto", "evidence"),
])
def test_regressor_tuning(frozen, sigma_size, epochs, subset, expected):
    assert policy.regressor_tuning(frozen, sigma_size, epochs, 0, 5, subset) == expected


def test_continual_tuning_means_the_evidence():
    assert policy.continual_tuning("auto") == "evidence"
    assert policy.continual_tuning(None) is None


def test_full_structure_seconds_counts_weight_space_and_kernel_flops():
    assert policy.full_structure_seconds(1000, 1, 100, 1.0) == 1000 * 100**2 + 10 * 100**3
    assert policy.full_structure_seconds(10, 2, 1000, 1.0) == 2 * 20**2 * 1000 + 10 * 20**3
    # rows in parts: the P × P sum is decomposed whatever N·C
    assert policy.full_structure_seconds(10, 2, 1000, 1.0, kernel=False) == \
        20 * 1000**2 + 10 * 1000**3
    assert policy.all_weights_structure(True, 800, 1, 2801) == "full"
    assert policy.all_weights_structure(True, 800, 1, 2801, kernel=False) == "kron"


@pytest.mark.parametrize("n_params, all_linear, fits, expected", [
    (100, True, True, "full"),
    (100, True, False, "kron"),  # the Jacobians beyond the memory budget
    (20_000, True, True, "kron"),  # beyond AUTO_FULL_SECONDS
    (20_000, False, True, "diag"),  # a net Kronecker factors cannot read
])
def test_all_weights_structure(n_params, all_linear, fits, expected):
    assert policy.all_weights_structure(all_linear, 500, 3, n_params, fits) == expected


@pytest.mark.parametrize("requested, n_params, linear, expected", [
    (("auto", "auto"), 100, True, ("all", "full")),
    (("auto", "auto"), 20_000, True, ("all", "kron")),
    (("auto", "auto"), 20_000, False, ("last_layer", "auto")),
    (("auto", "full"), 100, True, ("all", "full")),
    (("auto", "full"), 20_000, True, ("last_layer", "full")),
    (("auto", "diag"), 20_000, True, ("all", "diag")),
    (("all", "auto"), 20_000, False, ("all", "diag")),
    (("last_layer", "auto"), 20_000, True, ("last_layer", "auto")),
    (("subnetwork", "full"), 20_000, True, ("subnetwork", "full")),
])
def test_choose_subset(requested, n_params, linear, expected):
    assert policy.choose_subset(*requested, 500, 3, n_params, linear, True) == expected


def test_choose_subset_probes_the_net_only_when_the_choice_needs_it():
    calls = []

    def probe():
        calls.append(1)
        return True

    policy.choose_subset("last_layer", "full", 500, 3, 20_000, probe, True)
    policy.choose_subset("auto", "diag", 500, 3, 20_000, probe, True)
    assert calls == []
    assert policy.choose_subset("auto", "auto", 500, 3, 20_000, probe, True) == ("all", "kron")
    assert calls == [1]


@pytest.mark.parametrize("kind, structure, n_params, requested, refine, holds, expected", [
    ("last_layer", "auto", 500, "auto", None, True, "full"),
    ("last_layer", "auto", 5000, "auto", None, True, "kron"),
    ("last_layer", "auto", 5000, "auto", "laplace", True, "diag"),  # refine: no kron
    ("all", "kron", 5000, "auto", None, False, "diag"),  # a prior kron cannot hold
    ("all", "kron", 5000, "kron", None, False, "kron"),  # asked for: refused later, loudly
    ("all", "full", 5000, "auto", None, True, "full"),
])
def test_finish_structure(kind, structure, n_params, requested, refine, holds, expected):
    assert policy.finish_structure(kind, structure, n_params, requested, refine, holds) == expected


def test_kron_holds_a_prior_constant_per_tensor_only():
    sizes = [6, 2, 3, 1]
    assert policy.kron_holds_prior("scalar", 1.0, sizes)
    assert policy.kron_holds_prior("layerwise", [1.0, 2.0, 3.0, 4.0], sizes)
    assert not policy.kron_holds_prior("diag", 1.0, sizes)
    assert not policy.kron_holds_prior("scalar", np.arange(1.0, 13.0), sizes)


def test_check_time_warns_beyond_the_budget(monkeypatch):
    lines = []
    policy.check_time("full", 100, 2, 50, "cpu", lines.append)
    assert lines and "estimated" in lines[0]
    monkeypatch.setattr(policy, "TIME_BUDGET_SECONDS", 1e-12)
    with pytest.warns(UserWarning, match="beyond the .* budget"):
        policy.check_time("lowrank", 100, 2, 50, "cpu")
