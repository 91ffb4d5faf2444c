"""Shared pieces of the benchmark suites: timing, ceilings, clocks, model folders and the peers.

Peers run the same weights on the same inputs as our engine, each in a process of its own
(isolation.py) or behind the same HTTP stack: transformers (AutoModel, SDPA, padded batches) and
sentence-transformers (its modules on padded batches of 32 for token ids, `encode` for texts),
both in bf16 on CUDA.
"""
from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
import torch

from embedpipe.kernels.models.model_folder import builtin_models
from embedpipe.kernels.testing.random_model import SHAPES, write_random_model

MODELS = ("minilm", "bert-base", "qwen3-0.6b", "pplx-embed-0.6b")
LONG_CONTEXT = 8192  # max_seq_length of the random Qwen3-shaped folders (their positions go to 32768)
ST_BATCH = 32  # sentence-transformers' default batch size


def model_folder(name: str, cache: Path) -> Path:
    """all-MiniLM-L6-v2's real weights, or a random-weight folder of a named shape (written once)."""
    if name == "minilm":
        return builtin_models()["minilm"]
    if name not in SHAPES:
        raise SystemExit(f"unknown model {name!r}: minilm or one of {', '.join(SHAPES)}")
    folder = cache / name
    if not (folder / "model.safetensors").exists():
        long = SHAPES[name][1].get("max_position_embeddings", 512) > LONG_CONTEXT
        write_random_model(name, folder, max_seq_length=LONG_CONTEXT if long else 512)
    return folder


def tree_rss(process) -> tuple[int, int] | None:
    """RSS bytes of a psutil process and of all its descendants; None once it (or a child being read) is gone."""
    import psutil
    try:
        return process.memory_info().rss, sum(child.memory_info().rss for child in process.children(recursive=True))
    except psutil.NoSuchProcess:
        return None


def run_process(command: list[str], timeout: float | None,
                samplers=lambda pid: ()) -> tuple[int | None, str, str, list]:
    """(return code or None on timeout, stdout, stderr, samplers(pid)'s samplers) of `command`; with a timeout it
    runs in its own session, and past it its whole process group (it and its workers) is killed. Without one it
    stays in this session, so a Ctrl-C here stops it too."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=timeout is not None)
    started = list(samplers(process.pid))
    try:
        out, err = process.communicate(timeout=None if timeout is None else max(1.0, timeout))
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        return None, out, err, started
    return process.returncode, out, err, started


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return {"p50": statistics.median(ordered), "p90": pick(0.9), "p99": pick(0.99), "max": ordered[-1],
            "n": len(ordered)}


MIN_SAMPLES = 20


def time_calls(fn, iters: int, warmup: int = 5, max_seconds: float = float("inf"),
               min_samples: int = MIN_SAMPLES) -> list[float]:
    """Milliseconds per call, host-visible (each call must return its result on the host): `iters`
    calls, or fewer (at least `min_samples`) once they have taken `max_seconds`."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
        if len(samples) >= min_samples and sum(samples) >= max_seconds * 1e3:
            break
    return samples


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def ceilings(device: str) -> dict[str, float]:
    """Dense matmul rate (TFLOP/s, bf16 on CUDA, float32 on the CPU) and copy bandwidth (TB/s, read + write)."""
    cuda = device.startswith("cuda")
    n, dtype = (8192, torch.bfloat16) if cuda else (1024, torch.float32)
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    matmul_ms = _median_ms(lambda: a @ b, device, 20 if cuda else 5)
    src = torch.randn((1 << 30) if cuda else (1 << 24), device=device, dtype=dtype)
    dst = torch.empty_like(src)
    copy_ms = _median_ms(lambda: dst.copy_(src), device, 20 if cuda else 5)
    return {"matmul_tflops": 2 * n ** 3 / matmul_ms / 1e9, "matmul_dtype": str(dtype).split(".")[1],
            "copy_tbps": 2 * src.numel() * src.element_size() / copy_ms / 1e9}


def graphed_ms(fn, reps: int = 20, iters: int = 50, calls: list | None = None) -> float:
    """Device ms per call of fn, captured `reps` times back to back in one graph (the launch gaps of a model graph).
    `calls`: callables captured in turn instead of fn (e.g. each on its own copy of the weights, so that they come
    from HBM as a model's layers do, not from L2)."""
    calls = calls or [fn] * reps
    calls[0]()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    return cuda_ms(graph.replay, iters) / len(calls)


# (num_warps, num_stages) pairs the GEMM benches' --launch times the engine's own tile pick with
LAUNCHES = ((4, 1), (4, 2), (4, 3), (4, 4), (8, 1), (8, 2), (8, 3))


