"""The engine thread behind the server: FIFO token-budget batches merged across requests, in-process."""
import asyncio
import concurrent.futures
import threading
import time
from collections import deque

import numpy as np
import pytest

from support.numerics import cosine
from embedpipe.pipeline.batching.batcher import BatcherConfig
from embedpipe.pipeline.batching.embed import embed_token_ids
from embedpipe.pipeline.text.tokenizer import make_tokenizer
from embedpipe.pipeline.serve.scheduler import Scheduler, SchedulerClosed
from support.engines import OutOfMemoryAbove
from support.serve_client import GatedEngine

SMALL_BATCHES = BatcherConfig(max_batch_tokens=512, max_batch_seqs=64)


def sequences(num_seqs, length, seed=0):
    rng = np.random.default_rng(seed)
    return [[101, *rng.integers(1000, 29000, length - 2).tolist(), 102] for _ in range(num_seqs)]


def run(coroutine_fn, *args):
    return asyncio.run(coroutine_fn(*args))


def answer_all(engine, batching: BatcherConfig, jobs_ids: list) -> list:
    """Submits one request per entry of jobs_ids to a fresh Scheduler at once; their results, within 60 s."""
    async def main():
        scheduler = Scheduler(engine, batching)
        jobs = [scheduler.submit(ids) for ids in jobs_ids]
        results = await asyncio.wait_for(asyncio.gather(*(job.future for job in jobs)), 60)
        scheduler.close()
        return results

    return run(main)


