"""``elmo-hf probe``: what each layer of a model holds (linear probes per layer and over a learned mix), or the
learned mixes of a trained head.

    elmo-hf probe MODEL --corpus train.conllu [--test test.conllu] [--column upos] [--output DIR]
    elmo-hf probe HEAD_MODEL --mixes --output DIR

The library (``elmo_hf.probing``) checks the values and holds the defaults; this module only passes on what was given.
"""

from __future__ import annotations

import argparse

from elmo_hf.runtime.parallelism import set_torch_threads

from .arguments import existing_path, given_options, model_argument, output_directory
from .common import EXIT_OK, libraries_imported_whole, model_files_named, quiet_progress_bars, report_error

# The fields of ProbeOptions and the keywords of run_probe that options set (passed only when given).
PROBE_OPTIONS = ("seed", "epochs", "batch_size", "learning_rate")
RUN_OPTIONS = ("test", "test_fraction", "tag_column", "words_column", "input_format", "limit", "output", "overwrite")


def add_parsers(commands) -> None:
    probe = commands.add_parser(
        "probe", argument_default=argparse.SUPPRESS,
        help="what each layer holds: a linear probe per layer and over a learned mix, on a token-labelled corpus",
        description="Train a linear classifier on each representation of MODEL (the token layer, each biLSTM layer) and "
        "one over a learned scalar mix of them, on the words and tags of --corpus, and report their accuracy on --test "
        "(default: a seeded held-out fraction of --corpus), the mix's weights and two baselines; with --output, also a "
        "JSON report and a picture (PNG and SVG). With --mixes, draw a trained head's learned mixes instead.",
    )
    probe.add_argument("model", type=model_argument, help="an ELMo Hugging Face directory or Hub repo id")
    probe.add_argument("--corpus", type=existing_path, help="training words and tags: a .conllu treebank, or rows of words and tags (JSON lines, CSV, TSV, Parquet)")
    probe.add_argument("--test", type=existing_path, help="test words and tags, in the same form (default: --test-fraction of --corpus)")
    probe.add_argument("--test-fraction", type=float, help="the seeded fraction of --corpus held out for testing without --test (default 0.2)")
    probe.add_argument("--column", dest="tag_column", help="the tags: a CoNLL-U column (upos, xpos, deprel, lemma, feats, ...; default upos) or a column of rows")
    probe.add_argument("--words-column", help="the column of words in rows (default: words)")
    probe.add_argument("--input-format", help="the corpora's format when their extension does not tell")
    probe.add_argument("--limit", type=int, help="read only the first N sentences of each corpus")
    probe.add_argument("--seed", type=int, help="seed of the held-out split, the probes' initialisation and batches (default 0)")
    probe.add_argument("--epochs", type=int, help="passes over the training words (default 10)")
    probe.add_argument("--batch-size", type=int, help="words per probe training step (default 256)")
    probe.add_argument("--learning-rate", type=float, help="Adam's learning rate (default 0.003)")
    probe.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    probe.add_argument("--mixes", action="store_true", help="draw MODEL's learned mixes (a trained task head) into --output; no probes")
    probe.add_argument("--output", type=output_directory, help="write the report and its pictures into this directory (new, or with --overwrite)")
    probe.add_argument("--overwrite", action="store_true", help="replace an earlier probe output in --output")
    probe.add_argument("--no-progress", action="store_true", help="no progress bar")
    probe.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    given = vars(args)
    if given.get("mixes") and ("corpus" in given or "output" not in given):
        return report_error(ValueError("--mixes draws a trained head's mixes: give --output DIR and no --corpus"))
    if not given.get("mixes") and "corpus" not in given:
        return report_error(ValueError("give --corpus FILE (words and tags to probe on), or --mixes --output DIR for a trained head"))
    progress = not given.get("no_progress", False)
    with libraries_imported_whole():
        if not progress:
            quiet_progress_bars()
        from elmo_hf.probing import ProbeOptions
        from elmo_hf.probing.run import plot_head_mixes, run_probe
    try:
        set_torch_threads(given.get("threads"), "--threads")
        with model_files_named(args.model):
            if given.get("mixes"):
                mixes = plot_head_mixes(args.model, args.output, overwrite=given.get("overwrite", False))
                for position, mix in mixes.items():
                    weights = ", ".join(f"{weight:.3f}" for weight in mix["layer_weights"])
                    print(f"{position} mix: softmax(w) = {weights}; gamma = {mix['gamma']:.3f}")
                print(f"wrote {args.output}")
                return EXIT_OK
            options = ProbeOptions(**given_options(args, PROBE_OPTIONS))
            report = run_probe(args.model, args.corpus, options=options, progress=progress, **given_options(args, RUN_OPTIONS))
    except (ValueError, ImportError, OSError) as error:  # ValueError: every ELMoHFError (ProbeInputError, OutputDirectoryError, ...)
        return report_error(error)
    print(report.table())
    if "output" in given:
        print(f"wrote {args.output}")
    return EXIT_OK


__all__ = ["add_parsers", "run"]
