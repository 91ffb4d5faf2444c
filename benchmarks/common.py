"""Shared pieces of the benchmark suites: timing, ceilings, model folders and the transformers peer."""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from embedpipe.kernels.model_folder import builtin_models
from embedpipe.kernels.random_model import SHAPES, write_random_model

MODELS = ("minilm", "bert-base", "qwen3-0.6b", "pplx-embed-0.6b")


def model_folder(name: str, cache: Path) -> Path:
    """all-MiniLM-L6-v2's real weights, or a random-weight folder of a named shape (written once)."""
    if name == "minilm":
        return builtin_models()["minilm"]
    folder = cache / name
    if not (folder / "model.safetensors").exists():
        write_random_model(name, folder)
    return folder


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return {"p50": statistics.median(ordered), "p90": pick(0.9), "p99": pick(0.99), "max": ordered[-1]}


def time_calls(fn, iters: int, warmup: int = 10) -> list[float]:
    """Milliseconds per call, host-visible (each call must return its result on the host)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def ceilings(device: str = "cuda") -> dict[str, float]:
    """Dense bf16 matmul rate (TFLOP/s) and device copy bandwidth (TB/s, read + write), measured now."""
    n = 8192
    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
    ms = cuda_ms(lambda: a @ b, 20)
    src = torch.randn(1 << 30, device=device, dtype=torch.bfloat16)  # 2 GiB
    dst = torch.empty_like(src)
    copy_ms = cuda_ms(lambda: dst.copy_(src), 20)
    return {"bf16_tflops": 2 * n ** 3 / ms / 1e9, "copy_tbps": 2 * src.numel() * 2 / copy_ms / 1e9}


def cuda_ms(fn, iters: int) -> float:
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


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


class TransformersPeer:
    """transformers AutoModel, bf16, SDPA, padded batches: what users run without embedpipe."""

    def __init__(self, folder: Path, pooling: str, dtype=torch.bfloat16):
        from transformers import AutoModel
        self.model = AutoModel.from_pretrained(str(folder), dtype=dtype, attn_implementation="sdpa").cuda().eval()
        self.pooling = pooling

    @torch.inference_mode()
    def __call__(self, sequences: list[list[int]]) -> torch.Tensor:
        """Pads, runs and pools like sentence-transformers: [num_seqs, hidden] float32 on the host."""
        lengths = torch.tensor([len(s) for s in sequences])
        ids = torch.zeros(len(sequences), int(lengths.max()), dtype=torch.long)
        for i, s in enumerate(sequences):
            ids[i, : len(s)] = torch.tensor(s)
        mask = (torch.arange(ids.shape[1])[None] < lengths[:, None]).long()
        ids, mask = ids.cuda(non_blocking=True), mask.cuda(non_blocking=True)
        hidden = self.model(input_ids=ids, attention_mask=mask).last_hidden_state.float()
        if self.pooling == "mean":
            pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        elif self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            pooled = hidden[torch.arange(len(sequences)), lengths.cuda() - 1]
        return pooled.cpu()


def random_sequences(rng, num_seqs: int, length: int) -> list[list[int]]:
    return [rng.integers(1000, 30000, size=length).tolist() for _ in range(num_seqs)]


def write_results(results: dict, folder: Path, table: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(results, indent=2))
    (folder / "results.md").write_text(table)


def environment() -> dict:
    env = {"torch": torch.__version__, "date": time.strftime("%Y-%m-%d")}
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
    try:
        import flashinfer
        env["flashinfer"] = flashinfer.__version__
    except ImportError:
        env["flashinfer"] = None
    return env
