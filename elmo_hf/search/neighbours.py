"""Contextual nearest neighbours (the paper's Table 4, over your own corpus): the word occurrences of an indexed corpus
whose ELMo vectors are nearest to a word in a query sentence, and the token layer's context-independent neighbours.

A query sentence is embedded exactly as the corpus was (model, representation, dtype, windows, word splitter: all
read from the index record), so a sentence of the corpus finds itself first with cosine 1. Scores are cosines
(approximate for ``ivfpq``). Usage and what a query means: docs/guide/neighbours.md.
"""

from __future__ import annotations

import bisect
import functools
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pyarrow.parquet as pq

from ..corpus.readers import CorpusSource
from ..embedding.manifest import plural
from ..embedding.parquet import INPUT_ROW_COLUMN
from ..validation_elmo import ELMoHFError, check_bool, check_int
from .index import (
    FAISS_FILE_NAME,
    SENTENCE_STARTS_NAME,
    VOCABULARY_NAME,
    WORD_IDS_NAME,
    IndexedSource,
    IndexInputError,
    import_faiss,
    normalised,
    open_recorded_source,
    read_index_record,
)

CACHED_SHARDS = 32  # shards whose sentences a loaded index keeps in memory (those its recent answers came from)
CONTEXT_WORDS = 12  # words shown on each side of the query word when a sentence is printed (describe)
DEFAULT_STATIC_VOCABULARY = 50_000  # the most frequent corpus words static neighbours are chosen among
STATIC_BATCH_WORDS = 4096  # one-word sentences a token-layer call; why so many: docs/results/measurements.md


class QueryError(ELMoHFError):
    """A query that cannot be answered as asked (a word not in the sentence, a position out of range, a vector of
    the wrong size); the message names the sentence and what was expected."""


@dataclass(frozen=True)
class Neighbour:
    """One word occurrence of the indexed corpus: ``words[position]`` is ``word``; ``score`` its cosine similarity to
    the query (``distance`` = 1 - score). ``source`` is the embed output, ``shard`` and ``row`` the row holding the
    sentence there, ``input_row`` its row in the embed run's input, ``where`` the same in words (``corpus.txt line 12``)."""

    score: float
    word: str
    position: int
    words: tuple[str, ...]
    sentence: str
    where: str
    source: str
    shard: str
    row: int
    input_row: int | None
    index_id: int

    @property
    def distance(self) -> float:
        return 1.0 - self.score


@dataclass(frozen=True)
class StaticNeighbour:
    """A vocabulary word and the cosine similarity of its token-layer vector to the query word's."""

    word: str
    score: float


@dataclass
class QueryResult:
    """The answer to one query: the query sentence's ``words``, the ``position`` of the query word, the
    ``representation`` searched (e.g. ``"scalar mix 0"``), the nearest occurrences best first and, when asked for,
    the token layer's static neighbours of the word."""

    words: list[str]
    position: int
    representation: str
    index_kind: str
    neighbours: list[Neighbour]
    static_neighbours: list[StaticNeighbour] = field(default_factory=list)
    same_word: bool = False

    @property
    def word(self) -> str:
        return self.words[self.position]

    def to_json(self) -> dict[str, Any]:
        return {
            "query": " ".join(self.words),
            "word": self.word,
            "position": self.position,
            "representation": self.representation,
            "index": self.index_kind,
            "same_word": self.same_word,
            "neighbours": [{**asdict(neighbour), "words": list(neighbour.words)} for neighbour in self.neighbours],
            "static_neighbours": [asdict(neighbour) for neighbour in self.static_neighbours],
        }

    def describe(self) -> str:
        """The answer as text: one line per neighbour (cosine, where, the sentence around the word)."""
        among = f"occurrences of {self.word!r}" if self.same_word else "word occurrences"
        lines = [
            f"query: {highlighted(self.words, self.position)}",
            f"nearest {among} ({self.representation}, cosine, {self.index_kind} index):",
        ]
        if not self.neighbours:
            lines.append(f"  (none: {self.word!r} does not occur in the indexed corpus)" if self.same_word else "  (none)")
        width = max((len(neighbour.where) for neighbour in self.neighbours), default=0)
        for rank, neighbour in enumerate(self.neighbours, 1):
            lines.append(f"  {rank:>2}. {neighbour.score:.4f}  {neighbour.where:<{width}}  {highlighted(neighbour.words, neighbour.position)}")
        if self.static_neighbours:
            cells = ", ".join(f"{neighbour.word} {neighbour.score:.3f}" for neighbour in self.static_neighbours)
            lines.append(f"static neighbours of {self.word!r} (token layer, no context): {cells}")
        return "\n".join(lines)


