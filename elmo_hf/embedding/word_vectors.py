"""The vectors of one word in several sentences, in every representation a model gives (``elmo-hf similarity``)."""

from __future__ import annotations

import torch

from ..modeling_elmo import ELMoModel
from ..tokenization_elmo import ELMoTokenizer


def representation_names(model: ELMoModel) -> list[str]:
    """Names of the representations ``contextual_word_vectors`` returns, in order: the L + 1 layers, then the mixes."""
    names = [f"layer {index}" for index in range(model.config.num_representation_layers)]
    return names + [f"scalar mix {index}" for index in range(model.config.num_output_representations)]


def contextual_word_vectors(
    model: ELMoModel, tokenizer: ELMoTokenizer, sentences: list[str], word: str
) -> tuple[list[list[str]], list[torch.Tensor]]:
    """The words of each sentence and, per sentence, the vectors of the first occurrence of ``word`` in every
    representation (``representation_names``): (L + 1 layers + mixes, 2P). Raises ``ValueError`` naming a sentence
    without the word."""
    encoding = tokenizer(sentences, padding=True, return_offsets_mapping=True, return_tensors="pt")
    offsets = encoding.pop("offset_mapping")  # (B, T, 2) character spans of the words in each sentence
    words = [
        [sentence[start:end] for start, end in sentence_offsets[: int(length)].tolist()]
        for sentence, sentence_offsets, length in zip(sentences, offsets, encoding["attention_mask"].sum(1))
    ]
    with torch.inference_mode():
        output = model(**encoding.to(model.device))
    representations = torch.stack([*output.hidden_states, *output.elmo_representations], dim=2).cpu()  # (B, T, R, 2P)
    vectors = []
    for index, sentence_words in enumerate(words):
        if word not in sentence_words:
            raise ValueError(f"sentence {index + 1} ({sentences[index]!r}) does not contain the word {word!r}; its words are {sentence_words}.")
        vectors.append(representations[index, sentence_words.index(word)])
    return words, vectors


__all__ = ["contextual_word_vectors", "representation_names"]
