"""Device call 4: attention_timing.time_backends on Qwen3-0.6B's attention shape, 3 times in one process (fresh
per process: run it twice), each timing printed: does fa3's step at 128 and 2,048 tokens move between runs
(0.197 / 0.432 ms in call 1's warmup, 0.357 / 0.582 in call 2's)? And FlashInfer's host plan alone, per backend."""
import statistics
import time

import torch

from embedpipe.kernels.attention import AttentionSpec
from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.cuda.attention import make_cuda_attention
from embedpipe.kernels.cuda.attention_timing import time_backends

spec, device = AttentionSpec(16, 8, 128, True), torch.device("cuda")
for run in range(3):
    timings, failed = time_backends(spec, device, torch.bfloat16, 32768, ["triton", "fa2", "fa3"], layers=28)
    print("run", run, {t: {b: round(ms, 3) for b, ms in by.items()} for t, by in timings.items()}, failed, flush=True)
for name in ("fa2", "fa3"):
    attn = make_cuda_attention(name, spec, device, torch.bfloat16, 32768, 32768)
    batches = [pack([[1] * n], BucketPolicy()) for n in (128, 127)]
    layouts, key = [b.cu_seqlens.pin_memory() for b in batches], attn.graph_key(batches[0])
    dev = layouts[0].to(device)
    samples = []
    for i in range(400):
        start = time.perf_counter()
        attn.plan(layouts[i % 2], 1, key, dev)
        samples.append((time.perf_counter() - start) * 1e3)
    print(name, "plan ms p50", round(statistics.median(samples[100:]), 4), "p90",
          round(sorted(samples[100:])[270], 4), flush=True)