def hbm_weight_copies(*tensors, total_bytes: int = 120_000_000) -> list[tuple]:
    """The tensors (a weight first, then e.g. its bias or None), then clones of them: 20 to 100 sets, the weights
    >= total_bytes in all (the L2 holds 60 MB). Graphed calls that each take their own set read their weights from
    HBM, as a model's layers do."""
    count = min(100, max(20, -(-total_bytes // (tensors[0].numel() * tensors[0].element_size()))))
    clone = (lambda t: None if t is None else t.clone())  # noqa: E731
    return [tensors] + [tuple(map(clone, tensors)) for _ in range(count - 1)]


def warm_gpu(seconds: float = 0.5) -> dict:
    """Runs bf16 matmuls for `seconds` so the GPU reaches its steady clocks before a timed series (the first
    process after the GPU idles otherwise runs at idle clocks); returns the SM clocks nvidia-smi reads then."""
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()
    return gpu_clocks()


def gpu_clocks() -> dict:
    """{"sm_mhz", "max_sm_mhz"} of GPU 0 from nvidia-smi; {} where it cannot be read."""
    import subprocess
    try:
        line = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm", "--format=csv,noheader,nounits",
                               "-i", "0"], capture_output=True, text=True, timeout=10).stdout.strip()
        sm, max_sm = (int(v) for v in line.split(","))
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return {}
    return {"sm_mhz": sm, "max_sm_mhz": max_sm}


def _median_ms(fn, device: str, iters: int) -> float:
    def timed():
        fn()
        synchronize(device)
    return statistics.median(time_calls(timed, iters, warmup=3))


def host_call_ms(fn, iters: int = 200, queued: int = 0) -> float:
    """p50 host ms of one fn() call (how long the host is held, not the device's time): the device idle before
    each, or with `queued` calls of fn queued ahead of it."""
    samples = []
    for _ in range(iters):
        torch.cuda.synchronize()
        for _ in range(queued):
            fn()
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(samples)


def cuda_ms(fn, iters: int) -> float:
    """Device time per call, from CUDA events around `iters` back-to-back calls."""
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def two_in_flight_s(engine, batch, iters: int = 30) -> float:
    """Seconds per batch with two in flight (the index job's steady state), after three untimed steps (eager,
    capture, replay)."""
    for _ in range(3):
        engine.step(batch).result()
    torch.cuda.synchronize()
    start, pending = time.perf_counter(), []
    for _ in range(iters):
        pending.append(engine.step(batch))
        if len(pending) == 2:
            pending.pop(0).result()
    pending[0].result()
    return (time.perf_counter() - start) / iters


def add_system_option(parser) -> None:
    """The --system NAME=SITE option of the A/B runners (latency_ab.py, serve_online_ab.py); ab_systems reads it."""
    parser.add_argument("--system", action="append", default=[],
                        help="NAME=PYTHONPATH (empty: this checkout); none: this checkout, as ours")


def ab_systems(specs: list[str]) -> dict[str, str]:
    """--system NAME=SITE options (SITE empty: this checkout) -> {NAME: the PYTHONPATH its processes run with,
    SITE first}: A/B runs of two builds (latency_ab.py, serve_online_ab.py). No option: this checkout, as "ours"."""
    systems = {}
    for spec in specs or ["ours="]:
        name, site = spec.split("=", 1)
        systems[name] = os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p)
    return systems


def linear_params(folder: Path) -> int:
    """Weights that take part in matmuls (embeddings excluded): 2 * this = dense FLOPs per token."""
    from safetensors import safe_open
    total = 0
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                shape = f.get_slice(key).get_shape()
                if len(shape) == 2 and "embed" not in key:
                    total += shape[0] * shape[1]
    return total


def run_dtype(device: str) -> torch.dtype:
    """What our engine runs in on the device: the peers run in it too."""
    return torch.bfloat16 if device.startswith("cuda") else torch.float32


