"""The record of an `elmo-hf embed` output, its resume and its verification, without torch: the manifest
(``manifest.json``), the kind of output (``EMBEDDINGS_OUTPUT``), the check of a listed shard (``shard_problem``), the
comparison and clean-up a resumed run makes (``continue_from``), ``verify_embedding_output`` (``--verify``), and what
a run can refuse or answer before its model is loaded (``check_before_loading``).

``driver.py`` runs the output's writing, ``engine.py`` writes the shards. The command line calls
``check_before_loading`` before it imports torch (the ``__init__`` of ``elmo_hf`` and of ``elmo_hf.embedding`` are
lazy), so this module imports nothing heavier than pyarrow, and that only where a shard is checked.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..choices_elmo import OUTPUT_FORMATS
from ..corpus.readers import DEFAULT_TEXT_COLUMN, CorpusSource, sentence_column
from ..storage.files import sha256_of_file, write_atomically
from ..storage.output_directory import (
    MARKER_NAME, OutputDirectoryError, OutputKind, check_output_directory, read_marker, remove_unlisted,
)
from ..validation_elmo import check_int
from .shard_names import EMBED_SHARDS

logger = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "elmo-hf-embeddings"
MANIFEST_VERSION = 2
SAVED_DATASET_DIR = "dataset"
SAVED_DATASET_CACHE_DIR = ".cache"
# Input rows a shard holds at most.
DEFAULT_SHARD_SIZE = 1000
# Input characters a shard holds at most (besides its ``shard_size`` rows), so that long rows still make shards the
# workers share and memory holds, while corpora of sentences keep their 1,000-row shards
# (docs/results/embed-throughput.md, "Long rows").
DEFAULT_SHARD_CHARACTERS = 200_000
DEFAULT_OUTPUT_FORMAT = OUTPUT_FORMATS[0]  # Parquet shards only
# Options added to the manifest after its first version, with the value that means what a run before them did:
# shards cut by rows only (--shard-characters 0), batches closed by the word budget alone (--min-batch-size 0).
OPTIONS_BEFORE_THEY_EXISTED = {"shard_characters": 0, "min_batch_size": 0}


def _files_the_manifest_lists(output_dir: Path) -> dict[str, int]:
    """The manifest's own record of what a run wrote: each finished shard with its size, and the manifest itself
    (rewritten atomically after each shard, so a killed run's shards are proven its own)."""
    try:
        data = json.loads((output_dir / MANIFEST_NAME).read_text(encoding="utf-8"))
        listed = {shard["file"]: shard["bytes"] for shard in data["shards"] if "/" not in shard["file"]}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
        return {}
    if data.get("format") != MANIFEST_FORMAT:
        return {}
    return {**listed, MANIFEST_NAME: (output_dir / MANIFEST_NAME).stat().st_size}


EMBEDDINGS_OUTPUT = OutputKind(
    name="embeddings",
    description="an elmo-hf embedding output",
    entries=(EMBED_SHARDS.pattern, MANIFEST_NAME, SAVED_DATASET_DIR, SAVED_DATASET_CACHE_DIR),
    own_record=_files_the_manifest_lists,
)


def plural(count: int, noun: str) -> str:
    """``1 sentence``, ``2 sentences``, with thousands separators."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


@dataclass
class EmbeddingRunSummary:
    """What a run did. Counts cover the whole output (resumed shards included); ``seconds`` and the rates cover
    this run only."""

    output_dir: Path
    sentences: int
    words: int
    skipped_rows: int
    shards: int
    seconds: float
    words_this_run: int
    resumed_from_row: int = 0
    already_complete: bool = False
    redone_shards: int = 0
    # Busy seconds of each stage this run (read, model, write: engine.ShardTask's): they overlap in the pipeline;
    # with workers, they are summed over them.
    stage_seconds: dict[str, float] = field(default_factory=dict)
    # Words longer than the model's character slots hold (ELMoTokenizer.truncated_word_count), repeats counted: the
    # model saw only their beginning. Shards listed by a manifest written before this count existed count 0.
    truncated_words: int = 0
    max_characters_per_token: int | None = None

    def describe(self) -> str:
        resumed = f", resumed at input row {self.resumed_from_row:,}" if self.resumed_from_row else ""
        redone = f", {plural(self.redone_shards, 'damaged shard')} redone" if self.redone_shards else ""
        skipped = f", {plural(self.skipped_rows, 'invalid row')} skipped" if self.skipped_rows else ""
        if self.truncated_words:
            slots = f" {self.max_characters_per_token}" if self.max_characters_per_token else ""
            skipped += f", {plural(self.truncated_words, 'word')} cut to the model's{slots} character slots"
        rate = self.words_this_run / self.seconds if self.seconds > 0 else 0.0
        if self.already_complete:
            return (
                f"{self.output_dir} is already complete: {plural(self.sentences, 'sentence')}, "
                f"{plural(self.words, 'word')}{skipped}{redone}"
            )
        return (
            f"embedded {plural(self.sentences, 'sentence')} ({plural(self.words, 'word')}{skipped}) into "
            f"{plural(self.shards, 'shard')} in {self.output_dir}; this run: {plural(self.words_this_run, 'word')} in "
            f"{self.seconds:.1f} s = {rate:,.0f} words/s{resumed}{redone}"
        )


@dataclass
class Manifest:
    """The record of a run, rewritten atomically after every shard. ``request``: what the run asked for
    (``embedding_request``; None when it was not recorded: an embedder not made by ``from_pretrained``, or a manifest
    written before it existed)."""

    input: dict[str, Any]
    model: dict[str, Any]
    options: dict[str, Any]
    shards: list[dict[str, Any]] = field(default_factory=list)
    complete: bool = False
    request: dict[str, Any] | None = None

    @property
    def rows_done(self) -> int:
        return sum(shard["input_rows"] for shard in self.shards)

    def totals(self) -> dict[str, int]:
        return {
            "sentences": sum(shard["rows"] for shard in self.shards),
            "words": sum(shard["words"] for shard in self.shards),
            "skipped_rows": sum(shard["skipped_rows"] for shard in self.shards),
            "truncated_words": sum(shard.get("truncated_words", 0) for shard in self.shards),  # absent: an older run
        }

    def entries(self) -> set[str]:
        """The names the output directory may hold by this manifest: its shards, itself, the marker, and once complete
        the saved dataset."""
        return {shard["file"] for shard in self.shards} | {MANIFEST_NAME, MARKER_NAME} | ({SAVED_DATASET_DIR} if self.complete else set())

    def to_json(self) -> dict[str, Any]:
        request = {} if self.request is None else {"request": self.request}
        return {
            "format": MANIFEST_FORMAT,
            "version": MANIFEST_VERSION,
            "input": self.input,
            "model": self.model,
            "options": self.options,
            **request,
            "complete": self.complete,
            "totals": self.totals(),
            "shards": self.shards,
        }

    @classmethod
    def read(cls, path: Path) -> "Manifest":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise OutputDirectoryError(f"cannot read the manifest {path}: {error}") from error
        if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT or data.get("version") != MANIFEST_VERSION:
            found = (data.get("format"), data.get("version")) if isinstance(data, dict) else type(data).__name__
            raise OutputDirectoryError(f"{path} is not an elmo-hf embedding manifest (version {MANIFEST_VERSION}): {found}")
        try:
            return cls(data["input"], data["model"], data["options"], data["shards"], data["complete"], data.get("request"))
        except KeyError as error:
            raise OutputDirectoryError(f"{path} lacks the manifest field {error}") from None

    @classmethod
    def in_directory(cls, output_dir: Path) -> "Manifest | None":
        """The manifest of ``output_dir``, None if it has none yet."""
        return cls.read(output_dir / MANIFEST_NAME) if (output_dir / MANIFEST_NAME).is_file() else None

    def write(self, path: Path) -> None:
        content = (json.dumps(self.to_json(), indent=2) + "\n").encode("utf-8")
        write_atomically(path, lambda temporary: temporary.write_bytes(content))


def has_finished_shards(output_dir: str | Path) -> bool:
    """Worth keeping after a failure: at least one finished shard is listed."""
    try:
        manifest = Manifest.in_directory(Path(output_dir))
    except OutputDirectoryError:
        return True  # not ours to judge: keep it
    return manifest is not None and bool(manifest.shards)


def describe_run(output_dir: Path) -> str:
    try:
        manifest = Manifest.in_directory(output_dir)
    except OutputDirectoryError:
        return "an embedding run with an unreadable manifest"
    if manifest is None:
        return "an embedding run interrupted before its first shard"
    state = "complete" if manifest.complete else f"interrupted after {manifest.rows_done:,} input rows"
    return f"an embedding run ({state})"


def shard_problem(output_dir: Path, entry: dict[str, Any], check_sha256: bool = True) -> str | None:
    """Why a listed shard cannot be trusted (missing, another size, another sha256, unreadable rows), or None.
    ``check_sha256=False`` skips hashing (for a caller that verified the shards already)."""
    import pyarrow.parquet as pq

    path = output_dir / entry["file"]
    if not path.is_file():
        return f"{entry['file']} is missing"
    size = path.stat().st_size
    if size != entry["bytes"]:
        return f"{entry['file']} has {size:,} bytes, the manifest says {entry['bytes']:,}"
    if check_sha256 and sha256_of_file(path) != entry["sha256"]:
        return f"{entry['file']} has another sha256 than the manifest records"
    try:
        rows = pq.ParquetFile(path).metadata.num_rows
    except Exception as error:  # pyarrow raises several types for damaged files
        return f"{entry['file']} is not a readable Parquet file ({error})"
    if rows != entry["rows"]:
        return f"{entry['file']} has {rows} rows, the manifest says {entry['rows']}"
    return None


def model_fingerprint(model) -> str:
    """sha256 over a torch model's parameters and buffers (names, dtypes, shapes, bytes): a resumed run must use the
    same weights."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


# ----------------------------------------------------------------------------------------------------------------------
# Resume and verification
# ----------------------------------------------------------------------------------------------------------------------


def continue_from(output_dir: Path, fresh: Manifest) -> Manifest:
    """The manifest of an existing run to resume: it must have the same input, weights and options; files it does not
    list are removed where a record proves them the run's (a shard renamed after the last manifest update, temporary
    files, a saved dataset begun), else the resume is refused naming them (``remove_unlisted``)."""
    previous = Manifest.in_directory(output_dir)
    if previous is None:
        previous = fresh  # killed before the first shard was listed
    # Options a manifest written before they existed lacks: it ran as their value says, and the continued manifest
    # then says so.
    previous.options = with_options_of_older_runs(previous.options)
    # The model's name is informational (a path may be spelled differently); its weights must be the same. Options
    # come before the weights: another compute_dtype changes the weights' fingerprint too, and is the better name.
    check_same_run(output_dir, "input", previous.input, fresh.input)
    check_same_run(output_dir, "options", previous.options, fresh.options)
    check_same_run(output_dir, "model weights", {"sha256": previous.model["sha256"]}, {"sha256": fresh.model["sha256"]})
    listed = previous.entries()  # a symbolic link was refused when the output was opened (it proves nothing)
    # By record only: a shard renamed just before a kill (the in-flight record), temporary files named with the
    # output's recorded token, files an earlier run recorded; anything else stops the resume, named, and nothing goes.
    for name in remove_unlisted(output_dir, EMBEDDINGS_OUTPUT, listed):
        logger.info("resume: deleted %s, written by an earlier run of this output and not listed in its manifest", name)
    return previous


def verify_embedding_output(output_dir: str | Path) -> list[str]:
    """Every problem with a finished ``elmo-hf embed`` output: the marker, the manifest, each shard (size, sha256,
    rows, NaN or infinite values), the rows' continuity and files the manifest does not list. An empty list means
    the output is complete and intact."""
    from .parquet import non_finite_values

    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return [f"{output_dir} is not a directory"]
    marker = read_marker(output_dir)
    if marker is None or marker.get("kind") != EMBEDDINGS_OUTPUT.name:
        return [f"{output_dir} is not {EMBEDDINGS_OUTPUT.description} (no valid {MARKER_NAME})"]
    try:
        manifest = Manifest.in_directory(output_dir)
    except OutputDirectoryError as error:
        return [str(error)]
    if manifest is None:
        return [f"{output_dir} has no {MANIFEST_NAME}: the run never finished a shard"]
    problems = [] if manifest.complete else [f"the run is not complete ({manifest.rows_done:,} input rows done): resume it"]
    shard_problems = {entry["file"]: shard_problem(output_dir, entry) for entry in manifest.shards}
    problems += [problem for problem in shard_problems.values() if problem]
    problems += [
        f"{name} holds {count:,} NaN or infinite value(s), the first in its row {row} (stored by a run with "
        "--allow-non-finite, or damaged)"
        for name, problem in shard_problems.items()
        if problem is None and (found := non_finite_values(output_dir / name)) is not None
        for count, row in [found]
    ]
    listed = {entry["file"] for entry in manifest.shards}
    problems += [f"{path.name} is not listed in the manifest" for path in EMBED_SHARDS.in_directory(output_dir) if path.name not in listed]
    problems += [f"{name} is not written by elmo-hf embed" for name in EMBEDDINGS_OUTPUT.foreign_entries(output_dir)]
    return problems + _gaps_between_shards(manifest)


def _gaps_between_shards(manifest: Manifest) -> list[str]:
    """Each listed shard that does not start where the one before it ended."""
    problems, expected_first_row = [], 0
    for entry in manifest.shards:
        if entry["first_row"] != expected_first_row:
            problems.append(f"{entry['file']} starts at input row {entry['first_row']}, expected {expected_first_row}")
        expected_first_row = entry["first_row"] + entry["input_rows"]
    return problems


# ----------------------------------------------------------------------------------------------------------------------
# A run's options and request, and the comparison a resumed run makes
# ----------------------------------------------------------------------------------------------------------------------


def checked_run_options(shard_size: int, shard_characters: int, output_format: str) -> dict[str, Any]:
    """``embed_corpus``'s options that change its output, checked, as the manifest records them."""
    shard_size = check_int("shard_size", shard_size, 1)
    shard_characters = check_int("shard_characters", shard_characters, 0, hint="0: no limit")
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"output_format must be one of {list(OUTPUT_FORMATS)}, got {output_format!r}")
    return {"shard_size": shard_size, "shard_characters": shard_characters, "output_format": output_format}


