"""ELMo archives of the NLPL vector repository (``elmo-hf convert --zip 223.zip``), converted without unzipping: the
options, weights and vocabulary members are recognised by name, extracted into a temporary directory beside the output
(always removed) and handed to ``convert_allennlp_to_hf``. The member rules, what is refused and why the extraction
sits beside the output: docs/design/conversion.md.
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..corpus.lines import InvalidRowError, read_lines
from ..corpus.vocabulary import VOCABULARY_FILE_NAME
from .convert_allennlp_to_hf import HDF5ConversionReport, convert_allennlp_to_hf
from .shared import ConversionError

OPTIONS_NAME_SUFFIX = "options.json"
WEIGHTS_NAME_SUFFIX = ".hdf5"
VOCABULARY_NAMES = (VOCABULARY_FILE_NAME, f"{VOCABULARY_FILE_NAME}.gz")
COPY_CHUNK_BYTES = 1 << 20
# A gzipped vocabulary may expand to at most this many times its compressed size (word lists compress 3-5x) and at
# most MAX_VOCABULARY_BYTES (a million words of 60 bytes), and never past the free space where it is extracted: a
# 204 KB vocab.txt.gz once expanded to 200 MiB.
MAX_VOCABULARY_EXPANSION = 100
MAX_VOCABULARY_BYTES = 64 << 20
EXTRACTION_PREFIX = ".elmo-hf-zip-"  # the temporary directory beside the output
ELMOFORMANYLANGS_FILES = ("encoder.pkl", "token_embedder.pkl", "char.dic")


@dataclass(frozen=True)
class ArchiveMembers:
    """The members of an archive that make the model (names inside the archive)."""

    options: str
    weights: str
    vocabulary: str | None


@dataclass(frozen=True)
class ExtractedArchive:
    """Paths of the extracted files, valid inside ``extracted_archive``'s ``with`` block."""

    archive: Path
    members: ArchiveMembers
    options_file: Path
    weight_file: Path
    vocabulary_file: Path | None


def _file_name(member: str) -> str:
    return PurePosixPath(member).name


def find_members(archive: Path, names: list[str]) -> ArchiveMembers:
    """Which of the archive's member ``names`` are the options, the weights and the vocabulary
    (the rules: docs/design/conversion.md); ``ConversionError`` naming what was found when that is not clear."""
    files = [name for name in names if not name.endswith("/") and not name.startswith("__MACOSX/")]
    options = [name for name in files if _file_name(name).endswith(OPTIONS_NAME_SUFFIX)]
    weights = [name for name in files if _file_name(name).endswith(WEIGHTS_NAME_SUFFIX)]
    vocabularies = [name for name in files if _file_name(name) in VOCABULARY_NAMES]
    found = f"it holds {files}" if files else "it is empty"
    if not options and any(_file_name(name) in ELMOFORMANYLANGS_FILES for name in files):
        # The repository also hosts ELMoForManyLangs models (HIT-SCIR), which are not bilm-tf files.
        found += "; it looks like an ELMoForManyLangs model: unzip it and convert the directory with --elmoformanylangs"
    for what, candidates, expected in (
        ("options file", options, f"options.json (a name ending in {OPTIONS_NAME_SUFFIX!r})"),
        ("weight file", weights, f"model.hdf5 (a name ending in {WEIGHTS_NAME_SUFFIX!r})"),
    ):
        if not candidates:
            raise ConversionError(f"{archive} has no {what}, expected {expected}; {found}")
        if len(candidates) > 1:
            raise ConversionError(
                f"{archive} holds {len(candidates)} {what}s {candidates}: an archive of one ELMo was expected; unzip it "
                "and convert with --options and --weights"
            )
    if len(vocabularies) > 1:
        raise ConversionError(f"{archive} holds {len(vocabularies)} vocabularies {vocabularies}; expected at most one")
    return ArchiveMembers(options[0], weights[0], vocabularies[0] if vocabularies else None)