def padded(sequences: list[list[int]], device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and attention_mask [num_seqs, longest], right-padded with 0, on the device."""
    lengths = torch.tensor([len(s) for s in sequences])
    ids = torch.zeros(len(sequences), int(lengths.max()), dtype=torch.long)
    for i, s in enumerate(sequences):
        ids[i, : len(s)] = torch.tensor(s)
    mask = (torch.arange(ids.shape[1])[None] < lengths[:, None]).long()
    return ids.to(device, non_blocking=True), mask.to(device, non_blocking=True)


def is_bidirectional(folder: Path) -> bool:
    """A Qwen3 folder of pplx-embed's kind: stock transformers ignores this flag and runs it causally."""
    return bool(json.loads((folder / "config.json").read_text()).get("use_bidirectional_attention"))


def attention_mask(mask: torch.Tensor, bidirectional: bool):
    """The mask a transformers model takes: 2-D, or for a bidirectional model a full 4-D one
    (every query sees every real key of its sequence), as the parity tests give it."""
    if not bidirectional:
        return mask
    return {"full_attention": mask[:, None, None, :].bool().expand(-1, 1, mask.shape[1], -1)}


class TransformersPeer:
    """transformers AutoModel, SDPA, one padded batch per call: what users run without embedpipe."""

    name = "transformers"

    def __init__(self, folder: Path, pooling: str, device: str):
        from transformers import AutoModel
        self.model = AutoModel.from_pretrained(str(folder), dtype=run_dtype(device), attn_implementation="sdpa")
        self.model = self.model.to(device).eval()
        self.pooling, self.device, self.bidirectional = pooling, device, is_bidirectional(folder)

    @torch.inference_mode()
    def __call__(self, sequences: list[list[int]]) -> torch.Tensor:
        """Pads, runs and pools like sentence-transformers: [num_seqs, hidden] float32 on the host."""
        ids, mask = padded(sequences, self.device)
        hidden = self.model(input_ids=ids, attention_mask=attention_mask(mask, self.bidirectional)).last_hidden_state
        hidden = hidden.float()
        if self.pooling == "mean":
            pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        elif self.pooling == "cls":
            pooled = hidden[:, 0]
        else:  # last token
            pooled = hidden[torch.arange(len(sequences)), mask.sum(1) - 1]
        return pooled.cpu()


class SentenceTransformersPeer:
    """sentence-transformers: its modules on padded batches of 32 for token ids, `encode` for texts.

    A bidirectional folder runs its modules by hand with the full mask (`encode` would run it causally).
    """

    name = "sentence-transformers"

    def __init__(self, folder: Path, device: str):
        from sentence_transformers import SentenceTransformer
        self.model = SentenceTransformer(str(folder), device=device).to(run_dtype(device)).eval()
        self.device, self.bidirectional = device, is_bidirectional(folder)

    def _embed(self, features: dict) -> torch.Tensor:
        if not self.bidirectional:
            return self.model(features)["sentence_embedding"]
        mask = attention_mask(features["attention_mask"], True)
        hidden = self.model[0].auto_model(input_ids=features["input_ids"], attention_mask=mask).last_hidden_state
        features = {**features, "token_embeddings": hidden}
        for module in list(self.model.children())[1:]:  # pooling, normalisation
            features = module(features)
        return features["sentence_embedding"]

    @torch.inference_mode()
    def __call__(self, sequences: list[list[int]]) -> torch.Tensor:
        out = []
        for start in range(0, len(sequences), ST_BATCH):
            ids, mask = padded(sequences[start:start + ST_BATCH], self.device)
            out.append(self._embed({"input_ids": ids, "attention_mask": mask}).float().cpu())
        return torch.cat(out)

    @torch.inference_mode()
    def encode(self, texts: list[str]) -> np.ndarray:
        if not self.bidirectional:
            return self.model.encode(texts, batch_size=ST_BATCH, convert_to_tensor=True).float().cpu().numpy()
        out = []
        for start in range(0, len(texts), ST_BATCH):
            features = self.model.tokenize(texts[start:start + ST_BATCH])
            features = {key: features[key].to(self.device) for key in ("input_ids", "attention_mask")}
            out.append(self._embed(features).float().cpu())
        return torch.cat(out).numpy()


def min_cosine(a, b) -> float:
    a, b = torch.as_tensor(np.asarray(a, dtype=np.float64)), torch.as_tensor(np.asarray(b, dtype=np.float64))
    return torch.nn.functional.cosine_similarity(a, b).min().item()


def random_sequences(rng, num_seqs: int, length: int) -> list[list[int]]:
    return [rng.integers(1000, 30000, size=length).tolist() for _ in range(num_seqs)]


def write_results(results: dict, folder: Path, table: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(results, indent=2))
    (folder / "results.md").write_text(table)


def machine_id() -> str:
    """This machine and this boot of it (the GPU's UUID where there is one, and the kernel's boot id), hashed: two
    calls with the same id ran on one machine without a restart between them."""
    import hashlib
    boot = Path("/proc/sys/kernel/random/boot_id")
    parts = [boot.read_text().strip() if boot.exists() else "", os.uname().nodename]
    if torch.cuda.is_available():
        parts.append(str(torch.cuda.get_device_properties(0).uuid))
    return hashlib.sha1("/".join(parts).encode()).hexdigest()[:12]


def environment() -> dict:
    import platform
    env = {"torch": torch.__version__, "date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
           "cpus": len(os.sched_getaffinity(0)), "machine": machine_id()}
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
    for package in ("flashinfer", "transformers", "sentence_transformers"):
        try:
            env[package] = __import__(package).__version__
        except ImportError:
            env[package] = None
    return env
