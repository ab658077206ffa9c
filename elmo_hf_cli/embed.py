"""``elmo-hf embed``: ELMo vectors for a corpus, as Parquet shards with a manifest (resumable); ``--verify`` checks one.

What needs no model is settled before torch is imported (``check_before_loading``: the input's format and sentence
column, the output directory's state, a resume of another input, a resume of an output already complete), by the
library's own checks; the rest once the model is loaded."""

from __future__ import annotations

import argparse
import sys

from elmo_hf import choices_elmo
from elmo_hf.corpus import formats
from elmo_hf.runtime import parallelism

from .arguments import existing_directory, existing_path, model_argument, output_directory, representation_argument
from .common import (
    DEFAULT_MODEL_NOTE, EXIT_FAILED_CHECK, EXIT_INTERRUPTED, EXIT_OK, libraries_imported_whole, model_files_named, quiet_progress_bars,
    report_error,
)

ENGINES = ("datasets", "ray")


def add_parsers(commands) -> None:
    library = choices_elmo
    # Options left out are not passed on: the library's defaults apply (the help states them).
    embed = commands.add_parser(
        "embed",
        argument_default=argparse.SUPPRESS,
        help="ELMo vectors for a corpus, written as Parquet shards with a manifest (resumable)",
        description="Embed every sentence of INPUT. Output: OUT/shard-NNNNN.parquet (input_row, the input columns, "
        "words, num_words, vectors) and OUT/manifest.json. Empty lines give rows with zero words. With --verify OUT, "
        "check a finished output instead (exit 1 if anything is missing or damaged).",
    )
    embed.add_argument(
        "input", nargs="?", default=None, type=existing_path,
        help="the corpus, a file or a save_to_disk directory; its format is told by its extension, or --input-format",
    )
    embed.add_argument("--output", default=None, type=output_directory, help="output directory")
    embed.add_argument("--verify", default=None, metavar="OUT", type=existing_directory, help="check a finished output (marker, manifest, every shard's size and sha256)")
    embed.add_argument("--model", type=model_argument, help="ELMo directory or Hub repo id (default: the small demo model shipped with elmo-hf)")
    embed.add_argument("--revision", help="Hub revision of --model")
    embed.add_argument(
        "--input-format", choices=tuple(formats.INPUT_FORMATS), help=f"{formats.formats_help()} (default: from the extension)"
    )
    embed.add_argument("--text-column", help="column of raw sentences (default: text)")
    embed.add_argument("--words-column", help="column of pre-split sentences (lists of words); default for .conllu: words")
    embed.add_argument("--output-column", help="name of the vectors column (default: elmo)")
    add_vector_options(embed, library)
    add_run_options(embed, library)
    embed.set_defaults(run=run)


def add_vector_options(embed, library) -> None:
    """The options of what is computed and stored: representation, pooling, dtype, batches, windows, shards."""
    embed.add_argument(
        "--representation", type=representation_argument,
        help="mix (scalar mix, default), top, average, all, or a layer index (0 = token layer)",
    )
    embed.add_argument("--mix-index", type=int, help="which scalar mix with --representation mix (default 0)")
    embed.add_argument(
        "--pooling", choices=library.OUTPUT_POOLINGS,
        help="none: per-word vectors (default); one vector per sentence over its words: mean, max, mean_max (both "
        "concatenated) or first_last (first and last word concatenated)",
    )
    embed.add_argument("--dtype", choices=library.STORAGE_DTYPES, help="storage dtype of the vectors: float32 (default) or float16")
    embed.add_argument("--batch-size", type=int, help="most sentences per model batch (default: no limit of its own)")
    embed.add_argument(
        "--max-words-per-batch", type=int,
        help="most padded words per model batch, sentences x longest (default without --batch-size: 4096 on CPU, 16384 on CUDA)",
    )
    embed.add_argument(
        "--min-batch-size", type=int,
        help="a batch of fewer sentences (windows) than this may grow to 4x --max-words-per-batch, so that long rows do "
        "not run a few at a time (default: 128 on CPU with the default word budget, else 0: no floor)",
    )
    embed.add_argument(
        "--token-cache-words", type=int,
        help="keep the token-layer vectors of up to this many distinct words; same output, fewer CNN runs (default 50000, 0: off)",
    )
    embed.add_argument("--max-window-words", type=int, help="longer sentences run in windows (default 256)")
    embed.add_argument("--window-context", type=int, help="context words on each side of a window's core (default 32)")
    embed.add_argument("--shard-size", type=int, help="input rows per output shard (default 1000)")
    embed.add_argument(
        "--shard-characters", type=int,
        help="fewer rows in a shard whose rows hold more input characters than this: long rows still make shards the "
        "workers share (default 200000, 0: no limit)",
    )
    embed.add_argument("--output-format", choices=library.OUTPUT_FORMATS, help="parquet (shards, default), or dataset: also OUT/dataset (save_to_disk)")


