"""``elmo-hf convert`` (original ELMo files, bilm-tf checkpoints, TF-Hub modules, ... -> Hugging Face directory) and
``elmo-hf export`` (and back).

Both need the ``convert`` extra (h5py): ``pip install 'elmo-hf[convert]'``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from .arguments import existing_directory, existing_path, output_directory
from .common import EXIT_FAILED_CHECK, EXIT_OK, ModelFilesError, libraries_imported_whole, model_files_named, report_error

CONVERT_EXTRA_HINT = "the converter needs h5py: pip install 'elmo-hf[convert]'"


def add_parsers(commands) -> None:
    convert = commands.add_parser(
        "convert",
        help="convert an original ELMo (options.json + weights.hdf5, a bilm-tf checkpoint, a TF-Hub module, ...) to a Hugging Face directory",
        description="Convert an original ELMo (bilm-tf / AllenNLP options.json + weights.hdf5) to a Hugging Face "
        "directory (AutoModel, AutoTokenizer, remote code, model card). Nothing is written unless everything, "
        "--verify included, succeeds.",
    )
    convert.add_argument("--options", type=existing_path, help="the original options.json (with --checkpoint: default the one beside it)")
    convert.add_argument("--weights", type=existing_path, help="the original weights.hdf5")
    convert.add_argument(
        "--checkpoint", type=Path, metavar="PATH",
        help="instead of --weights: a bilm-tf TensorFlow checkpoint (its save directory, model.ckpt-N, or one of its "
        "files), converted with its LM softmax to an ELMoForPreTraining directory; needs --vocab",
    )
    convert.add_argument("--vocab", type=existing_path, metavar="FILE", help="with --checkpoint: the vocabulary file it was trained with")
    _add_other_sources(convert)
    _add_output_options(convert)
    convert.set_defaults(run=run_convert)
    _add_export_parser(commands)


def _add_other_sources(convert) -> None:
    """The formats that replace --options and --weights: an NLPL archive, ELMoForManyLangs, a TF-Hub module."""
    convert.add_argument(
        "--zip", type=existing_path, metavar="ZIP",
        help="instead of --options and --weights: an NLPL vector repository archive (options.json + model.hdf5 "
        "[+ vocab.txt]), converted without unzipping; its vocab.txt is kept and pre-fills elmo-hf embed's token cache",
    )
    convert.add_argument(
        "--elmoformanylangs", type=existing_directory, metavar="DIR",
        help="instead of --options and --weights: an ELMoForManyLangs (HIT-SCIR) model directory (config.json, its "
        "network configuration, char.dic, word.dic, token_embedder.pkl, encoder.pkl)",
    )
    convert.add_argument(
        "--tfhub", type=existing_path, metavar="MODULE",
        help="instead of --options and --weights: an ELMo TF-Hub module in the TF1 Hub format (google/elmo 2-3, "
        "DeepPavlov's): its directory, the .tar.gz as downloaded, or a download folder holding one version folder; "
        "--options overrides what the shapes cannot say (clips, activation, skip connections)",
    )
    convert.add_argument(
        "--allow-pickle", action="store_true",
        help="with --elmoformanylangs: unpickle .pkl files that hold more than tensors (runs the code they name: only "
        "for files you trust)",
    )


def _add_output_options(convert) -> None:
    """Where the conversion goes, its check against reference outputs and its upload."""
    convert.add_argument("--output", required=True, type=output_directory, help="directory to write (must not exist)")
    convert.add_argument("--overwrite", action="store_true", help="replace an earlier conversion in --output")
    convert.add_argument(
        "--verify",
        type=existing_directory,
        metavar="DIR",
        help="reference outputs of the original code (sentences.json + lm_embeddings_K.hdf5, optionally vocab_test.txt "
        "+ elmo_token_embeddings.hdf5, as in AllenNLP's test fixture); fail unless the converted model matches",
    )
    convert.add_argument("--tolerance", type=float, help="max abs difference for --verify (default 5e-6)")
    convert.add_argument("--allow-non-finite", action="store_true", help="convert weights that hold NaN or infinite values")
    convert.add_argument("--push-to-hub", metavar="REPO_ID", help="upload the converted directory to this Hub repo (token: HF_TOKEN or `hf auth login`)")
    convert.add_argument("--private", action="store_true", help="create the Hub repo as private")
    convert.add_argument("--revision", help="push to this branch (created if missing) instead of main")


def _add_export_parser(commands) -> None:
    export = commands.add_parser(
        "export",
        help="export a Hugging Face ELMo directory back to the original options.json + weights.hdf5",
        description="Write options.json + weights.hdf5 (and vocab.txt, when the model directory has one) in the "
        "original bilm-tf / AllenNLP layout. HDF5 -> HF -> HDF5 gives back every dataset bit for bit (names, shapes, "
        "dtypes, bytes); the file's own bytes differ (HDF5 headers).",
    )
    export.add_argument("--model", required=True, type=existing_directory, help="an ELMo Hugging Face directory (config.json + weights)")
    export.add_argument("--output", required=True, type=output_directory, help="directory to write options.json and weights.hdf5 into")
    export.add_argument("--overwrite", action="store_true", help="replace an earlier export in --output")
    export.set_defaults(run=run_export)


@dataclass(frozen=True)
class Source:
    """One input format of ``elmo-hf convert``: the argument that selects it, the converter modules it imports (each
    named when missing), the arguments it refuses or needs (the refusal's ``{given}`` lists those given), and how it
    converts."""

    selected_by: str | None  # None: the original options.json + weights.hdf5
    modules: tuple[str, ...]
    refused: tuple[str, ...]
    required: tuple[str, ...]
    refusal: str
    convert: Callable[[argparse.Namespace, ModuleType], Any]


def _hub(args: argparse.Namespace) -> dict:
    return {"push_to_hub": args.push_to_hub, "private": args.private, "revision": args.revision}


SOURCES = (
    Source(
        "elmoformanylangs", ("convert_elmoformanylangs",),
        ("options", "weights", "checkpoint", "vocab", "zip", "tfhub", "verify", "tolerance"), (),
        "--elmoformanylangs takes the whole model directory: give no {given} with it",
        lambda args, module: module.convert_elmoformanylangs(
            args.elmoformanylangs, args.output, overwrite=args.overwrite, allow_pickle=args.allow_pickle,
            allow_non_finite=args.allow_non_finite, **_hub(args),
        ),
    ),
    Source(
        "tfhub", ("convert_tfhub_module",), ("weights", "checkpoint", "vocab", "zip", "verify", "tolerance"), (),
        "--tfhub takes the module (and optionally --options): give no {given} with it",
        lambda args, module: module.convert_tfhub_module(
            args.tfhub, args.output, args.options, overwrite=args.overwrite, allow_non_finite=args.allow_non_finite, **_hub(args)
        ),
    ),
    Source(
        "zip", ("convert_allennlp_to_hf", "nlpl_zip"), ("options", "weights", "checkpoint", "vocab"), (),
        "--zip holds the options, weights and vocabulary: give no --options, --weights, --checkpoint or --vocab with it",
        lambda args, module: module.convert_nlpl_zip(
            args.zip, args.output, overwrite=args.overwrite, verify_dir=args.verify, tolerance=args.tolerance,
            allow_non_finite=args.allow_non_finite, **_hub(args),
        ),
    ),
    Source(
        "checkpoint", ("convert_tf_checkpoint",), ("weights", "verify", "tolerance"), ("vocab",),
        "--checkpoint takes --vocab (and optionally --options), not --weights, --verify or --tolerance",
        lambda args, module: module.convert_tf_checkpoint(
            args.checkpoint, args.vocab, args.output, args.options, args.overwrite, args.allow_non_finite, **_hub(args)
        ),
    ),
    Source(
        None, ("convert_allennlp_to_hf",), ("vocab",), ("options", "weights"),
        "convert takes --options and --weights (or --checkpoint with --vocab)",
        lambda args, module: module.convert_allennlp_to_hf(
            args.options, args.weights, args.output, args.overwrite, args.verify, args.tolerance,
            allow_non_finite=args.allow_non_finite, **_hub(args),
        ),
    ),
)


def run_convert(args: argparse.Namespace) -> int:
    """The source the arguments select, checked, converted; its report printed."""
    if (args.private or args.revision) and not args.push_to_hub:
        return report_error(ValueError("--private and --revision only apply with --push-to-hub"))
    source = next(source for source in SOURCES if source.selected_by is None or getattr(args, source.selected_by) is not None)
    if args.allow_pickle and source.selected_by != "elmoformanylangs":
        return report_error(ValueError("--allow-pickle only applies with --elmoformanylangs"))
    given = [f"--{name}" for name in source.refused if getattr(args, name) is not None]
    if given or any(getattr(args, name) is None for name in source.required):
        return report_error(ValueError(source.refusal.format(given=", ".join(given))))
    try:
        modules = [converter(name) for name in source.modules]
    except ImportError as error:
        return report_error(error)
    return run_conversion(lambda: source.convert(args, modules[-1]))


def converter(name: str) -> ModuleType:
    """The converter module ``elmo_hf.conversion.<name>``, its libraries imported whole (``libraries_imported_whole``);
    an ``ImportError`` that names the ``convert`` extra when one of them is missing (h5py)."""
    try:
        with libraries_imported_whole():
            return importlib.import_module(f"elmo_hf.conversion.{name}")
    except ImportError as error:
        raise ImportError(f"{CONVERT_EXTRA_HINT} ({error})") from error


def run_conversion(convert: Callable[[], Any]) -> int:
    """Run a converter (``convert()``, returning its report) as a command. Every converter raises the same errors:
    a ``ConversionError`` (nothing written), a ``HubPushError`` (written, not pushed) or the output-directory
    policy's error, each a message and exit 1; a failed ``--verify`` (``VerificationError``) exits 2. Then the report
    and where it was pushed. Call it once the converter's module imported (the ``convert`` extra is there)."""
    from elmo_hf import ELMoHFError
    from elmo_hf.conversion import VerificationError

    try:
        report = convert()
    except VerificationError as error:
        report_error(error)
        return EXIT_FAILED_CHECK
    except ELMoHFError as error:  # ConversionError, HubPushError, OutputDirectoryError
        return report_error(error)
    print("\n".join(report.describe()))
    if report.pushed_to:
        print(f"  pushed: {report.pushed_to}")
    return EXIT_OK


def run_export(args: argparse.Namespace) -> int:
    try:
        export = converter("convert_hf_to_allennlp")
    except ImportError as error:
        return report_error(error)
    from elmo_hf import ELMoHFError
    from elmo_hf.conversion import ALLENNLP_OPTIONS_FILE_NAME

    try:
        with model_files_named(str(args.model)):
            not_exported = export.convert_hf_to_allennlp(args.model, args.output, args.overwrite)
    except (ELMoHFError, ModelFilesError, OSError) as error:  # ConversionError, OutputDirectoryError; a model that cannot be read
        return report_error(error)
    print(f"Wrote {Path(args.output, ALLENNLP_OPTIONS_FILE_NAME)} and {Path(args.output, export.WEIGHTS_FILE_NAME)}")
    for name in not_exported:
        print(f"  not exported (the original format has no place for it): {name}", file=sys.stdout)
    return EXIT_OK


__all__ = ["SOURCES", "add_parsers", "run_convert", "run_export"]
