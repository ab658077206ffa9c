"""A TF-Hub module in the TF1 Hub format, read without TensorFlow: where it is (``module_directory``: the module,
a download folder, or a ``.tar.gz`` extracted by ``extracted_module`` beside the output) and what its graph's
signatures say (``read_module_graph``). The format: docs/design/conversion.md.
"""

from __future__ import annotations

import shutil
import struct
import tarfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .nlpl_zip import extraction_directory
from .shared import ConversionError
from .tf_checkpoint import protobuf_fields

MODULE_DEF_FILE_NAME = "tfhub_module.pb"
SAVED_MODEL_FILE_NAME = "saved_model.pb"
VARIABLES_PREFIX = "variables/variables"  # the checkpoint prefix, relative to the module directory
MODULE_FORMAT_V3 = 3  # ModuleDef.Format.FORMAT_V3, the only one tensorflow-hub writes
EXTRACTION_PREFIX = ".elmo-hf-tfhub-"  # the temporary directory beside the output
EXPECTATION = (
    "expected a TF-Hub module in the TF1 Hub format: a directory with tfhub_module.pb, saved_model.pb and "
    "variables/variables.index + variables.data-*, a download folder holding one such version folder, or its .tar.gz"
)


def is_module_directory(path: Path) -> bool:
    return (path / MODULE_DEF_FILE_NAME).is_file() and (path / SAVED_MODEL_FILE_NAME).is_file()


def module_directory(path: str | Path) -> Path:
    """The module directory in ``path``: ``path`` itself, or its one subfolder that is a module (a download folder
    ``elmo/`` with its version ``3/``). Raises ``ConversionError`` naming what was found."""
    path = Path(path)
    if not path.is_dir():
        raise ConversionError(f"{path} is not a directory; {EXPECTATION}.")
    if is_module_directory(path):
        check_module_def(path)
        return path
    versions = sorted(child for child in path.iterdir() if child.is_dir() and is_module_directory(child))
    if len(versions) == 1:
        check_module_def(versions[0])
        return versions[0]
    if versions:
        raise ConversionError(
            f"{path} holds {len(versions)} modules ({', '.join(version.name for version in versions)}): give the one "
            "to convert."
        )
    found = sorted(child.name for child in path.iterdir())[:10]
    raise ConversionError(f"{path} has no {MODULE_DEF_FILE_NAME} and {SAVED_MODEL_FILE_NAME} (it holds {found}); {EXPECTATION}.")


def check_module_def(directory: Path) -> None:
    """``tfhub_module.pb`` says format 3; a SavedModel of the TF2 format (no such file) is not this format."""
    path = directory / MODULE_DEF_FILE_NAME
    try:
        fields = dict(protobuf_fields(path.read_bytes()))
    except (OSError, ValueError, struct.error) as error:
        raise ConversionError(f"{path} cannot be read as a ModuleDef ({error}); {EXPECTATION}.") from None
    if fields.get(1) != MODULE_FORMAT_V3:
        raise ConversionError(f"{path}: module format {fields.get(1)}, expected {MODULE_FORMAT_V3} (the TF1 Hub format).")


# ---- a .tar.gz download ----------------------------------------------------------------------------------------------


def module_member_path(name: str) -> PurePosixPath | None:
    """Where an archive member goes in the module directory, or None for members that are not the module's files
    (read: ``tfhub_module.pb``, ``saved_model.pb``, ``variables/*``), at the archive's root or in one folder."""
    parts = [part for part in PurePosixPath(name).parts if part != "."]
    if name.startswith("/") or any(part in ("..", "") or "\\" in part for part in parts):
        return None
    if len(parts) >= 2 and parts[0] not in (MODULE_DEF_FILE_NAME, SAVED_MODEL_FILE_NAME, "variables"):
        parts = parts[1:]  # one enclosing folder (elmo_3/saved_model.pb)
    if parts in ([MODULE_DEF_FILE_NAME], [SAVED_MODEL_FILE_NAME]):
        return PurePosixPath(*parts)
    if len(parts) == 2 and parts[0] == "variables" and parts[1].startswith("variables."):
        return PurePosixPath(*parts)
    return None


def _extract_members(archive: Path, directory: Path) -> None:
    with tarfile.open(archive, "r:*") as opened:
        for member in opened:
            target = module_member_path(member.name)
            if target is None:
                continue
            if not member.isfile():
                raise ConversionError(f"{archive}: the member {member.name!r} is not a regular file (a link or device).")
            destination = directory / target
            destination.parent.mkdir(parents=True, exist_ok=True)
            if destination.exists():
                raise ConversionError(f"{archive} holds {target} twice (several modules in one archive?).")
            with opened.extractfile(member) as source, open(destination, "wb") as sink:
                shutil.copyfileobj(source, sink, 1 << 20)


