"""Rerankers on the engine (task "score") against their float32 references: sentence-transformers' CrossEncoder
(BERT, XLM-R cross-encoders) and Qwen3-Reranker's model card with transformers; one score per sequence, whatever the
batch it was packed in."""
import numpy as np
import pytest

from embedpipe.kernels.batch import BucketPolicy, pack, split_in_halves
from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.kernels.models.model_folder import ModelLoadError
from embedpipe.kernels.testing.random_model import write_random_model
from embedpipe.pipeline.batching.batcher import BatcherConfig
from embedpipe.pipeline.batching.embed import embed_token_chunks
from embedpipe.pipeline.batching import rerank
from embedpipe.pipeline.batching.rerank import chunk_bounds, score_documents, score_pairs
from embedpipe.pipeline.text.pairs import PairError, make_pair_tokenizer

from support.rerank_reference import cross_encoder_scores, qwen3_reranker_scores

SHAPES = {"tiny-bert-cross-encoder": cross_encoder_scores, "tiny-xlm-roberta-cross-encoder": cross_encoder_scores,
          "tiny-qwen3-reranker": qwen3_reranker_scores, "tiny-qwen3-reranker-untied": qwen3_reranker_scores}
MAX_LENGTH = 224  # below the longest pair (Qwen3-Reranker's template takes ~100 of it): its document is cut, as the
                  # references cut it


@pytest.fixture(scope="module", params=sorted(SHAPES))
def reranker(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    write_random_model(request.param, folder)
    engine = Engine(EngineConfig(model=str(folder), device="cpu", task="score"))
    return request.param, folder, engine, make_pair_tokenizer(engine, MAX_LENGTH)


def documents(texts) -> list[str]:
    return texts[:40] + [" ".join(texts[40:60])]  # the last pair is far longer than MAX_LENGTH


def test_scores_match_the_reference_in_value_and_order(reranker, texts):
    shape, folder, engine, tokenizer = reranker
    query = "how do graphs make small batches fast?"
    scored = score_documents(engine, tokenizer, query, documents(texts))
    reference = np.array(SHAPES[shape](folder, query, documents(texts), MAX_LENGTH), dtype=np.float32)
    np.testing.assert_allclose(scored.scores, reference, rtol=1e-4, atol=1e-6)
    assert scored.scores.std() > 0.05, f"{shape}: random scores too close together to test their order"
    assert scored.order.tolist() == np.argsort(-reference, kind="stable").tolist()
    assert scored.num_truncated >= 1


def test_batch_packing_does_not_change_a_score(reranker, texts):
    _, _, engine, tokenizer = reranker
    pairs = tokenizer.encode("a query", documents(texts))
    alone = np.array([score_pairs(engine, type(pairs)([ids], None if pairs.types is None else [pairs.types[i]],
                                                      [False]))[0] for i, ids in enumerate(pairs.ids)])
    for budget in (256, 1024, 16384):
        packed = score_pairs(engine, pairs, BatcherConfig(max_batch_tokens=budget))
        np.testing.assert_allclose(packed, alone, rtol=1e-5, atol=1e-6)


def test_documents_scored_a_chunk_at_a_time_score_as_one_batch(reranker, texts, monkeypatch):
    """score_documents tokenizes a chunk while the engine scores the one before; chunks change no score."""
    monkeypatch.setattr(rerank, "tokenizer_threads", lambda: 2)  # chunks of 2+ documents, whatever this machine
    _, _, engine, tokenizer = reranker
    docs = documents(texts)
    whole = score_pairs(engine, tokenizer.encode("a query", docs))
    for budget in (256, 512):  # chunks of min(CHUNK_TOKENS, the budget) tokens: several here
        assert len(chunk_bounds(docs, MAX_LENGTH, budget, 2)) > 1
        scored = score_documents(engine, tokenizer, "a query", docs, BatcherConfig(max_batch_tokens=budget))
        np.testing.assert_allclose(scored.scores, whole, rtol=1e-5, atol=1e-6)
        assert scored.num_truncated == tokenizer.encode("a query", docs).num_truncated >= 1


def test_a_bad_document_in_a_later_chunk_is_named_by_its_number_in_the_request(reranker, texts):
    _, _, engine, tokenizer = reranker
    docs, small = documents(texts), BatcherConfig(max_batch_tokens=256)
    with pytest.raises(PairError, match="document 37 is empty"):  # checked before any chunk runs
        score_documents(engine, tokenizer, "a query", docs[:37] + [""] + docs[38:], small)
    with pytest.raises(PairError, match=f"document {len(docs) - 1}: with the query, it is longer"):
        score_documents(engine, tokenizer, "a query", docs, small, truncate=False)
    assert score_documents(engine, tokenizer, "a query", docs[:3], small).scores.shape == (3,)  # the engine still
                                                                                                # serves


def test_each_chunk_is_launched_before_the_next_is_tokenized(reranker, texts, monkeypatch):
    _, _, engine, tokenizer = reranker
    launches, seen = [0], []
    step = engine.step
    monkeypatch.setattr(engine, "step", lambda batch: (launches.__setitem__(0, launches[0] + 1), step(batch))[1])

    def chunks(pairs, size=8):
        for start in range(0, len(pairs.ids), size):
            seen.append(launches[0])  # the launches made before this chunk is handed over
            yield pairs.ids[start:start + size], None if pairs.types is None else pairs.types[start:start + size]

    pairs = tokenizer.encode("a query", documents(texts))
    scores = embed_token_chunks(engine, chunks(pairs), len(pairs.ids), BatcherConfig(max_batch_tokens=16384))
    assert seen == list(range(len(seen))) and len(seen) == 6  # chunk k comes after chunks 0..k-1 were launched
    np.testing.assert_allclose(scores[:, 0], score_pairs(engine, pairs), rtol=1e-5, atol=1e-6)


def test_a_chunk_that_fails_leaves_no_launch_unread_and_raises_its_own_error(reranker, texts, monkeypatch):
    _, _, engine, tokenizer = reranker
    launched, read = [], []
    step = engine.step

    class Handle:  # the engine's handle, counting reads; the second one fails as a device error would
        def __init__(self, handle):
            self.handle = handle

        def read(self, consume):
            read.append(self)
            if len(read) == 2:
                raise RuntimeError("the device failed")
            return self.handle.read(consume)

    monkeypatch.setattr(engine, "step", lambda batch: launched.append(Handle(step(batch))) or launched[-1])
    pairs = tokenizer.encode("a query", documents(texts))

    def chunks():
        for start in (0, 8, 16):
            yield pairs.ids[start:start + 8], None if pairs.types is None else pairs.types[start:start + 8]
        raise PairError("document 24 is empty")

    with pytest.raises(PairError, match="document 24 is empty"):  # not the device error read while draining
        embed_token_chunks(engine, chunks(), len(pairs.ids), BatcherConfig(max_batch_tokens=16384))
    assert len(launched) == 3 and read == launched  # every launch read, oldest first


def test_a_query_too_long_for_any_pair_is_an_error_without_documents_too(reranker):
    _, _, engine, tokenizer = reranker
    with pytest.raises(PairError, match="longer than"):
        score_documents(engine, tokenizer, "word " * 400, [])
    assert score_documents(engine, tokenizer, "a query", []).scores.shape == (0,)


def test_chunk_bounds_cover_the_documents_in_runs_of_about_the_chunk_tokens():
    documents_ = ["x" * 400] * 10 + ["y" * 100_000] + ["z" * 8] * 3  # ~101 tokens each, one at the max length, 3
    bounds = chunk_bounds(documents_, 512, 300)
    assert bounds == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10), (10, 11), (11, 14)]
    assert chunk_bounds([], 512, 300) == [] and chunk_bounds(["a"], 512, 1) == [(0, 1)]
    # a document per tokenizer thread at least (here 4), the last chunk what is left
    assert chunk_bounds(documents_, 512, 300, 4) == [(0, 4), (4, 8), (8, 12), (12, 14)]
    # the query's and template's tokens count too: 101 + 100 a pair, one document a chunk
    assert chunk_bounds(documents_[:3], 512, 300, 1, 100) == [(0, 1), (1, 2), (2, 3)]


