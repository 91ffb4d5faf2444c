"""The systems an A/B benchmark runs (benchmarks/common.ab_systems, latency_ab.system_runs): each --system NAME=SITE
a process environment with SITE first on PYTHONPATH; none named: this checkout, as "ours" (a latency_ab.py run
with no --system had stopped on an empty list, results/2026-12-06-h200-qkv-pdl call 2)."""
import os
import sys

from support.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from common import ab_systems  # noqa: E402
from latency_ab import latency_summary, system_runs  # noqa: E402


def test_each_system_runs_with_its_site_first_and_none_named_runs_this_checkout(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/tmp/site")
    assert ab_systems(["main=/tmp/main", "now="]) == {"main": os.pathsep.join(["/tmp/main", "/tmp/site"]),
                                                       "now": "/tmp/site"}
    assert ab_systems([]) == {"ours": "/tmp/site"}
    monkeypatch.delenv("PYTHONPATH")
    assert ab_systems([]) == {"ours": ""}


def test_every_system_runs_every_backend_named_by_both_when_several():
    systems = {"main": "/tmp/main", "now": ""}
    assert system_runs(systems, ["triton"]) == {"main": ("/tmp/main", "triton"), "now": ("", "triton")}
    assert list(system_runs(ab_systems([]), ["triton", "fa3"])) == ["ours/triton", "ours/fa3"]


def test_the_summary_of_the_rounds_so_far_is_each_runs_median_and_spread_without_the_clocks():
    # latency_ab writes it after every whole round, so a run cut short keeps the rounds it finished
    rounds = {"main": [{"clocks": {"sm_mhz": 1980}, "bert 1x128": 0.40}, {"clocks": {}, "bert 1x128": 0.36},
                       {"clocks": {}, "bert 1x128": 0.38}],
              "new": [{"clocks": {}, "bert 1x128": 0.30}]}
    assert latency_summary(rounds) == {"bert 1x128": {"main": {"median_ms": 0.38, "min_ms": 0.36, "max_ms": 0.40},
                                                      "new": {"median_ms": 0.30, "min_ms": 0.30, "max_ms": 0.30}}}
