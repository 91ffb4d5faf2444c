"""embedpipe from Python: embed texts, index a corpus, search an index.

    import embedpipe

    model = embedpipe.Embedder()                            # all-MiniLM-L6-v2, device "auto"
    vectors = model.encode(["a first text", "another one"])  # [2, 384] float32, normalised
    result = embedpipe.index(["corpus/"], "out/")           # the `embedpipe index` job: Parquet + FAISS
    hits = embedpipe.open_index("out/").search(["what is ragged attention?"], k=5)
    hits[0][0]                                              # {"id": ..., "score": ..., kept columns...}

The same engine, batching and files as the command line: the vectors equal `embedpipe embed`'s,
an index() job writes what `embedpipe index` writes. Errors are typed: embedpipe.UserError (a
setting, an input or an output folder to fix; the CLI's exit 2) and embedpipe.JobFault (the
machine failed the work; exit 1; the completed units are kept, so running it again resumes), and
embedpipe.OutputLocked for an output another run holds (exit 4).
Importing embedpipe loads no torch: the engine loads with the first Embedder.

This file is `embedpipe/__init__.py` (pyproject's package-dir maps the package here).
"""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Sequence

from embedpipe.pipeline.errors import JobFault, UserError
from embedpipe.pipeline.output.lock import OutputLocked

try:
    __version__ = version("embedpipe")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0+unknown"

from embedpipe.reranker import Reranker  # noqa: E402 - its own file: pipeline/public/reranker.py

__all__ = ["Embedder", "Reranker", "SearchIndex", "index", "open_index", "UserError", "JobFault", "OutputLocked",
           "__version__"]


class Embedder:
    """One model on one device, loaded once: every encode() reuses its engine (and, on CUDA, its graphs).

    model: "minilm" (the default, all-MiniLM-L6-v2) or a local model folder. device: "auto" (CUDA when
    available), "cpu", "cuda" or "cuda:N". dim: Matryoshka truncation (re-normalised). dtype: the output,
    "float32", "float16", "int8" (round(tanh(x) * 127)) or "binary" (sign bits packed 8 to a uint8).
    prompt: a literal prefix of every text; prompt_name: a prompt of the model's config.
    max_length: tokens per text (prompt and special tokens included), below the model's max_seq_length.
    batch_tokens: padded tokens per engine batch (the default: 16384; results do not depend on it).
    Raises UserError for a model, device or setting that cannot be used.
    """

    def __init__(self, model: str = "minilm", *, device: str = "auto", dim: int | None = None,
                 dtype: str = "float32", prompt: str | None = None, prompt_name: str | None = None,
                 max_length: int | None = None, batch_tokens: int | None = None):
        from embedpipe.pipeline.api import TextEmbedder
        self._embedder = TextEmbedder(model, device, dim, dtype, prompt, prompt_name, max_length, batch_tokens)

    @property
    def dim(self) -> int:
        """Dimensions of each vector (for "binary": bits; the array holds dim / 8 bytes a row)."""
        return self._embedder.engine.output.dim

    @property
    def device(self) -> str:
        return str(self._embedder.engine.device)

    def encode(self, inputs: str | Sequence[str] | Sequence[Sequence[int]], *,
               batch_tokens: int | None = None):
        """Texts (a string or a list of strings) or token-id lists -> numpy [len(inputs), width] in input order,
        in this Embedder's dtype. Texts longer than the model's max length are cut, as in `embed`."""
        return self._embedder.encode(inputs, batch_tokens)

    def encode_windows(self, texts: str | Sequence[str], chunk_tokens: int, *, chunk_overlap: int = 0,
                       chunk_on: str = "token", late_chunking: bool = False, batch_tokens: int | None = None):
        """Texts cut into windows of at most chunk_tokens tokens (prompt and special tokens included), each
        embedded: `embed --chunk-tokens`. chunk_overlap: tokens a window repeats of the one before; chunk_on:
        "token" (a window ends at its last word boundary) or "sentence" (after its last sentence end);
        late_chunking: each window pooled from one pass over its whole text (`--late-chunking`; a mean or
        last-token pooling model).
        Returns .vectors [num_windows, width] and, per window, .text_index, .chunk, .char_start, .char_end
        (window w is texts[text_index[w]][char_start[w]:char_end[w]], that text's chunk[w]-th) and .texts.
        Raises UserError for options the model cannot take."""
        return self._embedder.encode_windows(texts, chunk_tokens, chunk_overlap, chunk_on, late_chunking, batch_tokens)


def index(inputs: str | Path | Sequence[str | Path], output: str | Path, **options):
    """Runs `embedpipe index INPUTS --output OUTPUT`: the job's Parquet files and FAISS index in OUTPUT,
    resumable like the command. options: the command's options by their names (model="minilm",
    device="cuda", dtype="int8", keep_columns=("title",), devices="all", ...; quiet=True unless given).
    Returns the job's result (.metrics as in metrics.json, .exit_code 0, or 3 when bad files were skipped).
    Raises UserError (exit 2 in the CLI), OutputLocked (4) or JobFault (1)."""
    from embedpipe.pipeline.api import index_job
    return index_job([inputs] if isinstance(inputs, (str, Path)) else list(inputs), output, options)


class SearchIndex:
    """An index built by `embedpipe index` or `merge` (open_index), searched with texts or vectors."""

    def __init__(self, output: str | Path, device: str = "auto", nprobe: int | None = None,
                 ef_search: int | None = None):
        from embedpipe.pipeline.api import IndexSearch
        self._search = IndexSearch(Path(output), device, nprobe, ef_search)

    @property
    def meta(self) -> dict:
        """index.json: the model, dimension, dtype, factory, metric, row count and search parameters."""
        return self._search.index.meta

    def search(self, queries, k: int = 10) -> list[list[dict]]:
        """queries: a text, a list of texts (embedded with the index's model and its query prompt, the model
        loaded on the first text query), or vectors [q, dim] float32 (quantised like the index's). Returns per
        query the k best hits, best first: {"id", "score", kept columns...}; an index of --chunk-tokens windows
        names each hit's window: chunk, char_start, char_end."""
        return self._search.search(queries, k)


def open_index(output: str | Path, *, device: str = "auto", nprobe: int | None = None,
               ef_search: int | None = None) -> SearchIndex:
    """The index in OUTPUT (or a `merge --into` folder); nprobe / ef_search override the ones written into it."""
    return SearchIndex(output, device, nprobe, ef_search)
