"""attention="auto": the table `embedpipe warmup` stores, the choice read from it, and the dispatch per batch
size (CPU: the CUDA kernels are measured on the H200, tests/kernels/test_gpu_engine.py)."""
import json

import pytest
import torch

from embedpipe.kernels.attention import AttentionBackend, AttentionSpec
from embedpipe.kernels.attention_choice import (ANY_SIZE, SAFE_DEFAULT, TABLE_VERSION, AttentionChoice,
                                                load_choice, ranges_from_timings, shape_key, store_choice)
from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.cuda import attention as cuda_attention
from embedpipe.kernels.cuda.attention import SelectedAttention, auto_choice, candidate_backends

MACHINE = {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130", "flashinfer": "0.6.18.post1"}
SHAPE = shape_key(16, 8, 128, True, "bfloat16")
TIMINGS = {128: {"torch-varlen": 0.02, "fa2": 0.03, "fa3": 0.025},
           2048: {"torch-varlen": 0.05, "fa2": 0.06, "fa3": 0.04},
           32768: {"torch-varlen": 0.9, "fa2": 1.1, "fa3": 0.7}}


def test_the_fastest_backend_per_size_with_bounds_between_the_sizes_measured():
    assert ranges_from_timings(TIMINGS) == ((512, "torch-varlen"), (ANY_SIZE, "fa3"))  # 512 = sqrt(128 * 2048)
    assert ranges_from_timings({128: {"fa2": 1.0}, 2048: {"fa3": 1.0}, 32768: {"fa2": 1.0}}) == (
        (512, "fa2"), (8192, "fa3"), (ANY_SIZE, "fa2"))
    # within 5% of the default is noise: the default stays (BERT-base 1 x 128 on the H200: 6.69 vs 6.76 us)
    assert ranges_from_timings({128: {"torch-varlen": 1.0, "fa3": 0.96}, 2048: {"torch-varlen": 1.0, "fa3": 0.9}}) == (
        (512, "torch-varlen"), (ANY_SIZE, "fa3"))
    choice = AttentionChoice(ranges_from_timings(TIMINGS), "measured")
    assert [choice.backend_for(n) for n in (64, 512, 513, 10 ** 6)] == ["torch-varlen"] * 2 + ["fa3"] * 2
    assert choice.describe() == "torch-varlen up to 512 tokens, fa3 above (measured)"


def test_a_stored_choice_is_read_back_for_its_shape_on_its_machine(tmp_path):
    path = tmp_path / "attention-choice.json"
    stored = store_choice(MACHINE, SHAPE, TIMINGS, {"fa2": "RuntimeError: x"}, "2026-12-01T10:00:00", path)
    loaded = load_choice(MACHINE, SHAPE, path)
    assert loaded.ranges == stored.ranges == ((512, "torch-varlen"), (ANY_SIZE, "fa3"))
    assert "measured by embedpipe warmup at 2026-12-01T10:00:00" in loaded.note
    table = json.loads(path.read_text())
    assert table["shapes"][SHAPE]["failed"] == {"fa2": "RuntimeError: x"}
    other = shape_key(12, 12, 64, False, "bfloat16")
    store_choice(MACHINE, other, {128: {"fa2": 1.0}}, {}, "later", path)  # a second shape joins the table
    assert load_choice(MACHINE, SHAPE, path).ranges == stored.ranges
    assert load_choice(MACHINE, other, path).ranges == ((ANY_SIZE, "fa2"),)


def test_a_missing_stale_or_corrupt_table_falls_back_to_the_safe_default_and_says_why(tmp_path):
    path = tmp_path / "attention-choice.json"
    cases = {"no measured choice": lambda: None,
             "cannot be read": lambda: path.write_text("{broken"),
             "another machine or version": lambda: store_choice({**MACHINE, "flashinfer": "0.5"}, SHAPE, TIMINGS,
                                                                {}, "t", path),
             "holds no choice for": lambda: store_choice(MACHINE, "other-shape", TIMINGS, {}, "t", path)}
    for reason, make in cases.items():
        path.unlink(missing_ok=True)
        make()
        choice = load_choice(MACHINE, SHAPE, path)
        assert choice.ranges == ((ANY_SIZE, SAFE_DEFAULT),), reason
        assert reason in choice.note and "run `embedpipe warmup`" in choice.note, choice.note


def test_a_head_dim_one_kernel_runs_reads_no_table():
    choice = auto_choice(AttentionSpec(8, 8, 96, False), torch.device("cpu"), torch.bfloat16)
    assert choice.ranges == ((ANY_SIZE, SAFE_DEFAULT),) and "head_dim 96" in choice.note


def test_the_backends_measured_per_shape(monkeypatch):
    """torch-varlen runs every shape; our Triton kernel power-of-two head dims up to 128 (MiniLM's 32 too);
    FlashInfer 64, 128 and 256 where it is installed."""
    pytest.importorskip("triton")
    monkeypatch.setattr(cuda_attention, "flashinfer_installed", lambda: True)
    assert candidate_backends(AttentionSpec(12, 12, 32, False)) == [SAFE_DEFAULT, "triton"]
    assert candidate_backends(AttentionSpec(16, 8, 128, True)) == [SAFE_DEFAULT, "triton", "fa2", "fa3"]
    assert candidate_backends(AttentionSpec(8, 8, 256, True)) == [SAFE_DEFAULT, "fa2", "fa3"]
    assert candidate_backends(AttentionSpec(8, 8, 96, True)) == [SAFE_DEFAULT]
    monkeypatch.setattr(cuda_attention, "flashinfer_installed", lambda: False)
    assert candidate_backends(AttentionSpec(16, 8, 128, True)) == [SAFE_DEFAULT, "triton"]


def test_head_dim_32_reads_the_measured_table_now_that_two_kernels_run_it(tmp_path, monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("EMBEDPIPE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cuda_attention, "machine_signature", lambda device: MACHINE)
    spec = AttentionSpec(12, 12, 32, False)
    assert "no measured choice" in auto_choice(spec, torch.device("cpu"), torch.bfloat16).note
    store_choice(MACHINE, shape_key(12, 12, 32, False, "bfloat16"),
                 {128: {SAFE_DEFAULT: 1.0, "triton": 0.5}, 2048: {SAFE_DEFAULT: 1.0, "triton": 1.2}}, {}, "t")
    assert auto_choice(spec, torch.device("cpu"), torch.bfloat16).ranges == ((512, "triton"), (ANY_SIZE, SAFE_DEFAULT))


def test_a_table_of_the_first_version_is_stale(tmp_path):
    """Version 1 timed attention replays alone (no host plan, one layer, no Triton kernel): measure again."""
    path = tmp_path / "attention-choice.json"
    store_choice(MACHINE, SHAPE, TIMINGS, {}, "t", path)
    table = json.loads(path.read_text())
    assert table["machine"]["table_version"] == TABLE_VERSION > 1
    table["machine"]["table_version"] = 1
    path.write_text(json.dumps(table))
    choice = load_choice(MACHINE, SHAPE, path)
    assert choice.ranges == ((ANY_SIZE, SAFE_DEFAULT),) and "another machine or version" in choice.note


class Recording(AttentionBackend):
    """A backend that records its plans and answers forward() with its name's mark."""

    def __init__(self, spec, mark: float):
        super().__init__(spec)
        self.mark, self.plans = mark, []

    def graph_key(self, batch):
        return (*batch.key, "own")  # starts with the padded tokens, as every key (GraphCache reads key[0])

    def plan(self, cu_seqlens, num_seqs, graph_key=None, device_cu_seqlens=None):
        self.plans.append((int(cu_seqlens[-1]), graph_key))

    def forward(self, q, k, v):
        return torch.full_like(q, self.mark)


def test_selected_attention_runs_each_batch_size_on_its_backend_and_keys_graphs_by_it():
    spec = AttentionSpec(2, 2, 64, False)
    small, large = Recording(spec, 1.0), Recording(spec, 2.0)
    attn = SelectedAttention(spec, {"torch-varlen": small, "fa3": large},
                             AttentionChoice(((512, "torch-varlen"), (ANY_SIZE, "fa3")), "measured"))
    q = torch.zeros(4, 2, 64)
    for lengths, name, backend in (([100, 200], "torch-varlen", small), ([600, 300], "fa3", large)):
        batch = pack([[1] * n for n in lengths], BucketPolicy())
        key = attn.graph_key(batch)
        assert key == (*batch.key, "own", name)
        attn.plan(batch.cu_seqlens, batch.num_seqs, key)  # captured or replayed: the key names the backend
        assert (backend.plans[-1] == (batch.key[0], (*batch.key, "own"))
                and attn.forward(q, q, q)[0, 0, 0] == backend.mark)
        attn.plan(batch.cu_seqlens, batch.num_seqs)  # eager: chosen by the batch's padded tokens
        assert backend.plans[-1] == (batch.key[0], None) and attn.forward(q, q, q)[0, 0, 0] == backend.mark
    assert len(small.plans) == len(large.plans) == 2


def test_warmup_times_the_backends_in_turns_and_keeps_each_sizes_median(monkeypatch):
    """time_backends (CPU: the timed step scripted): backends alternate round after round, a one-round outlier (fa3's
    2,048-token step, as one H100 warmup measured it: 0.582 against 0.43-0.46 ms in six others) does not move its
    median or the choice, and a backend that fails in a later round is left out with its reason, its earlier
    timings dropped."""
    from embedpipe.kernels.cuda import attention_timing

    sizes = [n * length for n, length in attention_timing.MEASURED_SHAPES]
    scripted = {  # backend: {tokens: ms of rounds 1, 2, 3}
        "triton": dict(zip(sizes, ([0.14, 0.15, 0.14], [0.48, 0.51, 0.54], [8.5, 8.6, 8.8]))),
        "fa3": dict(zip(sizes, ([0.20, 0.21, 0.20], [0.582, 0.44, 0.45], [6.4, 6.4, 6.5]))),
        "fa2": dict(zip(sizes, ([0.40, RuntimeError("lost"), 0.41], [0.93] * 3, [7.7] * 3)))}
    made, calls = [], []

    def fake_make(name, *args):
        made.append(name)
        return name

    def fake_time_shape(attn, spec, device, dtype, layers, max_graph_tokens, num_seqs, length):
        tokens = num_seqs * length
        calls.append((attn, tokens))
        ms = scripted[attn][tokens][calls.count((attn, tokens)) - 1]
        if isinstance(ms, Exception):
            raise ms
        return tokens, ms

    monkeypatch.setattr(attention_timing, "make_cuda_attention", fake_make)
    monkeypatch.setattr(attention_timing, "_time_shape", fake_time_shape)
    timings, failed = attention_timing.time_backends(AttentionSpec(16, 8, 128, True), torch.device("cpu"),
                                                     torch.bfloat16, 4096, ["triton", "fa3", "fa2"], layers=2)
    assert made == ["triton", "fa3", "fa2"]  # each made once, kept for its later rounds
    order = [name for name, tokens in calls if tokens == sizes[0]]
    assert order == ["triton", "fa3", "fa2", "triton", "fa3", "fa2", "triton", "fa3"]  # in turns; fa2 out in round 2
    assert failed == {"fa2": "RuntimeError: lost"}
    assert timings == {sizes[0]: {"triton": 0.14, "fa3": 0.20}, sizes[1]: {"triton": 0.51, "fa3": 0.45},
                       sizes[2]: {"triton": 8.6, "fa3": 6.4}}
    # fa3 from the geometric middle of 128 and 2,048 tokens on; round 1's figures alone would have kept triton there
    assert ranges_from_timings(timings) == ((512, "triton"), (ANY_SIZE, "fa3"))
