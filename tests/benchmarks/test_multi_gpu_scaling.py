"""benchmarks/multi_gpu_scaling.py: nvidia-smi's per-GPU samples become each GPU's busy fraction, and the script
runs on CPU engines end to end (every run verified against one engine's output); rounds become medians and
round-by-round speed-ups."""
import json
import subprocess
import sys

import pytest

from support.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from multi_gpu_scaling import add_speedups, busy_cell, summary, table  # noqa: E402
from suite_indexing import busy_figures, utilisation_sample  # noqa: E402


def test_nvidia_smi_lines_give_a_gpu_and_its_busy_fraction():
    assert utilisation_sample("0, 57\n", 2) == (0, 0.57)
    assert utilisation_sample("1, 100\n", 2) == (1, 1.0)
    assert utilisation_sample("2, 40\n", 2) is None  # a GPU the run does not use
    assert utilisation_sample("0, [N/A]\n", 1) is None
    assert utilisation_sample("index, utilization.gpu [%]\n", 1) is None


def test_each_gpu_is_busy_from_its_first_to_its_last_busy_sample():
    figures = busy_figures([[0.0, 0.5, 1.0, 0.0], [0.0, 0.0, 0.8, 0.6, 0.0]])
    assert figures["gpu_busy_per_device"] == pytest.approx([0.75, 0.7])
    assert figures["gpu_busy_while_embedding"] == pytest.approx(0.725)
    assert figures["gpu_busy_whole_process"] == pytest.approx((0.375 + 0.28) / 2)
    one = busy_figures([[0.0, 0.4, 0.0, 0.6]])
    assert one == pytest.approx({"gpu_busy_while_embedding": 1 / 3, "gpu_busy_whole_process": 0.25})
    assert busy_figures([[]]) == {} and busy_figures([]) == {}
    assert busy_figures([[0.0, 0.0], [0.0, 0.5]])["gpu_busy_per_device"] == [0.0, 0.5]  # one GPU never busy
    assert busy_cell(figures | {"ok": True}) == "75% / 70%" and busy_cell(one) == "33%" and busy_cell({}) == "-"


def test_rounds_give_medians_and_round_by_round_speedups():
    def run(tokens_per_s, wall_s, **extra):
        return {"options": "--devices x", "num_engines": 1, "units_per_engine": [25], "rows": 100, "tokens": 1000,
                "verify_passed": True, "ok": True, "tokens_per_s": tokens_per_s, "embeddings_per_s": tokens_per_s / 10,
                "wall_s": wall_s, "seconds": wall_s - 1, **extra}

    same = {"same_unit_files": True, "same_ids": True, "same_index_ids": True}
    per_run = {"--devices x1": [run(100.0, 10.0), run(50.0, 20.0, min_cosine=0.99999, **same)],
               "--devices x2": [run(190.0, 5.0, min_cosine=0.99995, **same), run(80.0, 11.0, min_cosine=1.0, **same)],
               "--ray": [run(171.0, 6.0, min_cosine=1.0, **same), run(88.0, 10.0, min_cosine=1.0, **same)]}
    runs = {"--devices x1": ([], 1), "--devices x2": ([], 2), "--ray": ([], 2)}
    summaries = {name: summary(results) for name, results in per_run.items()}
    add_speedups(summaries, per_run, runs)
    one, two, ray = summaries.values()
    assert one["tokens_per_s"] == 75.0 and one["spread"]["wall_s"] == {"median": 15.0, "min": 10.0, "max": 20.0}
    assert one["min_cosine"] == 0.99999 and "speedup" not in one  # round 2 checked against round 1
    # round by round, not a ratio of medians: 190 / 100 and 80 / 50
    assert two["speedup"]["rounds"] == pytest.approx([1.9, 1.6]) and two["target"] == 1.9
    assert two["wall_speedup"]["rounds"] == pytest.approx([2.0, 20 / 11]) and two["wall_target"] == 1.8
    assert two["min_cosine"] == 0.99995 and two["ok"]
    assert ray["vs_devices"]["rounds"] == pytest.approx([0.9, 1.1])  # against the x2 run of its round
    rows = {line.split(" | ")[1]: line for line in table({"m": {"runs": summaries}}).splitlines()[2:]}
    assert "| 1.75x [1.60-1.90] | >= 1.9x |" in rows["--devices x2"]
    assert "| 1.00x [0.90-1.10] (>= 0.9x) |" in rows["--ray"]
    assert "| 75 [50-100] |" in rows["--devices x1"]

    per_run["--devices x2"][1] = {"options": "--devices 0,1", "error": "exit 1: boom", "ok": False}
    failed = summary(per_run["--devices x2"])
    assert failed["error"] == "exit 1: boom" and not failed["ok"]  # one failed round fails the run
    summaries = {name: summary(results) for name, results in per_run.items()}
    add_speedups(summaries, per_run, runs)
    assert "speedup" not in summaries["--devices x2"] and "vs_devices" not in summaries["--ray"]  # no failed base
    assert "failed: exit 1: boom" in table({"m": {"runs": summaries}})


@pytest.mark.slow
def test_cpu_engines_run_every_count_and_ray_and_match_one_engine(tmp_path):
    script = REPO / "benchmarks" / "multi_gpu_scaling.py"
    done = subprocess.run([sys.executable, str(script), "--cpu", "--rows", "3000", "--models", "tiny-bert",
                           "--gpus", "1,2", "--ray", "local", "--rounds", "2", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    model = json.loads((tmp_path / "results.json").read_text())["models"]["tiny-bert"]
    runs = model["runs"]
    assert list(runs) == ["--devices x1", "--devices x2", "--ray"] and model["rounds"] == 2
    one, two, ray = runs.values()
    assert one["rows"] == two["rows"] == ray["rows"] == 3000 and one["ok"] and two["ok"] and ray["ok"]
    assert all(len(r["rounds"]) == 2 for r in runs.values())
    assert two["num_engines"] == 2 and all(sum(units) == sum(one["units_per_engine"][0])
                                           for units in two["units_per_engine"])
    for r in (one, two, ray):  # the reference's second round is checked against its first, like every other run
        assert r["same_ids"] and r["same_index_ids"] and r["min_cosine"] >= 0.9999
    assert len(two["speedup"]["rounds"]) == 2 and len(ray["vs_devices"]["rounds"]) == 2
    assert not any(key.startswith("gpu_busy") for key in one)  # CPU engines: no GPU sampled
    assert "| tiny-bert | --devices x2 | 2 |" in (tmp_path / "results.md").read_text()
