"""The server's Prometheus metrics, on a registry of its own (one per app)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily

from embedpipe.kernels.batch import Batch

SECONDS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
POWERS_OF_TWO = tuple(float(1 << i) for i in range(11))  # 1 .. 1024
TOKENS = tuple(float(64 << i) for i in range(11))  # 64 .. 65536
PHASE_SECONDS = (0.0001, 0.0002, 0.0005, *SECONDS)  # a short request's parse and encode take tens of microseconds
# a request's phases (timing.RequestTimes.phases), each a histogram embedpipe_request_<phase>_seconds
PHASES = {"parse": "Request body to a checked request", "tokenize": "Texts to token ids",
          "inference": "First batch of a request launched until its last row is back",
          "encode": "Vectors to response bytes"}


class EngineCounters:
    """Graph replays, captures and eager runs, read from the engine when scraped."""

    def __init__(self, engine, prefix: str):
        self.engine, self.prefix = engine, prefix

    def collect(self):
        for name, value in self.engine.counters.as_dict().items():
            family = CounterMetricFamily(f"{self.prefix}{name}", f"Engine batches: {name.replace('_', ' ')}")
            family.add_metric([], value)
            yield family


class BatchMetrics:
    """One engine's batches: sizes, padding, the queue time of the requests they start, and the engine's graph
    counters; `prefix` names them (embedpipe_ for the embedding engine, embedpipe_rerank_ for the reranker's)."""

    def __init__(self, engine, registry: CollectorRegistry, prefix: str, what: str):
        self.queue_seconds = Histogram(f"{prefix}queue_seconds", f"Submission to the first batch of a {what}",
                                       buckets=SECONDS, registry=registry)
        self.batch_sequences = Histogram(f"{prefix}batch_sequences", "Sequences per batch",
                                         buckets=POWERS_OF_TWO, registry=registry)
        self.batch_tokens = Histogram(f"{prefix}batch_tokens", "Real tokens per batch", buckets=TOKENS,
                                      registry=registry)
        self.padded_tokens = Counter(f"{prefix}batch_padded_tokens", "Tokens launched, padding included",
                                     registry=registry)
        registry.register(EngineCounters(engine, prefix))

    def on_batch(self, batch: Batch, queue_seconds: list[float]) -> None:
        """Called by the engine's scheduler thread for every batch it launches."""
        self.batch_sequences.observe(batch.num_seqs)
        self.batch_tokens.observe(batch.num_tokens)
        self.padded_tokens.inc(batch.key[0])
        for seconds in queue_seconds:
            self.queue_seconds.observe(seconds)


class Metrics:
    """The server's metrics: requests (from every HTTP process), and the batches of its engine and of its reranker's,
    if it has one."""

    def __init__(self, engine, reranker=None):
        disable_created_metrics()  # no *_created series: half the lines, nothing anyone graphs
        self.registry = registry = CollectorRegistry()
        self.requests = Counter("embedpipe_requests", "HTTP requests answered", ["endpoint", "status"],
                                registry=registry)
        self.request_seconds = Histogram("embedpipe_request_seconds", "Request latency, arrival to response",
                                         ["endpoint"], buckets=SECONDS, registry=registry)
        self.active = Gauge("embedpipe_requests_active", "Requests admitted and not yet answered (the queue)",
                            registry=registry)
        self.inputs = Counter("embedpipe_inputs", "Texts or token-id lists embedded", registry=registry)
        self.tokens = Counter("embedpipe_tokens", "Tokens embedded (prompts and special tokens included)",
                              registry=registry)
        self.phase_seconds = [Histogram(f"embedpipe_request_{phase}_seconds", text, ["endpoint"],
                                        buckets=PHASE_SECONDS, registry=registry) for phase, text in PHASES.items()]
        self.batches = BatchMetrics(engine, registry, "embedpipe_", "request")
        self.rerank_batches = (None if reranker is None
                               else BatchMetrics(reranker, registry, "embedpipe_rerank_", "rerank request"))

    def admitted(self, change: int) -> None:
        self.active.inc(change)

    def counted(self, inputs: int, tokens: int) -> None:
        self.inputs.inc(inputs)
        self.tokens.inc(tokens)

    def answered(self, endpoint: str, status: int, seconds: float, phases: tuple[float, ...] | None = None) -> None:
        """A response: its status, its seconds from arrival and, for an answered one, the seconds of its phases
        (timing.RequestTimes.phases: parse, tokenize, inference, encode)."""
        self.requests.labels(endpoint, str(status)).inc()
        self.request_seconds.labels(endpoint).observe(seconds)
        if phases is not None:
            for histogram, value in zip(self.phase_seconds, phases):
                histogram.labels(endpoint).observe(value)

    def update(self, active_change: int, inputs: int, tokens: int, answered: list[tuple]) -> None:
        """An HTTP process's updates since its last (fronts.RemoteMetrics.take); answered: the arguments of
        answered() for each response."""
        self.admitted(active_change)
        self.counted(inputs, tokens)
        for response in answered:
            self.answered(*response)

    def text(self) -> bytes:
        return generate_latest(self.registry)
