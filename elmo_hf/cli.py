"""The ``elmo-hf`` command line. Thin: parse arguments, call the library, print.

    elmo-hf similarity --model DIR --word bank "I sat on the bank ." "The bank raised rates ."
"""

from __future__ import annotations

import argparse
import sys

import torch

from .modeling_elmo import ELMoModel
from .tokenization_elmo import ELMoTokenizer


def contextual_word_vectors(
    model: ELMoModel, tokenizer: ELMoTokenizer, sentences: list[str], word: str
) -> tuple[list[list[str]], list[torch.Tensor]]:
    """The words of each sentence and, per sentence, the vectors of the first occurrence of ``word`` in every
    representation: (L + 1 layers + mixes, 2P). Raises ``ValueError`` naming a sentence without the word."""
    encoding = tokenizer(sentences, padding=True, return_offsets_mapping=True, return_tensors="pt")
    offsets = encoding.pop("offset_mapping")  # (B, T, 2) character spans of the words in each sentence
    words = [
        [sentence[start:end] for start, end in sentence_offsets[: int(length)].tolist()]
        for sentence, sentence_offsets, length in zip(sentences, offsets, encoding["attention_mask"].sum(1))
    ]
    with torch.inference_mode():
        output = model(**encoding)
    representations = torch.stack([*output.hidden_states, *output.elmo_representations], dim=2)  # (B, T, R, 2P)
    vectors = []
    for index, sentence_words in enumerate(words):
        if word not in sentence_words:
            raise ValueError(f"sentence {index + 1} ({sentences[index]!r}) does not contain the word {word!r}; its words are {sentence_words}.")
        vectors.append(representations[index, sentence_words.index(word)])
    return words, vectors


def similarity_command(args: argparse.Namespace) -> int:
    model = ELMoModel.from_pretrained(args.model).eval()
    tokenizer = ELMoTokenizer.from_pretrained(args.model)
    try:
        words, vectors = contextual_word_vectors(model, tokenizer, args.sentences, args.word)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    names = [f"layer {index}" for index in range(model.config.num_representation_layers)]
    names += [f"scalar mix {index}" for index in range(model.config.num_output_representations)]
    for index, (sentence_words, vector) in enumerate(zip(words, vectors)):
        head = ", ".join(f"{value:+.4f}" for value in vector[-1, :6].tolist())
        print(f"[{index + 1}] {' '.join(sentence_words)}\n    {args.word!r} {names[-1]} ({vector.shape[-1]} dims): [{head}, ...]")
    print(f"\ncosine similarity of {args.word!r} between sentences, per representation:")
    for first in range(len(vectors)):
        for second in range(first + 1, len(vectors)):
            similarities = torch.cosine_similarity(vectors[first], vectors[second], dim=-1)
            cells = "  ".join(f"{name}: {value:.4f}" for name, value in zip(names, similarities.tolist()))
            print(f"  [{first + 1}] vs [{second + 1}]  {cells}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="elmo-hf", description="ELMo contextual word representations.")
    commands = parser.add_subparsers(dest="command", required=True)
    similarity = commands.add_parser(
        "similarity", help="contextual vectors of one word in several sentences and their cosine similarities"
    )
    similarity.add_argument("--model", required=True, help="an ELMo Hugging Face directory or Hub repo id")
    similarity.add_argument("--word", required=True, help="the word to compare (as the tokenizer splits it)")
    similarity.add_argument("sentences", nargs="+", help="two or more sentences containing the word")
    similarity.set_defaults(run=similarity_command)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
