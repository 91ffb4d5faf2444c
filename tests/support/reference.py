"""The float32 reference embeddings of a transformers model, pooled independently of our Pooler."""
import torch


def reference_embeddings(model, sequences, pooling, normalize, bidirectional=False):
    """transformers on a padded batch with an attention mask, pooled here independently."""
    lengths = torch.tensor([len(s) for s in sequences])
    ids = torch.zeros(len(sequences), int(lengths.max()), dtype=torch.long)
    for i, s in enumerate(sequences):
        ids[i, : len(s)] = torch.tensor(s)
    mask = (torch.arange(ids.shape[1])[None, :] < lengths[:, None]).long()
    device = next(model.parameters()).device
    ids, mask, lengths = ids.to(device), mask.to(device), lengths.to(device)
    attention = mask
    if bidirectional:  # every query row sees every real key of its sequence
        attention = {"full_attention": mask[:, None, None, :].bool().expand(-1, 1, ids.shape[1], -1)}
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=attention).last_hidden_state
    if pooling == "mean":
        pooled = (hidden * mask[..., None]).sum(1) / lengths[:, None]
    elif pooling == "cls":
        pooled = hidden[:, 0]
    else:
        pooled = hidden[torch.arange(len(sequences), device=device), lengths - 1]
    pooled = pooled.cpu()
    return torch.nn.functional.normalize(pooled, dim=-1) if normalize else pooled
