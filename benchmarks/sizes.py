"""How much each suite measures: presets `full` (the default on the GPU), `one-call` and `quick` (CPU smoke run).

Windows are short and every figure is a median of rounds: what one round loses in samples the rounds give back
as a spread. Wall time measured on one H200 with 16 cores (benchmarks/results/2026-12-02-h200-full, seconds;
"start" is the latency workers, both servers and the corpus loading at once, untimed; indexing is 3 rounds of
`embedpipe index`, the script at batch 256 and its first rows at batch 32, each a fresh process, on 200,000 rows):

    full             start  latency  http  indexing      total
    minilm             13     17      37      252        ~320 s
    bert-base          17     24      39   ~290-370      ~370-450 s
    qwen3-0.6b         25     51      72     ~720        ~870 s
    pplx-embed-0.6b    25     55      75     ~740        ~900 s   + ceilings, a corpus per call: ~42 min in all

sentence-transformers at batch 256 takes 53-61 s of every round on 200,000 rows with MiniLM or BERT-base (103 s
on another H200: the peer varies by machine, ours by ~4%), 170-196 s with a 0.6B shape (ours 41-45 s): suite 5 is
most of the run. So the full preset needs several 10-minute device calls into one folder (--merge after the
first; --budget-s, 510 s by default on the GPU, skips and records what would not fit): `--suites latency,http`
(~7.5 min), `--suites indexing --models minilm` (~4.5 min), `--models bert-base` (~5-6.5 min), and for each 0.6B
shape `--rounds 2 --budget-s 570` (~9 min) then, warm, on the same machine, `--add-rounds --rounds 1` (~4.5
min). `one-call` keeps every suite, model and round but shorter windows and 20,000 rows (10,000 for the 0.6B
shapes), ~8.7 min, so the budget may cut its last rounds.
"""
from __future__ import annotations

from dataclasses import dataclass

LARGE_MODELS = ("qwen3-0.6b", "pplx-embed-0.6b")  # ~5x the cost per token of BERT-base


@dataclass(frozen=True)
class Sizes:
    rounds: int = 3  # every system once per round, alternating: A B A B A B
    # suites 1-2: per series and round, ours until 200 calls or 0.2 s (at least 20); a peer 20 or 0.2 s (at least 5)
    latency_tokens: tuple[int, ...] = (128, 512, 4096)
    latency_iters: int = 200
    measure_seconds: float = 0.2
    peer_iters: int = 20
    peer_seconds: float = 0.2
    peer_min_samples: int = 5
    scoring_batches: tuple[int, ...] = (5, 25, 50)
    scoring_tokens: int = 512
    # suite 3: requests of 100 sequences, fewer where that passes throughput_request_tokens (4096: 12)
    throughput_tokens: tuple[int, ...] = (512, 1024, 4096)
    throughput_batch: int = 100
    throughput_request_tokens: int = 51_200
    throughput_clients: int = 4
    throughput_requests: int = 1  # per client and round (the warm-up requests went before the rounds)
    # suite 4: closed loops of each client count, passages and queries
    concurrency: tuple[int, ...] = (1, 2, 4, 8, 16)
    concurrency_tokens: int = 512
    query_tokens: int = 10  # the online case: a few tokens a request, [CLS] and [SEP] included
    concurrency_seconds: float = 0.3
    warmup_seconds: float = 0.1
    http_workers: int = 4  # our server's HTTP processes (`embedpipe serve --http-workers`) in suites 3 and 4
    # suite 5: rows of the corpus, 200,000 for every model (issue 24); a 0.6B shape's round takes ~4 min there, most
    # of it the script's encode at ~1,200 rows/s, so its 3 rounds span two calls (run.py --add-rounds)
    corpus_rows: int = 200_000
    large_model_rows: int = 200_000
    default_batch_rows: int = 5_000  # sentence-transformers at its default batch of 32: the first rows
    large_default_batch_rows: int = 2_000

    def rows_for(self, model: str) -> int:
        return self.large_model_rows if model in LARGE_MODELS else self.corpus_rows

    def default_batch_rows_for(self, model: str) -> int:
        return self.large_default_batch_rows if model in LARGE_MODELS else self.default_batch_rows


ONE_CALL = Sizes(measure_seconds=0.1, peer_seconds=0.1, peer_min_samples=3, throughput_request_tokens=25_600,
                 concurrency_seconds=0.2, warmup_seconds=0.05, corpus_rows=20_000, large_model_rows=10_000,
                 default_batch_rows=2_000, large_default_batch_rows=1_000)

QUICK = Sizes(rounds=2, latency_tokens=(32, 128), latency_iters=5, measure_seconds=0.0, peer_iters=3,
              peer_seconds=0.0, peer_min_samples=3, scoring_batches=(2, 5), scoring_tokens=64, throughput_tokens=(64,),
              throughput_batch=10, throughput_request_tokens=640, throughput_requests=2, concurrency=(1, 4),
              concurrency_tokens=64, query_tokens=8, concurrency_seconds=1.0, warmup_seconds=0.5, http_workers=2,
              corpus_rows=96, large_model_rows=96, default_batch_rows=32, large_default_batch_rows=32)

PRESETS = {"full": Sizes(), "one-call": ONE_CALL, "quick": QUICK}