def test_concurrent_jobs_match_the_reference_and_share_batches(minilm, texts):
    ids = [s for s in make_tokenizer(minilm).encode(texts)[0] if len(s) <= 48][:90]
    expected = embed_token_ids(minilm, ids)
    engine = GatedEngine(minilm)

    async def main():
        scheduler = Scheduler(engine, BatcherConfig(max_batch_tokens=512, max_batch_seqs=16))
        jobs = [scheduler.submit(ids[i:i + 3]) for i in range(0, len(ids), 3)]
        engine.gate.set()
        results = await asyncio.gather(*(job.future for job in jobs))
        scheduler.close()
        return results

    results = run(main)
    assert [len(r) for r in results] == [3] * (len(ids) // 3)
    assert cosine(np.concatenate(results), expected).min() >= 0.9999
    assert any(len({id(job) for job, _ in tags}) > 1 for tags in engine.batches), "no batch merged two requests"
    assert max(len(tags) for tags in engine.batches) <= 16


def test_a_large_request_is_cut_into_chunks_that_share_a_batch_with_the_next(minilm):
    big, small = sequences(30, 50), sequences(2, 5, seed=1)  # 10 big ones fill a 512-token batch
    engine = GatedEngine(minilm)

    async def main():
        scheduler = Scheduler(engine, SMALL_BATCHES)
        big_job, small_job = scheduler.submit(big), scheduler.submit(small)
        engine.gate.set()
        out = await asyncio.gather(big_job.future, small_job.future)
        scheduler.close()
        return big_job, small_job, out

    big_job, small_job, (big_out, small_out) = run(main)
    order = [(job, i) for tags in engine.batches for job, i in tags]
    assert order == [(big_job, i) for i in range(30)] + [(small_job, 0), (small_job, 1)]  # first in, first out
    assert sum(any(job is big_job for job, _ in tags) for tags in engine.batches) == 3
    shared = [tags for tags in engine.batches if {id(job) for job, _ in tags} == {id(big_job), id(small_job)}]
    assert len(shared) == 1, "the small request did not join the big one's last chunk"
    assert cosine(big_out, embed_token_ids(minilm, big)).min() >= 0.9999
    assert cosine(small_out, embed_token_ids(minilm, small)).min() >= 0.9999


def test_a_cancelled_job_drops_its_unbatched_sequences(minilm):
    engine = GatedEngine(minilm)

    async def main():
        scheduler = Scheduler(engine, SMALL_BATCHES)
        doomed, kept = scheduler.submit(sequences(50, 50)), scheduler.submit(sequences(1, 8))
        await asyncio.sleep(0.05)
        doomed.cancel()  # as a timed-out request does
        engine.gate.set()
        result = await asyncio.wait_for(kept.future, 60)
        scheduler.close()
        return doomed, result

    doomed, result = run(main)
    ran = sum(job is doomed for tags in engine.batches for job, _ in tags)
    assert ran <= 21, f"{ran} of the cancelled job's 50 sequences still ran"  # at most two batches' worth
    assert not doomed.future.done() and result.shape == (1, minilm.output.width)


def test_an_engine_failure_fails_its_requests_and_the_scheduler_goes_on(minilm):
    engine = GatedEngine(minilm, fail_token=7)
    engine.gate.set()

    async def main():
        scheduler = Scheduler(engine, SMALL_BATCHES)
        bad = scheduler.submit([[101, 7, 102]])
        with pytest.raises(RuntimeError, match="injected"):
            await bad.future
        good = await scheduler.submit(sequences(3, 20)).future
        scheduler.close()
        return good

    assert cosine(run(main), embed_token_ids(minilm, sequences(3, 20))).min() >= 0.9999


def test_close_finishes_queued_jobs_then_refuses_new_ones(minilm):
    engine = GatedEngine(minilm)

    async def main():
        scheduler = Scheduler(engine, SMALL_BATCHES)
        jobs = [scheduler.submit(sequences(4, 50, seed=i)) for i in range(5)]
        closing = asyncio.get_running_loop().run_in_executor(None, scheduler.close)
        await asyncio.sleep(0.05)
        with pytest.raises(SchedulerClosed):
            scheduler.submit(sequences(1, 8))
        engine.gate.set()
        await closing
        return await asyncio.gather(*(job.future for job in jobs))

    assert [r.shape[0] for r in run(main)] == [4] * 5


class SlowDeque(deque):
    """An inbox whose append waits first: a submit that has passed the closing check is slow to queue its job."""

    def __init__(self, entered: threading.Event):
        super().__init__()
        self.entered = entered

    def append(self, job):
        self.entered.set()
        time.sleep(0.2)
        super().append(job)


def test_a_submit_racing_close_is_served(minilm):
    """close() comes after a submit checked that the scheduler was open but before it queued its job: the engine
    thread waits for that job and answers it (without the inbox lock it stopped and the job waited forever)."""
    engine = GatedEngine(minilm)
    engine.gate.set()
    scheduler = Scheduler(engine, SMALL_BATCHES)
    entered, answer = threading.Event(), concurrent.futures.Future()
    scheduler._inbox = SlowDeque(entered)
    submitting = threading.Thread(target=scheduler.submit_with, args=(sequences(1, 8), answer.set_result))
    submitting.start()
    assert entered.wait(5)
    scheduler.close(timeout=5)
    submitting.join(5)
    assert answer.result(timeout=5).shape == (1, 384)
    with pytest.raises(SchedulerClosed):
        scheduler.submit_with(sequences(1, 8), answer.set_result)


def test_a_spinning_engine_thread_answers_while_it_polls_and_after_it_sleeps_and_closes_at_once(minilm):
    """idle_spin_s: after a batch the engine thread polls (a request then starts without a wake-up), then sleeps;
    answers are the same either way, and close() does not wait out the spin."""
    first, later = sequences(3, 20), sequences(2, 30, seed=1)

    async def main():
        scheduler = Scheduler(minilm, SMALL_BATCHES, idle_spin_s=0.5)
        got = [await scheduler.submit(first).future]
        await asyncio.sleep(0.05)  # within the spin
        got.append(await scheduler.submit(later).future)
        await asyncio.sleep(0.7)  # past it: asleep
        got.append(await scheduler.submit(first).future)
        started = time.perf_counter()
        await asyncio.get_running_loop().run_in_executor(None, scheduler.close)  # while it spins again
        return got, time.perf_counter() - started

    (a, b, c), closing_s = run(main)
    assert cosine(a, embed_token_ids(minilm, first)).min() >= 0.9999 and np.array_equal(a, c)
    assert cosine(b, embed_token_ids(minilm, later)).min() >= 0.9999
    assert closing_s < 0.4, f"close() took {closing_s:.2f} s: it waited out the spin"


def test_the_engine_thread_spins_by_default_only_alone_in_front_of_a_gpu():
    from embedpipe.pipeline.serve.config import IDLE_SPIN_US, ServeConfig, spin_seconds
    assert spin_seconds(ServeConfig(http_workers=4), "cuda:0") == IDLE_SPIN_US / 1e6
    assert spin_seconds(ServeConfig(http_workers=1), "cuda:0") == 0.0  # it would take the GIL from the HTTP loop
    assert spin_seconds(ServeConfig(http_workers=4), "cpu") == 0.0  # it would take a core from the engine
    assert spin_seconds(ServeConfig(http_workers=1, idle_spin_us=250), "cpu") == 250e-6
    with pytest.raises(ValueError, match="idle_spin_us"):
        ServeConfig(idle_spin_us=-1)


class DelayedHandle:
    """A LazyTensor that completes `delay` seconds after it is made, as a batch on a GPU does."""

    def __init__(self, rows, delay: float, on_result):
        self.rows, self.ready_at, self.on_result = rows, time.perf_counter() + delay, on_result

    def done(self) -> bool:
        return time.perf_counter() >= self.ready_at

    def result(self):
        time.sleep(max(0.0, self.ready_at - time.perf_counter()))
        self.on_result()
        return self.rows

    def read(self, consume):  # as LazyTensor.read
        return consume(self.result())


class DeviceLikeEngine:
    """The real engine behind handles that complete later; counts the batches launched and not yet read."""

    def __init__(self, engine, delay: float = 0.02):
        self.engine, self.delay = engine, delay
        self.outstanding = self.max_outstanding = 0
        self.lock = threading.Lock()

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def step(self, batch):
        rows = self.engine.step(batch).result()
        with self.lock:
            self.outstanding += 1
            self.max_outstanding = max(self.max_outstanding, self.outstanding)
        return DelayedHandle(rows, self.delay, self._read)

    def _read(self):
        with self.lock:
            self.outstanding -= 1


def test_two_batches_in_flight_while_the_device_is_busy(minilm):
    engine = DeviceLikeEngine(minilm)
    jobs_ids = [sequences(2, 30, seed=i) for i in range(12)]
    results = answer_all(engine, BatcherConfig(max_batch_tokens=256, max_batch_seqs=4), jobs_ids)
    assert engine.max_outstanding == 2  # launched ahead, but never more than two
    for ids, got in zip(jobs_ids, results):
        assert cosine(got, embed_token_ids(minilm, ids)).min() >= 0.9999


class HeldHandle:
    """A step's result that is done only once the test releases it."""

    def __init__(self, rows):
        self.rows, self.released = rows, threading.Event()

    def done(self):
        return self.released.is_set()

    def result(self):
        self.released.wait()
        return self.rows

    def read(self, consume):  # as LazyTensor.read
        return consume(self.result())


class HeldEngine:
    """The real engine, whose batches stay unfinished until released; records how many were unfinished
    each time a batch was launched."""

    def __init__(self, engine):
        self.engine, self.handles, self.unfinished_at_launch = engine, [], []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def step(self, batch):
        self.unfinished_at_launch.append(sum(not h.done() for h in self.handles))
        self.handles.append(HeldHandle(self.engine.step(batch).result()))
        return self.handles[-1]


@pytest.mark.parametrize("max_in_flight", [1, 2, 3])
def test_at_most_max_in_flight_batches_run_at_once(minilm, max_in_flight):
    engine = HeldEngine(minilm)
    stop = threading.Event()

    def release_slowly():  # the oldest batch, once max_in_flight are unfinished (or every batch has started)
        while not stop.is_set():
            unfinished = [h for h in list(engine.handles) if not h.done()]
            if unfinished and (len(unfinished) >= max_in_flight or len(engine.handles) == 12):
                unfinished[0].released.set()
            time.sleep(0.001)

    async def main():  # one sequence per batch
        scheduler = Scheduler(engine, BatcherConfig(max_batch_tokens=512, max_batch_seqs=1),
                              max_in_flight=max_in_flight)
        jobs = [scheduler.submit(sequences(1, 20, seed=i)) for i in range(12)]
        results = await asyncio.gather(*(job.future for job in jobs))
        scheduler.close()
        return results

    releaser = threading.Thread(target=release_slowly)
    releaser.start()
    try:
        results = run(main)
    finally:
        stop.set()
        releaser.join()
    assert len(engine.handles) == 12 and all(len(r) == 1 for r in results)
    assert max(engine.unfinished_at_launch) == max_in_flight - 1  # reached, never passed


@pytest.mark.parametrize("at", ["step", "result"])
def test_a_batch_out_of_memory_runs_as_halves_and_answers_every_request(minilm, at):
    """The scheduler launches through batching/in_flight.py, so the server splits a batch the device has
    no memory for, as the index job does, instead of failing the requests in it."""
    engine = OutOfMemoryAbove(minilm, max_tokens=128, at=at)
    jobs_ids = [sequences(6, 30, seed=i) for i in range(4)]
    results = answer_all(engine, BatcherConfig(max_batch_tokens=1024, max_batch_seqs=32), jobs_ids)
    assert engine.num_failed >= 1
    for ids, got in zip(jobs_ids, results):
        assert cosine(got, embed_token_ids(minilm, ids)).min() >= 0.9999


def test_a_job_times_its_queue_and_its_inference(minilm):
    """queue: submission to its first batch's launch; inference: that launch to its last row back (x-queue-time,
    x-inference-time). The first job's batch is held in step() 0.3 s; the second waits behind it."""
    engine = GatedEngine(minilm)

    async def main():
        scheduler = Scheduler(engine, SMALL_BATCHES)
        first = scheduler.submit(sequences(1, 8))
        await asyncio.sleep(0.1)  # the engine thread launches the first batch and blocks in its step
        second = scheduler.submit(sequences(1, 8, seed=1))
        await asyncio.sleep(0.2)
        engine.gate.set()
        await asyncio.wait_for(asyncio.gather(first.future, second.future), 60)
        scheduler.close()
        return first.times, second.times

    (first_queue, first_inference), (second_queue, second_inference) = run(main)
    assert first_queue < 0.09 and first_inference >= 0.29, (first_queue, first_inference)
    assert second_queue >= 0.19 and 0 < second_inference < second_queue, (second_queue, second_inference)


def test_reranker_pairs_with_token_types_share_batches_and_keep_their_scores(tmp_path):
    """/v1/rerank's path: a cross-encoder's pairs (BERT token types included) merged across requests into the
    scheduler's token-budget batches score as score_pairs (the `rerank` command's path) does."""
    from embedpipe.kernels.engine import Engine, EngineConfig
    from embedpipe.kernels.testing.random_model import write_random_model
    from embedpipe.pipeline.batching.rerank import score_pairs
    from embedpipe.pipeline.text.pairs import make_pair_tokenizer
    write_random_model("tiny-bert-cross-encoder", tmp_path)
    reranker = Engine(EngineConfig(model=str(tmp_path), device="cpu", task="score"))
    tokenizer = make_pair_tokenizer(reranker)
    requests = [tokenizer.encode(f"query {i}", [f"document {j} of {i} " * (j + 1) for j in range(5)])
                for i in range(6)]
    assert requests[0].types is not None and any(1 in types for types in requests[0].types)
    engine = GatedEngine(reranker)

    async def main():
        scheduler = Scheduler(engine, BatcherConfig(max_batch_tokens=256, max_batch_seqs=8))
        jobs = [scheduler.submit(pairs.ids, pairs.types) for pairs in requests]
        engine.gate.set()
        results = await asyncio.wait_for(asyncio.gather(*(job.future for job in jobs)), 60)
        scheduler.close()
        return results

    for pairs, scores in zip(requests, run(main)):
        np.testing.assert_allclose(scores[:, 0], score_pairs(reranker, pairs), atol=1e-5)
    assert any(len({id(job) for job, _ in tags}) > 1 for tags in engine.batches), "no batch merged two requests"