def highlighted(words: Sequence[str], position: int, context: int = CONTEXT_WORDS) -> str:
    """``words`` joined with ``[word]`` at ``position``, cut to ``context`` words on each side (``...`` marks a cut)."""
    start, end = max(0, position - context), min(len(words), position + context + 1)
    shown = [f"[{word}]" if index == position else word for index, word in enumerate(words[start:end], start)]
    return " ".join(["..."] * (start > 0) + shown + ["..."] * (end < len(words)))


def describe_representation(vectors: dict[str, Any]) -> str:
    """``"scalar mix 0"``, ``"layer 1"`` (0 = token layer), ``"top layer"``, ``"average of all layers"``."""
    representation = vectors["representation"]
    if representation == "mix":
        return f"scalar mix {vectors['mix_index']}"
    if representation == "top":
        return "top layer"
    if representation == "average":
        return "average of all layers"
    layer = vectors["layer"] if representation == "all" else representation
    return "layer 0 (token layer)" if layer == 0 else f"layer {layer}"


def resolve_position(words: Sequence[str], word: str | None, position: int | None) -> int:
    """The position of the query word among ``words``: ``position`` (0-based; if ``word`` is given too it must be
    the word there) or the first occurrence of ``word``. ``QueryError`` naming the sentence otherwise."""
    sentence = " ".join(words)
    if position is not None:
        if isinstance(position, bool) or not isinstance(position, (int, np.integer)):
            raise QueryError(f"position must be an int (0-based index of a word of the sentence), got {position!r}")
        if not 0 <= position < len(words):
            raise QueryError(
                f"position {position} is out of range: the sentence {sentence!r} has {plural(len(words), 'word')} "
                f"(positions 0 to {len(words) - 1}): {list(words)}"
            )
        if word is not None and words[position] != word:
            raise QueryError(f"word {position} of the sentence {sentence!r} is {words[position]!r}, not {word!r}")
        return int(position)
    if word is None:
        raise QueryError("name the query word: give word= (its first occurrence is used) or position= (0-based)")
    if word not in words:
        others = [candidate for candidate in words if candidate.lower() == word.lower()]
        hint = f" (it has {others[0]!r}: words are matched exactly)" if others else ""
        raise QueryError(f"the word {word!r} is not in the sentence {sentence!r}{hint}; its words are {list(words)}")
    return list(words).index(word)


def token_vectors(model, tokenizer, words: Sequence[str], batch_size: int = STATIC_BATCH_WORDS) -> np.ndarray:
    """Normalised token-layer vectors of ``words`` (N, P) float32: each word alone through ``ELMoModel.token_layer``."""
    import torch

    vectors = []
    with torch.inference_mode():
        for start in range(0, len(words), batch_size):
            input_ids, attention_mask = tokenizer.batch_character_ids([[word] for word in words[start : start + batch_size]])
            tokens, _ = model.token_layer(torch.from_numpy(input_ids).to(model.device), torch.from_numpy(attention_mask).to(model.device))
            vectors.append(normalised(tokens[:, 0].float().cpu().numpy()))
    return np.concatenate(vectors) if vectors else np.zeros((0, model.config.projection_dim), np.float32)