def add_run_options(embed, library) -> None:
    """The options of how the run goes: resume or overwrite, invalid rows, device, processes and threads, engine."""
    existing = embed.add_mutually_exclusive_group()
    existing.add_argument("--resume", action="store_true", help="continue an interrupted run in --output (damaged shards are redone)")
    existing.add_argument("--overwrite", action="store_true", help="delete an earlier embedding output in --output and start over")
    embed.add_argument("--skip-invalid", action="store_true", help="skip rows whose text is missing, not a string or not UTF-8 (counted) instead of stopping")
    embed.add_argument("--allow-non-finite", action="store_true", help="store NaN / infinite vectors instead of stopping on them")
    embed.add_argument("--device", help="torch device, e.g. cuda (default: cpu)")
    embed.add_argument(
        "--allow-tf32", action="store_true",
        help="let a float32 model on CUDA use TF32 (faster on recent GPUs, about 1e-2 off in the top layer); default: exact float32",
    )
    embed.add_argument(
        "--compute-dtype", choices=library.COMPUTE_DTYPES,
        help="run the model in float32 (the model's own, default, exact), bfloat16 or float16: not exact (per-word "
        "cosine >= 0.999 to float32); faster only on a GPU or, for bfloat16, a CPU with AMX or AVX512-BF16; int8 "
        "(CPU only): the LSTM matmuls and the token layer's convolutions and highways in int8, per-vector cosine "
        ">= 0.999 to float32, faster on CPUs (docs/results/int8.md)",
    )
    embed.add_argument(
        "--workers", type=int,
        help="processes embedding shards in parallel on the CPU, each with its own copy of the model at --threads "
        "threads (default: one per usable core, at most one per shard of INPUT, 1 with --threads alone or a GPU "
        "--device); the output is byte-identical to one process at one thread",
    )
    embed.add_argument(
        "--threads", type=int,
        help="torch CPU threads of each worker (default 1); without --workers: one process at this many threads",
    )
    embed.add_argument("--no-progress", action="store_true", help="no progress bars")
    embed.add_argument("--engine", default="datasets", choices=ENGINES, help="datasets (default) or ray: run on Ray Data (needs elmo-hf[ray])")
    embed.add_argument(
        "--ray-address",
        help="address of an existing Ray cluster (default: RAY_ADDRESS or a `ray start` cluster on this machine, else a "
        "local Ray started for the job, its workers at normal priority; 'local': always a new local Ray)",
    )
    embed.add_argument("--ray-workers", type=int, help="model replicas (actors) for --engine ray (default 1)")
    embed.add_argument("--ray-gpus-per-worker", type=float, help="GPUs per actor for --engine ray (default 0)")


