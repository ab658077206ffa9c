"""The ``elmo-hf`` command line. Thin: parse arguments, call the library, print.

    elmo-hf embed corpus.txt --output vectors/ [--model DIR_OR_REPO] [--resume]
    elmo-hf similarity --model DIR --word bank "I sat on the bank ." "The bank raised rates ."
    elmo-hf pretrain --corpus corpus.txt --output elmo-small/ [--config tiny|small|FILE] [--max-steps N] [--resume]
"""

from __future__ import annotations

import argparse
import sys

import torch

from .corpus.readers import INPUT_FORMATS, CorpusError, CorpusSource, InvalidRowError
from .embedding.embedder import DEFAULT_MODEL_DIR, POOLINGS, REPRESENTATIONS, STORAGE_DTYPES, ELMoEmbedder
from .modeling_elmo import ELMoModel
from .pretraining.run import (
    CONFIG_PRESETS, LR_SCHEDULERS, OPTIMIZERS, REGIMES, PretrainingError, PretrainingInterrupted, PretrainingOptions,
    pretrain,
)
from .embedding.shards import OUTPUT_FORMATS, OutputDirectoryError, embed_corpus
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
            from .embedding.ray_engine import embed_with_ray

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


def pretrain_command(args: argparse.Namespace) -> int:
    resume_hint = "rerun the same command with --resume (without --overwrite) to continue"
    try:
        options = PretrainingOptions(
            corpus=args.corpus, output_dir=args.output, config=args.config, held_out=args.held_out,
            held_out_fraction=args.held_out_fraction, word_splitter=args.word_splitter, min_count=args.min_count,
            max_vocab_size=args.max_vocab_size, regime=args.regime, window_size=args.window_size,
            batch_size=args.batch_size, max_steps=args.max_steps, epochs=args.epochs, optimizer=args.optimizer,
            learning_rate=args.learning_rate, lr_scheduler=args.lr_scheduler, warmup_ratio=args.warmup_ratio,
            max_grad_norm=args.max_grad_norm, softmax_samples=args.softmax_samples, dropout=args.dropout,
            save_steps=args.save_steps, save_total_limit=args.save_total_limit, eval_steps=args.eval_steps,
            logging_steps=args.logging_steps, train_eval_sentences=args.train_eval_sentences, seed=args.seed,
            max_time_minutes=args.max_time_minutes, resume=args.resume, overwrite=args.overwrite,
            export_hdf5=args.export_hdf5, progress=not args.no_progress, num_threads=args.threads,
        )
        report = pretrain(options)
    except PretrainingInterrupted as interruption:
        where = f"the latest checkpoint is {interruption.checkpoint}" if interruption.checkpoint else "no checkpoint was saved yet"
        print(f"\ninterrupted: {where}; {resume_hint}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print(f"\ninterrupted: checkpoints already saved in {args.output} are kept; {resume_hint}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (PretrainingError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE_ERROR
    print(report.describe())
    return 0


def add_pretrain_parser(commands) -> None:
    pretrain_parser = commands.add_parser(
        "pretrain",
        help="pre-train an ELMo biLM on text with transformers.Trainer (checkpoints, --resume, perplexity report)",
        description="Pre-train ELMoForPreTraining on CORPUS (text: one sentence per line; or .conllu). Output: the "
        "model (AutoModelForPreTraining; AutoModel loads the biLM), tokenizer, vocab.txt + vocab_counts.tsv, "
        "checkpoint-N/ folders and pretraining_report.json (exact per-direction perplexities vs the unigram baseline).",
    )
    add = pretrain_parser.add_argument
    add("--corpus", nargs="+", required=True, metavar="FILE", help="training files: text (one sentence per line) or .conllu")
    add("--output", required=True, metavar="DIR", help="output directory (must be empty or absent, unless --resume / --overwrite)")
    add("--config", default="small", help=f"architecture: {' or '.join(CONFIG_PRESETS)} (default small), or a JSON file "
        "(config.json fields or an original options.json)")
    held_out = pretrain_parser.add_mutually_exclusive_group()
    held_out.add_argument("--held-out", nargs="+", metavar="FILE", help="held-out files (default: a fraction of the corpus)")
    held_out.add_argument("--held-out-fraction", type=float, default=0.05, help="seeded random fraction of the corpus sentences held out (default 0.05)")
    add("--word-splitter", default="moses", help="how text lines are split into words: moses (default), ptb, whitespace, bert")
    add("--min-count", type=int, default=2, help="words seen fewer times in training are <UNK> (default 2)")
    add("--max-vocab-size", type=int, help="largest softmax vocabulary, <S> </S> <UNK> included")
    add("--regime", choices=REGIMES, default="windowed", help="windowed: bilm-tf's windows with the LSTM state carried "
        "between batches (default); sentence: every sentence from the initial state")
    add("--window-size", type=int, default=20, help="positions per window in the windowed regime (default 20, bilm-tf's)")
    add("--batch-size", type=int, default=32, help="rows (windowed) or sentences per batch (default 32)")
    add("--max-steps", type=int, help="optimizer steps (default: --epochs)")
    add("--epochs", type=float, default=1.0, help="epochs when --max-steps is not given (default 1)")
    add("--optimizer", choices=list(OPTIMIZERS), default="adam", help="adam (AdamW without weight decay, default) or adagrad (bilm-tf's)")
    add("--learning-rate", type=float, help=f"default: {', '.join(f'{name} {rate:g}' for name, (_, rate) in OPTIMIZERS.items())}")
    add("--lr-scheduler", choices=LR_SCHEDULERS, default="linear", help="after warm-up: linear decay to 0 (default), constant, cosine")
    add("--warmup-ratio", type=float, default=0.02, help="linear warm-up over this fraction of the steps (default 0.02)")
    add("--max-grad-norm", type=float, default=10.0, help="global gradient-norm clipping (default 10, bilm-tf's; 0: none)")
    add("--softmax-samples", type=int, help="sampled softmax with this many negatives in training (default: the config's; 0: full softmax)")
    add("--dropout", type=float, help="lm_dropout (default: the config's; small 0.1, tiny 0)")
    add("--save-steps", type=int, default=500, help="checkpoint every N steps (default 500)")
    add("--save-total-limit", type=int, default=2, help="checkpoints kept (default 2)")
    add("--eval-steps", type=int, default=500, help="held-out perplexity every N steps and at step 0 (default 500; 0: only at the end)")
    add("--logging-steps", type=int, default=50, help="log the training loss every N steps (default 50)")
    add("--train-eval-sentences", type=int, default=2000, help="fixed sample of training sentences for the train perplexity (default 2000)")
    add("--seed", type=int, default=0, help="initialisation, held-out split, sentence order (default 0)")
    add("--threads", type=int, help="torch CPU threads (default: torch's); on a busy machine 1 can be much faster")
    add("--max-time-minutes", type=float, help="stop after this much training time (checkpoint, final evaluation and save)")
    existing = pretrain_parser.add_mutually_exclusive_group()
    existing.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --output (same options)")
    existing.add_argument("--overwrite", action="store_true", help="delete an earlier pretrain run in --output and start over")
    add("--export-hdf5", action="store_true", help="also write DIR/hdf5/ (options.json + weights.hdf5 + vocab.txt, the biLM in "
        "the original layout; needs a repository checkout and h5py)")
    add("--no-progress", action="store_true", help="no progress bar (logs are printed instead)")
    pretrain_parser.set_defaults(run=pretrain_command)


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
    add_pretrain_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
