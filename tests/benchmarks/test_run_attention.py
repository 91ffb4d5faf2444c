"""benchmarks/run.py runs `embedpipe warmup` per model on the GPU, so ours runs the measured attention choice: its
printed lines become the model's record, and the report names what ran."""
import sys

from support.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from report import attention_lines  # noqa: E402
from run import warmup_attention  # noqa: E402

WARMUP_PRINTS = """                  load_s: 1.234
attention_128_tokens_torch-varlen_ms: 0.035
attention_128_tokens_triton_ms: 0.023
attention_32768_tokens_fa3_ms: 1.897
               attention: triton up to 8192 tokens, fa3 above (measured by embedpipe warmup at 2026-12-04T15:19:50)
           2x100_first_s: 0.512
"""


def test_the_warmups_lines_give_the_choice_and_its_timings():
    assert warmup_attention(WARMUP_PRINTS) == {
        "attention": "triton up to 8192 tokens, fa3 above (measured by embedpipe warmup at 2026-12-04T15:19:50)",
        "attention_timings_ms": {"128 torch-varlen": 0.035, "128 triton": 0.023, "32768 fa3": 1.897}}


def test_the_report_names_the_attention_each_model_ran():
    models = {"minilm": {"attention": "triton (measured)"}, "bert-base": {"attention_error": "died"}}
    assert attention_lines(models) == ["Attention after `embedpipe warmup`: minilm: triton (measured); bert-base: the "
                                       "warmup failed (results.json has its error), so the safe default ran.", ""]
    assert attention_lines({"minilm": {}}) == []  # a CPU run, or one made before the warmup step