# Command-line option -> keyword of ELMoEmbedder, embed_corpus or embed_with_ray (passed only when given).
EMBEDDER_OPTIONS = {
    "representation": "representation", "mix_index": "mix_index", "pooling": "pooling", "dtype": "dtype",
    "batch_size": "batch_size", "max_words_per_batch": "max_words_per_batch", "min_batch_size": "min_batch_size",
    "max_window_words": "max_window_words",
    "window_context": "window_context", "output_column": "output_column", "token_cache_words": "token_cache_words",
    "compute_dtype": "compute_dtype",
}
CORPUS_RUN_OPTIONS = {
    "shard_size": "shard_size", "shard_characters": "shard_characters", "output_format": "output_format", "workers": "workers",
}
RAY_OPTIONS = {"ray_address": "address", "ray_workers": "num_workers", "ray_gpus_per_worker": "gpus_per_worker"}
# Options of the datasets engine that embed_with_ray has no counterpart for (embed_corpus's own, and how its process
# runs): given with --engine ray, they are refused rather than ignored. Derived from CORPUS_RUN_OPTIONS, so that an
# option added there is refused with Ray too.
DATASETS_ENGINE_ONLY = (*CORPUS_RUN_OPTIONS, "threads", "resume", "device")


def given(args: argparse.Namespace, names: dict[str, str]) -> dict:
    return {keyword: getattr(args, name) for name, keyword in names.items() if hasattr(args, name)}


def run(args: argparse.Namespace) -> int:
    if args.verify is not None:
        if args.input is not None or args.output is not None:
            return report_error(ValueError("--verify OUT checks an existing output: give no INPUT and no --output"))
        return verify(args.verify)
    if args.input is None or args.output is None:
        return report_error(ValueError("give INPUT and --output (or --verify OUT to check an output)"))
    if args.engine == "ray":
        unread = ["--" + name.replace("_", "-") for name in DATASETS_ENGINE_ONLY if hasattr(args, name)]
        if unread:
            return report_error(ValueError(
                f"{' and '.join(unread)}: only the datasets engine reads {'it' if len(unread) == 1 else 'them'}. With "
                "--engine ray, --ray-workers sets the replicas and --ray-gpus-per-worker the GPUs; Ray Data cuts its "
                "own files (Parquet) and has no --resume (rerun with --overwrite)"
            ))
    model = getattr(args, "model", None)
    if model is None:
        print(DEFAULT_MODEL_NOTE, file=sys.stderr)
    model_name = model or choices_elmo.DEFAULT_MODEL_DIR
    if args.engine == "datasets":
        try:  # before torch is imported and the model loaded: seconds, minutes on a busy machine
            finished = check_before_loading(args, model_name)
        except (ValueError, KeyError, OSError) as error:
            return report_error(error)
        if finished is not None:
            print(finished.describe())
            return EXIT_OK
    progress = not getattr(args, "no_progress", False)
    with libraries_imported_whole():
        if not progress:
            quiet_progress_bars()
        # The libraries embed_on_the_engine runs on (the driver imports the embedder and the corpus readers).
        from elmo_hf.embedding.driver import EmbeddingInterrupted
        from elmo_hf.embedding.manifest import has_finished_shards
        from elmo_hf.embedding.workers import EmbeddingWorkerError

    try:
        summary = embed_on_the_engine(args, model_name, progress)
    except EmbeddingInterrupted as interruption:
        return report_interruption(interruption, args.output)
    except EmbeddingWorkerError as error:
        print(f"error: {error}", file=sys.stderr)
        if has_finished_shards(args.output):
            print(f"the finished shards are kept in {args.output}; run the same command with --resume to continue", file=sys.stderr)
        return EXIT_FAILED_CHECK
    # ValueError: every ELMoHFError (CorpusError, InvalidRowError, OutputDirectoryError, ...), the argument checks
    # and datasets' and transformers' own; KeyError: a column the data does not have.
    except (ValueError, KeyError, OSError, ImportError) as error:
        return report_error(error)
    print(summary.describe())
    return EXIT_OK