def extraction_parent(output_dir: str | Path | None) -> Path:
    """Where the temporary directory is made: the parent of ``output_dir`` or its nearest existing ancestor (the
    current directory's when relative); the system's temporary folder when ``output_dir`` is None."""
    if output_dir is None:
        return Path(tempfile.gettempdir())
    parent = Path(output_dir).absolute().parent
    while not parent.is_dir() and parent != parent.parent:
        parent = parent.parent
    return parent


def extraction_directory(archive: Path, output_dir: str | Path | None, prefix: str) -> tempfile.TemporaryDirectory:
    """A temporary directory named ``prefix...`` in ``extraction_parent(output_dir)`` to extract ``archive`` into;
    ``ConversionError`` naming both when none can be made there."""
    parent = extraction_parent(output_dir)
    try:
        return tempfile.TemporaryDirectory(dir=parent, prefix=prefix)
    except OSError as error:
        raise ConversionError(f"{archive} cannot be extracted: no temporary directory can be made in {parent} ({error})") from None


def _check_free_space(archive: Path, opened: zipfile.ZipFile, members: ArchiveMembers, directory: Path) -> None:
    """``ConversionError`` naming both sizes when the members to extract (their declared, uncompressed sizes) do not
    fit in the free space of ``directory``'s file system. A gzipped vocabulary grows past its declared size, by a
    few MB at most: not counted."""
    chosen = [members.options, members.weights, *([members.vocabulary] if members.vocabulary else [])]
    needed = sum(opened.getinfo(name).file_size for name in chosen)
    free = shutil.disk_usage(directory).free
    if needed > free:
        raise ConversionError(
            f"{archive}: its members {chosen} need {needed:,} bytes once extracted, but {directory} (where they are "
            f"extracted, beside the output) has {free:,} bytes free; write the output on a disk with more room"
        )


def _extract_member(archive: zipfile.ZipFile, member: str, target: Path, decompress_gzip: bool = False) -> None:
    """Copy one member to ``target`` in chunks (the weights are hundreds of MB), gunzipping it if asked."""
    try:
        opened = archive.open(member)
    except NotImplementedError as error:  # zipfile reads stored, deflate, bzip2 and lzma members only (a RuntimeError)
        method = archive.getinfo(member).compress_type
        name = getattr(zipfile, "compressor_names", {}).get(method, "unknown")
        raise ConversionError(
            f"{archive.filename}: the member {member!r} (compression method {method}, {name}) cannot be read by Python's "
            f"zipfile ({error}); expected stored, deflate, bzip2 or lzma members: unzip it with another tool and "
            "convert with --options and --weights"
        ) from None
    with opened as source:
        stream = gzip.open(source) if decompress_gzip else source
        with stream, open(target, "wb") as destination:
            if not decompress_gzip:  # zipfile reads at most the declared size, which the free-space check counted
                shutil.copyfileobj(stream, destination, COPY_CHUNK_BYTES)
                return
            compressed = archive.getinfo(member).file_size
            limit = min(MAX_VOCABULARY_EXPANSION * compressed, MAX_VOCABULARY_BYTES, shutil.disk_usage(target.parent).free)
            written = 0
            while chunk := stream.read(min(COPY_CHUNK_BYTES, limit + 1 - written)):
                written += len(chunk)
                if written > limit:
                    raise ConversionError(
                        f"{archive.filename}: the member {member!r} ({compressed:,} bytes gzipped) expands past "
                        f"{limit:,} bytes (the least of {MAX_VOCABULARY_EXPANSION}x its size, {MAX_VOCABULARY_BYTES:,} "
                        f"bytes, and the free space in {target.parent}); a vocabulary is a word list, not this: "
                        "check the archive"
                    )
                destination.write(chunk)


def _check_vocabulary_text(path: Path, archive: Path, member: str) -> None:
    """``ConversionError`` naming the line of the archive's vocabulary that is not UTF-8."""
    for row, line in read_lines(path):
        if isinstance(line, InvalidRowError):
            raise ConversionError(f"{archive}: {member} line {row + 1} is {line}: a vocabulary is UTF-8 text, one word a line")


