"""(query, document) pairs -> one token sequence each, for a reranker (never imports torch).

A cross-encoder's pair is the tokenizer's own pair encoding, `[CLS] q [SEP] d [SEP]` for BERT (token types 0, then
1 from d on) or `<s> q </s></s> d </s>` for XLM-R (one type). Qwen3-Reranker's is its prompt template, from its
model card (huggingface.co/Qwen/Qwen3-Reranker-0.6B, "Transformers Usage"; the same in QwenLM/Qwen3-Embedding's
README): prefix tokens + the tokens of format_instruction(instruction, query, doc) cut to max_length - len(prefix) -
len(suffix) + suffix tokens, each part tokenized without special tokens; the model then judges "yes" or "no".
An over-long pair loses the end of its document (counted in `truncated`), or raises PairError with truncate=False.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tokenizers import Encoding, Tokenizer

from embedpipe.pipeline.errors import UserError
from embedpipe.pipeline.text.tokenizer import (CUT_CHARS_PER_TOKEN, MAX_CHARS_PER_TOKEN, MAX_TEXT_CHARS,
                                              checked_max_length, encode_shortest_prefix, holds_two_more_words)

QWEN3_RERANKER_PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
                         "and the Instruct provided. Note that the answer can only be \"yes\" or \"no\"."
                         "<|im_end|>\n<|im_start|>user\n")
QWEN3_RERANKER_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
QWEN3_RERANKER_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
TEMPLATES = ("pair", "qwen3-reranker")


class PairError(UserError, ValueError):
    """A query or document a reranker cannot score: empty, or too long for the model (the message says which)."""


@dataclass
class EncodedPairs:
    """One sequence per document: ids[i] (query and document i), types[i] (a type per token; None: the model takes
    none), truncated[i] (the document lost tokens to max_length)."""

    ids: list[list[int]]
    types: list[list[int]] | None
    truncated: list[bool]

    @property
    def num_truncated(self) -> int:
        return sum(self.truncated)


class PairTokenizer:
    """Tokenizes (query, documents) for one reranker: template "pair" (a cross-encoder; token_types: keep BERT's
    segment types) or "qwen3-reranker" (its prompt, with `instruction`); at most max_length tokens a pair."""

    def __init__(self, tokenizer_file: str | Path, max_length: int, template: str = "pair", token_types: bool = False,
                 instruction: str | None = None):
        if template not in TEMPLATES:
            raise ValueError(f"template must be one of {', '.join(TEMPLATES)}, not {template!r}")
        self.max_length, self.template, self.token_types = max_length, template, token_types
        self.instruction = instruction or QWEN3_RERANKER_INSTRUCTION
        self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()  # cut here, on the document side
        self._prefix = self._tokenizer.encode(QWEN3_RERANKER_PREFIX, add_special_tokens=False).ids
        self._suffix = self._tokenizer.encode(QWEN3_RERANKER_SUFFIX, add_special_tokens=False).ids
        self._pair_specials = self._tokenizer.num_special_tokens_to_add(True)
        self._single_specials = self._tokenizer.num_special_tokens_to_add(False)  # Qwen3's tokenizer: none
        self._stand_in = self._tokenizer.encode("a", add_special_tokens=False)  # a body of one token
        self._stand_in.truncate(1)
        # Qwen3-Reranker's pair: prefix, the single-sequence special tokens around the body (Qwen3's: none), suffix
        before, _, after = around_the_body(self._tokenizer.post_process(self._stand_in, None, True), 0)
        self._prompt_before, self._prompt_after = self._prefix + before.ids, after.ids + self._suffix
        # the fewest tokens a pair can have: the template's (Qwen3-Reranker's instruction included) and the special
        # tokens, one query and one document token
        self.min_length = 2 + (self._pair_specials if template == "pair" else
                               len(self._prefix) + len(self._suffix) + self._single_specials
                               + len(self._tokenizer.encode(self._head(""), add_special_tokens=False)))
        if max_length < self.min_length:
            raise ValueError(f"max-length {max_length} is too short for this reranker: a pair takes "
                             f"{self.min_length - 2} tokens of template and special tokens, and at least one query "
                             "and one document token")

    def _head(self, query: str) -> str:
        """Qwen3-Reranker's format_instruction up to the document."""
        return f"<Instruct>: {self.instruction}\n<Query>: {query}\n<Document>: "

    def encode(self, query: str, documents: list[str], truncate: bool = True, first: int = 0) -> EncodedPairs:
        """Raises PairError for an empty query or document, a query that leaves a document no token, and with
        truncate=False for a pair longer than max_length. first: the number of documents[0] in the request (for
        the messages: a request tokenized a chunk at a time)."""
        self.check(query, documents, first)
        pairs = self._pairs(query, documents) if self.template == "pair" else self._prompts(query, documents)
        if not truncate and any(pairs.truncated):
            i = first + pairs.truncated.index(True)
            raise PairError(f"document {i}: with the query, it is longer than the model's {self.max_length} tokens "
                            "(truncate is off)")
        return pairs

    @staticmethod
    def check(query: str, documents: list[str], first: int = 0) -> None:
        """Raises PairError for an empty query or document (numbered from `first`)."""
        if not query:
            raise PairError("the query is empty")
        empty = next((i for i, document in enumerate(documents) if not document), None)
        if empty is not None:
            raise PairError(f"document {first + empty} is empty")

    def _pairs(self, query: str, documents: list[str]) -> EncodedPairs:
        """The tokenizer's pair encoding, the document cut to what the query and the special tokens leave."""
        room = self.max_length - self._pair_specials
        [query_encoding], [query_cut] = self._first_tokens([query], room - 1)
        if query_cut:
            raise PairError(f"the query is longer than {room - 1} tokens: a pair of this model holds "
                            f"{self.max_length}, special tokens and at least one document token included")
        # the template around a document, from a one-token stand-in: [CLS] q [SEP] ... [SEP] for BERT
        head, body_type, tail = around_the_body(self._tokenizer.post_process(query_encoding, self._stand_in, True), 1)
        encodings, truncated = self._first_tokens(documents, room - len(query_encoding))
        bodies = [encoding.ids[:room - len(query_encoding)] for encoding in encodings]
        ids = [head.ids + body + tail.ids for body in bodies]
        types = [head.types + [body_type] * len(body) + tail.types for body in bodies] if self.token_types else None
        return EncodedPairs(ids, types, truncated)

    def _prompts(self, query: str, documents: list[str]) -> EncodedPairs:
        """Qwen3-Reranker's prefix + format_instruction(...) cut to what prefix and suffix leave + suffix. The model
        card tokenizes format_instruction's text with the tokenizer's special tokens for one sequence (Qwen3's has
        none), so they are added here too, inside its budget."""
        room = self.max_length - len(self._prefix) - len(self._suffix) - self._single_specials
        head = self._head(query)
        if self._first_tokens([head], room - 1)[1][0]:
            raise PairError(f"the query and instruction are longer than {room - 1} tokens: with the prompt template, "
                            f"a pair of this model holds {self.max_length} tokens")
        encodings, truncated = self._first_tokens([head + document for document in documents], room)
        return EncodedPairs([self._prompt_before + encoding.ids[:room] + self._prompt_after for encoding in encodings],
                            None, truncated)

    def _first_tokens(self, texts: list[str], budget: int) -> tuple[list[Encoding], list[bool]]:
        """Each text's encoding, of which the first `budget` tokens (no special tokens) are the whole text's, and
        whether the text had more. As TextTokenizer does, a long text is tokenized from a prefix of budget *
        CUT_CHARS_PER_TOKEN characters, doubled until it provably holds those tokens, and never read past
        max(MAX_TEXT_CHARS, budget * MAX_CHARS_PER_TOKEN) characters; a shorter text is tokenized whole, without
        the character offsets and word ids it does not need (encode_batch_fast)."""
        cut = budget * CUT_CHARS_PER_TOKEN
        encodings: list[Encoding | None] = [None] * len(texts)
        read_whole = [True] * len(texts)
        short = [i for i, text in enumerate(texts) if len(text) <= cut]
        for i, encoding in zip(short, self._tokenizer.encode_batch_fast([texts[i] for i in short],
                                                                        add_special_tokens=False)):
            encodings[i] = encoding
        long = [i for i, text in enumerate(texts) if len(text) > cut]
        for i, prefix in zip(long, self._tokenizer.encode_batch([texts[i][:cut] for i in long],
                                                                add_special_tokens=False)):
            encodings[i] = prefix
            if not holds_first_tokens(prefix, budget):
                encodings[i], read_whole[i] = self._encode_prefix(texts[i], 2 * cut, budget)
        return encodings, [len(e) > budget or not whole for e, whole in zip(encodings, read_whole)]

    def _encode_prefix(self, text: str, cut: int, budget: int) -> tuple[Encoding, bool]:
        """The encoding of the shortest prefix of cut * 2^k characters that provably holds the text's first budget
        tokens, and True; or that of the bound's prefix, and False."""
        def encode(prefix: str) -> Encoding:
            return self._tokenizer.encode_batch([prefix], add_special_tokens=False)[0]
        return encode_shortest_prefix(encode, text, cut, max(MAX_TEXT_CHARS, budget * MAX_CHARS_PER_TOKEN),
                                      lambda encoding: holds_first_tokens(encoding, budget))


