"""benchmarks/multi_gpu_scaling.py: nvidia-smi's per-GPU samples become each GPU's busy fraction, and the script
runs on CPU engines end to end (every run verified against one engine's output)."""
import json
import subprocess
import sys

import pytest

from support.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from multi_gpu_scaling import busy_cell  # noqa: E402
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


@pytest.mark.slow
def test_cpu_engines_run_every_count_and_match_one_engine(tmp_path):
    script = REPO / "benchmarks" / "multi_gpu_scaling.py"
    done = subprocess.run([sys.executable, str(script), "--cpu", "--rows", "3000", "--models", "tiny-bert",
                           "--gpus", "1,2", "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = json.loads((tmp_path / "results.json").read_text())["models"]["tiny-bert"]["runs"]
    assert list(runs) == ["--devices x1", "--devices x2"]
    one, two = runs.values()
    assert one["rows"] == two["rows"] == 3000 and one["ok"] and two["ok"]
    assert two["num_engines"] == 2 and sum(two["units_per_engine"]) == sum(one["units_per_engine"])
    assert two["same_ids"] and two["same_index_ids"] and two["min_cosine"] >= 0.9999 and "speedup" in two
    assert not any(key.startswith("gpu_busy") for key in one)  # CPU engines: no GPU sampled
    assert "| tiny-bert | --devices x2 | 2 |" in (tmp_path / "results.md").read_text()