def test_a_split_batch_keeps_its_token_types():
    sequences, types = [[101, 7, 102, 8, 102], [101, 9, 102, 10, 11, 102]], [[0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 1]]
    first, second = split_in_halves(pack(sequences, BucketPolicy(), token_types=types), BucketPolicy())
    assert first.token_type_ids[:5].tolist() == types[0] and second.token_type_ids[:6].tolist() == types[1]
    assert first.token_type_ids[5:].eq(0).all()


def test_bert_token_types_change_the_score(tmp_path):
    """Only BERT cross-encoders take token types (XLM-R and Qwen3 have one type)."""
    write_random_model("tiny-bert-cross-encoder", tmp_path)
    engine = Engine(EngineConfig(model=str(tmp_path), device="cpu", task="score"))
    assert engine.folder.takes_token_types
    ids = [101, 2054, 2003, 102, 1037, 4937, 102]
    with_types = engine.step(pack([ids], token_types=[[0, 0, 0, 0, 1, 1, 1]])).result()
    without = engine.step(pack([ids])).result()
    assert with_types.shape == (1, 1) and not np.allclose(with_types, without)


def test_an_embedding_folder_is_not_a_reranker_and_types_need_a_cross_encoder(tiny_model):
    with pytest.raises(ModelLoadError, match="not a reranker"):
        Engine(EngineConfig(model=str(tiny_model), device="cpu", task="score"))
    embedder = Engine(EngineConfig(model=str(tiny_model), device="cpu"))
    with pytest.raises(ValueError, match="takes no token types"):
        embedder.step(pack([[101, 7, 102]], token_types=[[0, 0, 0]]))
    with pytest.raises(ValueError, match="do not apply"):
        EngineConfig(model=str(tiny_model), task="score", dim=8)
