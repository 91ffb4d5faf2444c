"""/v1/rerank's request parsing and response (serve/rerank.py), and `query --rerank`'s hit texts and order
(serve/query.py), without a model or a server."""
import json

import numpy as np
import pytest

from embedpipe.pipeline.batching.rerank import Scored
from embedpipe.pipeline.serve.protocol import ApiError, Limits
from embedpipe.pipeline.serve.query import hit_texts, reranked
from embedpipe.pipeline.serve.rerank import parse_rerank, rerank_response

LIMITS = Limits(max_inputs=3, max_input_tokens=16, truncate=True, dim=8, vocab_size=100)


def parse(**payload):
    return parse_rerank(json.dumps(payload).encode(), LIMITS)


def test_parse_takes_strings_or_text_objects_and_defaults():
    req = parse(query="q", documents=["a", {"text": "b"}])
    assert (req.documents, req.top_n, req.return_documents, req.truncate, req.model) == (["a", "b"], None, False,
                                                                                         True, None)
    assert parse(query="q", documents=["a"], truncate=False, top_n=5, model="m").truncate is False
    assert parse_rerank(b'{"query": "q", "documents": ["a"]}', Limits(3, 16, False, 8, 100)).truncate is False


@pytest.mark.parametrize("payload,param", [
    ({"query": 3, "documents": ["a"]}, "query"), ({"query": "q", "documents": "a"}, "documents"),
    ({"query": "q", "documents": [{"title": "a"}]}, "documents"), ({"query": "q", "documents": ["a"] * 4}, "documents"),
    ({"query": "q", "documents": ["a"], "top_n": True}, "top_n"),
    ({"query": "q", "documents": ["a"], "return_documents": 1}, "return_documents"),
    ({"query": "q", "documents": ["a"], "model": 1}, "model"),
])
def test_parse_names_the_bad_field(payload, param):
    with pytest.raises(ApiError) as error:
        parse(**payload)
    assert error.value.status == 400 and error.value.param == param


def test_response_is_sorted_cut_to_top_n_with_documents():
    req = parse(query="q", documents=["a", "b", "c"], top_n=2, return_documents=True)
    scores = np.array([0.1, 0.9, 0.1], dtype=np.float32)
    body = json.loads(rerank_response(Scored(scores, np.argsort(-scores, kind="stable"), 1), req, "m", 7))
    assert [r["index"] for r in body["results"]] == [1, 0]  # ties: the earlier document first
    assert (body["results"][0]["document"] == {"text": "b"}
            and body["results"][0]["relevance_score"] == pytest.approx(0.9))
    assert body["usage"] == {"prompt_tokens": 7, "total_tokens": 7, "truncated_documents": 1}


def test_hit_texts_are_the_kept_text_or_its_window_and_reranked_keeps_both_scores():
    hits = [{"id": 1, "score": 0.9, "text": "a cat sat"}, {"id": 2, "score": 0.5, "text": None},
            {"id": 3, "score": 0.4, "text": "hello world", "char_start": 6, "char_end": 11}]
    assert hit_texts(hits) == ["a cat sat", "", "world"]
    ordered = reranked(hits, np.array([0.2, 0.7, 0.2]), top=2)
    assert [(h["id"], h["rerank_score"], h["score"]) for h in ordered] == [(2, 0.7, 0.5), (1, pytest.approx(0.2), 0.9)]