@contextmanager
def extracted_module(archive: str | Path, output_dir: str | Path | None = None) -> Iterator[Path]:
    """Extract the module files of a ``.tar.gz`` download into a temporary directory beside ``output_dir`` (as
    ``nlpl_zip.extraction_parent`` places it), removed when the block ends; yields the module directory."""
    archive = Path(archive)
    if not tarfile.is_tarfile(archive):
        raise ConversionError(f"{archive} is not a tar archive; {EXPECTATION}.")
    with extraction_directory(archive, output_dir, EXTRACTION_PREFIX) as temporary_name:
        directory = Path(temporary_name)
        try:
            _extract_members(archive, directory)
        except (tarfile.TarError, EOFError, zlib.error) as error:
            raise ConversionError(f"{archive} is damaged and cannot be extracted: {error}") from None
        except OSError as error:
            raise ConversionError(f"{archive} cannot be extracted into {directory}: {error}") from None
        if not is_module_directory(directory):
            raise ConversionError(f"{archive} holds no {MODULE_DEF_FILE_NAME} and {SAVED_MODEL_FILE_NAME}; {EXPECTATION}.")
        check_module_def(directory)
        yield directory


# ---- the graph's signatures ------------------------------------------------------------------------------------------


@dataclass
class ModuleGraph:
    """The outputs of the module's graph's signatures (signature -> output key -> node name) and each node's data
    inputs."""

    outputs: dict[str, dict[str, str]] = field(default_factory=dict)
    node_inputs: dict[str, list[str]] = field(default_factory=dict)

    def depends_on(self, node: str, target: str) -> bool:
        """Whether ``target`` is among the nodes ``node`` is computed from (data inputs, not control inputs)."""
        seen, pending = {node}, [node]
        while pending:
            for source in self.node_inputs.get(pending.pop(), ()):
                if source == target:
                    return True
                if source not in seen:
                    seen.add(source)
                    pending.append(source)
        return False


def node_name(tensor: str) -> str:
    """``"scope/op:1"`` or ``"^scope/op"`` -> ``"scope/op"``."""
    return tensor.lstrip("^").rsplit(":", 1)[0] if ":" in tensor else tensor.lstrip("^")


def _map_entries(message: bytes) -> tuple[str, bytes]:
    """A protobuf map entry: key (1), value (2)."""
    entry = dict(protobuf_fields(message))
    return entry.get(1, b"").decode("utf-8"), entry.get(2, b"")


def _tensor_names(tensor_map_entries: list[bytes]) -> dict[str, str]:
    """map<string, TensorInfo> -> key -> node name (TensorInfo.name is field 1)."""
    names = {}
    for entry in tensor_map_entries:
        key, info = _map_entries(entry)
        names[key] = node_name(dict(protobuf_fields(info)).get(1, b"").decode("utf-8"))
    return names


def _read_meta_graph(message: bytes, graph: ModuleGraph) -> None:
    """MetaGraphDef: graph_def (2) with its NodeDefs (1: name 1, input 3), signature_def (5)."""
    for number, value in protobuf_fields(message):
        if number == 2:
            for graph_field, node in protobuf_fields(value):
                if graph_field != 1:
                    continue
                node_fields = list(protobuf_fields(node))
                name = next(item for number_, item in node_fields if number_ == 1).decode("utf-8")
                inputs = [item.decode("utf-8") for number_, item in node_fields if number_ == 3]
                graph.node_inputs[name] = [node_name(source) for source in inputs if not source.startswith("^")]
        elif number == 5:
            key, signature = _map_entries(value)
            graph.outputs[key] = _tensor_names([item for number_, item in protobuf_fields(signature) if number_ == 2])


def read_module_graph(directory: Path) -> ModuleGraph:
    """The signatures and nodes of ``saved_model.pb`` (its first meta graph, the one ``Module.export`` writes with
    the empty tag set). Raises ``ConversionError`` when it cannot be decoded."""
    path = directory / SAVED_MODEL_FILE_NAME
    graph = ModuleGraph()
    try:
        meta_graphs = [value for number, value in protobuf_fields(path.read_bytes()) if number == 2]
        if not meta_graphs:
            raise ValueError("no meta graph")
        _read_meta_graph(meta_graphs[0], graph)
    except (OSError, ValueError, StopIteration, UnicodeDecodeError, AttributeError, TypeError, struct.error) as error:
        raise ConversionError(f"{path} cannot be decoded as a SavedModel ({error or type(error).__name__}); {EXPECTATION}.") from None
    return graph


__all__ = [
    "ModuleGraph", "SAVED_MODEL_FILE_NAME", "VARIABLES_PREFIX", "extracted_module", "module_directory",
    "read_module_graph",
]
