"""The binary messages between HTTP processes and the engine process (serve/wire.py), over a real Pipe."""
import multiprocessing
import os
import threading

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
    kind, rid, sent, got = _through_a_pipe(wire.embed_message(2**40 + 5, 1234.5678901, sequences))
    assert (kind, rid, sent) == ("embed", 2**40 + 5, 1234.5678901)
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
    frame = wire.embed_message(1, 0.0, [[1, 2, 3]])
    with pytest.raises(ValueError, match="token ids"):
        wire.decode(frame[:-4])
    with pytest.raises(ValueError, match="unknown message kind"):
        wire.decode(b"\x09")


def test_the_frame_reader_returns_whole_frames_as_their_bytes_arrive():
    """Frames written by Connection.send_bytes, read from a non-blocking pipe a few bytes at a time."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    frames = [wire.vectors_message(i, np.full((2, 3), i, np.float32), (0.0, 0.0)) for i in range(3)]
    stream = b"".join(len(f).to_bytes(4, "big") + f for f in frames)
    reader, got = wire.FrameReader(read_end), []
    assert reader.read() == [] and not reader.closed  # nothing written yet
    for start in range(0, len(stream), 7):
        os.write(write_end, stream[start:start + 7])
        got += reader.read()
    assert got == frames and not reader.closed
    os.close(write_end)
    assert reader.read() == [] and reader.closed
    os.close(read_end)


def test_the_frame_reader_reads_what_a_connection_sends():
    reader_end, writer_end = multiprocessing.Pipe(duplex=False)
    os.set_blocking(reader_end.fileno(), False)
    big = np.zeros((300, 1024), np.float32)  # larger than one read of a pipe's buffer
    reader, got = wire.FrameReader(reader_end.fileno()), []
    sender = threading.Thread(target=lambda: [writer_end.send_bytes(wire.vectors_message(i, big, (0.0, 0.0)))
                                              for i in range(2)])
    sender.start()
    while len(got) < 2:
        got += reader.read()
    sender.join()
    assert [wire.decode(f)[1] for f in got] == [0, 1] and wire.decode(got[1])[2].shape == (300, 1024)


def test_the_frame_writer_never_blocks_keeps_order_and_drops_what_a_gone_reader_cannot_take():
    """wire.FrameWriter on a page-sized pipe: frames beyond what it holds wait, in order, and reach the reader as it
    reads; at shutdown, flush_blocking drops (without raising) what a reader that has gone can no longer take."""
    import asyncio
    import fcntl

    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, getattr(fcntl, "F_SETPIPE_SZ", 1031), 4096)
    os.set_blocking(read_end, False)
    frames = [bytes([i]) * 3000 for i in range(5)]  # 15 KB into a 4 KiB pipe

    async def main():
        writer, reader, got = wire.FrameWriter(write_end, asyncio.get_running_loop()), wire.FrameReader(read_end), []
        for frame in frames:
            writer.write(frame)  # returns at once: the loop is never held
        while len(got) < len(frames):
            got += reader.read()
            await asyncio.sleep(0.001)  # the loop's turns write the rest as the pipe drains
        for frame in frames:  # more than the pipe holds again, then the reader goes away
            writer.write(frame)
        os.close(read_end)
        writer.flush_blocking()
        return got

    assert asyncio.run(main()) == frames
    os.close(write_end)
