"""A FAISS index of every word vector of one or more ``elmo-hf embed`` outputs: ``build_index`` writes it,
``read_index_record`` / ``IndexedSource`` read what it records (``neighbours.py`` queries it).

Ids are the corpus's words in order (sources, shards, rows, positions); vectors are L2-normalised and ranked by inner
product (cosine). The directory's files, the index kinds, memory and why FAISS is used directly rather than
``datasets.Dataset.add_faiss_index``: docs/guide/neighbours.md ("The index directory", "Design notes").
FAISS is an optional dependency: ``pip install 'elmo-hf[search]'`` (faiss-cpu).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import pyarrow.parquet as pq

from ..choices_elmo import INDEX_KINDS
from ..embedding.embedder import NUM_WORDS_COLUMN, WORDS_COLUMN
from ..embedding.manifest import EMBEDDINGS_OUTPUT, MANIFEST_NAME, Manifest, plural, shard_problem, verify_embedding_output
from ..embedding.parquet import per_word_vectors_of_column
from ..storage.files import sha256_of_file
from ..storage.output_directory import MARKER_NAME, OutputKind, read_marker, staged_output_directory
from ..validation_elmo import ELMoHFError, check_bool, check_choice, check_int

INDEX_FORMAT = "elmo-hf-neighbours-index"
INDEX_VERSION = 1
INDEX_RECORD_NAME = "index.json"
FAISS_FILE_NAME = "vectors.faiss"
SENTENCE_STARTS_NAME = "sentence_starts.npy"
WORD_IDS_NAME = "word_ids.npy"
VOCABULARY_NAME = "vocabulary.json"
SEARCH_EXTRA_HINT = "pip install 'elmo-hf[search]'"
READ_BATCH_ROWS = 1024  # rows of a shard in memory at a time while building
# The most training vectors chosen by default; more only when nlist needs them (FAISS wants >= 39 per cluster).
DEFAULT_MAX_TRAIN_SIZE = 100_000
MIN_TRAINING_POINTS_PER_CLUSTER = 39
# The embed options that change the vectors themselves: every source of one index must agree on them, and a query
# is embedded with them. (Batching changes only the last bits; the columns are read per source.)
VECTOR_OPTIONS = (
    "representation", "mix_index", "dtype", "max_window_words", "window_context", "allow_tf32", "compute_dtype", "tokenizer",
)

NEIGHBOURS_INDEX_OUTPUT = OutputKind(
    name="neighbours-index",
    description="an elmo-hf neighbours index",
    entries=(INDEX_RECORD_NAME, FAISS_FILE_NAME, SENTENCE_STARTS_NAME, WORD_IDS_NAME, VOCABULARY_NAME),
)


class IndexInputError(ELMoHFError):
    """An embed output that cannot be indexed, or an index that no longer matches what it was built from; the message
    names the directory and what to do."""


def import_faiss():
    """The ``faiss`` module, or ``ImportError`` naming the extra that installs it."""
    try:
        import faiss
    except ImportError as error:
        raise ImportError(f"nearest-neighbour search needs FAISS: {SEARCH_EXTRA_HINT} (faiss-cpu)") from error
    return faiss


def normalised(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` (N, D) scaled to unit length (float32, C-contiguous): inner products become cosines. A zero vector
    stays zero."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


@dataclass
class IndexedSource:
    """One embed output as an index sees it: its manifest and the columns that hold its sentences and vectors.

    ``first_sentence`` is the global number of its first row (sources are numbered one after the other)."""

    path: Path
    manifest: Manifest
    manifest_sha256: str
    first_sentence: int = 0

    @classmethod
    def open(cls, path: str | Path, *, verify: bool) -> "IndexedSource":
        """The embed output at ``path``, refused unless it is a finished ``elmo-hf embed`` output with per-word vectors.
        ``verify``: check every shard's size and sha256 too (what ``elmo-hf embed --verify`` does)."""
        path = Path(path)
        if not path.is_dir():
            raise IndexInputError(f"embed output {path} is not a directory: pass a directory written by elmo-hf embed")
        marker = read_marker(path)
        if marker is None or marker.get("kind") != EMBEDDINGS_OUTPUT.name or not (path / MANIFEST_NAME).is_file():
            found = "no elmo-hf ownership marker" if marker is None else f"an elmo-hf output of kind {marker.get('kind')!r}"
            raise IndexInputError(
                f"{path} is not an elmo-hf embed output with vectors ({found}"
                f"{'' if (path / MANIFEST_NAME).is_file() else f', no {MANIFEST_NAME}'}): index a directory written by "
                "`elmo-hf embed INPUT --output DIR` (a Ray output has no manifest: embed with the default engine)"
            )
        problems = verify_embedding_output(path) if verify else []
        if problems:
            listed = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
            raise IndexInputError(f"embed output {path} cannot be trusted: {listed} (see `elmo-hf embed --verify {path}`)")
        manifest = Manifest.read(path / MANIFEST_NAME)
        if not manifest.complete:
            raise IndexInputError(f"embed output {path} is not complete: finish it with elmo-hf embed --resume first")
        if manifest.options.get("pooling") != "none":
            raise IndexInputError(
                f"embed output {path} holds one pooled vector per sentence (it was embedded with --pooling "
                f"{manifest.options.get('pooling')}), not per-word vectors: embed the corpus again without --pooling to "
                "search words in context"
            )
        return cls(path, manifest, sha256_of_file(path / MANIFEST_NAME))

    @property
    def options(self) -> dict[str, Any]:
        return self.manifest.options

    @property
    def vectors_column(self) -> str:
        return self.options["output_column"]

    @property
    def words_column(self) -> str:
        """The column of each sentence's words: the input's pre-split words, or the words the embed run split."""
        return self.options["words_column"] or WORDS_COLUMN

    @property
    def text_column(self) -> str | None:
        """The column of raw sentences, for text inputs (None for pre-split input)."""
        return None if self.options["words_column"] else self.options["text_column"]

    @property
    def sentences(self) -> int:
        return self.manifest.totals()["sentences"]

    @property
    def words(self) -> int:
        return self.manifest.totals()["words"]

    @cached_property
    def shard_first_rows(self) -> np.ndarray:
        """int64 (shards + 1,): the source-local number of each shard's first row, then the number of rows."""
        return np.concatenate([[0], np.cumsum([shard["rows"] for shard in self.manifest.shards])]).astype(np.int64)

    def shard_path(self, shard: int) -> Path:
        return self.path / self.manifest.shards[shard]["file"]

    def vector_options(self) -> dict[str, Any]:
        return {name: self.options.get(name) for name in VECTOR_OPTIONS}

    def batches(self, vector_shape: tuple[int, ...], layer: int | None) -> Iterator[tuple[np.ndarray, np.ndarray, list[list[str]]]]:
        """``(vectors (words, D) float32, num_words (rows,), words of each row)`` for every batch of rows of every
        shard, in order; with ``layer`` one layer of an output of every layer."""
        columns = [self.vectors_column, NUM_WORDS_COLUMN, self.words_column]
        for shard in range(len(self.manifest.shards)):
            for batch in pq.ParquetFile(self.shard_path(shard)).iter_batches(batch_size=READ_BATCH_ROWS, columns=columns):
                vectors = per_word_vectors_of_column(batch.column(self.vectors_column), vector_shape)
                if layer is not None:
                    vectors = vectors[:, layer]
                num_words = batch.column(NUM_WORDS_COLUMN).to_numpy().astype(np.int64)
                yield vectors, num_words, batch.column(self.words_column).to_pylist()

    def record(self) -> dict[str, Any]:
        """What ``index.json`` records of this source (``open_recorded_source`` checks it)."""
        return {
            "path": str(self.path.resolve()), "manifest_sha256": self.manifest_sha256, "input": self.manifest.input,
            "sentences": self.sentences, "words": self.words, "first_sentence": self.first_sentence,
        }


