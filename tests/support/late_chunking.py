"""Late chunking's float32 reference and the documents the tests chunk: transformers runs each whole document
once, and its windows are pooled here from the raw hidden states, independently of our Pooler."""
import numpy as np
import torch


def reference_span_embeddings(model, document, spans, pooling, normalize, bidirectional=False, dim=None):
    """model: a transformers AutoModel; document: token ids; spans: (start, end) within it ->
    [len(spans), dim] float32: mean (or last token) of each span's hidden states, truncated, normalised."""
    device = next(model.parameters()).device
    ids = torch.tensor([document], device=device)
    mask = torch.ones_like(ids)
    attention = mask
    if bidirectional:  # every token sees every token of the document
        attention = {"full_attention": mask[:, None, None, :].bool().expand(-1, 1, ids.shape[1], -1)}
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=attention).last_hidden_state[0].float().cpu()
    pooled = torch.stack([hidden[start:end].mean(0) if pooling == "mean" else hidden[end - 1]
                          for start, end in spans])[:, :dim]
    return torch.nn.functional.normalize(pooled, dim=-1) if normalize else pooled


def windows(length: int, size: int = 64, stride: int = 48) -> list[tuple[int, int]]:
    """Overlapping windows over a document of `length` tokens (the last one shorter), then a span of one
    token and one span of the whole document."""
    spans = [(start, min(start + size, length)) for start in range(0, max(length - size + stride, 1), stride)]
    return spans + [(length // 2, length // 2 + 1), (0, length)]


def random_documents(seed: int, lengths) -> list[list[int]]:
    """Documents of random ids that every test vocabulary holds, framed by [CLS] ... [SEP]."""
    rng = np.random.default_rng(seed)
    return [[101, *rng.integers(1000, 30000, size=n - 2).tolist(), 102] for n in lengths]
