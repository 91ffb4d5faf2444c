"""Where an `embedpipe index` run spends its time: CPU per process role over time, GPU use, py-spy stacks.

    . benchmarks/gpu_setup.sh
    python benchmarks/profile_index.py --model bert-base --rows 200000 --run "--device cuda" --run "--devices 0,1"
        --out DIR

Each --run is one `embedpipe index` of the same corpus (workloads.py lengths) with those options
(leading NAME=VALUE words set environment variables).
While it runs, every 0.5 s: the cores used by each role (the job's main process, engine processes
of --devices, tokenizer workers, others) and the threads of the main and engine processes over
half a core, by name, from psutil, and each GPU's utilisation from NVML. With
py-spy on PATH (--py-spy), the run is recorded with `py-spy record --subprocesses` and the busiest
functions of each role are listed by their own samples. Writes DIR/NAME.json per run and
DIR/summary.md; prints the summary.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from common import model_folder
from workloads import corpus_lengths, texts_of_lengths, write_corpus

SAMPLE_S = 0.5


def roles(root: psutil.Process, engines: bool) -> dict[int, str]:
    """pid -> role: 'main', 'engine' (with `engines`: the main's children), 'tokenizer', 'other'."""
    found = {root.pid: "main"}
    for child in root.children():
        try:
            grandchildren = child.children()
            command = " ".join(child.cmdline())
        except psutil.NoSuchProcess:
            continue
        if "resource_tracker" in command or "py-spy" in command:
            found[child.pid] = "other"
            continue
        found[child.pid] = "engine" if engines else "tokenizer"
        for grandchild in grandchildren:
            found[grandchild.pid] = "tokenizer"
    return found


class Sampler(threading.Thread):
    """Cores used per role and GPU utilisation, every SAMPLE_S, until stopped."""

    def __init__(self, root_pid: int, engines: bool):
        super().__init__(daemon=True)
        self.root_pid, self.engines, self.samples, self.roles = root_pid, engines, [], {}
        self.stopped = threading.Event()

    def run(self) -> None:
        gpus = _nvml_handles()
        last: dict[int, float] = {}
        start = time.perf_counter()
        while not self.stopped.wait(SAMPLE_S):
            try:
                root = psutil.Process(self.root_pid)
                if root.name() == "py-spy":  # recorded: the job is py-spy's child
                    root = root.children()[0]
                self.roles.update(roles(root, self.engines))
            except (psutil.NoSuchProcess, IndexError):
                continue
            cores, busy_threads = collections.Counter(), collections.Counter()
            for pid, role in list(self.roles.items()):
                try:
                    times = psutil.Process(pid).cpu_times()
                    threads = psutil.Process(pid).threads() if role in ("main", "engine") else []
                except psutil.NoSuchProcess:
                    continue
                total = times.user + times.system
                cores[role] += (total - last.get(pid, total)) / SAMPLE_S
                last[pid] = total
                for thread in threads:  # native threads too (OpenMP, Arrow, CUDA), which py-spy does not see
                    key = -thread.id  # tids and pids share a number space; keep them apart
                    total = thread.user_time + thread.system_time
                    if (total - last.get(key, total)) / SAMPLE_S > 0.5:
                        busy_threads[f"{role} {_thread_name(pid, thread.id)}"] += 1
                    last[key] = total
            sample = {"t": round(time.perf_counter() - start, 2), **{r: round(c, 2) for r, c in cores.items()},
                      "machine": round(psutil.cpu_percent() * psutil.cpu_count() / 100, 1),
                      "gpu": [_utilisation(handle) for handle in gpus], "threads_over_half_a_core": dict(busy_threads)}
            self.samples.append(sample)


def _thread_name(pid: int, tid: int) -> str:
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
    except OSError:
        return "?"


def _nvml_handles() -> list:
    try:
        import pynvml
        pynvml.nvmlInit()
        return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:
        return []


def _utilisation(handle) -> int:
    import pynvml
    return pynvml.nvmlDeviceGetUtilizationRates(handle).gpu


def top_functions(speedscope: Path, pid_roles: dict[int, str], count: int = 20) -> dict[str, list]:
    """Per role, the functions with the most samples of their own (py-spy's speedscope: a profile per thread)."""
    data = json.loads(speedscope.read_text())
    frames = [f"{f['name']} ({Path(f['file'] or '?').name}:{f['line']})" for f in data["shared"]["frames"]]
    ours = {i for i, f in enumerate(data["shared"]["frames"]) if "/embedpipe/" in (f["file"] or "")
            or re.search(r"/(pipeline|kernels|cli)/", f["file"] or "")}
    own: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    inclusive: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for profile in data["profiles"]:
        role = pid_roles.get(int(re.match(r"Process (\d+)", profile["name"])[1]), "other")  # 'Process PID Thread..'
        for stack, weight in zip(profile["samples"], profile["weights"]):
            if stack and not frames[stack[-1]].startswith("process "):  # a process with no Python frame
                own[role][frames[stack[-1]]] += weight
                for frame in set(stack) & ours:
                    inclusive[role][frames[frame].split(" (")[0]] += weight
    rounded = lambda counter: [(name, round(s, 2)) for name, s in counter.most_common(count)]
    return {role: {"own": rounded(own[role]), "inclusive (ours)": rounded(inclusive[role])} for role in own}


def profile_run(name: str, corpus: Path, model: Path, options: list[str], tmp: Path, py_spy: bool) -> dict:
    output = tmp / name
    env = dict(os.environ, **dict(option.split("=", 1) for option in options if "=" in option and option[0] != "-"))
    options = [option for option in options if not ("=" in option and option[0] != "-")]
    command = [sys.executable, "-m", "embedpipe.cli.main", "index", str(corpus), "--output", str(output),
               "--model", str(model), *options]
    recording = tmp / f"{name}.speedscope.json"
    if py_spy:
        command = ["py-spy", "record", "--subprocesses", "--nonblocking", "--rate", "50", "--format", "speedscope",
                   "-o", str(recording), "--", *command]
    start = time.perf_counter()
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    sampler = Sampler(process.pid, engines="--devices" in options)
    sampler.start()
    _, log = process.communicate()
    sampler.stopped.set()
    sampler.join()
    result = {"command": " ".join(command), "returncode": process.returncode, "wall_s": time.perf_counter() - start,
              "log": log[-3000:], "samples": sampler.samples}
    if (output / "metrics.json").exists():
        result["metrics"] = json.loads((output / "metrics.json").read_text())
    if py_spy and recording.exists():
        result["top_functions"] = top_functions(recording, sampler.roles)
    shutil.rmtree(output, ignore_errors=True)
    return result


def summary(runs: dict[str, dict]) -> str:
    lines = []
    for name, r in runs.items():
        m = r.get("metrics", {})
        lines.append(f"## {name}: exit {r['returncode']}, wall {r['wall_s']:.1f} s, job {m.get('seconds', 0):.1f} s, "
                     f"{m.get('embeddings_per_s', 0):,.0f} rows/s, graphs {m.get('engine')}, "
                     f"batches {m.get('batches')}")
        busy = [s for s in r["samples"] if any(u > 0 for u in s["gpu"])]
        if busy:
            mean = lambda key: sum(s.get(key, 0) for s in busy) / len(busy)
            gpu = [sum(s["gpu"][i] for s in busy) / len(busy) for i in range(len(busy[0]["gpu"]))]
            threads = collections.Counter()
            for s in busy:
                threads.update(s["threads_over_half_a_core"])
            lines.append("threads over half a core, mean while busy: " + ", ".join(
                f"{name} {n / len(busy):.1f}" for name, n in threads.most_common()))
            lines.append(f"while a GPU was busy ({len(busy) * SAMPLE_S:.1f} s): cores used main {mean('main'):.2f}, "
                         f"engines {mean('engine'):.2f}, tokenizers {mean('tokenizer'):.2f}, "
                         f"other {mean('other'):.2f}, "
                         f"machine {mean('machine'):.1f}; GPU utilisation % {[round(u) for u in gpu]}")
        first_busy = busy[0]["t"] if busy else None
        lines.append(f"first GPU activity at {first_busy} s of {r['wall_s']:.1f}")
        for role, tops in r.get("top_functions", {}).items():
            for kind, functions in tops.items():
                lines.append(f"- {role}, {kind} (seconds of samples): "
                             + "; ".join(f"{f} {s}" for f, s in functions[:14]))
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bert-base")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--run", action="append", required=True, help="options of one `embedpipe index` run")
    parser.add_argument("--py-spy", action="store_true", help="record each run with py-spy (on PATH)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = model_folder(args.model, tmp / "models")
        corpus = write_corpus(texts_of_lengths(model, corpus_lengths(args.rows)), tmp / "corpus.parquet")
        runs = {}
        for i, options in enumerate(args.run):
            name = f"{i}-" + "".join(c if c.isalnum() else "_" for c in options).strip("_")
            runs[name] = profile_run(name, corpus, model, options.split(), tmp, args.py_spy)
            (args.out / f"{name}.json").write_text(json.dumps(runs[name], indent=1))
            print(summary({name: runs[name]}), flush=True)
    (args.out / "summary.md").write_text(summary(runs))


if __name__ == "__main__":
    main()
