"""`benchmarks/run.py --quick` on the CPU: every suite runs through the isolated-process path (each system a process
of its own, rounds alternating) and writes well-formed results (no timing checks); the README's benchmark block is
what `benchmarks/report.py --readme` makes of the results it names."""
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from support.paths import REPO

RUN = REPO / "benchmarks" / "run.py"
IN_PROCESS = {"ours", "transformers", "sentence-transformers"}
sys.path.insert(0, str(RUN.parent))
import report  # noqa: E402


def positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def check_spread(spread: dict) -> None:
    assert positive(spread["median"]) and spread["min"] <= spread["median"] <= spread["max"], spread


def check_summary(summary: dict, rounds: int, keys=("p50", "p90", "p99", "max")) -> None:
    """Every figure summarised over `rounds` rounds; percentiles ordered within each round."""
    assert len(summary["rounds"]) == rounds, summary
    for key in keys:
        check_spread(summary[key])
    for r in summary["rounds"]:
        if "p50" in keys:
            assert r["p50"] <= r["p90"] <= r["p99"] <= r["max"], r


def check_ratio(value: dict, rounds: int) -> None:
    check_spread(value)
    assert len(value["rounds"]) == rounds and all(positive(v) for v in value["rounds"])


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("bench")
    done = subprocess.run([sys.executable, str(RUN), "--quick", "--out", str(out)], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "results.json").read_text()), out


@pytest.mark.slow
def test_quick_run_writes_suites_1_and_2(quick):
    results, _ = quick
    sizes, minilm = results["sizes"], results["models"]["minilm"]
    assert results["format"] == report.FORMAT and results["device"] == "cpu"
    assert set(minilm["seconds"]) == {"start", "latency", "http", "indexing"} and "errors" not in minilm
    latency = minilm["latency"]
    assert latency["rounds"] == sizes["rounds"] >= 2
    for group, key in (("latency", "latency_tokens"), ("scoring", "scoring_batches")):
        for size in map(str, sizes[key]):
            row = latency[group][size]
            assert set(row) == IN_PROCESS | {"vs"}
            for name in IN_PROCESS:
                check_summary(row[name], sizes["rounds"])
            for peer in IN_PROCESS - {"ours"}:
                check_ratio(row["vs"][peer], sizes["rounds"])
    assert min(latency["agreement"].values()) >= 0.999


@pytest.mark.slow
def test_quick_run_writes_suites_3_and_4(quick):
    results, _ = quick
    sizes, http = results["sizes"], results["models"]["minilm"]["http"]
    for tokens in map(str, sizes["throughput_tokens"]):  # 3. throughput over HTTP
        row = http["throughput"][tokens]
        for server in ("ours", "peer"):
            check_summary(row[server], sizes["rounds"], ("embeddings_per_s", "tokens_per_s"))
            assert all(r["requests"] == sizes["throughput_clients"] * sizes["throughput_requests"]
                       for r in row[server]["rounds"])
        check_ratio(row["vs"]["peer"], sizes["rounds"])
    assert set(http["concurrency"]) == {"passages", "queries"}  # 4. concurrency: long texts and short queries
    assert http["concurrency"]["queries"]["tokens"] < http["concurrency"]["passages"]["tokens"]
    for kind in http["concurrency"].values():
        assert list(kind["levels"]) == [str(c) for c in sizes["concurrency"]]
        for row in kind["levels"].values():
            for server in ("ours", "peer"):
                check_summary(row[server], sizes["rounds"])
            check_spread(row["ours"]["mean_batch_sequences"])
            check_ratio(row["vs"]["peer"], sizes["rounds"])
    assert min(http["agreement"].values()) >= 0.999


@pytest.mark.slow
def test_quick_run_writes_suite_5(quick):
    results, _ = quick
    sizes, indexing = results["sizes"], results["models"]["minilm"]["indexing"]
    systems = indexing["systems"]
    assert set(systems) == {"embedpipe index", "sentence-transformers (batch 256)", "sentence-transformers (batch 32)"}
    for system in systems.values():
        check_summary(system, sizes["rounds"], ("embeddings_per_s",))
    for r in systems["embedpipe index"]["rounds"]:
        assert r["rows"] == r["index_rows"] == sizes["corpus_rows"]
        assert positive(r["job_s"]) and r["wall_s"] > r["job_s"] and positive(r["peak_rss_mib"])
    for r in systems["sentence-transformers (batch 256)"]["rounds"]:  # the whole script, and encode alone in it
        assert r["rows"] == sizes["corpus_rows"] and r["wall_s"] > r["encode_s"] > 0
    for name, vs in indexing["vs"].items():
        for value in vs.values():
            check_ratio(value, sizes["rounds"])
    assert indexing["agreement"]["sentence-transformers"] >= 0.999


