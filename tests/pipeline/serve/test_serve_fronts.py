"""The link between an HTTP process and the engine process (serve/fronts.py), in one process over its real pipes."""
import asyncio
import fcntl
import struct
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from support.numerics import cosine
from embedpipe.pipeline.batching.batcher import BatcherConfig
from embedpipe.pipeline.batching.embed import embed_token_ids
from embedpipe.pipeline.serve.app import LocalBackend
from embedpipe.pipeline.serve.fronts import FrontBridge, RemoteBackend, link
from support.serve_client import GatedEngine

FAIL_TOKEN = 2999


@pytest.fixture
def linked(minilm):
    """(engine, engine-process side, HTTP-process side): a LocalBackend behind a bridge, and its RemoteBackend."""
    engine = GatedEngine(minilm, fail_token=FAIL_TOKEN)
    local = LocalBackend(engine, None, BatcherConfig(max_batch_tokens=512, max_batch_seqs=16))
    local.start()
    here, there = link()
    searches = ThreadPoolExecutor(1)
    bridge = FrontBridge(here, local, searches)
    yield engine, bridge, RemoteBackend(there)
    engine.gate.set()
    for connection in there:
        connection.close()
    bridge.close(10)
    assert bridge.jobs_closed.is_set() and not bridge.thread.is_alive(), "the HTTP process's end was not seen"
    local.close()
    searches.shutdown()


def test_embeddings_failures_timeouts_and_metrics_cross_the_link(linked, minilm):
    engine, bridge, remote = linked
    sequences = [[101, *range(1000, 1000 + n), 102] for n in (5, 40, 7)]

    async def main():
        remote.start()
        first = asyncio.create_task(asyncio.wait_for(remote.embed(sequences[:1]), 0.3))
        await asyncio.sleep(0.05)
        assert len(bridge._jobs) == 1  # the engine thread read it and launched it; the gated step holds it
        second = asyncio.create_task(asyncio.wait_for(remote.embed([[101, 7777, 102]]), 0.1))
        for waiting in (first, second):
            with pytest.raises(asyncio.TimeoutError):
                await waiting
        engine.gate.set()  # the engine thread reads the second request and its cancel together, before batching
        deadline = time.monotonic() + 5
        while bridge._jobs:  # the first's late answer went nowhere; the cancelled second was dropped
            assert time.monotonic() < deadline, "a cancelled job stayed in the bridge"
            await asyncio.sleep(0.01)
        batched = [list(job.sequences[i]) for tags in engine.batches for job, i in tags]
        assert batched == [sequences[0]], "the cancelled request ran"
        got, (queue_seconds, inference_seconds) = await remote.embed(sequences)  # the engine's times come along
        assert got.shape == (3, 384) and queue_seconds >= 0 and inference_seconds > 0
        assert cosine(got, embed_token_ids(minilm, sequences)).min() >= 0.9999
        with pytest.raises(RuntimeError, match="injected engine failure"):
            await remote.embed([[101, FAIL_TOKEN, 102]])
        with pytest.raises(AttributeError):  # no index in the engine process: the error comes back, the link goes on
            await asyncio.get_running_loop().run_in_executor(None, remote.search, np.zeros((1, 384), np.float32), 3)
        remote.metrics.admitted(1)
        remote.metrics.counted(3, 58)
        remote.metrics.answered("embeddings", 200, 0.004, (0.0001, 0.0005, 0.003, 0.0002))  # and the phases
        remote.metrics.answered("embeddings", 400, 0.0003)
        remote.metrics.admitted(-1)
        return await asyncio.get_running_loop().run_in_executor(None, remote.metrics.text)

    text = asyncio.run(main()).decode()
    assert "embedpipe_tokens_total 58.0" in text and "embedpipe_inputs_total 3.0" in text
    assert 'embedpipe_requests_total{endpoint="embeddings",status="200"} 1.0' in text
    for phase in ("parse", "tokenize", "inference", "encode"):  # the answered request's, not the 400's
        assert f'embedpipe_request_{phase}_seconds_count{{endpoint="embeddings"}} 1.0' in text, phase
    assert 'embedpipe_request_inference_seconds_sum{endpoint="embeddings"} 0.003' in text
    assert "embedpipe_requests_active 0.0" in text
    assert not bridge._jobs


def test_a_full_jobs_pipe_and_a_full_replies_pipe_do_not_wait_on_each_other(linked, minilm):
    """The engine thread writes a reply larger than the replies pipe while the HTTP process has more requests than
    the jobs pipe holds: the loop never blocks on the jobs pipe (its frames wait in wire.FrameWriter), so it reads
    the reply, the engine thread goes on and reads the requests. (A loop that blocked on the full jobs pipe read no
    reply, and the engine thread, blocked on the full replies pipe, read no request.)"""
    engine, bridge, remote = linked
    for end in (remote.jobs, remote.replies):  # the smallest pipes (a page) stand in for 1 MiB ones under load
        fcntl.fcntl(end.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), 4096)
    large_reply = [[101, 1000 + i, 102] for i in range(16)]  # 16 x 384 float32: 24 KiB back
    long_requests = [[[101, *range(2000 + r, 2498 + r), 102]] * 4 for r in range(3)]  # 8 KiB frames each

    async def main():
        remote.start()
        first = asyncio.create_task(remote.embed(large_reply))
        await asyncio.sleep(0.1)  # launched; the gated step holds the engine thread
        rest = [asyncio.create_task(remote.embed(ids)) for ids in long_requests]
        await asyncio.sleep(0.1)  # the loop ran every send: the jobs pipe is full, the rest waits in the writer
        engine.gate.set()
        return await asyncio.wait_for(asyncio.gather(first, *rest), 60)

    answers = asyncio.run(main())
    for (got, _), ids in zip(answers, [large_reply, *long_requests]):
        assert cosine(got, embed_token_ids(minilm, ids)).min() >= 0.9999


def test_a_frame_that_does_not_decode_is_dropped_and_the_engine_goes_on(linked, minilm):
    engine, bridge, remote = linked
    engine.gate.set()
    remote.jobs.send_bytes(struct.pack("<BqdI", 1, 7, 0.0, 1) + struct.pack("<ii", 5, 1))  # 5 ids said, 1 sent
    sequences = [[101, 1000, 1001, 102]]

    async def main():
        remote.start()
        return await asyncio.wait_for(remote.embed(sequences), 30)

    got, _ = asyncio.run(main())
    assert cosine(got, embed_token_ids(minilm, sequences)).min() >= 0.9999
    assert bridge.backend.scheduler.failure is None


class RecordingScheduler:
    def __init__(self):
        self.submitted = []

    def submit_with(self, sequences, on_done, token_types=None):
        self.submitted.append(sequences)
        raise AssertionError("a rerank was submitted after its HTTP process had gone")


def test_a_rerank_read_after_the_http_process_has_gone_is_not_run(linked, monkeypatch):
    """The control pipe's thread may read a rerank after the engine thread saw the jobs pipe end and cancelled
    that process's jobs: it is dropped, not run for nobody."""
    engine, bridge, remote = linked
    remote.jobs.close()
    assert bridge.jobs_closed.wait(10)
    monkeypatch.setattr(bridge.backend, "rerank_scheduler", RecordingScheduler())  # undone before linked's close
    bridge._handle("rerank", 7, [[101, 1000, 102]], None)
    assert bridge.backend.rerank_scheduler.submitted == [] and not bridge._jobs
