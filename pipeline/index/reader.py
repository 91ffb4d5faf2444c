"""Worker side of the index job: read a piece of a unit, set its bad rows aside, tokenize the rest.

A unit (sources.WorkUnit) is cut into pieces of at most read_rows rows (a JSONL / CSV unit is one
piece, the whole file). A tokenizer worker reads its piece itself and replies one Chunk per record
batch, then an end marker: the good rows' token ids as flat int32 arrays and their ids and kept
columns as Arrow arrays (both pickle as a few buffers, never as one Python object per row).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from embedpipe.pipeline.inputs.sources import (ColumnSpec, InputError, UnreadableInputError, WorkUnit,
                                               bad_text_reasons, file_metadata, read_unit, unit_rows)
from embedpipe.pipeline.output.layout import WINDOW_COLUMNS
from embedpipe.pipeline.text.chunking import ChunkConfig, WindowCutter
from embedpipe.pipeline.text.late_chunking import LateChunker, chunker_of
from embedpipe.pipeline.text.tokenizer import TextTokenizer

if TYPE_CHECKING:
    from embedpipe.pipeline.config import JobConfig
    from embedpipe.pipeline.text.tokenizer_pool import TokenizerPool

BAD_TEXT_WORDS = {"null": "null", "empty": "empty", "whitespace": "whitespace only"}
NO_TOKENS = np.empty(0, np.int32)


# Parquet metadata `embedpipe tokenize` writes into its files: what made the token ids
TOKENIZER_KEY, PROMPT_KEY = b"embedpipe.tokenizer", b"embedpipe.prompt"


class BadRowError(InputError):
    """A null, empty or whitespace-only text under --on-bad-row fail."""


class TokenIdsError(InputError):
    """Pre-tokenised input the model cannot take: an empty list, a null or out-of-vocabulary id,
    or files tokenized with another tokenizer or prompt."""


@dataclass(frozen=True)
class Piece:
    """Rows [start, stop) of a unit's file (None: the whole unit, as JSONL / CSV are read)."""

    unit: WorkUnit
    rows: tuple[int, int] | None
    last: bool  # the unit's last piece: its end marker ends the unit


@dataclass
class Chunk:
    """One record batch of a piece without its bad rows, or (end=True) the marker after a piece's last batch.

    schema: the unit's fields (id, text, kept...); ids / kept: the good rows' columns.
    token_ids: [sum(lengths)] int32, the good rows' ids end to end; lengths: [len(ids)] int32.
    With --chunk-tokens, a row is a window of a good row: schema is id, text, chunk, char_start, char_end, kept...,
    and kept starts with those three columns. num_inputs: the good rows (input rows, not windows).
    With --late-chunking, token_ids / lengths are the windows' documents and spans = (bounds, counts) place the
    windows in them (chunking.CutTexts.spans): a row per window, a sequence per document.
    error: on an end marker, why the piece could not be read to its end.
    """

    piece: Piece
    schema: pa.Schema | None = None
    ids: pa.Array | None = None
    kept: list[pa.Array] = field(default_factory=list)
    rejected_ids: pa.Array | None = None
    rejected_reasons: list[str] = field(default_factory=list)
    token_ids: np.ndarray = field(default_factory=lambda: NO_TOKENS)
    lengths: np.ndarray = field(default_factory=lambda: NO_TOKENS)
    num_truncated: int = 0
    num_inputs: int = 0
    spans: tuple[np.ndarray, np.ndarray] | None = None
    end: bool = False
    error: InputError | None = None

    def __len__(self) -> int:
        return 0 if self.ids is None else len(self.ids)

    @property
    def unit(self) -> WorkUnit:
        return self.piece.unit


def is_unreadable_file(error: InputError) -> bool:
    """Whether the error is a file that cannot be read (not a column or row problem)."""
    return isinstance(error, UnreadableInputError)