def embed_on_the_engine(args: argparse.Namespace, model_name: str, progress: bool):
    """The run on ``--engine``'s engine (the libraries imported already, by ``run``); its summary. The processes and
    threads are the library's reading of ``--workers`` and ``--threads`` (``parallelism.command_line_embedding``)."""
    from elmo_hf.corpus import CorpusSource
    from elmo_hf.embedding.embedder import ELMoEmbedder
    from elmo_hf.embedding.driver import embed_corpus

    revision = getattr(args, "revision", None)
    source = None if args.engine == "ray" else CorpusSource.open(args.input, getattr(args, "input_format", None))
    options = embedder_options(args, source)
    if args.engine == "ray":
        from elmo_hf.embedding.ray_engine import embed_with_ray

        return embed_with_ray(
            args.input, args.output, model_name=model_name, revision=revision,
            input_format=getattr(args, "input_format", None), overwrite=getattr(args, "overwrite", False),
            **given(args, RAY_OPTIONS), **options,
        )
    run_options = given(args, CORPUS_RUN_OPTIONS)  # no --workers: the library's default_workers()
    processes = parallelism.command_line_embedding(run_options.pop("workers", None), getattr(args, "threads", None))
    if processes.workers is not None:
        run_options["workers"] = processes.workers
    if processes.worker_threads is not None:
        run_options["worker_threads"] = processes.worker_threads
    parallelism.set_torch_threads(processes.process_threads, "--threads")
    with model_files_named(model_name):
        embedder = ELMoEmbedder.from_pretrained(model_name, revision=revision, device=getattr(args, "device", None), **options)
    return embed_corpus(
        source, embedder, args.output, model_name=model_name, resume=getattr(args, "resume", False),
        overwrite=getattr(args, "overwrite", False), progress=progress, **run_options,
    )


def report_interruption(interruption, output: str) -> int:
    """Say what an interrupted run kept in ``output``; ``EXIT_INTERRUPTED``."""
    if interruption.shards:
        print(
            f"\ninterrupted: {interruption.shards} finished shard(s) are kept in {output}; run the same "
            "command with --resume to continue",
            file=sys.stderr,
        )
    else:
        print(f"\ninterrupted before the first shard was finished: nothing was kept in {output}", file=sys.stderr)
    return EXIT_INTERRUPTED


def check_before_loading(args: argparse.Namespace, model_name: str):
    """What the run would refuse, or answer, without its model (``elmo_hf.embedding.manifest.check_before_loading``:
    the input's format and sentence column, the output directory's state, a resume of another input or with other
    options, an output already complete), before torch is imported: the library's torch-free modules. Returns the summary of an output already complete, else None."""
    from elmo_hf.corpus import readers
    from elmo_hf.embedding import manifest

    source = readers.CorpusSource.open(args.input, getattr(args, "input_format", None))
    options = embedder_options(args, source)
    request = manifest.embedding_request(model_name, getattr(args, "revision", None), getattr(args, "device", None), options)
    output_options = {name: value for name, value in given(args, CORPUS_RUN_OPTIONS).items() if name != "workers"}
    return manifest.check_before_loading(
        source, args.output, request, options, resume=getattr(args, "resume", False),
        overwrite=getattr(args, "overwrite", False), **output_options,
    )


def embedder_options(args: argparse.Namespace, source) -> dict:
    """The keywords of ``ELMoEmbedder.from_pretrained`` (and ``embed_with_ray``) the command line gives."""
    options = {**given(args, EMBEDDER_OPTIONS), **sentence_columns(args, source)}
    options["on_invalid"] = "skip" if getattr(args, "skip_invalid", False) else "raise"
    options["check_finite"] = not getattr(args, "allow_non_finite", False)
    options["allow_tf32"] = getattr(args, "allow_tf32", False)
    return options


def sentence_columns(args: argparse.Namespace, source) -> dict:
    """The columns holding the sentences: as given, else the input format's own (the words of a .conllu file)."""
    text_column, words_column = getattr(args, "text_column", None), getattr(args, "words_column", None)
    if text_column is None and words_column is None and source is not None:
        text_column, words_column = source.default_columns
    columns = {"words_column": words_column}
    if text_column is not None:
        columns["text_column"] = text_column
    return columns


def verify(output_dir: str) -> int:
    with libraries_imported_whole():
        from elmo_hf.embedding.manifest import verify_embedding_output

    problems = verify_embedding_output(output_dir)
    if problems:
        print(f"{output_dir}: {len(problems)} problem(s):", file=sys.stderr)
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        return EXIT_FAILED_CHECK
    print(f"{output_dir}: complete, every shard matches the manifest")
    return EXIT_OK


__all__ = ["add_parsers", "run"]
