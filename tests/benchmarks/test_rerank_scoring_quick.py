"""`benchmarks/rerank_scoring.py --quick` on the CPU: the tiny rerankers, ours and each peer in processes of their
own, alternating over 2 rounds; the results are well-formed and the peers' scores equal ours (fp32 on the CPU). No
timing checks."""
import json
import subprocess
import sys

import pytest

from support.paths import REPO
from test_benchmarks_quick import check_ratio, check_summary

SCRIPT = REPO / "benchmarks" / "rerank_scoring.py"
PEERS = {"tiny-bert-cross-encoder": {"sentence-transformers", "sentence-transformers-one-batch"},
         "tiny-qwen3-reranker": {"transformers", "transformers-last-logits"}}


@pytest.mark.slow
def test_quick_rerank_scoring_run(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(tmp_path)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results["models"]) == set(PEERS)
    for name, model in results["models"].items():
        pids = [pid for values in model["pids"].values() for pid in values]
        assert len(set(pids)) == len(pids) == 4  # ours and the peer, 2 rounds, a process each
        assert set(model["agreement_max_abs"]) == PEERS[name]
        assert all(diff < 1e-4 for diff in model["agreement_max_abs"].values()), model["agreement_max_abs"]
        assert model["scores_range"][0] < model["scores_range"][1]  # the documents' scores differ
        assert set(model["pair_tokens"]) == {160}  # every pair cut to the max length
        assert set(model["scoring"]) == {"2", "5"}
        for row in model["scoring"].values():
            assert set(row) == {"ours", "vs"} | PEERS[name]
            for system in {"ours"} | PEERS[name]:
                check_summary(row[system], 2)
            for peer in PEERS[name]:
                check_ratio(row["vs"][peer], 2)
    assert "| tiny-qwen3-reranker | 5 | transformers |" in (tmp_path / "results.md").read_text()