def pieces_of(unit: WorkUnit, read_rows: int, num_workers: int = 1) -> list[Piece]:
    """The unit cut into pieces of at most read_rows rows (from its file's footer); at least one. A unit too small
    to give each of num_workers workers a piece is cut into num_workers pieces: 400 documents of 2k-8k tokens were
    one piece of 1,024 rows, so one tokenizer worker of 15 cut them all (the H200 was 17% busy)."""
    try:
        rows = unit_rows(unit)
    except (pa.ArrowException, OSError):  # the worker reading it reports the error, naming the file
        rows = None
    if rows is None:
        return [Piece(unit, None, True)]
    start, stop = rows
    read_rows = max(1, min(read_rows, -(-(stop - start) // max(num_workers, 1))))
    starts = range(start, stop, read_rows) or [start]
    return [Piece(unit, (a, min(a + read_rows, stop)), i == len(starts) - 1) for i, a in enumerate(starts)]


def unit_tasks(job: JobConfig, units: Iterable[WorkUnit], num_workers: int = 1) -> Iterator[ReadAndTokenize]:
    """One read-and-tokenize task per piece of each unit, in order; `units` is read lazily."""
    for unit in units:
        for piece in pieces_of(unit, job.read_rows, num_workers):
            yield piece_task(job, piece)


def piece_task(job: JobConfig, piece: Piece) -> ReadAndTokenize:
    """The read-and-tokenize task of one piece of a unit."""
    return ReadAndTokenize(piece, job.columns, job.read_rows, job.on_bad_row == "fail", job.chunking)


def read_and_tokenize(job: JobConfig, pool: TokenizerPool, units: Iterable[WorkUnit]) -> Iterator[Chunk]:
    """The units' chunks, tokenized by the pool's workers; `units` is read lazily (it may be a shared queue)."""
    for _, chunk in pool.map((None, task) for task in unit_tasks(job, units, pool.num_workers)):
        yield chunk


@dataclass(frozen=True)
class ReadAndTokenize:
    """A tokenizer worker's task: one piece, read, split and tokenized (TokenizerPool runs `run`)."""

    piece: Piece
    columns: ColumnSpec
    read_rows: int
    fail_on_bad_row: bool
    chunking: ChunkConfig | None = None

    def run(self, tokenizer: TextTokenizer) -> Iterator[Chunk]:
        try:
            if self.columns.token_ids:
                check_tokenized_with(self.piece.unit, tokenizer)
            cutter = chunker_of(tokenizer, self.chunking) if self.chunking is not None else None
            for batch in read_unit(self.piece.unit, self.columns, self.read_rows, self.piece.rows):
                yield tokenize_batch(self.piece, batch, tokenizer, self.fail_on_bad_row, bool(self.columns.token_ids),
                                     cutter)
        except InputError as error:
            yield Chunk(self.piece, end=True, error=error)
            return
        yield Chunk(self.piece, end=True)


def tokenize_batch(piece: Piece, batch: pa.RecordBatch, tokenizer: TextTokenizer, fail_on_bad_row: bool,
                   pre_tokenized: bool = False, cutter: WindowCutter | LateChunker | None = None) -> Chunk:
    """Good rows are tokenized (or their token ids checked; or with a cutter, cut into windows) into the chunk;
    bad ones go to chunk.rejected_*."""
    chunk = Chunk(piece, batch.schema if cutter is None else window_schema(batch.schema))
    source = batch.column(1)
    reasons = np.where(source.is_null().to_numpy(zero_copy_only=False), "null", "") if pre_tokenized \
        else bad_text_reasons(source)
    bad_rows = np.flatnonzero(reasons != "")
    if len(bad_rows):
        if fail_on_bad_row:
            row = int(bad_rows[0])
            what, verb = ("token ids", "are") if pre_tokenized else ("text", "is")
            raise BadRowError(f"{piece.unit.path}: the {what} of the row with id {batch.column(0)[row].as_py()!r} "
                              f"{verb} {BAD_TEXT_WORDS[str(reasons[row])]} (--on-bad-row fail; the default, skip, "
                              "records such rows in rejected.parquet)")
        chunk.rejected_ids = batch.column(0).take(bad_rows)
        chunk.rejected_reasons = reasons[bad_rows].tolist()
        batch = batch.filter(pa.array(reasons == ""))
    chunk.ids, chunk.kept, chunk.num_inputs = batch.column(0), batch.columns[2:], batch.num_rows
    if cutter is not None:
        cut_into_windows(chunk, batch, cutter)
    elif batch.num_rows and pre_tokenized:
        chunk.token_ids, chunk.lengths, chunk.num_truncated = checked_token_ids(piece, batch, tokenizer)
    elif batch.num_rows:
        chunk.token_ids, chunk.lengths, truncated = tokenizer.encode_flat(batch.column(1).to_pylist())
        chunk.num_truncated = int(truncated.sum())
    return chunk


def window_schema(schema: pa.Schema) -> pa.Schema:
    """A unit's fields (id, text, kept...) with the window's columns after the text: chunk, char_start, char_end."""
    window_fields = [pa.field(name, kind) for name, kind in zip(WINDOW_COLUMNS, (pa.int32(), pa.int64(), pa.int64()))]
    return pa.schema([schema.field(0), schema.field(1), *window_fields, *list(schema)[2:]], metadata=schema.metadata)


def cut_into_windows(chunk: Chunk, batch: pa.RecordBatch, cutter: WindowCutter | LateChunker) -> None:
    """The chunk's rows become the windows of its good rows (batch): each window's id and kept columns are its
    row's, but for a kept text column, which holds the window's text."""
    cut = cutter.cut(batch.column(1).to_pylist())
    rows, text_name = pa.array(cut.rows), batch.schema.names[1]
    kept = [pa.array(cut.texts, column.type) if name == text_name else column.take(rows)
            for name, column in zip(batch.schema.names[2:], batch.columns[2:])]
    chunk.ids = batch.column(0).take(rows)
    chunk.kept = [pa.array(cut.chunk, pa.int32()), pa.array(cut.char_start, pa.int64()),
                  pa.array(cut.char_end, pa.int64()), *kept]
    chunk.token_ids, chunk.lengths, chunk.num_truncated = cut.token_ids, cut.lengths, cut.num_truncated
    chunk.spans = cut.spans


def checked_token_ids(piece: Piece, batch: pa.RecordBatch,
                      tokenizer: TextTokenizer) -> tuple[np.ndarray, np.ndarray, int]:
    """A batch's token id lists (no nulls) as flat int32 ids and lengths, cut to max_length; the count cut."""
    lists = batch.column(1)
    lengths = pc.list_value_length(lists).to_numpy().astype(np.int64)
    values = pc.list_flatten(lists)  # the batch's own values (a slice's offsets respected)
    name = lambda row: f"{piece.unit.path}: the token ids of the row with id {batch.column(0)[row].as_py()!r}"
    ends = np.cumsum(lengths)
    if (lengths == 0).any():
        raise TokenIdsError(f"{name(int(np.argmax(lengths == 0)))} are an empty list")
    if values.null_count:
        row = int(np.searchsorted(ends, pc.index(values.is_null(), True).as_py(), side="right"))
        raise TokenIdsError(f"{name(row)} hold a null")
    ids = values.to_numpy().astype(np.int64, copy=False)
    bad = (ids < 0) | (ids >= tokenizer.vocab_size) if tokenizer.vocab_size else ids < 0
    if bad.any():
        at = int(np.argmax(bad))
        row = int(np.searchsorted(ends, at, side="right"))
        raise TokenIdsError(f"{name(row)} hold {ids[at]}, outside the model's vocabulary of "
                            f"{tokenizer.vocab_size} ids (0 to {tokenizer.vocab_size - 1})")
    ids, lengths, num_cut = cut_to_max_length(ids, lengths, tokenizer.max_length, tokenizer.last_special_id)
    return ids.astype(np.int32), lengths.astype(np.int32), num_cut


def cut_to_max_length(ids: np.ndarray, lengths: np.ndarray, max_length: int,
                      last_special: int | None) -> tuple[np.ndarray, np.ndarray, int]:
    """Cuts each sequence to max_length ids as the tokenizer truncates texts: a sequence that ends with
    the tokenizer's closing special token keeps it last. Loops over the cut sequences only."""
    long = np.flatnonzero(lengths > max_length)
    if not len(long):
        return ids, lengths, 0
    ends = np.cumsum(lengths)
    keep = np.ones(len(ids), dtype=np.bool_)
    for row in long.tolist():
        start, end = int(ends[row] - lengths[row]), int(ends[row])
        if last_special is not None and ids[end - 1] == last_special:
            keep[start + max_length - 1:end - 1] = False
        else:
            keep[start + max_length:end] = False
    return ids[keep], np.minimum(lengths, max_length), len(long)


def check_tokenized_with(unit: WorkUnit, tokenizer: TextTokenizer) -> None:
    """A file `embedpipe tokenize` wrote must come from this model's tokenizer and the job's prompt."""
    metadata = file_metadata(unit)
    if TOKENIZER_KEY not in metadata:
        return  # token ids made elsewhere: only their values can be checked
    made_by, prompt = metadata[TOKENIZER_KEY].decode(), metadata.get(PROMPT_KEY, b"").decode()
    if made_by != tokenizer.fingerprint:
        raise TokenIdsError(f"{unit.path} was tokenized by another tokenizer ({made_by}) than this model's "
                            f"({tokenizer.fingerprint}); tokenize the texts again with this model")
    if prompt != tokenizer.prompt:
        raise TokenIdsError(f"{unit.path} was tokenized with the prompt {prompt!r}, not this job's "
                            f"{tokenizer.prompt!r}; "
                            "give index the same --prompt / --prompt-name as tokenize")