def static_neighbours(
    model, tokenizer, word: str, vocabulary: Sequence[str], k: int = 10, *, vocabulary_vectors: np.ndarray | None = None
) -> list[StaticNeighbour]:
    """The ``k`` words of ``vocabulary`` (the word itself left out) whose token-layer vectors are nearest (cosine) to
    ``word``'s: ELMo's context-independent neighbours. ``vocabulary_vectors``: ``token_vectors(model, tokenizer,
    vocabulary)`` computed before, to reuse across queries."""
    check_int("k", k, 1)
    if vocabulary_vectors is None:
        vocabulary_vectors = token_vectors(model, tokenizer, list(vocabulary))
    if len(vocabulary_vectors) != len(vocabulary):
        raise ValueError(f"vocabulary_vectors has {len(vocabulary_vectors)} rows for {len(vocabulary)} vocabulary words")
    scores = vocabulary_vectors @ token_vectors(model, tokenizer, [word])[0]
    order = np.argsort(-scores, kind="stable")
    return [StaticNeighbour(vocabulary[index], float(scores[index])) for index in order if vocabulary[index] != word][:k]


class ContextualIndex:
    """A neighbours index (``build_index``) opened for queries (``ContextualIndex.load``), with the embed outputs it
    was built from. The model is loaded and checked (indexed size, recorded fingerprint) at the first query; answers'
    sentences are read from the embed outputs' shards (the last ``CACHED_SHARDS`` kept in memory)."""

    def __init__(
        self,
        index_dir: Path,
        record: dict[str, Any],
        faiss_index,
        sources: list[IndexedSource],
        sentence_starts: np.ndarray,
        word_ids: np.ndarray,
        vocabulary: list[str],
        counts: list[int],
        *,
        model=None,
        device=None,
    ):
        self.index_dir = index_dir
        self.record = record
        self.faiss_index = faiss_index
        self.sources = sources
        self.sentence_starts = sentence_starts
        self.word_ids = word_ids
        self.vocabulary = vocabulary
        self.counts = counts
        self.word_numbers = {word: number for number, word in enumerate(vocabulary)}
        self._model_argument = model
        self._device = device
        self._rows_of_shard = functools.lru_cache(maxsize=CACHED_SHARDS)(self._read_rows_of_shard)
        self._static_vocabulary = functools.lru_cache(maxsize=None)(self._static_vocabulary_vectors)

    @classmethod
    def load(
        cls,
        index_dir: str | Path,
        *,
        embeddings: str | Path | Sequence[str | Path] | None = None,
        model=None,
        device=None,
        verify: bool = False,
    ) -> "ContextualIndex":
        """Open the index at ``index_dir``. ``embeddings``: where the embed outputs are now, in the indexed order, if
        they moved (each must be unchanged: its manifest's sha256 and every shard's size are checked); ``model``: an
        `ELMoModel`, directory or Hub repo id with the recorded weights, if the recorded name does not load here;
        ``device``: where queries run (default: CPU); ``verify``: also re-hash every shard."""
        faiss = import_faiss()
        check_bool("verify", verify)
        index_dir = Path(index_dir)
        record = read_index_record(index_dir)
        recorded = record["sources"]
        paths = [None] * len(recorded) if embeddings is None else ([embeddings] if isinstance(embeddings, (str, Path)) else list(embeddings))
        if len(paths) != len(recorded):
            raise IndexInputError(
                f"index {index_dir} was built from {plural(len(recorded), 'embed output')} ({', '.join(entry['path'] for entry in recorded)}); "
                f"embeddings names {len(paths)}: give one path for each, in that order"
            )
        sources = [open_recorded_source(entry, path, index_dir, verify) for entry, path in zip(recorded, paths)]
        try:
            faiss_index = faiss.read_index(str(index_dir / FAISS_FILE_NAME))
        except RuntimeError as error:
            raise IndexInputError(f"cannot read the FAISS index {index_dir / FAISS_FILE_NAME}: {str(error).strip().splitlines()[-1]}") from None
        totals, dim = record["totals"], record["vectors"]["dim"]
        if faiss_index.d != dim or faiss_index.ntotal != totals["words"]:
            raise IndexInputError(
                f"{index_dir / FAISS_FILE_NAME} holds {faiss_index.ntotal:,} vectors of {faiss_index.d} dimensions, but "
                f"{index_dir} records {totals['words']:,} of {dim}: the index files do not belong together; build it again"
            )
        sentence_starts = np.load(index_dir / SENTENCE_STARTS_NAME, mmap_mode="r")
        word_ids = np.load(index_dir / WORD_IDS_NAME, mmap_mode="r")
        vocabulary = json.loads((index_dir / VOCABULARY_NAME).read_text(encoding="utf-8"))
        if sentence_starts.shape != (totals["sentences"] + 1,) or word_ids.shape != (totals["words"],) or len(vocabulary["words"]) != totals["vocabulary"]:
            raise IndexInputError(f"the files of index {index_dir} do not agree with its {index_dir / 'index.json'}: build it again")
        return cls(index_dir, record, faiss_index, sources, sentence_starts, word_ids, vocabulary["words"], vocabulary["counts"], model=model, device=device)

    @property
    def dim(self) -> int:
        return self.record["vectors"]["dim"]

    @property
    def kind(self) -> str:
        return self.record["index"]["kind"]

    @property
    def representation(self) -> str:
        return describe_representation(self.record["vectors"])

    def describe(self) -> str:
        totals, vectors = self.record["totals"], self.record["vectors"]
        return (
            f"index {self.index_dir}: {self.kind} ({self.record['index']['factory']}), {plural(totals['words'], 'word')} of "
            f"{plural(totals['sentences'], 'sentence')} from {plural(len(self.sources), 'embed output')}; {self.representation} "
            f"of {self.record['model']['name']} ({vectors['dim']} dimensions, stored as {vectors['dtype']})"
        )

    @functools.cached_property
    def embedder(self):
        """The `ELMoEmbedder` that embeds queries exactly as the corpus was embedded (loaded and checked once)."""
        from ..embedding.embedder import ELMoEmbedder
        from ..embedding.manifest import model_fingerprint
        from ..modeling_elmo import ELMoModel
        from ..tokenization_elmo import ELMoTokenizer

        recorded, vectors = self.record["model"], self.record["vectors"]
        model = self._model_argument
        if model is None or isinstance(model, (str, Path)):
            name = str(model if model is not None else recorded["name"])
            try:
                model = ELMoModel.from_pretrained(name)
            except (OSError, ValueError) as error:
                raise IndexInputError(
                    f"cannot load the model {name!r} that embedded the corpus of index {self.index_dir}: {error}. Pass "
                    "that model (model= / --model)"
                ) from None
        if model.config.output_dim != self.dim:
            raise IndexInputError(
                f"the model gives {model.config.output_dim}-dimensional vectors, but index {self.index_dir} holds "
                f"{self.dim}-dimensional ones (embedded with {recorded['name']}): pass that model"
            )
        if model_fingerprint(model) != recorded["sha256"]:
            raise IndexInputError(
                f"the model has other weights than {recorded['name']}, which embedded the corpus of index "
                f"{self.index_dir} (sha256 {recorded['sha256'][:12]}...): its vectors are not comparable; pass that model"
            )
        # The model's own tokenizer (a character vocabulary of its own, boundary rows), splitting as the embed run did;
        # ELMoEmbedder refuses one that does not fit the model.
        tokenizer_source = str(model.name_or_path or recorded["name"])
        try:
            splitting = {name: vectors["tokenizer"][name] for name in ("word_splitter", "unicode_errors")}
            tokenizer = ELMoTokenizer.from_pretrained(tokenizer_source, **splitting)
        except (OSError, ValueError) as error:
            raise IndexInputError(f"cannot load the tokenizer of {tokenizer_source!r} for index {self.index_dir}: {error}") from None
        representation = vectors["layer"] if vectors["representation"] == "all" else vectors["representation"]
        return ELMoEmbedder(
            model, tokenizer, representation=representation, mix_index=vectors["mix_index"], dtype=vectors["dtype"],
            max_window_words=vectors["max_window_words"], window_context=vectors["window_context"],
            allow_tf32=vectors["allow_tf32"], compute_dtype=vectors.get("compute_dtype"), device=self._device,
        )

    def query(
        self,
        sentence: str | Sequence[str],
        word: str | None = None,
        *,
        position: int | None = None,
        k: int = 10,
        same_word: bool = False,
        nprobe: int | None = None,
        static_k: int = 0,
    ) -> QueryResult:
        """The ``k`` word occurrences of the corpus nearest to ``word`` (its first occurrence) or the word at
        ``position`` (0-based) in ``sentence`` (raw text, split as the embed run split its text, or a list of words).
        ``same_word``: only occurrences of that word (the paper's Table 4); ``nprobe``: clusters an IVF index scans
        (default: the recorded one); ``static_k``: also that many nearest words in the token layer."""
        check_int("k", k, 1)
        check_int("static_k", static_k, 0)
        check_bool("same_word", same_word)
        words = self._words_of(sentence)
        position = resolve_position(words, word, position)
        vector = self.embedder.embed_words([words])[0][position]  # (D,) in the stored dtype, as the corpus was
        only = None
        if same_word:
            number = self.word_numbers.get(words[position])
            only = np.flatnonzero(self.word_ids == number) if number is not None else np.zeros(0, np.int64)
        neighbours = self.search_vector(vector, k, nprobe=nprobe, only_ids=only)
        static = self.static_neighbours(words[position], static_k) if static_k else []
        return QueryResult(words, position, self.representation, self.kind, neighbours, static, same_word)

    def _words_of(self, sentence: str | Sequence[str]) -> list[str]:
        if isinstance(sentence, str):
            words = self.embedder.tokenizer.tokenize(sentence)
        elif isinstance(sentence, (list, tuple)) and all(isinstance(word, str) and word for word in sentence):
            words = list(sentence)
        else:
            raise QueryError(f"sentence must be a string or a list of non-empty strings (its words), got {sentence!r:.80}")
        if not words:
            raise QueryError(f"the sentence {sentence!r} has no words")
        return words

    def search_vector(self, vector: np.ndarray, k: int = 10, *, nprobe: int | None = None, only_ids: np.ndarray | None = None) -> list[Neighbour]:
        """The ``k`` occurrences nearest (cosine) to ``vector`` (D,), best first; ``only_ids``: among these index ids."""
        faiss = import_faiss()
        check_int("k", k, 1)
        vector = np.asarray(vector, dtype=np.float32)
        if vector.shape != (self.dim,):
            raise QueryError(
                f"a query vector of shape {vector.shape} for index {self.index_dir}, which holds {self.dim}-dimensional "
                f"vectors ({self.representation} of {self.record['model']['name']}): expected shape ({self.dim},)"
            )
        if only_ids is not None and len(only_ids) == 0:
            return []
        selector = faiss.IDSelectorBatch(np.ascontiguousarray(only_ids, dtype=np.int64)) if only_ids is not None else None
        if self.kind == "flat":
            parameters = faiss.SearchParameters(sel=selector)
        else:
            nprobe = check_int("nprobe", nprobe, 1, allow_none=True) or self.record["index"]["nprobe"]
            # A selector filters inside the clusters scanned: scan them all, or occurrences elsewhere are missed.
            parameters = faiss.SearchParametersIVF(sel=selector, nprobe=self.faiss_index.nlist if selector is not None else nprobe)
        scores, ids = self.faiss_index.search(normalised(vector[None]), min(k, self.faiss_index.ntotal), params=parameters)
        return [self.occurrence(int(index_id), float(score)) for index_id, score in zip(ids[0], scores[0]) if index_id >= 0]

    def occurrence(self, index_id: int, score: float = float("nan")) -> Neighbour:
        """Index id ``index_id`` as a word occurrence: its sentence, read from the embed output's shard."""
        sentence = int(np.searchsorted(self.sentence_starts, index_id, side="right")) - 1
        position = index_id - int(self.sentence_starts[sentence])
        source_number = bisect.bisect_right([source.first_sentence for source in self.sources], sentence) - 1
        source = self.sources[source_number]
        first_rows = source.shard_first_rows
        local = sentence - source.first_sentence
        shard = int(np.searchsorted(first_rows, local, side="right")) - 1
        row = local - int(first_rows[shard])
        rows = self._rows_of_shard(source_number, shard)
        words = rows["words"][row]
        length = int(self.sentence_starts[sentence + 1] - self.sentence_starts[sentence])
        if len(words) != length or words[position] != self.vocabulary[self.word_ids[index_id]]:
            raise IndexInputError(
                f"{source.shard_path(shard)} row {row} is not the sentence index {self.index_dir} recorded: the embed "
                f"output changed since the index was built; rebuild it"
            )
        input_row = rows["input_row"][row]
        text = rows["text"][row] if rows["text"] is not None else " ".join(words)
        input_path, input_format = Path(source.manifest.input["path"]), source.manifest.input["format"]
        where = CorpusSource(Path(input_path.name), input_format).row_name(input_row) if input_row is not None else f"row {row}"
        return Neighbour(
            score, words[position], position, tuple(words), text, where, str(source.path), source.manifest.shards[shard]["file"],
            row, input_row, index_id,
        )

    def _read_rows_of_shard(self, source_number: int, shard: int) -> dict[str, list]:
        """The words, input rows and texts of one shard's rows (``_rows_of_shard`` keeps the last ``CACHED_SHARDS``)."""
        source = self.sources[source_number]
        columns = [source.words_column, INPUT_ROW_COLUMN] + ([source.text_column] if source.text_column else [])
        table = pq.read_table(source.shard_path(shard), columns=columns)
        return {
            "words": table.column(source.words_column).to_pylist(),
            "input_row": table.column(INPUT_ROW_COLUMN).to_pylist(),
            "text": table.column(source.text_column).to_pylist() if source.text_column else None,
        }

    def static_neighbours(
        self, word: str, k: int = 10, *, min_count: int = 1, max_words: int = DEFAULT_STATIC_VOCABULARY
    ) -> list[StaticNeighbour]:
        """The ``k`` corpus words nearest to ``word`` in the token layer, among the ``max_words`` most frequent words
        seen at least ``min_count`` times (their vectors are computed once per index and kept)."""
        vocabulary, vectors = self._static_vocabulary(check_int("min_count", min_count, 1), check_int("max_words", max_words, 1))
        return static_neighbours(self.embedder.model, self.embedder.tokenizer, word, vocabulary, k, vocabulary_vectors=vectors)

    def _static_vocabulary_vectors(self, min_count: int, max_words: int) -> tuple[list[str], np.ndarray]:
        """The static vocabulary and its token-layer vectors (``_static_vocabulary`` keeps them per index)."""
        order = sorted(range(len(self.vocabulary)), key=lambda number: -self.counts[number])  # stable: ties in corpus order
        chosen = [self.vocabulary[number] for number in order if self.counts[number] >= min_count][:max_words]
        return chosen, token_vectors(self.embedder.model, self.embedder.tokenizer, chosen)


__all__ = [
    "ContextualIndex", "Neighbour", "QueryError", "QueryResult", "StaticNeighbour", "describe_representation", "highlighted",
    "resolve_position", "static_neighbours", "token_vectors",
]
