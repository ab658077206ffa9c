"""The ``elmo-hf`` command line. Thin: parse arguments, call the library, print.

    elmo-hf embed corpus.txt --output vectors/ [--model DIR_OR_REPO] [--resume]
    elmo-hf similarity --model DIR --word bank "I sat on the bank ." "The bank raised rates ."
"""

from __future__ import annotations

import argparse
import sys

import torch

from .corpus_readers import INPUT_FORMATS, CorpusError, CorpusSource
from .embedding import DEFAULT_MODEL_DIR, POOLINGS, REPRESENTATIONS, STORAGE_DTYPES, ELMoEmbedder, InvalidRowError
from .modeling_elmo import ELMoModel
from .sharded_embedding import OUTPUT_FORMATS, OutputDirectoryError, embed_corpus
from .tokenization_elmo import ELMoTokenizer

EXIT_USAGE_ERROR = 2
EXIT_INTERRUPTED = 130


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


def representation_argument(value: str) -> str | int:
    if value in REPRESENTATIONS:
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected one of {list(REPRESENTATIONS)} or a layer index, got {value!r}") from None


def embed_command(args: argparse.Namespace) -> int:
    model_name = args.model or str(DEFAULT_MODEL_DIR)
    if args.model is None:
        print(
            "note: no --model given, using elmo-hf's offline default model (AllenNLP's tiny test ELMo, for trying the "
            "tool out); pass --model with a converted ELMo for real vectors",
            file=sys.stderr,
        )
    options = dict(
        representation=args.representation, mix_index=args.mix_index, pooling=args.pooling, dtype=args.dtype,
        batch_size=args.batch_size, max_words_per_batch=args.max_words_per_batch, max_window_words=args.max_window_words,
        window_context=args.window_context, text_column=args.text_column, words_column=args.words_column,
        output_column=args.output_column, on_invalid="skip" if args.skip_invalid else "raise",
    )
    try:
        if args.engine == "ray":
            from .ray_embedding import embed_with_ray

            summary = embed_with_ray(
                args.input, args.output, model_name=model_name, revision=args.revision, input_format=args.input_format,
                overwrite=args.overwrite, address=args.ray_address, num_workers=args.ray_workers,
                gpus_per_worker=args.ray_gpus_per_worker, **options,
            )
        else:
            source = CorpusSource.open(args.input, args.input_format)
            embedder = ELMoEmbedder.from_pretrained(model_name, revision=args.revision, device=args.device, **options)
            summary = embed_corpus(
                source, embedder, args.output, model_name=model_name, shard_size=args.shard_size,
                output_format=args.output_format, resume=args.resume, overwrite=args.overwrite, progress=not args.no_progress,
            )
    except KeyboardInterrupt:
        print(
            f"\ninterrupted: every finished shard is saved in {args.output}; run the same command with --resume to "
            "continue",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    except (CorpusError, InvalidRowError, OutputDirectoryError, ValueError, KeyError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE_ERROR
    print(summary.describe())
    return 0


def add_embed_parser(commands) -> None:
    embed = commands.add_parser(
        "embed",
        help="ELMo vectors for a corpus, written as Parquet shards with a manifest (resumable)",
        description="Embed every sentence of INPUT. Output: OUT/shard-NNNNN.parquet (input_row, the input columns, "
        "words, num_words, vectors) and OUT/manifest.json. Empty lines give rows with zero words.",
    )
    embed.add_argument("input", help="text file (one sentence per line), .jsonl, .csv, .parquet, or a save_to_disk directory")
    embed.add_argument("--output", required=True, help="output directory")
    embed.add_argument("--model", help="ELMo directory or Hub repo id (default: the offline default model shipped with elmo-hf)")
    embed.add_argument("--revision", help="Hub revision of --model")
    embed.add_argument("--input-format", choices=INPUT_FORMATS, help="default: from the extension (a directory is a saved dataset)")
    embed.add_argument("--text-column", default="text", help="column of raw sentences (default: text)")
    embed.add_argument("--words-column", help="column of pre-split sentences (lists of words) instead of --text-column")
    embed.add_argument("--output-column", default="elmo", help="name of the vectors column (default: elmo)")
    embed.add_argument(
        "--representation", type=representation_argument, default="mix",
        help="mix (scalar mix, default), top, average, all, or a layer index (0 = token layer)",
    )
    embed.add_argument("--mix-index", type=int, default=0, help="which scalar mix with --representation mix")
    embed.add_argument("--pooling", choices=POOLINGS, default="none", help="none: per-word vectors; mean: one vector per sentence")
    embed.add_argument("--dtype", choices=STORAGE_DTYPES, default="float32", help="storage dtype of the vectors")
    embed.add_argument("--batch-size", type=int, default=32, help="sentences per model batch (default 32)")
    embed.add_argument("--max-words-per-batch", type=int, help="padded words per model batch (sentences x longest)")
    embed.add_argument("--max-window-words", type=int, default=256, help="longer sentences run in windows (default 256)")
    embed.add_argument("--window-context", type=int, default=32, help="context words on each side of a window's core (default 32)")
    embed.add_argument("--shard-size", type=int, default=1000, help="input rows per output shard (default 1000)")
    embed.add_argument("--output-format", choices=OUTPUT_FORMATS, default="parquet", help="parquet shards, or also OUT/dataset (save_to_disk)")
    existing = embed.add_mutually_exclusive_group()
    existing.add_argument("--resume", action="store_true", help="continue an interrupted run in --output")
    existing.add_argument("--overwrite", action="store_true", help="delete an earlier run in --output and start over")
    embed.add_argument("--skip-invalid", action="store_true", help="skip rows whose text is missing, not a string or not UTF-8 (counted) instead of stopping")
    embed.add_argument("--device", help="torch device, e.g. cuda (default: cpu)")
    embed.add_argument("--no-progress", action="store_true", help="no progress bar")
    embed.add_argument("--engine", choices=("datasets", "ray"), default="datasets", help="ray: run on Ray Data (needs elmo-hf[ray])")
    embed.add_argument("--ray-address", help="address of an existing Ray cluster (default: start a local Ray)")
    embed.add_argument("--ray-workers", type=int, default=1, help="model replicas (actors) for --engine ray (default 1)")
    embed.add_argument("--ray-gpus-per-worker", type=float, default=0, help="GPUs per actor for --engine ray (default 0)")
    embed.set_defaults(run=embed_command)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="elmo-hf", description="ELMo contextual word representations.")
    commands = parser.add_subparsers(dest="command", required=True)
    add_embed_parser(commands)
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