@pytest.mark.slow
def test_quick_run_gives_every_system_a_process_of_its_own(quick):
    """Each peer, and each round, ran in a process other than ours and other than the run's own."""
    results, _ = quick
    minilm = results["models"]["minilm"]
    pids = [*minilm["latency"]["pids"].values(), *minilm["http"]["pids"].values(), *minilm["indexing"]["pids"].values()]
    flat = [pid for values in pids for pid in values]
    assert len(flat) == len(set(flat)) == 3 * results["sizes"]["rounds"] + 2 + 2 * results["sizes"]["rounds"]
    assert results["pid"] not in flat


@pytest.mark.slow
def test_quick_run_writes_report_plots_and_readme_block(quick):
    results, out = quick
    table = (out / "results.md").read_text()
    for heading in ("1. Low-latency embedding", "2. Low-latency scoring", "3. High throughput",
                    "4. Concurrency", "5. Offline indexing", "Agreement", "Where we lose"):
        assert heading in table
    for plot in ("latency.png", "http.png", "indexing.png"):
        assert (out / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    block = report.readme_block(out)
    assert block.startswith(report.BEGIN) and block.endswith(report.END)
    assert "| minilm | 1 x 32 |" in block and "| minilm | 96 |" in block and "Where we lose" in block


@pytest.mark.slow
def test_add_rounds_adds_a_calls_rounds_of_suite_5_to_the_earlier_calls(quick, tmp_path):
    """--add-rounds on the same machine and corpus: the earlier call's rounds are kept (the same processes), this
    call's follow them, and every summary and ratio is over all of them."""
    results, out = quick
    shutil.copy(out / "results.json", tmp_path / "results.json")
    done = subprocess.run([sys.executable, str(RUN), "--quick", "--suites", "indexing", "--rounds", "1", "--merge",
                           "--add-rounds", "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    before, after = results["models"]["minilm"]["indexing"], json.loads((tmp_path / "results.json").read_text())
    indexing, rounds = after["models"]["minilm"]["indexing"], results["sizes"]["rounds"] + 1
    assert indexing["rounds"] == rounds and indexing["rounds_per_call"] == [rounds - 1, 1]
    for system, pids in indexing["pids"].items():
        assert pids[:-1] == before["pids"][system] and pids[-1] not in pids[:-1]
    for system in indexing["systems"].values():
        check_summary(system, rounds, ("embeddings_per_s",))
    for peer, vs in indexing["vs"].items():
        for measure, value in vs.items():
            check_ratio(value, rounds)
            assert value["rounds"][:-1] == before["vs"][peer][measure]["rounds"]  # the earlier call's pairs kept
    assert after["models"]["minilm"]["latency"] == results["models"]["minilm"]["latency"]  # other suites untouched
    assert "rounds 2 + 1 from 2 calls" in (tmp_path / "results.md").read_text()


def test_add_rounds_starts_afresh_on_another_machine_or_corpus():
    from common import machine_id
    from suite_indexing import IndexingRun
    earlier = {"machine": machine_id(),
               "corpus": {"file": "corpus-ab-96.parquet", "tokens": 5000, "default_batch_rows": 32}}
    run = IndexingRun.__new__(IndexingRun)  # no corpus written: earlier_rounds reads only these
    run.ctx, run.corpus, run.default_rows = SimpleNamespace(earlier=earlier), Path("corpus-ab-96.parquet"), 32
    assert run.earlier_rounds(5000) is earlier
    assert run.earlier_rounds(5001) is None  # other tokens: another tokenizer's or draw's corpus
    run.corpus = Path("corpus-ab-200.parquet")
    assert run.earlier_rounds(5000) is None
    run.corpus, run.ctx = Path("corpus-ab-96.parquet"), SimpleNamespace(earlier={**earlier, "machine": "elsewhere"})
    assert run.earlier_rounds(5000) is None
    run.ctx = SimpleNamespace(earlier={k: v for k, v in earlier.items() if k != "machine"})  # an older file's
    assert run.earlier_rounds(5000) is None
    run.ctx, run.default_rows = SimpleNamespace(earlier=earlier), 16  # another preset's rows at batch 32
    assert run.earlier_rounds(5000) is None
    run.ctx = SimpleNamespace(earlier=None)
    assert run.earlier_rounds(5000) is None


def test_readme_block_is_what_report_makes_of_the_results_it_names():
    """The block names its results folder (or none); regenerated from it, it is the README's text. With none,
    no committed results folder of this format exists (`report.py --readme` would pick it up)."""
    source = report.readme_source()
    assert report.readme_block(source) in report.README.read_text(), "run: python benchmarks/report.py --readme"
    assert source == report.newest_results(), "a newer results folder exists: python benchmarks/report.py --readme"


def test_report_names_suites_short_of_the_runs_rounds_and_every_day_of_a_merged_run():
    from report_tables import run_dates, skipped_notes
    models = {"m": {"indexing": {"rounds": 2}, "http": {"rounds": 3}},
              "n": {"indexing": {"rounds": 1, "rounds_cut": "round 2 of 2 skipped"}}}
    assert skipped_notes(models, 3) == ["- m / indexing: 2 rounds of the run's 3",
                                        "- n / indexing: 1 rounds (round 2 of 2 skipped)"]
    assert skipped_notes({"m": {"indexing": {"rounds": 3}}}, 3) == []
    merged = {"environment": {"date": "2026-12-02"}, "runs": [{"environment": {"date": "2026-12-02"}}, {}]}
    assert run_dates(merged) == "2026-12-02"
    merged["runs"].append({"environment": {"date": "2026-12-03"}})
    assert run_dates(merged) == "2026-12-02 to 2026-12-03"


def test_merge_keeps_each_models_suites_from_both_runs():
    first = {"environment": {"date": "a"}, "runs": [{"command": "first"}],
             "models": {"m": {"latency": {"x": 1}, "http": {"y": 1}, "seconds": {"latency": 1.0, "http": 2.0,
                                                                             "indexing": 3.0},
                              "errors": {"indexing": "killed"}},
                        "n": {"latency": {"x": 2}, "seconds": {"latency": 1.0}}}}
    second = {"environment": {"date": "b"}, "runs": [{"command": "second"}],
              "models": {"m": {"indexing": {"z": 3}, "seconds": {"indexing": 4.0}}}}
    merged = report.merge(first, second)
    assert merged["models"]["m"] == {"latency": {"x": 1}, "http": {"y": 1}, "indexing": {"z": 3},
                                     "seconds": {"latency": 1.0, "http": 2.0, "indexing": 4.0}}
    assert merged["models"]["n"] == first["models"]["n"]
    assert [r["command"] for r in merged["runs"]] == ["first", "second"] and merged["environment"] == {"date": "a"}
    failed_again = {"models": {"m": {"seconds": {"http": 5.0}, "errors": {"http": "refused"}}}}
    assert report.merge(first, failed_again)["models"]["m"]["errors"] == {"indexing": "killed", "http": "refused"}
    cut_short = {"models": {"m": {"seconds": {"latency": 1.0}, "skipped": {"indexing": "budget"}}}}
    assert "skipped" not in report.merge(cut_short, second)["models"]["m"]  # the second call ran it


@pytest.mark.slow
def test_host_pipeline_quick_writes_its_figures(tmp_path):
    """benchmarks/host_pipeline.py --quick: the real job with a null engine, each worker count in its own process."""
    script = RUN.parent / "host_pipeline.py"
    done = subprocess.run([sys.executable, str(script), "--quick", "--workers", "0", "1", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "host_pipeline.json").read_text())
    assert [run["workers"] for run in results["median"]] == [0, 1]
    for run in results["median"]:
        assert run["rows"] == results["rows"] == 2000
        assert all(positive(run[key]) for key in ("main_us_per_row", "feeding_thread_us_per_row",
                                                  "writer_thread_us_per_row", "rows_per_s", "tokens_per_s"))
    assert positive(results["median"][1]["worker_us_per_token"])


@pytest.mark.slow
def test_index_feed_quick_runs_every_system(tmp_path):
    """benchmarks/index_feed.py --device cpu --quick: tokenize, index from texts and from token ids, the engine
    and the tokenizer alone, each in its own process; --combine makes the README's table of its results."""
    script = RUN.parent / "index_feed.py"
    done = subprocess.run([sys.executable, str(script), "--device", "cpu", "--quick", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert sorted(run["system"] for run in results["runs"]) == sorted(
        ["tokenize", "index", "index-ids", "engine", "tokenizer-pool"])
    assert all(positive(run["tokens_per_s"]) for run in results["runs"]), results["runs"]
    index, ids = (next(r for r in results["runs"] if r["system"] == name) for name in ("index", "index-ids"))
    assert index["tokens"] == ids["tokens"] and index["rows"] == ids["rows"] == 500
    table = subprocess.run([sys.executable, str(script), "--combine", str(tmp_path / "results.json")],
                           capture_output=True, text=True, timeout=120)
    assert table.returncode == 0 and "| minilm | 500 |" in table.stdout, table.stdout + table.stderr
