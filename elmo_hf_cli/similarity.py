"""``elmo-hf similarity``: the vectors of one word in several sentences and their cosine similarities."""

from __future__ import annotations

import argparse
import sys

from elmo_hf.runtime.parallelism import set_torch_threads

from .arguments import model_argument
from .common import DEFAULT_MODEL_NOTE, EXIT_OK, libraries_imported_whole, model_files_named, report_error


def add_parsers(commands) -> None:
    similarity = commands.add_parser(
        "similarity", help="contextual vectors of one word in several sentences and their cosine similarities"
    )
    similarity.add_argument(
        "--model", type=model_argument,
        help="an ELMo Hugging Face directory or Hub repo id (default: the small demo model shipped with elmo-hf, as for embed)",
    )
    similarity.add_argument("--word", required=True, help="the word to compare (as the tokenizer splits it)")
    similarity.add_argument("sentences", nargs="+", help="two or more sentences containing the word")
    similarity.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    similarity.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with libraries_imported_whole():
        import torch

        from elmo_hf import DEFAULT_MODEL_DIR, ELMoModel, ELMoTokenizer
        from elmo_hf.embedding.word_vectors import contextual_word_vectors, representation_names

    if args.model is None:
        print(DEFAULT_MODEL_NOTE, file=sys.stderr)
    model_name = args.model or DEFAULT_MODEL_DIR
    try:
        set_torch_threads(args.threads, "--threads")
        with model_files_named(model_name):
            model = ELMoModel.from_pretrained(model_name).eval()
            tokenizer = ELMoTokenizer.from_pretrained(model_name)
        words, vectors = contextual_word_vectors(model, tokenizer, args.sentences, args.word)
    except (ValueError, OSError) as error:
        return report_error(error)
    names = representation_names(model)
    for index, (sentence_words, vector) in enumerate(zip(words, vectors)):
        head = ", ".join(f"{value:+.4f}" for value in vector[-1, :6].tolist())
        print(f"[{index + 1}] {' '.join(sentence_words)}\n    {args.word!r} {names[-1]} ({vector.shape[-1]} dims): [{head}, ...]")
    print(f"\ncosine similarity of {args.word!r} between sentences, per representation:")
    for first in range(len(vectors)):
        for second in range(first + 1, len(vectors)):
            similarities = torch.cosine_similarity(vectors[first], vectors[second], dim=-1)
            cells = "  ".join(f"{name}: {value:.4f}" for name, value in zip(names, similarities.tolist()))
            print(f"  [{first + 1}] vs [{second + 1}]  {cells}")
    return EXIT_OK


__all__ = ["add_parsers", "run"]
