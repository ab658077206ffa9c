"""``elmo-hf neighbours``: contextual nearest neighbours over ``elmo-hf embed`` outputs (the paper's Table 4).

    elmo-hf neighbours build EMBED_DIR [EMBED_DIR ...] --output INDEX_DIR [--index flat|ivf|ivfpq]
    elmo-hf neighbours query INDEX_DIR --sentence "We saw the play ." --word play [-k 10] [--same-word] [--static K]

The library (``elmo_hf.search``) checks the values and holds the defaults; this module only passes on what was given.
"""

from __future__ import annotations

import argparse
import json

from elmo_hf import choices_elmo
from elmo_hf.runtime.parallelism import set_torch_threads

from .arguments import existing_directory, given_options, model_argument, output_directory
from .common import EXIT_OK, libraries_imported_whole, model_files_named, quiet_progress_bars, report_error

# The keywords of build_index, ContextualIndex.load and .query that options set (passed only when given).
BUILD_OPTIONS = ("kind", "layer", "nlist", "nprobe", "pq_subquantizers", "pq_bits", "train_size", "seed", "overwrite")
LOAD_OPTIONS = ("model", "device", "embeddings", "verify")
QUERY_OPTIONS = ("k", "position", "nprobe", "same_word", "static_k")


def add_parsers(commands) -> None:
    neighbours = commands.add_parser(
        "neighbours",
        help="contextual nearest neighbours of a word in a sentence, over an elmo-hf embed output (FAISS)",
        description="Build a FAISS index of every word vector of elmo-hf embed outputs, then find the word occurrences "
        "nearest to a word in a sentence (cosine). Needs elmo-hf[search] (faiss-cpu).",
    )
    actions = neighbours.add_subparsers(dest="action", required=True)

    build = actions.add_parser(
        "build", argument_default=argparse.SUPPRESS, help="index the per-word vectors of embed outputs",
        description="Index every word vector of EMBED_DIR (finished elmo-hf embed outputs with per-word vectors, of one "
        "model and the same options; each is verified first) into INDEX_DIR, which appears only complete.",
    )
    build.add_argument("embed_dirs", nargs="+", metavar="EMBED_DIR", type=existing_directory, help="an elmo-hf embed output (several are indexed together, in order)")
    build.add_argument("--output", required=True, metavar="INDEX_DIR", type=output_directory, help="the index directory to write")
    build.add_argument(
        "--index", dest="kind", choices=choices_elmo.INDEX_KINDS, help="flat: exact, 4 bytes x dimensions a word (default); ivf: clusters, --nprobe of them searched; "
        "ivfpq: clusters and compressed vectors (--pq-subquantizers bytes a word), approximate scores",
    )
    build.add_argument("--layer", type=int, help="for an output of --representation all: the layer to index (0 = token layer)")
    build.add_argument("--nlist", type=int, help="ivf/ivfpq: number of clusters (default about 4 x sqrt(words))")
    build.add_argument("--nprobe", type=int, help="ivf/ivfpq: clusters searched per query by default (default nlist / 16)")
    build.add_argument("--pq-subquantizers", type=int, help="ivfpq: sub-vectors per vector, must divide the dimension (default dimension / 4)")
    build.add_argument("--pq-bits", type=int, help="ivfpq: bits per sub-vector code (default 8)")
    build.add_argument("--train-size", type=int, help="ivf/ivfpq: training vectors, sampled from the whole corpus (default min(words, max(100000, 39 x nlist)))")
    build.add_argument("--seed", type=int, help="seed of the training sample (default 0)")
    build.add_argument("--overwrite", action="store_true", help="replace an earlier neighbours index in INDEX_DIR")
    build.add_argument("--no-progress", action="store_true", help="no progress bar")
    build.set_defaults(run=run_build)

    query = actions.add_parser(
        "query", argument_default=argparse.SUPPRESS, help="the word occurrences nearest to a word in a sentence",
        description="Embed SENTENCE as the corpus was embedded (same model, representation, dtype and word splitter, "
        "read from the index) and print the nearest word occurrences of the corpus: cosine, where, the sentence.",
    )
    query.add_argument("index_dir", metavar="INDEX_DIR", type=existing_directory, help="an index written by elmo-hf neighbours build")
    query.add_argument("--sentence", action="append", required=True, help="the query sentence (repeat for several, each searched for the same word)")
    query.add_argument("--word", help="the query word (its first occurrence in the sentence; matched exactly)")
    query.add_argument("--position", type=int, help="the query word's 0-based position among the sentence's words")
    query.add_argument("-k", type=int, help="number of neighbours (default 10)")
    query.add_argument("--same-word", action="store_true", help="only occurrences of the same word (as the paper's Table 4)")
    query.add_argument("--static", dest="static_k", type=int, metavar="K", help="also the K nearest corpus words in the token layer (no context)")
    query.add_argument("--nprobe", type=int, help="ivf/ivfpq: clusters searched (default: the index's)")
    query.add_argument("--model", type=model_argument, help="the model that embedded the corpus, if its recorded name does not load here (same weights)")
    query.add_argument("--embeddings", nargs="+", metavar="EMBED_DIR", type=existing_directory, help="where the indexed embed outputs are now, if they moved (in order)")
    query.add_argument("--device", help="torch device for the model, e.g. cuda (default: cpu)")
    query.add_argument("--verify", action="store_true", help="also re-hash every shard of the embed outputs")
    query.add_argument("--threads", type=int, help="torch CPU threads for the model (default: torch's)")
    query.add_argument("--json", action="store_true", help="print the results as JSON")
    query.set_defaults(run=run_query)


def run_build(args: argparse.Namespace) -> int:
    progress = not getattr(args, "no_progress", False)
    with libraries_imported_whole():
        if not progress:
            quiet_progress_bars()
        from elmo_hf.search import build_index

    try:
        summary = build_index(args.embed_dirs, args.output, progress=progress, **given_options(args, BUILD_OPTIONS))
    except (ValueError, ImportError, OSError) as error:  # ValueError: every ELMoHFError (IndexInputError, OutputDirectoryError, ...)
        return report_error(error)
    print(summary.describe())
    return EXIT_OK


def run_query(args: argparse.Namespace) -> int:
    with libraries_imported_whole():
        quiet_progress_bars()
        from elmo_hf.search import ContextualIndex

    if not hasattr(args, "word") and not hasattr(args, "position"):
        return report_error(ValueError("name the query word: --word WORD (its first occurrence) or --position N (0-based)"))
    try:
        set_torch_threads(getattr(args, "threads", None), "--threads")
        index = ContextualIndex.load(args.index_dir, **given_options(args, LOAD_OPTIONS))
        with model_files_named(str(getattr(args, "model", None) or index.record["model"]["name"])):  # loaded at the first query
            options = given_options(args, QUERY_OPTIONS)
            results = [index.query(sentence, getattr(args, "word", None), **options) for sentence in args.sentence]
    except (ValueError, ImportError, OSError) as error:
        return report_error(error)
    if getattr(args, "json", False):
        print(json.dumps({"index": str(index.index_dir), "results": [result.to_json() for result in results]}, indent=2, ensure_ascii=False))
        return EXIT_OK
    print(index.describe())
    for result in results:
        print()
        print(result.describe())
    return EXIT_OK


__all__ = ["add_parsers", "run_build", "run_query"]
