"""The files of `embedpipe tokenize`: per unit, the id, the token ids and the kept columns (no torch here:
Ray's tokenize tasks write them too)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from embedpipe.pipeline.config import JobConfig
from embedpipe.pipeline.util.progress import Progress
from embedpipe.pipeline.index.reader import PROMPT_KEY, TOKENIZER_KEY, Chunk
from embedpipe.pipeline.output.layout import TOKENS_FOLDER, unit_file
from embedpipe.pipeline.output.sinks import AtomicParquetWriter
from embedpipe.pipeline.inputs.sources import WorkUnit
from embedpipe.pipeline.text.tokenizer import TextTokenizer
from embedpipe.pipeline.index.unit_files import UnitFilesRunner, UnitSlot

TOKEN_IDS_COLUMN = "token_ids"


class TokenFile(AtomicParquetWriter):
    """OUTPUT/tokens/<safe_name(unit_id)>.parquet: id, token_ids list<int32>, kept columns."""

    def __init__(self, output: Path, unit: WorkUnit, schema: pa.Schema, tokenizer: TextTokenizer):
        fields = [schema.field(0), pa.field(TOKEN_IDS_COLUMN, pa.list_(pa.int32()), nullable=False),
                  *(schema.field(i) for i in range(2, len(schema)))]
        metadata = {TOKENIZER_KEY: tokenizer.fingerprint.encode(), PROMPT_KEY: tokenizer.prompt.encode()}
        final = unit_file(output, TOKENS_FOLDER, unit.unit_id)
        super().__init__(final, pa.schema(fields, metadata=metadata))
        self.num_rows = 0

    def write(self, chunk: Chunk) -> None:
        offsets = np.zeros(len(chunk.lengths) + 1, dtype=np.int32)
        np.cumsum(chunk.lengths, out=offsets[1:])
        token_ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(chunk.token_ids))
        self.write_batch([chunk.ids, token_ids, *chunk.kept])
        self.num_rows += len(chunk)


class TokenFilesRunner(UnitFilesRunner):
    """Writes each chunk's token ids into its unit's file as it comes."""

    folder = TOKENS_FOLDER

    def __init__(self, job: JobConfig, tokenizer: TextTokenizer, progress: Progress):
        super().__init__(job, progress)
        self.tokenizer = tokenizer

    def _open_file(self, unit: WorkUnit, schema: pa.Schema) -> TokenFile:
        return TokenFile(self.job.output, unit, schema, self.tokenizer)

    def _take_rows(self, slot: UnitSlot, chunk: Chunk) -> None:
        self.writer.submit(slot.writer.write, chunk)
        self.counts.rows += len(chunk)
        self.counts.tokens += len(chunk.token_ids)
        self.progress.advance(rows=len(chunk), tokens=len(chunk.token_ids))
