"""Index options: TOML files, precedence, validation, and the CLI's defaults."""
from __future__ import annotations


import pytest
import typer

from embedpipe.cli.main import app
from embedpipe.pipeline.config import ConfigError, IndexOptions, job_config, merge_options, read_config_file

from support.paths import REPO


def write_toml(tmp_path, text):
    path = tmp_path / "job.toml"
    path.write_text(text)
    return path


def test_toml_names_take_dashes_or_underscores_and_are_typed(tmp_path):
    path = write_toml(tmp_path, 'model = "m"\nmax-batch-tokens = 4096\nmax_batch_seqs = 64\n'
                                'keep-columns = "title, url"\nskip-bad-files = true\ninputs = "data/"\n')
    values = read_config_file(path)
    assert values == {"model": "m", "max_batch_tokens": 4096, "max_batch_seqs": 64, "keep_columns": ("title, url",),
                      "skip_bad_files": True, "inputs": ("data/",)}
    job = job_config(merge_options(path, {"output": "out"}))
    assert job.columns.keep == ("title", "url") and job.batching.max_batch_tokens == 4096
    assert job.engine.graphs.max_graph_tokens >= 4096


def test_command_line_wins_over_the_file(tmp_path):
    path = write_toml(tmp_path, 'dim = 64\ntext-column = "body"\noutput = "from-file"\n')
    options = merge_options(path, {"dim": 32, "inputs": ("x.parquet",)})
    assert (options.dim, options.text_column, options.output, options.inputs) == (32, "body", "from-file",
                                                                                  ("x.parquet",))
    assert merge_options(None, {}) == IndexOptions()


@pytest.mark.parametrize("text, message", [
    ("dims = 3\n", "unknown option 'dims'; options are: inputs, output, model"),
    ('dim = "64"\n', "dim must be a int, not '64'"),
    ("overwrite = 1\n", "overwrite must be a bool"),
    ("rows-per-unit = true\n", "rows-per-unit must be a int"),
    ("keep-columns = [1]\n", "keep-columns must be a list of strings"),
    ("model = \n", "is not valid TOML"),
])
def test_bad_config_files_are_named_with_the_reason(tmp_path, text, message):
    path = write_toml(tmp_path, text)
    with pytest.raises(ConfigError) as error:
        read_config_file(path)
    assert str(path) in str(error.value) and message in str(error.value)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        read_config_file(tmp_path / "nope.toml")


@pytest.mark.parametrize("changes, message", [
    ({"output": None}, "no output folder"),
    ({"inputs": ()}, "no inputs"),
    ({"shard_index": 1}, "go together"),
    ({"shard_index": 3, "num_shards": 3}, "shard-index must be in"),
    ({"on_bad_row": "ignore"}, "on-bad-row must be one of skip, fail"),
    ({"prompt": "q: ", "prompt_name": "query"}, "either prompt or prompt-name"),
    ({"workers": -1}, "workers must be >= 0"),
    ({"rows_per_unit": 0}, "must be positive"),
    ({"chunk_overlap": 4}, "--chunk-overlap, --chunk-on and --late-chunking shape the windows of --chunk-tokens; "
                           "give it too"),
    ({"late_chunking": True}, "--chunk-overlap, --chunk-on and --late-chunking shape the windows of --chunk-tokens; "
                              "give it too"),
    ({"chunk_on": "sentence"}, "give it too"),
    ({"chunk_tokens": 0}, "--chunk-tokens must be a positive integer, not 0"),
    ({"chunk_tokens": 8, "chunk_overlap": 8}, r"--chunk-overlap must be from 0 to --chunk-tokens - 1 \(7\), not 8"),
    ({"chunk_tokens": 8, "chunk_on": "page"}, "--chunk-on must be one of token, sentence, not 'page'"),
    ({"chunk_tokens": 8, "token_ids_column": "ids"}, "it cannot cut --token-ids-column's token ids"),
])
def test_invalid_jobs_are_refused(changes, message):
    options = IndexOptions(inputs=("x",), output="out")
    with pytest.raises(ConfigError, match=message):
        job_config(IndexOptions(**{**options.__dict__, **changes}))


def test_chunk_options_come_from_the_command_line_or_a_file(tmp_path):
    from embedpipe.pipeline.text.chunking import ChunkConfig

    path = write_toml(tmp_path, 'chunk-tokens = 128\nchunk_on = "sentence"\n')
    assert (job_config(merge_options(path, {"inputs": ("x",), "output": "out"})).chunking
            == ChunkConfig(128, 0, "sentence"))
    given = merge_options(path, {"inputs": ("x",), "output": "out", "chunk_overlap": 16})
    assert job_config(given).chunking == ChunkConfig(128, 16, "sentence")
    assert job_config(IndexOptions(inputs=("x",), output="out")).chunking is None


def test_shard_options_select_a_shard():
    job = job_config(IndexOptions(inputs=("x",), output="out", shard_index=2, num_shards=4))
    assert (job.shard_index, job.num_shards, job.sharded) == (2, 4, True)
    assert not job_config(IndexOptions(inputs=("x",), output="out")).sharded


def test_cli_help_shows_the_defaults_the_job_uses():
    command = typer.main.get_command(app).commands["index"]
    defaults = IndexOptions()
    for param in command.params:
        if param.name in defaults.__dict__ and param.default is not None:
            default = getattr(param.default, "value", param.default)
            assert default == getattr(defaults, param.name), param.name


CONFIGS = sorted((REPO / "configs").glob("*.toml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_ready_configs_make_jobs(path):
    job = job_config(merge_options(path, {"inputs": ("data/",), "output": "out"}))
    assert job.engine.model and job.batching.max_batch_tokens >= 4096
    assert {p.name for p in CONFIGS} >= {"minilm-cpu.toml", "bert-base-gpu.toml", "qwen3-embedding-0.6b-gpu.toml"}


def test_cpu_and_gpu_get_their_own_batch_and_worker_defaults():
    cpu = job_config(IndexOptions(inputs=("x",), output="out", device="cpu"))
    assert (cpu.batching.max_batch_tokens, cpu.num_workers) == (4096, 0)
    gpu = job_config(IndexOptions(inputs=("x",), output="out", device="cuda"))
    assert (gpu.batching.max_batch_tokens, gpu.num_workers) == (16384, None)
    given = job_config(IndexOptions(inputs=("x",), output="out", device="cpu", max_batch_tokens=8192, workers=2))
    assert (given.batching.max_batch_tokens, given.num_workers) == (8192, 2)
    with pytest.raises(ConfigError, match="device must be"):
        job_config(IndexOptions(inputs=("x",), output="out", device="tpu"))
