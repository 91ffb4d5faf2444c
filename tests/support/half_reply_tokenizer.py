"""A tokenizer whose worker process dies half-way through sending its first reply (SIGKILL).

Unpickling it in a worker patches that process's Connection._send: a death at the worst moment
for a pool whose workers share a result pipe, where the parent would wait forever for the rest.
"""
from __future__ import annotations

import os
import signal
from multiprocessing.connection import Connection

from embedpipe.pipeline.text.tokenizer import TextTokenizer


class HalfReplyTokenizer(TextTokenizer):
    def __reduce__(self):
        return _in_worker, (self.tokenizer_file, self.max_length)


def _in_worker(tokenizer_file: str, max_length: int) -> TextTokenizer:
    send = Connection._send

    def send_half_then_die(connection, buf, *args):
        if len(buf) > 1000:  # a reply's body, not its 4-byte header
            send(connection, bytes(buf[:len(buf) // 2]), *args)
            os.kill(os.getpid(), signal.SIGKILL)
        send(connection, buf, *args)

    Connection._send = send_half_then_die
    return TextTokenizer(tokenizer_file, max_length)
