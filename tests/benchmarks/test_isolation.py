"""benchmarks/isolation.py: rounds alternate the systems, the budget cuts whole rounds with a recorded reason,
and figures and ratios are summarised round by round."""
import sys
import time

import pytest

from support.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from isolation import Deadline, OutOfBudget, ratio, round_robin, same_process_check, summarize  # noqa: E402


def test_rounds_alternate_the_systems():
    order = []
    results, cut = round_robin(["ours", "peer"], 3, lambda s, r: order.append((s, r)) or r, Deadline(None), "t")
    assert order == [("ours", 0), ("peer", 0), ("ours", 1), ("peer", 1), ("ours", 2), ("peer", 2)]
    assert results == {"ours": [0, 1, 2], "peer": [0, 1, 2]} and cut is None


def test_the_budget_keeps_whole_rounds_and_says_why():
    def slow(system, r):
        time.sleep(0.2)
        return r
    results, cut = round_robin(["ours", "peer"], 5, slow, Deadline(0.5), "suite")
    assert results == {"ours": [0], "peer": [0]} and "suite: round 2 of 5" in cut


def test_a_worker_past_the_budget_drops_its_round_only():
    def run_one(system, r):
        if (system, r) == ("peer", 1):
            raise OutOfBudget("stopped")
        return r
    results, cut = round_robin(["ours", "peer"], 3, run_one, Deadline(None), "suite")
    assert results == {"ours": [0], "peer": [0]} and "round 2 of 3 stopped" in cut
    with pytest.raises(OutOfBudget):  # nothing measured: the suite is skipped
        round_robin(["ours"], 3, lambda s, r: (_ for _ in ()).throw(OutOfBudget("no")), Deadline(None), "suite")


def test_figures_and_ratios_are_summarised_round_by_round():
    ours = [{"p50": 1.0, "n": 10, "pid": 7}, {"p50": 2.0, "n": 10, "pid": 8}, {"p50": 4.0, "n": 10, "pid": 9}]
    peer = [{"p50": 10.0, "n": 5}, {"p50": 10.0, "n": 5}, {"p50": 12.0, "n": 5}]
    summary = summarize(ours)
    assert summary["p50"] == {"median": 2.0, "min": 1.0, "max": 4.0} and summary["n"] == 30 and "pid" not in summary
    assert ratio(ours, peer, "p50", higher_is_better=False) == {"median": 5.0, "min": 3.0, "max": 10.0,
                                                               "rounds": [10.0, 5.0, 3.0]}


def test_systems_sharing_a_process_are_refused():
    same_process_check({"ours": [1, 2], "peer": [3, 4]})
    with pytest.raises(RuntimeError):
        same_process_check({"ours": [1, 2], "peer": [2, 4]})
