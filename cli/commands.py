"""What each CLI command does, given its configs. Errors a user can fix exit with a message, not a traceback."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import sys
from pathlib import Path

from embedpipe.kernels.models.model_folder import ModelLoadError, read_model_folder
from embedpipe.pipeline.config import job_config, merge_options
from embedpipe.pipeline.errors import JobFault, UserError
from embedpipe.pipeline.output.lock import LOCK_FILE, OutputLocked, output_lock
from embedpipe.pipeline.output.layout import INDEX_FILE, METRICS_FILE
from embedpipe.pipeline.output.job_files import merge_outputs

# torch is imported by the commands that run a model (embed, query, index, tokenize, serve) only, so that
# --help, merge and verify start at once

# errors a user can fix: exit code 2 and a message (the kernels' ModelLoadError is one, outside pipeline's kinds)
USER_ERRORS = (UserError, ModelLoadError)
# faults of the machine, not the input (a tokenizer worker or engine process died, a write failed, the device
# is full): exit code 1
JOB_FAULTS = (JobFault, OSError)
RESUME = "the completed units are kept: run the same command again to resume"


def fail(message: str, code: int = 2):
    print(f"embedpipe: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def read_texts(texts: list[str] | None, input_file: Path | None) -> list[str]:
    """embed's texts: the arguments, standard input (`-` or --input-file -) or a file, one a line (a .jsonl file:
    the "text" field of each line); blank lines are skipped. A problem is a one-line usage error."""
    if texts and input_file is not None:
        fail("give texts or --input-file, not both")
    if texts != ["-"] and input_file is None:
        if not texts:
            fail("nothing to embed: give texts, - (standard input) or --input-file FILE")
        return texts
    source = "standard input" if texts == ["-"] or str(input_file) == "-" else str(input_file)
    try:
        lines = sys.stdin.read().splitlines() if source == "standard input" else \
            input_file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        fail(f"cannot read {source}: {getattr(error, 'strerror', None) or error}")
    if input_file is not None and input_file.suffix == ".jsonl":
        return [_jsonl_text(line, source, number) for number, line in enumerate(lines, 1) if line.strip()]
    return [line for line in lines if line.strip()]


def _jsonl_text(line: str, source: str, number: int) -> str:
    try:
        text = json.loads(line).get("text")
    except (ValueError, AttributeError):
        text = None
    if not isinstance(text, str):
        fail(f"{source}, line {number}: not a JSON object with a string \"text\" field")
    return text


def chunk_config(tokens: int | None, overlap: int | None, on: str | None, late: bool = False):
    """embed's --chunk-tokens, --chunk-overlap, --chunk-on, --late-chunking as a ChunkConfig (None: no windows); a
    value it refuses is a one-line usage error."""
    from embedpipe.pipeline.config import chunk_config as make

    try:
        return make(tokens, overlap, on, late)
    except ValueError as e:
        fail(str(e))


def run_embed(config, texts: list[str], prompt: str | None, prompt_name: str | None,
              max_length: int | None = None, chunking=None) -> None:
    """Prints each text's embedding as a JSON line, or with chunking (a ChunkConfig) each window's; config: an
    EngineConfig."""
    from embedpipe.kernels.engine import Engine
    from embedpipe.pipeline.batching.embed import embed_texts, embed_windows
    from embedpipe.pipeline.text.late_chunking import chunker_of
    from embedpipe.pipeline.text.tokenizer import make_tokenizer

    try:
        engine = Engine(config)
        tokenizer = make_tokenizer(engine, prompt, prompt_name, max_length)
        cutter = chunker_of(tokenizer, chunking) if chunking is not None else None
        if chunking is not None and chunking.late:
            engine.output.check_span_pooling()
    except (ModelLoadError, ValueError) as e:
        fail(str(e))
    if cutter is None:
        for text, vector in zip(texts, embed_texts(engine, tokenizer, texts)):
            print(json.dumps({"text": text, "embedding": vector.tolist()}, ensure_ascii=False))
        return
    vectors, cut = embed_windows(engine, cutter, texts)
    for w, vector in enumerate(vectors):
        window = {"input": int(cut.rows[w]), "chunk": int(cut.chunk[w]), "char_start": int(cut.char_start[w]),
                  "char_end": int(cut.char_end[w]), "text": cut.texts[w], "embedding": vector.tolist()}
        print(json.dumps(window, ensure_ascii=False))


def run_index(given: dict, config_file) -> None:
    """Exit codes: 0 done; 1 a fault (worker, engine process, disk, device) or a bug; 2 usage / config / input
    error; 3 done but for skipped files; 4 OUTPUT is locked by another run; 130 / 143 interrupted (SIGINT / SIGTERM)."""
    from embedpipe.pipeline.api import run_index as run_job

    _run_units_job(run_job, _options(given, config_file))


def run_tokenize(given: dict, config_file) -> None:
    """`embedpipe tokenize`: the exit codes of run_index. Its workers default to CPU count - 1 on any machine."""
    from embedpipe.pipeline.api import run_tokenize as tokenize

    options = _options(given, config_file)
    if options.workers is None:
        options = dataclasses.replace(options, workers=max(1, (os.cpu_count() or 2) - 1))
    _run_units_job(tokenize, options)


def _options(given: dict, config_file):
    try:
        return merge_options(config_file, given)
    except ValueError as e:
        fail(str(e))


def _run_units_job(run, options) -> None:
    try:
        job = job_config(options)
    except ValueError as e:
        fail(str(e))
    previous_handler = signal.signal(signal.SIGTERM, _interrupt)  # unwinds like Ctrl-C: open unit files are removed
    try:
        result = run(job)
    except USER_ERRORS as e:
        fail(str(e))
    except OutputLocked as e:
        fail(str(e), 4)
    except JOB_FAULTS as e:
        fail(f"{e}; {RESUME}", 1)
    except KeyboardInterrupt as e:
        signum = e.signum if isinstance(e, Terminated) else signal.SIGINT
        fail(f"interrupted ({signal.Signals(signum).name}); {RESUME}", 128 + signum)
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
    if result.exit_code == 3:
        print(f"embedpipe: finished with {len(result.metrics['bad_files'])} bad files skipped (listed in "
              f"{job.output / METRICS_FILE}); everything else is written", file=sys.stderr)
    raise SystemExit(result.exit_code)


class Terminated(KeyboardInterrupt):
    """A termination signal, raised in the main thread to stop the job as Ctrl-C does."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _interrupt(signum, frame):
    raise Terminated(signum)


