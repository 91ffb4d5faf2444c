"""`benchmarks/run.py --quick` on the CPU: every suite runs and writes well-formed results (no timing checks)."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO

RUN = REPO / "benchmarks" / "run.py"
PEERS_IN_PROCESS = {"ours", "transformers", "sentence-transformers"}


def positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def check_percentiles(stats: dict) -> None:
    assert all(positive(stats[k]) for k in ("p50", "p90", "p99", "max")), stats
    assert stats["p50"] <= stats["p90"] <= stats["p99"] <= stats["max"], stats


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("bench")
    done = subprocess.run([sys.executable, str(RUN), "--quick", "--out", str(out)], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "results.json").read_text()), out


@pytest.mark.slow
def test_quick_run_writes_every_suite(quick):
    results, out = quick
    sizes = results["sizes"]
    assert results["device"] == "cpu" and positive(results["ceilings"]["matmul_tflops"])
    assert positive(results["ceilings"]["copy_tbps"])
    minilm = results["models"]["minilm"]
    assert set(minilm["seconds"]) == {"latency", "http", "indexing"}

    for tokens in map(str, sizes["latency_tokens"]):  # 1. batch-1 latency
        assert set(minilm["latency"][tokens]) == PEERS_IN_PROCESS
        for stats in minilm["latency"][tokens].values():
            check_percentiles(stats)
            assert positive(stats["weight_bandwidth_fraction"])
    for seqs in map(str, sizes["scoring_batches"]):  # 2. scoring
        assert set(minilm["scoring"][seqs]) == PEERS_IN_PROCESS
        for stats in minilm["scoring"][seqs].values():
            check_percentiles(stats)
            assert positive(stats["mfu"])
    for tokens in map(str, sizes["throughput_tokens"]):  # 3. throughput over HTTP
        for server in ("ours", "peer"):
            row = minilm["throughput"][tokens][server]
            assert row["requests"] == sizes["throughput_clients"] * sizes["throughput_requests"]
            assert positive(row["embeddings_per_s"]) and positive(row["mfu"])
    for clients in map(str, sizes["concurrency"]):  # 4. concurrency over HTTP
        for server in ("ours", "peer"):
            check_percentiles(minilm["concurrency"][clients][server])
        assert minilm["concurrency"][clients]["ours"]["mean_batch_sequences"] >= 1

    indexing = minilm["indexing"]  # 5. offline indexing
    assert indexing["index"]["rows"] == indexing["index"]["index_rows"] == sizes["corpus_rows"]
    assert positive(indexing["index"]["embeddings_per_s"]) and positive(indexing["index"]["peak_rss_mib"])
    assert set(indexing["engine"]) == {"ours", "ours-no-double-buffer", "ours-padded"}
    assert set(indexing["peers"]) == {"transformers", "sentence-transformers"}
    for run in [*indexing["engine"].values(), *indexing["peers"].values()]:
        assert positive(run["embeddings_per_s"]) and positive(run["tokens_per_s"])

    agreements = [*minilm["agreement"].values(), *minilm["http_agreement"].values(), *indexing["agreement"].values()]
    assert len(agreements) == 6 and min(agreements) >= 0.999


@pytest.mark.slow
def test_quick_run_writes_report_and_plots(quick):
    results, out = quick
    table = (out / "results.md").read_text()
    for heading in ("1. Low-latency embedding", "2. Low-latency scoring", "3. High throughput",
                    "4. Concurrency", "5. Offline indexing", "Agreement"):
        assert heading in table
    for plot in ("latency.png", "http.png", "indexing.png"):
        assert (out / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_merge_keeps_each_models_suites_from_both_runs():
    sys.path.insert(0, str(RUN.parent))
    import report
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