def compatible_sources(sources: Sequence[IndexedSource]) -> None:
    """``IndexInputError`` unless every source was embedded with the same model weights and vector options."""
    first = sources[0]
    for source in sources[1:]:
        if source.manifest.model["sha256"] != first.manifest.model["sha256"]:
            raise IndexInputError(
                f"embed outputs {first.path} and {source.path} were embedded with different models ({first.manifest.model['name']} "
                f"and {source.manifest.model['name']}, other weights): one index holds the vectors of one model"
            )
        differences = {
            name: (value, source.vector_options()[name]) for name, value in first.vector_options().items() if source.vector_options()[name] != value
        }
        if differences:
            described = "; ".join(f"{name}: {was!r} vs {now!r}" for name, (was, now) in differences.items())
            raise IndexInputError(f"embed outputs {first.path} and {source.path} hold different vectors ({described}): embed them with the same options")


def vector_shape_of(source: IndexedSource) -> tuple[int, ...]:
    """``(D,)`` or ``(L + 1, D)``: one word's vectors, the shape of the datasets ``Array2D((None, D))`` /
    ``Array3D((None, L + 1, D))`` type of the source's first shard's vectors column."""
    schema = pq.read_schema(source.shard_path(0))
    if source.vectors_column not in schema.names:
        raise IndexInputError(f"embed output {source.path}: {source.shard_path(0).name} has no column {source.vectors_column!r}")
    shape = getattr(schema.field(source.vectors_column).type, "shape", None)  # datasets' extension types have one
    if shape is None or len(shape) not in (2, 3) or shape[0] is not None:
        raise IndexInputError(
            f"embed output {source.path}: column {source.vectors_column!r} of {source.shard_path(0).name} is not a "
            f"column of per-word vectors (type {schema.field(source.vectors_column).type})"
        )
    return tuple(shape[1:])


