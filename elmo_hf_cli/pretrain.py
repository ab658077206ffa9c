"""``elmo-hf pretrain``: pre-train an ELMo biLM with ``transformers.Trainer`` (checkpoints, resume, perplexity report)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import os
import signal
import sys

from elmo_hf import choices_elmo
from elmo_hf.corpus import formats

from .arguments import existing_path, output_directory
from .common import EXIT_INTERRUPTED, EXIT_OK, ModelFilesError, libraries_imported_whole, model_files_named, quiet_progress_bars, report_error

RESUME_HINT = "rerun the same command with --resume (without --overwrite) to continue"

# The command-line options named otherwise than their PretrainingOptions field; every other option given is its
# field of the same name (the rest keep their defaults).
RENAMED_OPTIONS = {"output": "output_dir", "threads": "num_threads"}


def checkpoint_or_directory(value: str) -> str:
    """``--init-from``: a directory, or a TF checkpoint's prefix (``model.ckpt-N``, not itself a file) in an existing
    directory; the library says what is wrong with anything else."""
    parent = os.path.dirname(os.path.expanduser(value))
    if not os.path.exists(os.path.expanduser(value)) and parent and not os.path.isdir(parent):
        raise argparse.ArgumentTypeError(f"no such directory: {value} (nor {parent})")
    return os.path.expanduser(value)


def add_parsers(commands) -> None:
    library = choices_elmo
    parser = commands.add_parser(
        "pretrain",
        argument_default=argparse.SUPPRESS,
        help="pre-train an ELMo biLM on text with transformers.Trainer (checkpoints, --resume, perplexity report)",
        description=f"Pre-train ELMoForPreTraining on CORPUS, each file's format told by its extension: "
        f"{formats.formats_help()}; structured input with a text or words column. Output: the model (AutoModelForPreTraining; "
        "AutoModel loads the biLM), tokenizer, vocab.txt + vocab_counts.tsv, checkpoint-N/ folders and "
        "pretraining_report.json (exact per-direction perplexities vs the unigram baseline).",
    )
    add = parser.add_argument
    add("--corpus", nargs="+", required=True, type=existing_path, metavar="FILE", help="training corpora, any format elmo-hf reads; a directory of "
        "shards (the 1B Word Benchmark's training-monolingual.tokenized.shuffled/) is read file by file in name order")
    add("--output", required=True, metavar="DIR", type=output_directory, help="output directory (must be empty or absent, unless --resume / --overwrite)")
    add("--config", help="architecture: tiny or small (default small), or a JSON file (config.json fields or an original options.json)")
    held_out = parser.add_mutually_exclusive_group()
    held_out.add_argument("--held-out", nargs="+", metavar="FILE", type=existing_path, help="held-out corpora (default: a fraction of the corpus)")
    held_out.add_argument("--held-out-fraction", type=float, help="seeded random fraction of the corpus sentences held out (default 0.05)")
    add("--word-splitter", choices=library.WORD_SPLITTERS, help="how text is split into words: moses (default; with --init-from, the splitter its "
        "tokenizer records), ptb, whitespace, bert; Korean morphemes: kiwi (needs elmo-hf[kiwi]) or mecab (needs "
        "elmo-hf[mecab]). Saved with the tokenizer")
    add("--max-characters-per-token", type=int, metavar="N", help="character slots per word of the new model (default: "
        "the config's, 50): a word keeps N - 2 UTF-8 bytes, a Hangul syllable takes 3")
    columns = parser.add_mutually_exclusive_group()
    columns.add_argument("--text-column", help="column of raw sentences in structured corpora (default: text)")
    columns.add_argument("--words-column", help="column of lists of words in structured corpora (default for .conllu: words)")
    add("--min-count", type=int, help="words seen fewer times in training are <UNK> (default 2)")
    add("--max-vocab-size", type=int, help="largest softmax vocabulary, <S> </S> <UNK> included")
    add_training_options(parser, library)
    existing = parser.add_mutually_exclusive_group()
    existing.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --output (same options)")
    existing.add_argument("--overwrite", action="store_true", help="delete an earlier pre-training output in --output and start over")
    add("--init-from", metavar="DIR_OR_CHECKPOINT", type=checkpoint_or_directory, help="continue pre-training this model on --corpus (bilm-tf's "
        "restart.py): an ELMoForPreTraining directory with its vocab.txt (elmo-hf convert --checkpoint, an earlier run) "
        "or a bilm-tf TensorFlow checkpoint (with --init-vocab); its architecture and vocabulary are kept")
    add("--init-vocab", metavar="FILE", type=existing_path, help="the vocabulary file of a TF checkpoint given to --init-from")
    add("--add-words", action="store_true", help="with --init-from: append the corpus words (--min-count, "
        "--max-vocab-size) missing from the model's vocabulary; their softmax rows start as <UNK>'s")
    add("--export-hdf5", action="store_true", help="also write DIR/hdf5/ (options.json + weights.hdf5 + vocab.txt, the biLM in "
        "the original layout; needs elmo-hf[convert])")
    add("--no-progress", action="store_true", help="no progress bar (logs are printed instead)")
    parser.set_defaults(run=run)


def add_training_options(parser, library) -> None:
    """The options of the training itself: regime, batches, steps, optimizer, checkpoints, evaluation, threads."""
    add = parser.add_argument
    add("--regime", choices=library.REGIMES, help="windowed: bilm-tf's windows with the LSTM state carried between batches (default); sentence: "
        "every sentence from the initial state")
    add("--window-size", type=int, help="positions per window in the windowed regime (default 20, bilm-tf's)")
    add("--batch-size", type=int, help="rows (windowed) or sentences per batch (default 32); under torchrun the global batch, split "
        "evenly over the processes")
    add("--max-steps", type=int, help="optimizer steps (default: --epochs)")
    add("--epochs", type=float, help="epochs when --max-steps is not given (default 1)")
    add("--optimizer", choices=tuple(library.OPTIMIZERS), help="adam (AdamW without weight decay, default) or adagrad (bilm-tf's)")
    add("--learning-rate", type=float, help="default: adam 5e-3, adagrad 0.2")
    add("--lr-scheduler", choices=library.LR_SCHEDULERS, help="after warm-up: linear decay to 0 (default), constant, cosine")
    add("--warmup-ratio", type=float, help="linear warm-up over this fraction of the steps (default 0.02)")
    add("--max-grad-norm", type=float, help="global gradient-norm clipping (default 10, bilm-tf's; 0: none)")
    add("--softmax-samples", type=int, help="sampled softmax with this many negatives in training (default: the config's; 0: full softmax)")
    add("--dropout", type=float, help="lm_dropout (default: the config's; small 0.1, tiny 0)")
    add("--save-steps", type=int, help="checkpoint every N steps (default 500)")
    add("--save-total-limit", type=int, help="checkpoints kept (default 2)")
    add("--eval-steps", type=int, help="held-out perplexity every N steps and at step 0 (default 500; 0: only at the end)")
    add("--logging-steps", type=int, help="log the training loss every N steps (default 50)")
    add("--train-eval-sentences", type=int, help="fixed sample of training sentences for the train perplexity (default 2000)")
    add("--seed", type=int, help="initialisation, held-out split, sentence order (default 0)")
    add("--threads", type=int, help="torch CPU threads (default: torch's); on a busy machine 1 can be much faster")
    add("--max-time-minutes", type=float, help="stop after this much training time (checkpoint, final evaluation and save)")


def run(args: argparse.Namespace) -> int:
    die_with_the_torchrun_agent()
    progress = not getattr(args, "no_progress", False)
    with libraries_imported_whole():
        from accelerate import PartialState

        from elmo_hf import ELMoHFError
        from elmo_hf.pretraining.run import PretrainingInterrupted, PretrainingOptions, pretrain

        if not progress:
            quiet_progress_bars()
    names = {field.name for field in dataclasses.fields(PretrainingOptions)}
    given = {RENAMED_OPTIONS.get(name, name): value for name, value in vars(args).items()}
    options = {name: value for name, value in given.items() if name in names}
    callers_group = joined_a_process_group()  # a program that runs this command in a group of its own keeps it
    try:
        with model_files_named(args.init_from) if getattr(args, "init_from", None) else contextlib.nullcontext():
            report = pretrain(PretrainingOptions(**options, progress=progress))
        is_main_process = PartialState().is_main_process
    except PretrainingInterrupted as interruption:
        if interruption.checkpoint is None:
            where = "no checkpoint was saved yet, so nothing was kept" if not interruption.output_dir.exists() else "no checkpoint was saved yet"
        else:
            where = f"the latest checkpoint is {interruption.checkpoint}; {RESUME_HINT}"
        print(f"\ninterrupted: {where}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print(f"\ninterrupted: checkpoints already saved in {args.output} are kept; {RESUME_HINT}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ELMoHFError, ModelFilesError, OSError) as error:  # PretrainingError, OutputDirectoryError, ...
        return report_error(error)
    finally:
        if not callers_group:
            leave_the_process_group()
    if is_main_process:  # under torchrun, every process returns the report: print it once
        print(report.describe())
    return EXIT_OK


def die_with_the_torchrun_agent() -> None:
    """Under ``torchrun`` on Linux: have the kernel kill this process (SIGKILL) when the agent that started it dies,
    as torchrun's own session would not (docs/design/pretraining-distributed.md, "Workers die with their agent")."""
    if "TORCHELASTIC_RUN_ID" not in os.environ or not sys.platform.startswith("linux"):
        return
    import ctypes

    set_parent_death_signal = 1  # PR_SET_PDEATHSIG, <linux/prctl.h>
    try:
        ctypes.CDLL(None, use_errno=True).prctl(set_parent_death_signal, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the workers outlive a killed agent, as torchrun leaves them
        pass


def joined_a_process_group() -> bool:
    """Whether this process has joined a torch.distributed process group."""
    import torch.distributed

    return torch.distributed.is_available() and torch.distributed.is_initialized()


def leave_the_process_group() -> None:
    """Destroy the torch.distributed process group the run joined (under torchrun: the Trainer's), if any, and free
    it (``gc.collect()``: the Trainer's wrapper holds it in reference cycles), so that its gloo threads are joined
    while the interpreter still runs (docs/design/pretraining-distributed.md). ``run`` calls it only where the process
    was in no group before the run: a group that a program running the command made itself is that program's."""
    import torch.distributed

    if joined_a_process_group():
        torch.distributed.destroy_process_group()
        gc.collect()


__all__ = ["add_parsers", "die_with_the_torchrun_agent", "joined_a_process_group", "leave_the_process_group", "run"]