def run_merge(outputs: list[Path], into: Path, factory: str, allow_incomplete: bool) -> None:
    """Exit codes: 0 merged, 2 not outputs of one complete job, 4 an output or the index folder is locked."""
    with exit_codes(), contextlib.ExitStack() as held:  # no job writes the outputs, nor another merge the index
        read_only = [output for output in outputs if output.resolve() != into.resolve()]
        if len(read_only) == len(outputs):
            into.mkdir(parents=True, exist_ok=True)
        if into.is_dir():  # else an output that does not exist: merge_outputs says so
            held.enter_context(output_lock(into))
        held.enter_context(reading(read_only))
        meta = merge_outputs(outputs, into, factory, allow_incomplete)
    print(f"embedpipe: index of {meta['num_rows']:,} rows ({meta['factory']}, {meta['metric']}) "
          f"at {into / INDEX_FILE}", file=sys.stderr)


@contextlib.contextmanager
def exit_codes():
    """A command's errors as exit codes: a UserError (or ModelLoadError) 2, a locked output 4."""
    try:
        yield
    except USER_ERRORS as e:
        fail(str(e))
    except OutputLocked as e:
        fail(str(e), 4)


@contextlib.contextmanager
def reading(outputs: list[Path]):
    """Shared locks on the outputs that have a lock file: no index job writes them while this command reads."""
    with contextlib.ExitStack() as held:
        for output in outputs:
            if (output / LOCK_FILE).exists():
                held.enter_context(output_lock(output, exclusive=False))
        yield


def run_export(output: Path, destination: str, ann_index: bool) -> None:
    """Exit codes: 0 exported, 2 not an output, another table's output or no lancedb, 4 OUTPUT is locked."""
    import importlib.util
    from embedpipe.pipeline.output.lancedb_export import export_to_lancedb
    if importlib.util.find_spec("lancedb") is None:  # the extra; checked before OUTPUT is locked
        fail("lancedb is missing; install the LanceDB extra: pip install 'embedpipe[lancedb]'")
    with exit_codes(), reading([output]):
        result = export_to_lancedb(output, destination, ann_index)
    print(f"embedpipe: exported {result.added_rows:,} rows of {result.added_units} units to {result.table} "
          f"({result.removed_units} units removed; {result.rows:,} rows in the table)", file=sys.stderr)


def run_verify(outputs: list, index_dir, inputs: list[str] | None) -> None:
    """Prints each check; exit codes: 0 all hold, 1 a check failed, 2 not an output folder or bad inputs, 4 locked."""
    from embedpipe.pipeline.verify.checks import verify

    with exit_codes(), reading(outputs):  # shared locks: no index job starts writing while verify reads
        report = verify(list(outputs), index_dir, inputs)
    for status, message in report.lines:
        print(f"{status:<5} {message}")
    failed = sum(status == "FAIL" for status, _ in report.lines)
    print(f"embedpipe: verify: {'passed' if report.passed else f'{failed} checks failed'}", file=sys.stderr)
    raise SystemExit(0 if report.passed else 1)


def run_query(text: str, index_dir, k: int, as_json: bool, model: str | None, dim: int | None,
              dtype: str | None, prompt: str | None, prompt_name: str | None, device: str,
              nprobe: int | None = None, ef_search: int | None = None, rerank: str | None = None,
              top: int | None = None) -> None:
    """With an index: print the top-k hits of `text` (with rerank: reranked, the best `top`); without: print its
    embedding, like `embed`."""
    from embedpipe.kernels.engine import EngineConfig
    from embedpipe.pipeline.serve.query import format_hits, query_prompt_name, search

    if index_dir is None and (rerank is not None or top is not None):
        fail("--rerank and --top rerank an index's hits; give --index OUTPUT")
    if rerank is None and top is not None:
        fail("--top is for --rerank; -k sets how many hits to print")
    if index_dir is None:
        try:
            config = EngineConfig(model=model or "minilm", dim=dim, output_dtype=dtype or "float32", device=device)
            prompt_name = query_prompt_name(read_model_folder(config.model), prompt, prompt_name)
        except (ModelLoadError, ValueError) as e:
            fail(str(e))
        run_embed(config, [text], prompt, prompt_name)
        return
    if model is not None or dim is not None or dtype is not None:
        fail("--model, --dim and --dtype come from the index; leave them out with --index")
    if k <= 0:
        fail("-k must be positive")
    try:
        if rerank is None:
            hits = search(index_dir, text, k, device, prompt, prompt_name, nprobe, ef_search)
        else:
            from embedpipe.pipeline.api import search_reranked
            hits = search_reranked(index_dir, text, k, top, rerank, device, prompt, prompt_name, nprobe, ef_search)
    except USER_ERRORS + (ValueError,) as e:
        fail(str(e))
    print(format_hits(hits, as_json))
