"""`embedpipe warmup`: options."""
from __future__ import annotations

import sys
from typing import Optional

from embedpipe.cli.options import DEVICE, DIM, DTYPE, MODEL, OutputDtype, engine_config


def warmup(model: str = MODEL, dim: Optional[int] = DIM, dtype: OutputDtype = DTYPE, device: str = DEVICE):
    """Compile MODEL's kernels ahead of a job so a cron run does not pay for it.

    On CUDA it first times the attention kernels (PyTorch's flash varlen, our Triton kernel, FlashInfer fa2
    and fa3) on MODEL's shape and stores the fastest per batch size in ~/.cache/embedpipe/attention-choice.json
    ($EMBEDPIPE_CACHE_DIR), which `--attention auto` then runs. FlashInfer compiles its kernels on first
    use (25-120 s per configuration on an H200) into ~/.cache/flashinfer; Triton caches in ~/.triton.
    Run once per machine image.
    """
    from embedpipe.cli.commands import fail
    from embedpipe.pipeline.api import run_warmup
    try:
        timings = run_warmup(engine_config(model, dim, dtype, device))
    except (ValueError, OSError) as e:
        fail(str(e))
    for name, value in timings.items():
        print(f"{name:>24}: {value:.3f}" if isinstance(value, float) else f"{name:>24}: {value}", file=sys.stderr)
