"""The policies' trees and budgets: split by VC size; the device quota's energy never binds."""

from __future__ import annotations

import pytest

from joulepool.admission import Admit, decide
from joulepool.claim import Claim
from joulepool.grade import Energy, Grade
from joulepool.tree import Usage
from joulepool_sim.errors import SimulationConfigError
from joulepool_sim.policy import (
    ROOT,
    device_limits,
    device_only_policy,
    gpu_time_budgets,
    grade_blind_policy,
    pool1_policy,
    split_in_proportion,
)


def test_a_split_conserves_the_total_and_gives_remainders_by_size_then_id() -> None:
    shares = split_in_proportion(10, {"b": 1, "a": 1, "c": 1})
    assert shares == {"a": 4, "b": 3, "c": 3}
    shares = split_in_proportion(704, {"x": 64, "y": 8, "z": 3})
    assert sum(shares.values()) == 704
    assert shares == {"x": 601, "y": 75, "z": 28}


def test_pool1_splits_devices_and_energy_by_vc_size() -> None:
    policy = pool1_policy({"big": 3, "small": 1}, 8, 1_000)
    tree = policy.tree
    assert policy.vcs() == ("big", "small")
    assert (tree["big"].guarantee_devices, tree["small"].guarantee_devices) == (6, 2)
    assert (tree["big"].guarantee_uj, tree["small"].guarantee_uj) == (750, 250)
    assert (tree["big"].over_quota_weight, tree["small"].over_quota_weight) == (3, 1)
    assert tree[ROOT].guarantee_devices == 8
    assert tree[ROOT].guarantee_uj == 1_000


def test_the_device_quota_admits_on_devices_alone_up_to_the_whole_demand() -> None:
    demand = 5_000
    policy = device_only_policy({"a": 1, "b": 1}, 4, demand)
    usage = Usage(policy.tree)
    # The VC has already spent all of the trace's demand but this claim: still no borrowing.
    usage.move("a", spent_uj=demand - 700)
    claim = Claim("c", "a", 2, 1, Energy(700, Grade.Estimator))
    assert decide(policy.tree, usage, claim) == Admit(Energy(700, Grade.Estimator), 2, 0)


def test_settings_that_describe_no_cluster_are_refused() -> None:
    with pytest.raises(SimulationConfigError, match="at least one GPU"):
        pool1_policy({"a": 1}, 0, 10)
    with pytest.raises(SimulationConfigError, match="energy budget must be at least 1"):
        pool1_policy({"a": 1}, 1, 0)
    with pytest.raises(SimulationConfigError, match="nothing to simulate"):
        device_only_policy({}, 1, 10)


def test_the_grade_blind_quota_has_pool1s_tree_and_the_gpu_hours_split_by_size() -> None:
    sizes = {"big": 3, "small": 1}
    assert grade_blind_policy(sizes, 8, 1_000).tree == pool1_policy(sizes, 8, 1_000).tree
    assert gpu_time_budgets(sizes, 101) == {"big": 76, "small": 25}
    assert device_limits(pool1_policy(sizes, 8, 1_000).tree) == {"big": 6, "small": 2}
    with pytest.raises(SimulationConfigError, match="GPU-time budget"):
        gpu_time_budgets(sizes, 0)


def test_the_device_quota_takes_a_ceiling_per_vc() -> None:
    policy = device_only_policy({"a": 1, "b": 1}, 4, {"a": 10, "b": 30})
    assert (policy.tree["a"].guarantee_uj, policy.tree["b"].guarantee_uj) == (10, 30)
    assert policy.tree[ROOT].guarantee_uj == 40
