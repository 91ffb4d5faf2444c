"""What the CLI and Python users call: the jobs, with the engines each one's settings ask for.

The index job itself (index/job.py) embeds with whatever engines it is handed; here they are picked:
this process's engine, one engine process per device (--devices, scale/devices.py) or a Ray
cluster (--ray, scale/ray_job.py). Only cli/ and users import this module.
"""
from __future__ import annotations

import time

from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.pipeline.config import IndexOptions, JobConfig, job_config
from embedpipe.pipeline.index import tokenize_job
from embedpipe.pipeline.index.job import JobResult, LocalEngine, OpenEmbedder, run_job
from embedpipe.pipeline.scale.devices import DeviceEngines
from embedpipe.pipeline.scale.ray_job import ray_engines, tokenize_with_ray

# (sequences, tokens each) of `warmup`: a small batch (eager, then captured and replayed) and a large one (eager)
WARMUP_SHAPES = ((2, 100), (64, 512))


def run_index(job: JobConfig) -> JobResult:
    """`embedpipe index`: the whole job, holding OUTPUT's lock (raises OutputLocked when another run holds it)."""
    return run_job(job, embedder_for(job))


def embedder_for(job: JobConfig) -> OpenEmbedder:
    if job.ray_address is not None:
        return lambda job, tokenizer: ray_engines(job)
    if job.devices is not None:
        return lambda job, tokenizer: DeviceEngines(job)
    return LocalEngine


def run_tokenize(job: JobConfig) -> JobResult:
    """`embedpipe tokenize`: in this process's tokenizer pool, or as Ray tasks (--ray)."""
    return tokenize_job.run_tokenize(job, tokenize_with_ray if job.ray_address is not None else None)


def index_with_ray(inputs: list[str], output: str, address: str = "auto", **options) -> JobResult:
    """The job of `embedpipe index INPUTS --output OUTPUT --ray ADDRESS`, other options by their
    IndexOptions names (devices="gpu:4", keep_columns=("title",), ...). In a process that has already
    called ray.init, that session is used and `address` is ignored."""
    return run_index(job_config(IndexOptions(inputs=tuple(map(str, inputs)), output=str(output), ray=address,
                                             **options)))


def run_warmup(config: EngineConfig) -> dict[str, float | int | str]:
    """`embedpipe warmup`: on CUDA with attention "auto", first times the attention backends on the model's shape
    and stores the fastest per batch size (Engine.measure_attention); then compiles the model's kernels
    (FlashInfer JIT, Triton, cuBLAS) by running each warm-up shape three times: eager, capture, replay.
    Returns seconds per phase, the attention timings and choice, and the graph counters."""
    start = time.perf_counter()
    engine = Engine(config)
    timings: dict[str, float | int | str] = {"load_s": time.perf_counter() - start}
    if config.attention == "auto":
        timings |= engine.measure_attention()
        if any(name.startswith("attention_") for name in timings):
            engine = Engine(config)  # built again, with the choice just stored
    timings["attention"] = engine.attention
    max_len = min(engine.folder.max_seq_length, 512)
    for num_seqs, length in WARMUP_SHAPES:
        batch = pack([[100 + i % 1000 for i in range(min(length, max_len))]] * num_seqs, BucketPolicy())
        for phase in ("first", "second", "third"):
            start = time.perf_counter()
            engine.step(batch).result()
            timings[f"{num_seqs}x{length}_{phase}_s"] = time.perf_counter() - start
    timings.update(engine.counters.as_dict())
    return timings