@contextmanager
def extracted_archive(archive: str | Path, output_dir: str | Path | None = None) -> Iterator[ExtractedArchive]:
    """Extract the options, weights and vocabulary of an NLPL ``archive`` into a temporary directory beside
    ``output_dir`` (see ``extraction_parent``), removed when the block ends (however it ends). The weight file keeps
    its name (the converter recognises released files by name)."""
    archive = Path(archive)
    if not archive.is_file():
        raise ConversionError(f"{archive} does not exist or is not a file (expected an NLPL .zip archive)")
    if not zipfile.is_zipfile(archive):
        raise ConversionError(f"{archive} is not a zip archive (expected an NLPL .zip holding options.json and model.hdf5)")
    with extraction_directory(archive, output_dir, EXTRACTION_PREFIX) as temporary_name:
        directory = Path(temporary_name)
        try:
            with zipfile.ZipFile(archive) as opened:
                members = find_members(archive, opened.namelist())
                _check_free_space(archive, opened, members, directory)
                weights_name = _file_name(members.weights)
                if weights_name in ("", ".", "..") or "\\" in weights_name:
                    raise ConversionError(f"{archive}: the member name {members.weights!r} is not a plain file name")
                options_file, weight_file = directory / "options.json", directory / weights_name
                _extract_member(opened, members.options, options_file)
                _extract_member(opened, members.weights, weight_file)
                vocabulary_file = None
                if members.vocabulary is not None:
                    vocabulary_file = directory / VOCABULARY_FILE_NAME
                    _extract_member(opened, members.vocabulary, vocabulary_file, members.vocabulary.endswith(".gz"))
                    _check_vocabulary_text(vocabulary_file, archive, members.vocabulary)
        except RuntimeError as error:  # zipfile: an encrypted member needs a password (NotImplementedError, a
            # RuntimeError too, is turned into a ConversionError by _extract_member)
            raise ConversionError(f"{archive} cannot be extracted ({error}); encrypted archives are not supported") from None
        except (zipfile.BadZipFile, EOFError, gzip.BadGzipFile, zlib.error) as error:  # a bad CRC, a cut-off member
            raise ConversionError(f"{archive} is damaged and cannot be extracted: {error}") from None
        except OSError as error:
            raise ConversionError(f"{archive} cannot be extracted into {directory}: {error}") from None
        yield ExtractedArchive(archive, members, options_file, weight_file, vocabulary_file)


def convert_nlpl_zip(archive: str | Path, output_dir: str | Path, **options) -> HDF5ConversionReport:
    """Convert the ELMo in an NLPL ``archive`` to ``output_dir`` (its vocabulary copied as ``vocab.txt``);
    ``options`` are ``convert_allennlp_to_hf``'s (``overwrite``, ``verify_dir``, ``push_to_hub``, ...). Raises
    ``ConversionError`` (nothing written) as ``extracted_archive`` and the converter say."""
    with extracted_archive(archive, output_dir) as extracted:
        try:
            return convert_allennlp_to_hf(
                extracted.options_file, extracted.weight_file, output_dir, vocabulary_file=extracted.vocabulary_file,
                archive=extracted.archive, **options,
            )
        except ConversionError as error:  # it names the extracted files, which are gone: name the members instead
            raise type(error)(_in_archive_terms(str(error), extracted)) from None


def _in_archive_terms(message: str, extracted: ExtractedArchive) -> str:
    """``message`` with the paths of the extracted files replaced by ``ARCHIVE:member``."""
    for path, member in (
        (extracted.weight_file, extracted.members.weights),
        (extracted.options_file, extracted.members.options),
    ):
        message = message.replace(str(path), f"{extracted.archive}:{member}")
    return message


__all__ = [
    "ArchiveMembers", "ExtractedArchive", "convert_nlpl_zip", "extracted_archive", "extraction_directory",
    "extraction_parent", "find_members",
]