def model_files(name_or_path: str | Path) -> dict[str, list[int]] | None:
    """``{name: [bytes, mtime_ns]}`` of each file directly in a local model directory (what ``from_pretrained``
    reads: config, weights, tokenizer files); None for a name that is not a directory here (a Hub repo id)."""
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        return None
    stats = {entry.name: entry.stat() for entry in sorted(path.iterdir()) if entry.is_file()}
    return {name: [stat.st_size, stat.st_mtime_ns] for name, stat in stats.items()}


def embedding_request(
    model_name: str | Path, revision: str | None = None, device: Any = None, options: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """What a run asks for: the arguments of ``ELMoEmbedder.from_pretrained`` as given (the model, its revision, the
    device and the options, none of the defaults they stand for), and the model's files (``model_files``). The
    manifest records it, so that a resumed run asking the same of unchanged model files is known to use the same
    weights and options without loading the model (``check_before_loading``). None where it is no JSON value (an
    option given as a NumPy int): then nothing is recorded."""
    request = {
        "model": str(model_name), "revision": revision, "device": None if device is None else str(device),
        "options": dict(options or {}), "model_files": model_files(model_name),
    }
    try:
        return json.loads(json.dumps(request))
    except (TypeError, ValueError):
        return None


def with_options_of_older_runs(options: dict[str, Any]) -> dict[str, Any]:
    """The options a manifest records, with those it was written before (``OPTIONS_BEFORE_THEY_EXISTED``) as the run
    ran them: after the options it has, in their order (a resumed manifest's bytes are compared)."""
    return {**options, **{name: value for name, value in OPTIONS_BEFORE_THEY_EXISTED.items() if name not in options}}


def check_same_run(output_dir: Path, what: str, was: dict[str, Any], now: dict[str, Any]) -> None:
    """Refuse to resume ``output_dir`` if a value of ``now`` differs from ``was`` (what the manifest records of the
    run's ``what``: input, options, model weights)."""
    differences = {name: (was.get(name), value) for name, value in now.items() if was.get(name) != value}
    if differences:
        described = "; ".join(f"{name}: was {before!r}, now {after!r}" for name, (before, after) in differences.items())
        raise OutputDirectoryError(
            f"cannot resume {output_dir}: it was started with different {what} ({described}); rerun with the same "
            "input, model and options, or pass --overwrite to start over"
        )


def complete_summary(output_dir: Path, manifest: Manifest, max_characters_per_token: int | None, redone: int = 0) -> EmbeddingRunSummary:
    """The summary of a resumed run that found its output complete."""
    totals = manifest.totals()
    return EmbeddingRunSummary(
        output_dir, totals["sentences"], totals["words"], totals["skipped_rows"], len(manifest.shards), 0.0, 0,
        manifest.rows_done, already_complete=True, redone_shards=redone, truncated_words=totals["truncated_words"],
        max_characters_per_token=max_characters_per_token,
    )


# ----------------------------------------------------------------------------------------------------------------------
# Before the model is loaded
# ----------------------------------------------------------------------------------------------------------------------


def check_before_loading(
    source: CorpusSource,
    output_dir: str | Path,
    request: dict[str, Any] | None,
    options: dict[str, Any],
    *,
    shard_size: int = DEFAULT_SHARD_SIZE,
    shard_characters: int = DEFAULT_SHARD_CHARACTERS,
    output_format: str = DEFAULT_OUTPUT_FORMAT,
    resume: bool = False,
    overwrite: bool = False,
) -> EmbeddingRunSummary | None:
    """What ``embed_corpus`` would refuse, or answer, that needs no model, checked before one is loaded (the command
    line runs it before importing torch); the run checks everything again. ``options`` (``ELMoEmbedder``'s, as
    given) and ``request`` (``embedding_request`` of them) are what the run will load the embedder with; the other
    arguments are ``embed_corpus``'s.

    Refused, with the run's own messages: run options out of range; an output directory the run may not open
    (``check_output_directory``: another output, foreign files, one to overwrite that is not provably its own, one
    to resume that is not an embedding output); an input without the sentence column (``CorpusSource.check_column``);
    a resume of another input. Returns the summary the run would print for an output that is already complete,
    resumed with the request it was made with (the same model files) and the same run options, every shard intact;
    else None: the run decides. Other options than recorded are left to the run: those an embedder records by
    default (the device's batch budget, the model's dtype, its tokenizer's settings) are known once the model is
    loaded, and its message names every option that differs.
    """
    run_options = checked_run_options(shard_size, shard_characters, output_format)
    output_dir = Path(output_dir)
    opening = check_output_directory(
        output_dir, EMBEDDINGS_OUTPUT, resume=resume, overwrite=overwrite, inputs=[source.path], describe_existing=describe_run
    )
    source.check_column(sentence_column(options.get("text_column", DEFAULT_TEXT_COLUMN), options.get("words_column")))
    previous = Manifest.in_directory(output_dir) if opening == "resume" else None
    if previous is None:
        return None
    check_same_run(output_dir, "input", previous.input, source.identity())
    recorded = with_options_of_older_runs(previous.options)
    unchanged = (
        request is not None and request["model_files"] is not None and previous.request == request
        and all(recorded.get(name) == value for name, value in run_options.items())
    )
    if not (previous.complete and unchanged and _holds_only_what_it_lists(output_dir, previous)):
        return None
    if any(shard_problem(output_dir, entry) for entry in previous.shards):
        return None  # the run redoes it
    return complete_summary(output_dir, previous, previous.model.get("max_characters_per_token"))


def _holds_only_what_it_lists(output_dir: Path, manifest: Manifest) -> bool:
    """Whether every entry of ``output_dir`` is one ``manifest`` lists (and none a symbolic link): nothing a resumed
    run would remove or refuse."""
    listed = manifest.entries()
    return all(entry.name in listed and not entry.is_symlink() for entry in output_dir.iterdir())


__all__ = [
    "DEFAULT_OUTPUT_FORMAT", "DEFAULT_SHARD_CHARACTERS", "DEFAULT_SHARD_SIZE", "EMBEDDINGS_OUTPUT",
    "EmbeddingRunSummary", "MANIFEST_NAME", "Manifest", "OPTIONS_BEFORE_THEY_EXISTED", "check_before_loading",
    "check_same_run", "checked_run_options", "complete_summary", "continue_from", "describe_run", "embedding_request",
    "has_finished_shards", "model_files", "model_fingerprint", "shard_problem", "verify_embedding_output",
    "with_options_of_older_runs",
]
