"""The messages between an HTTP process and the engine process (fronts.py): raw int32 token ids in, raw
float32 vectors out, no pickling on the request path.

A message is one `Connection.send_bytes()` frame (a Unix socket: `multiprocessing.Pipe`); its first byte
says what it is:

    EMBED    HTTP -> engine  <B q d I>: rid, sent (perf_counter s), n; lengths int32 [n]; token ids int32
             [sum(lengths)], end to end
    CANCEL   HTTP -> engine  <B q>: rid
    VECTORS  engine -> HTTP  <B q I I d d>: rid, rows, width, queue and inference seconds; float32 [rows, width]
    PICKLED  either way      a pickled tuple: the rare messages (listening, search, metrics, errors)

Decoded, every message is a tuple (kind name, ...) as fronts.py handles it; arrays are read-only views of the
frame. An HTTP process reads its replies on its event loop, from a non-blocking pipe (FrameReader), and writes its
requests there too, never blocking (FrameWriter): a loop blocked on a full pipe reads no replies, and an engine
thread blocked on a full replies pipe reads no requests.
"""
from __future__ import annotations

import itertools
import os
import pickle
import struct
from collections import deque

import numpy as np

EMBED, CANCEL, VECTORS, PICKLED = 1, 2, 3, 4
_EMBED = struct.Struct("<BqdI")
_CANCEL = struct.Struct("<Bq")
_VECTORS = struct.Struct("<BqIIdd")


def embed_message(rid: int, sent: float, sequences: list) -> bytes:
    """sent: when the HTTP process sent it (its queue time starts there); sequences: lists (or int arrays) of ids."""
    lengths = np.fromiter(map(len, sequences), np.int32, len(sequences))
    ids = np.fromiter(itertools.chain.from_iterable(sequences), np.int32, int(lengths.sum()))
    return b"".join((_EMBED.pack(EMBED, rid, sent, len(sequences)), lengths.tobytes(), ids.tobytes()))


def cancel_message(rid: int) -> bytes:
    return _CANCEL.pack(CANCEL, rid)


def vectors_message(rid: int, vectors: np.ndarray, times: tuple[float, float]) -> bytes:
    """vectors [rows, width] float32; times: the job's (queue, inference) seconds."""
    rows, width = vectors.shape
    return _VECTORS.pack(VECTORS, rid, rows, width, *times) + np.ascontiguousarray(vectors, np.float32).tobytes()


def pickled_message(*message) -> bytes:
    return bytes([PICKLED]) + pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def decode(frame: bytes) -> tuple:
    """("embed", rid, sent, [ids int32 [length], ...]) | ("cancel", rid) | ("vectors", rid, vectors [rows, width],
    (queue s, inference s)) | the pickled tuple."""
    kind = frame[0]
    if kind == EMBED:
        _, rid, sent, n = _EMBED.unpack_from(frame)
        lengths = np.frombuffer(frame, np.int32, n, _EMBED.size)
        ids = np.frombuffer(frame, np.int32, offset=_EMBED.size + 4 * n)
        if ids.shape[0] != int(lengths.sum()):
            raise ValueError(f"an embed message of {ids.shape[0]} token ids for lengths summing to {lengths.sum()}")
        return "embed", rid, sent, np.split(ids, np.cumsum(lengths[:-1]))
    if kind == CANCEL:
        return "cancel", _CANCEL.unpack(frame)[1]
    if kind == VECTORS:
        _, rid, rows, width, queue_s, inference_s = _VECTORS.unpack_from(frame)
        vectors = np.frombuffer(frame, np.float32, rows * width, _VECTORS.size).reshape(rows, width)
        return "vectors", rid, vectors, (queue_s, inference_s)
    if kind == PICKLED:
        return pickle.loads(memoryview(frame)[1:])
    raise ValueError(f"unknown message kind {kind} from the other process")


READ_BYTES = 1 << 20
_SIZE, _LARGE_SIZE = struct.Struct("!i"), struct.Struct("!Q")  # multiprocessing's frame header (-1, then 8 bytes)


class FrameWriter:
    """Frames for `Connection.recv_bytes` (or a FrameReader), written to a non-blocking pipe by one event loop that
    never waits on it: what the pipe cannot take yet waits here, in order, and is written as the pipe drains
    (loop.add_writer). `write` only on the loop's thread."""

    def __init__(self, fd: int, loop):
        self.fd, self.loop = fd, loop
        self._outbox: deque[memoryview] = deque()
        os.set_blocking(fd, False)

    def write(self, frame: bytes) -> None:
        """Raises OSError when the reader is gone."""
        data = memoryview(_SIZE.pack(len(frame)) + frame)  # frames here stay far below 2 GiB
        if not self._outbox:
            data = data[self._write(data):]
            if not data:
                return
            self.loop.add_writer(self.fd, self._drain)
        self._outbox.append(data)

    def flush_blocking(self) -> None:
        """Writes what waits, waiting on the pipe (at shutdown, when the loop may not turn again); what a reader
        that is gone cannot take is dropped."""
        if self._outbox:
            self.loop.remove_writer(self.fd)
            os.set_blocking(self.fd, True)
            try:
                while self._outbox:
                    data = self._outbox.popleft()
                    while data:
                        data = data[os.write(self.fd, data):]
            except OSError:  # the reader is gone: nothing waits for these
                self._outbox.clear()

    def _write(self, data: memoryview) -> int:
        try:
            return os.write(self.fd, data)
        except BlockingIOError:
            return 0

    def _drain(self) -> None:
        try:
            while self._outbox:
                written = self._write(self._outbox[0])
                if written < len(self._outbox[0]):
                    self._outbox[0] = self._outbox[0][written:]
                    return
                self._outbox.popleft()
        except OSError:  # the reader is gone: so is every reply these would get
            self._outbox.clear()
        self.loop.remove_writer(self.fd)


class FrameReader:
    """The frames `Connection.send_bytes` wrote, read from a non-blocking file descriptor as the bytes come:
    `read()` returns the frames completed so far (none when a frame is still arriving); `closed` once the writer
    is gone."""

    def __init__(self, fd: int):
        self.fd, self.closed = fd, False
        self._buffer = bytearray()

    def read(self) -> list[bytes]:
        while not self.closed:
            try:
                chunk = os.read(self.fd, READ_BYTES)
            except BlockingIOError:
                break
            self._buffer += chunk
            self.closed = not chunk
        return self._frames()

    def _frames(self) -> list[bytes]:
        frames, buffer, start = [], self._buffer, 0
        while len(buffer) - start >= _SIZE.size:
            size, header = _SIZE.unpack_from(buffer, start)[0], _SIZE.size
            if size == -1:
                if len(buffer) - start < _SIZE.size + _LARGE_SIZE.size:
                    break
                size, header = _LARGE_SIZE.unpack_from(buffer, start + _SIZE.size)[0], _SIZE.size + _LARGE_SIZE.size
            if len(buffer) - start - header < size:
                break
            frames.append(bytes(buffer[start + header:start + header + size]))
            start += header + size
        del buffer[:start]
        return frames