@dataclass(frozen=True)
class IndexParameters:
    """The FAISS index to build: ``kind`` and its sizes (``nlist`` clusters, ``nprobe`` scanned by default,
    ``pq_subquantizers`` x ``pq_bits`` per vector, ``train_size`` training vectors)."""

    kind: str
    nlist: int | None = None
    nprobe: int | None = None
    pq_subquantizers: int | None = None
    pq_bits: int | None = None
    train_size: int | None = None

    @property
    def factory(self) -> str:
        """The FAISS index factory string."""
        if self.kind == "flat":
            return "Flat"
        if self.kind == "ivf":
            return f"IVF{self.nlist},Flat"
        # "np": no polysemous training, which this search never uses (docs/guide/neighbours.md, "Design notes").
        return f"IVF{self.nlist},PQ{self.pq_subquantizers}x{self.pq_bits}np"

    @classmethod
    def choose(
        cls,
        kind: str,
        words: int,
        dim: int,
        *,
        nlist: int | None,
        nprobe: int | None,
        pq_subquantizers: int | None,
        pq_bits: int | None,
        train_size: int | None,
    ) -> "IndexParameters":
        """Check the options of ``kind`` for ``words`` vectors of ``dim`` dimensions and fill in the defaults: nlist
        about 4 sqrt(W), nprobe nlist / 16, m = D / 4 sub-quantizers of 8 bits, train_size min(W, max(100,000, 39 nlist))."""
        check_choice("index kind", kind, INDEX_KINDS)
        if kind == "flat":
            for name, value in (("nlist", nlist), ("nprobe", nprobe), ("pq_subquantizers", pq_subquantizers), ("pq_bits", pq_bits), ("train_size", train_size)):
                if value is not None:
                    raise ValueError(f"{name} applies to the ivf and ivfpq indexes only, not to a flat index")
            return cls("flat")
        check_int("nlist", nlist, 1, allow_none=True)
        nlist = nlist or max(1, min(round(4 * math.sqrt(words)), words // MIN_TRAINING_POINTS_PER_CLUSTER))
        nprobe = check_int("nprobe", nprobe, 1, allow_none=True) or max(1, nlist // 16)
        if kind == "ivf" and (pq_subquantizers is not None or pq_bits is not None):
            raise ValueError("pq_subquantizers and pq_bits apply to the ivfpq index only")
        if kind == "ivfpq":
            pq_bits = check_int("pq_bits", pq_bits, 1, 17, allow_none=True) or 8
            pq_subquantizers = check_int("pq_subquantizers", pq_subquantizers, 1, allow_none=True) or max(1, dim // 4)
            if dim % pq_subquantizers:
                divisors = [m for m in range(1, dim + 1) if dim % m == 0]
                raise ValueError(f"pq_subquantizers must divide the vector size {dim}, got {pq_subquantizers}; e.g. one of {divisors}")
        needed = max(nlist, 2**pq_bits if kind == "ivfpq" else 0)
        train_size = check_int("train_size", train_size, 1, allow_none=True) or min(words, max(DEFAULT_MAX_TRAIN_SIZE, MIN_TRAINING_POINTS_PER_CLUSTER * nlist))
        train_size = min(train_size, words)
        if train_size < needed:
            raise ValueError(
                f"an {kind} index with nlist={nlist}{f' and pq_bits={pq_bits}' if kind == 'ivfpq' else ''} needs at least "
                f"{needed} training vectors, and {'the corpus has' if train_size == words else 'train_size is'} "
                f"{train_size}: choose a smaller nlist{' or pq_bits' if kind == 'ivfpq' else ''}, or the flat index"
            )
        return cls(kind, nlist, min(nprobe, nlist), pq_subquantizers, pq_bits, train_size)

    def record(self) -> dict[str, Any]:
        return {**asdict(self), "factory": self.factory, "metric": "inner product of L2-normalised vectors (cosine)"}


@dataclass
class IndexBuildSummary:
    """What ``build_index`` did."""

    index_dir: Path
    kind: str
    factory: str
    sentences: int
    words: int
    vocabulary: int
    dim: int
    seconds: float

    def describe(self) -> str:
        return (
            f"indexed {plural(self.words, 'word')} of {plural(self.sentences, 'sentence')} ({plural(self.vocabulary, 'distinct word')}, "
            f"{self.dim}-dimensional vectors) into {self.index_dir}: {self.kind} index ({self.factory}, cosine) in {self.seconds:.1f} s"
        )


def _training_sample(sources: Sequence[IndexedSource], vector_shape, layer, words: int, size: int, seed: int) -> np.ndarray:
    """``size`` normalised vectors chosen uniformly at random among all ``words`` (one pass over the shards)."""
    chosen = np.sort(np.random.default_rng(seed).choice(words, size=size, replace=False))
    sample, first_id = [], 0
    for source in sources:
        for vectors, _, _ in source.batches(vector_shape, layer):
            low, high = np.searchsorted(chosen, [first_id, first_id + len(vectors)])
            if high > low:
                sample.append(normalised(vectors[chosen[low:high] - first_id]))
            first_id += len(vectors)
    return np.concatenate(sample)


def build_index(
    embed_dirs: str | Path | Sequence[str | Path],
    index_dir: str | Path,
    *,
    kind: str = "flat",
    layer: int | None = None,
    nlist: int | None = None,
    nprobe: int | None = None,
    pq_subquantizers: int | None = None,
    pq_bits: int | None = None,
    train_size: int | None = None,
    seed: int = 0,
    overwrite: bool = False,
    progress: bool = True,
) -> IndexBuildSummary:
    """Index every word vector of ``embed_dirs`` (finished ``elmo-hf embed`` outputs of one model and the same vector
    options, each verified as ``elmo-hf embed --verify`` does) into ``index_dir``. ``kind``: ``"flat"`` (exact),
    ``"ivf"`` (exact scores in the clusters scanned) or ``"ivfpq"`` (approximate), sized by the options
    ``IndexParameters.choose`` defaults; IVF kinds train on ``train_size`` vectors sampled with ``seed``. ``layer``: the layer of a ``--representation all``
    output (required there). ``overwrite`` replaces only an earlier neighbours index."""
    faiss = import_faiss()
    started = time.perf_counter()
    paths, index_dir = _checked_build_arguments(embed_dirs, index_dir, kind, overwrite, progress, seed)
    # The output's checks (an existing index without overwrite, another build holding the lock) come before the
    # expensive verification and training, and the lock is held for all of it.
    with staged_output_directory(index_dir, NEIGHBOURS_INDEX_OUTPUT, overwrite=overwrite, inputs=paths) as staging:
        sources = [IndexedSource.open(path, verify=True) for path in paths]
        compatible_sources(sources)
        for number, source in enumerate(sources):
            source.first_sentence = sum(other.sentences for other in sources[:number])
        sentences, words = sum(source.sentences for source in sources), sum(source.words for source in sources)
        if words == 0:
            raise IndexInputError(f"embed output(s) {', '.join(map(str, paths))} hold no words: nothing to index")
        vector_shape = vector_shape_of(sources[0])
        dim, layer = vector_shape[-1], _checked_layer(sources[0], layer, vector_shape[0] if len(vector_shape) == 2 else None)
        parameters = IndexParameters.choose(
            kind, words, dim, nlist=nlist, nprobe=nprobe, pq_subquantizers=pq_subquantizers, pq_bits=pq_bits, train_size=train_size
        )
        index = faiss.index_factory(dim, parameters.factory, faiss.METRIC_INNER_PRODUCT)
        if parameters.kind != "flat":
            index.train(_training_sample(sources, vector_shape, layer, words, parameters.train_size, seed))
        vocabulary = _add_every_vector(index, sources, staging, vector_shape, layer, (sentences, words, dim), progress, paths)
        faiss.write_index(index, str(staging / FAISS_FILE_NAME))
        record = _index_record(sources, parameters, layer, dim, {"sentences": sentences, "words": words, "vocabulary": len(vocabulary)})
        (staging / INDEX_RECORD_NAME).write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return IndexBuildSummary(
        index_dir, parameters.kind, parameters.factory, sentences, words, len(vocabulary), dim, time.perf_counter() - started
    )


def _index_record(sources, parameters: IndexParameters, layer: int | None, dim: int, totals: dict[str, int]) -> dict[str, Any]:
    """What ``index.json`` records of a build: its sources, their model and vector options, the index, the totals."""
    return {
        "format": INDEX_FORMAT,
        "version": INDEX_VERSION,
        "sources": [source.record() for source in sources],
        "model": sources[0].manifest.model,
        "vectors": {**sources[0].vector_options(), "layer": layer, "dim": dim},
        "index": parameters.record(),
        "totals": totals,
    }


def _checked_build_arguments(embed_dirs, index_dir, kind: str, overwrite, progress, seed) -> tuple[list, Path]:
    """``(paths, index_dir)``: ``build_index``'s arguments checked before anything is read."""
    check_bool("overwrite", overwrite)
    check_bool("progress", progress)
    check_int("seed", seed, 0)
    check_choice("index kind", kind, INDEX_KINDS)  # before hours of hashing, not after
    paths = [embed_dirs] if isinstance(embed_dirs, (str, Path)) else list(embed_dirs)
    if not paths:
        raise ValueError("embed_dirs is empty: give at least one elmo-hf embed output")
    index_dir = Path(index_dir)
    for path in paths:
        if Path(path).resolve() == index_dir.resolve() or Path(path).resolve() in index_dir.resolve().parents:
            raise IndexInputError(f"the index {index_dir} cannot be written inside the embed output {path}: choose another --output")
    return paths, index_dir


def _add_every_vector(index, sources, staging: Path, vector_shape, layer, totals: tuple[int, int, int], progress, paths) -> dict[str, int]:
    """Add every word vector of ``sources`` to ``index``, normalised, writing each sentence's first id and each word's
    number (in the vocabulary of first occurrences) and the vocabulary into ``staging``; the vocabulary (word ->
    number). ``totals``: ``(sentences, words, dim)`` as the manifests say, checked against what the shards hold."""
    sentences, words, dim = totals
    sentence_starts = np.lib.format.open_memmap(staging / SENTENCE_STARTS_NAME, mode="w+", dtype=np.int64, shape=(sentences + 1,))
    word_ids = np.lib.format.open_memmap(staging / WORD_IDS_NAME, mode="w+", dtype=np.int32, shape=(words,))
    vocabulary: dict[str, int] = {}  # word -> its number, in order of first occurrence
    next_id, next_sentence = 0, 0
    from tqdm.auto import tqdm

    bar = tqdm(total=words, unit=" words", disable=not progress, dynamic_ncols=True, mininterval=0.5)
    for source in sources:
        for vectors, num_words, sentence_words in source.batches(vector_shape, layer):
            _check_batch(source, vectors, num_words, sentence_words, dim, next_id, words)
            index.add(normalised(vectors))
            row_starts = next_id + np.concatenate([[0], np.cumsum(num_words)[:-1]]).astype(np.int64)
            sentence_starts[next_sentence : next_sentence + len(num_words)] = row_starts
            batch_ids = [vocabulary.setdefault(word, len(vocabulary)) for row in sentence_words for word in row]
            word_ids[next_id : next_id + len(batch_ids)] = batch_ids
            next_id += len(batch_ids)
            next_sentence += len(num_words)
            bar.update(len(vectors))
    bar.close()
    if next_id != words or next_sentence != sentences or index.ntotal != words:
        raise IndexInputError(
            f"embed output(s) {', '.join(map(str, paths))}: the shards hold {next_id:,} words in {next_sentence:,} rows, "
            f"the manifests say {words:,} in {sentences:,}"
        )
    sentence_starts[sentences] = words
    counts = np.bincount(word_ids, minlength=len(vocabulary)).tolist()
    sentence_starts.flush()
    word_ids.flush()
    del sentence_starts, word_ids  # close the memory maps before the directory is renamed
    (staging / VOCABULARY_NAME).write_text(json.dumps({"words": list(vocabulary), "counts": counts}, ensure_ascii=False) + "\n", encoding="utf-8")
    return vocabulary


def _checked_layer(source: IndexedSource, layer: int | None, num_layers: int | None) -> int | None:
    if source.options["representation"] == "all":
        if layer is None:
            raise IndexInputError(
                f"embed output {source.path} holds every layer (--representation all): choose the one to index with "
                f"layer= / --layer (0 = token layer, ..., {num_layers - 1} = top)"
            )
        return check_int("layer", layer, 0, num_layers, hint=f"the output holds {num_layers} layers")
    if layer is not None:
        raise ValueError(
            f"layer={layer} applies to an output of --representation all; {source.path} holds one representation "
            f"({source.options['representation']!r})"
        )
    return None


def _check_batch(
    source: IndexedSource,
    vectors: np.ndarray,
    num_words: np.ndarray,
    sentence_words: list,
    dim: int,
    first_id: int,
    words: int,
) -> None:
    if first_id + len(vectors) > words:
        raise IndexInputError(f"embed output {source.path}: its shards hold more words than its manifest says ({words:,} in all)")
    if vectors.shape[-1] != dim:
        raise IndexInputError(f"embed output {source.path} has {vectors.shape[-1]}-dimensional vectors where {dim} were expected")
    if len(vectors) != int(num_words.sum()) or [len(words) for words in sentence_words] != num_words.tolist():
        raise IndexInputError(f"embed output {source.path}: a shard's vectors, num_words and words do not agree")
    if not np.isfinite(vectors).all():
        raise IndexInputError(f"embed output {source.path} holds NaN or infinite vectors (embedded with --allow-non-finite): they cannot be searched")


def read_index_record(index_dir: Path) -> dict[str, Any]:
    """``index.json`` of ``index_dir``, refused (naming the directory) unless it is an elmo-hf neighbours index."""
    if not index_dir.is_dir():
        raise IndexInputError(f"index {index_dir} is not a directory: build one with `elmo-hf neighbours build EMBED_DIR --output {index_dir}`")
    marker = read_marker(index_dir)
    if marker is None or marker.get("kind") != NEIGHBOURS_INDEX_OUTPUT.name:
        hint = (
            " (it is an embed output: build an index from it with `elmo-hf neighbours build`)"
            if marker is not None and marker.get("kind") == EMBEDDINGS_OUTPUT.name else ""
        )
        raise IndexInputError(f"{index_dir} is not {NEIGHBOURS_INDEX_OUTPUT.description} (no valid {MARKER_NAME} of that kind){hint}")
    try:
        record = json.loads((index_dir / INDEX_RECORD_NAME).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise IndexInputError(f"cannot read {index_dir / INDEX_RECORD_NAME}: {error}") from None
    if not isinstance(record, dict) or record.get("format") != INDEX_FORMAT or record.get("version") != INDEX_VERSION:
        raise IndexInputError(f"{index_dir / INDEX_RECORD_NAME} is not an elmo-hf neighbours index record (version {INDEX_VERSION})")
    return record


def open_recorded_source(entry: dict[str, Any], path: str | Path | None, index_dir: Path, verify: bool) -> IndexedSource:
    """The embed output an index was built from (at ``path`` if given, else where it was), refused if it changed
    since: its manifest must have the recorded sha256 (a re-run, resumed or overwritten output has another), its
    shards their listed sizes; ``verify`` also re-hashes every shard."""
    path = Path(path if path is not None else entry["path"])
    rebuild = f"rebuild the index: elmo-hf neighbours build ... --output {index_dir} --overwrite"
    if not (path / MANIFEST_NAME).is_file():
        raise IndexInputError(
            f"index {index_dir} was built from the embed output {entry['path']}, and {path} holds no elmo-hf embed output "
            f"(no {MANIFEST_NAME}); pass where it is now (embeddings= / --embeddings) or {rebuild}"
        )
    source = IndexedSource.open(path, verify=verify)
    if source.manifest_sha256 != entry["manifest_sha256"]:
        raise IndexInputError(
            f"the embed output {path} has changed since index {index_dir} was built from it (its manifest differs: "
            f"another run, input or model); {rebuild}"
        )
    for shard in source.manifest.shards:
        problem = shard_problem(path, shard, check_sha256=False)  # verify=True re-hashed them already
        if problem is not None:
            raise IndexInputError(
                f"the embed output {path} has changed since index {index_dir} was built from it ({problem}; check it "
                f"with `elmo-hf embed --verify {path}`); {rebuild}"
            )
    if source.sentences != entry["sentences"] or source.words != entry["words"]:
        raise IndexInputError(f"the embed output {path} does not hold what index {index_dir} recorded; {rebuild}")
    source.first_sentence = entry["first_sentence"]
    return source


__all__ = [
    "FAISS_FILE_NAME", "INDEX_KINDS", "INDEX_RECORD_NAME", "NEIGHBOURS_INDEX_OUTPUT", "IndexBuildSummary", "IndexInputError",
    "IndexParameters", "IndexedSource", "build_index", "import_faiss", "normalised", "open_recorded_source", "read_index_record",
]
