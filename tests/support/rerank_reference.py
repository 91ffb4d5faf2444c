"""The float32 references of a reranker folder: sentence-transformers' CrossEncoder for a cross-encoder, and
Qwen3-Reranker's model card (huggingface.co/Qwen/Qwen3-Reranker-0.6B, "Transformers Usage") run with transformers."""
import torch

from embedpipe.pipeline.text.pairs import QWEN3_RERANKER_INSTRUCTION, QWEN3_RERANKER_PREFIX, QWEN3_RERANKER_SUFFIX


def cross_encoder_scores(folder, query: str, documents: list[str], max_length: int) -> list[float]:
    from sentence_transformers import CrossEncoder
    model = CrossEncoder(str(folder), device="cpu", max_length=max_length)
    return model.predict([(query, document) for document in documents], batch_size=4).tolist()


def qwen3_reranker_scores(folder, query: str, documents: list[str], max_length: int) -> list[float]:
    """The model card's process_inputs and compute_logits, one pair at a time (no padding)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    prefix = tokenizer.encode(QWEN3_RERANKER_PREFIX, add_special_tokens=False)
    suffix = tokenizer.encode(QWEN3_RERANKER_SUFFIX, add_special_tokens=False)
    no, yes = tokenizer.convert_tokens_to_ids("no"), tokenizer.convert_tokens_to_ids("yes")
    scores = []
    for document in documents:
        text = f"<Instruct>: {QWEN3_RERANKER_INSTRUCTION}\n<Query>: {query}\n<Document>: {document}"
        body = tokenizer(text, truncation="longest_first", max_length=max_length - len(prefix) - len(suffix))
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prefix + body["input_ids"] + suffix])).logits[:, -1, :]
        pair = torch.nn.functional.log_softmax(torch.stack([logits[:, no], logits[:, yes]], dim=1), dim=1)
        scores.append(pair[0, 1].exp().item())
    return scores