@dataclass(frozen=True)
class Tokens:
    ids: list[int]
    types: list[int]


def around_the_body(probe: Encoding, sequence: int) -> tuple[Tokens, int, Tokens]:
    """The tokens before and after sequence `sequence` of a post-processed encoding whose sequence has one token, and
    that token's type: what the tokenizer's template puts around any body there (its tokens are contiguous)."""
    at = probe.sequence_ids.index(sequence)
    return (Tokens(probe.ids[:at], probe.type_ids[:at]), probe.type_ids[at],
            Tokens(probe.ids[at + 1:], probe.type_ids[at + 1:]))


def holds_first_tokens(prefix: Encoding, budget: int) -> bool:
    """Whether a text's prefix yields the whole text's first `budget` tokens: it holds two more words after the
    word of its budget-th token (tokenizer.keeps_whole_text_tokens gives the reason)."""
    return holds_two_more_words(prefix.word_ids[:budget], prefix.word_ids[budget:])


def make_pair_tokenizer(model, max_length: int | None = None, instruction: str | None = None) -> PairTokenizer:
    """The pair tokenizer of a reranker (an Engine or a ModelSpec of task "score": anything with its ModelFolder as
    .folder); max_length caps the tokens a pair below the model's max_seq_length (None: that). instruction: Qwen3-
    Reranker's task instruction (None: the model card's default). Raises ValueError for a cap outside 1 to
    max_seq_length, or an instruction for a cross-encoder."""
    folder = model.folder
    max_length = checked_max_length(folder, max_length)
    qwen3 = folder.scorer.label_token_ids is not None
    if instruction is not None and not qwen3:
        raise ValueError("an instruction is for Qwen3-Reranker; a cross-encoder takes none")
    return PairTokenizer(folder.tokenizer_file, max_length,
                         "qwen3-reranker" if qwen3 else "pair", folder.takes_token_types, instruction)
