"""The binary messages between HTTP processes and the engine process (serve/wire.py), over a real Pipe."""
import multiprocessing

import numpy as np
import pytest

from embedpipe.pipeline.serve import wire


def _through_a_pipe(frame: bytes) -> tuple:
    here, there = multiprocessing.Pipe(duplex=True)
    here.send_bytes(frame)
    return wire.decode(there.recv_bytes())


def test_embed_messages_carry_every_sequence_exactly():
    rng = np.random.default_rng(0)
    sequences = [rng.integers(0, 250_000, size=n).tolist() for n in (1, 7, 512, 3)]
    kind, rid, got = _through_a_pipe(wire.embed_message(2**40 + 5, sequences))
    assert (kind, rid) == ("embed", 2**40 + 5)
    assert [s.tolist() for s in got] == sequences and all(s.dtype == np.int32 for s in got)


def test_vectors_messages_carry_the_rows_and_the_times():
    vectors = np.random.default_rng(1).standard_normal((3, 384)).astype(np.float32)
    kind, rid, got, times = _through_a_pipe(wire.vectors_message(9, vectors, (0.25, 1.5)))
    assert (kind, rid, times) == ("vectors", 9, (0.25, 1.5))
    assert got.dtype == np.float32 and np.array_equal(got, vectors)


def test_cancel_and_pickled_messages():
    assert _through_a_pipe(wire.cancel_message(3)) == ("cancel", 3)
    assert _through_a_pipe(wire.pickled_message("search", 4, "q", 10)) == ("search", 4, "q", 10)
    error = _through_a_pipe(wire.pickled_message(5, ValueError("bad")))
    assert error[0] == 5 and isinstance(error[1], ValueError)


def test_a_short_or_unknown_frame_is_refused():
    frame = wire.embed_message(1, [[1, 2, 3]])
    with pytest.raises(ValueError, match="token ids"):
        wire.decode(frame[:-4])
    with pytest.raises(ValueError, match="unknown message kind"):
        wire.decode(b"\x09")
