"""Convert an ELMoForManyLangs model directory (HIT-SCIR's ELMo for 44 languages) to a Hugging Face directory
(``elmo-hf convert --elmoformanylangs DIR``): one ``ELMoModel`` with a Unicode character vocabulary (and word
embedding). What the package does differently (ids + 1, swapped word markers, highway sign, projection order, the
AllenNLP cell) and why pickles are read tensors-only: docs/design/conversion.md.
"""

from __future__ import annotations

import codecs
import json
import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..characters_elmo import CHARACTER_VOCABULARY_FILE_NAME, CharacterVocabulary
from ..configuration_elmo import ELMoConfig
from ..modeling_elmo import ELMoModel
from ..storage.files import sha256_of_file
from ..storage.output_directory import staged_output_directory
from ..tokenization_elmo import ELMoTokenizer
from .hdf5_layout import model_state_not_in_hdf5
from .model_cards import conversion_command, render_model_card
from .shared import (
    CONVERTED_MODEL_OUTPUT, ORIGINAL_ELMOFORMANYLANGS_CONFIG_FILE_NAME, ConversionError, ConversionReport, check_finite,
    model_from_state, push_directory_to_hub, write_converted,
)

ELMOFORMANYLANGS_CONFIG_FILE_NAME = "config.json"  # the package's config.json, which names the network configuration
CHARACTER_DIC = "char.dic"
WORD_DIC = "word.dic"
TOKEN_EMBEDDER_FILE = "token_embedder.pkl"
ENCODER_FILE = "encoder.pkl"

# The network configuration's keys: what the converter reads, and what it knows to be training-only.
NETWORK_SECTIONS = {"encoder", "token_embedder"}
TRAINING_ONLY_SECTIONS = {"classifier", "dropout"}
ENCODER_KEYS = {"name", "projection_dim", "dim", "n_layers", "cell_clip", "proj_clip"}
TOKEN_EMBEDDER_KEYS = {"name", "activation", "filters", "n_highway", "word_dim", "char_dim", "max_characters_per_token"}

# char.dic entries the package needs, and the elmo-hf marker each becomes. The package reads its markers swapped:
# `bow_id, eow_id = char2id['<eow>'], char2id['<bow>']` (frontend.create_one_batch).
CHARACTER_MARKER_ENTRIES = {
    "begin_word": "<eow>", "end_word": "<bow>", "padding": "<pad>", "unknown": "<oov>", "begin_sentence": "<bos>",
    "end_sentence": "<eos>",
}
BOUNDARY_WORDS = ("<bos>", "<eos>")  # the words the package puts around every sentence (elmo.read_list)
UNKNOWN_WORD = "<oov>"
REQUIRED_WORDS = ("<oov>", "<pad>")  # the package asserts both (frontend.create_one_batch)
ID_SHIFT = 1  # every .dic id + 1: 0 is the padding token

PARITY = (
    "On tiny random-weight models built with the `elmoformanylangs` package itself (0.0.4.post2; elmo-hf's "
    "`tests/fixtures/elmoformanylangs`, with and without the word embedding), the converted models match the "
    "package's `Embedder.sents2elmo` on every output layer and their average to a max abs difference of {parity}."
)
MEASURED_PARITY = "1.5e-6"  # both fixtures, both inference paths (tests/conversion/test_elmoformanylangs.py: bound 1e-5)


@dataclass
class ElmoForManyLangsModel:
    """What the converter read from a model directory."""

    directory: Path
    network_config_file: Path
    network: dict[str, Any]
    config: ELMoConfig
    vocabulary: CharacterVocabulary
    state_dict: dict[str, torch.Tensor]


@dataclass
class ElmoForManyLangsReport(ConversionReport):
    num_characters: int
    num_words: int
    ignored_keys: list[str] = field(default_factory=list)

    def describe(self) -> list[str]:
        config = self.config
        words = f", word embedding {config.word_embedding_dim} x {self.num_words:,} words" if config.word_embedding_dim else ""
        return [
            f"Converted ELMoForManyLangs: {self.architecture()}, {self.num_characters:,} characters (limit "
            f"{config.max_characters_per_token - 2} per word){words}; {self.num_parameters:,} parameters -> {self.output_dir}"
        ] + [f"  training-only section (not part of the biLM, not converted): {key}" for key in self.ignored_keys]


# ---- reading the directory --------------------------------------------------------------------------------------------


def read_json(path: Path, what: str) -> Any:
    if not path.is_file():
        raise ConversionError(f"{path}: missing ({what}).")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConversionError(f"{path} is not valid JSON ({what}): {error}") from None


def network_config_path(directory: Path) -> Path:
    """The network configuration named by config.json's ``config_path``, found as the package finds it: the path as
    given (relative to the model directory), then its file name inside the directory."""
    options = read_json(directory / ELMOFORMANYLANGS_CONFIG_FILE_NAME, "the package's config.json, which names the network configuration")
    if not isinstance(options, dict) or not isinstance(options.get("config_path"), str) or not options["config_path"]:
        raise ConversionError(f"{directory / ELMOFORMANYLANGS_CONFIG_FILE_NAME}: expected an object with a 'config_path' string.")
    given = Path(options["config_path"])
    for candidate in (directory / given, directory / given.name):
        if candidate.is_file():
            return candidate
    raise ConversionError(
        f"{directory / ELMOFORMANYLANGS_CONFIG_FILE_NAME} names the network configuration {options['config_path']!r}, which is not in "
        f"{directory}. Released models use the package's elmoformanylangs/configs/cnn_50_100_512_4096_sample.json: "
        "copy that file into the model directory (the package's README says the same)."
    )


def check_network(network: Any, source: Path) -> dict[str, Any]:
    """The network configuration, checked: unknown keys and other architectures are refused."""
    if not isinstance(network, dict):
        raise ConversionError(f"{source}: expected a JSON object with 'encoder' and 'token_embedder'.")
    unknown = set(network) - NETWORK_SECTIONS - TRAINING_ONLY_SECTIONS
    missing = NETWORK_SECTIONS - set(network)
    if unknown or missing:
        raise ConversionError(f"{source}: unknown section(s) {sorted(unknown)}, missing {sorted(missing)}.")
    for section, keys in (("encoder", ENCODER_KEYS), ("token_embedder", TOKEN_EMBEDDER_KEYS)):
        values = network[section]
        if not isinstance(values, dict) or set(values) != keys:
            found = sorted(values) if isinstance(values, dict) else type(values).__name__
            raise ConversionError(
                f"{source}: section {section!r} must have exactly the keys {sorted(keys)} (the package reads those), "
                f"got {found}."
            )
    encoder, embedder = network["encoder"], network["token_embedder"]
    if str(encoder["name"]).lower() != "elmo":
        raise ConversionError(
            f"{source}: encoder.name is {encoder['name']!r}; only 'elmo' (the biLM with projections and skip "
            "connections) converts: the package's 'lstm' encoder is a plain stacked LSTM, another architecture."
        )
    if str(embedder["name"]).lower() != "cnn":
        raise ConversionError(
            f"{source}: token_embedder.name is {embedder['name']!r}; only 'cnn' (the character CNN) converts: the "
            "package's 'lstm' token embedder runs a character LSTM, which elmo-hf's token layer does not have."
        )
    if not isinstance(embedder["char_dim"], int) or embedder["char_dim"] <= 0:
        raise ConversionError(
            f"{source}: token_embedder.char_dim is {embedder['char_dim']!r}; a model without character input (words "
            "only) does not convert: elmo-hf's token layer is the character CNN."
        )
    return network


def elmo_config(
    network: dict[str, Any], vocabulary: CharacterVocabulary, num_characters: int, num_words: int, source: Path
) -> ELMoConfig:
    """The ELMoConfig of the network; ``ConversionError`` for one elmo-hf cannot compute the same way."""
    encoder, embedder = network["encoder"], network["token_embedder"]
    try:
        begin_sentence_ids, end_sentence_ids = vocabulary.boundary_rows(embedder["max_characters_per_token"])
        config = ELMoConfig(
            char_embedding_dim=embedder["char_dim"],
            char_cnn_filters=embedder["filters"],
            num_highway_layers=embedder["n_highway"],
            char_cnn_activation=embedder["activation"],
            num_characters=num_characters,
            max_characters_per_token=embedder["max_characters_per_token"],
            projection_dim=encoder["projection_dim"],
            lstm_cell_size=encoder["dim"],
            num_lstm_layers=encoder["n_layers"],
            # The package clips when the value is truthy (`if self.memory_cell_clip_value:`), like elmo-hf.
            cell_clip=encoder["cell_clip"] or None,
            projection_clip=encoder["proj_clip"] or None,
            use_skip_connections=True,  # ElmobiLm always adds each layer's input from the second layer on
            character_vocabulary="unicode_characters",
            begin_sentence_ids=begin_sentence_ids,
            end_sentence_ids=end_sentence_ids,
            word_embedding_dim=embedder["word_dim"],
            word_embedding_vocab_size=num_words if embedder["word_dim"] else 0,
            tf_forget_gate_bias=False,  # AllenNLP's cell: the stored bias is the whole bias
        )
    except (TypeError, ValueError) as error:
        raise ConversionError(f"{source}: the network configuration does not make an elmo-hf model: {error}") from None
    features = config.char_cnn_output_dim + config.word_embedding_dim
    if features == config.projection_dim:
        raise ConversionError(
            f"{source}: the token embedder's features ({config.char_cnn_output_dim} filters + word_dim "
            f"{config.word_embedding_dim}) are already projection_dim ({config.projection_dim}) wide; the package still "
            "projects them, elmo-hf's token layer has no projection then."
        )
    if config.lstm_cell_size == config.projection_dim:
        raise ConversionError(
            f"{source}: encoder.dim equals encoder.projection_dim ({config.projection_dim}); the package's LSTM still "
            "projects its output, elmo-hf's LSTM has no projection then."
        )
    return config


def read_dic(path: Path) -> dict[str, int]:
    """A .dic file as the package reads it (``elmo.Embedder.get_model``): each line stripped and split at tabs, a bare
    id meaning U+3000, later lines replacing earlier ones. Lines the package cannot read are refused."""
    if not path.is_file():
        raise ConversionError(f"{path}: missing (the package's vocabulary file, `entry<TAB>id` lines).")
    entries: dict[str, int] = {}
    try:
        # codecs.open, as the package: its line iteration splits where the package's does.
        with codecs.open(str(path), "r", encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                fields = line.strip().split("\t")
                if len(fields) == 1:
                    # The package's reader: the line's only entry was a whitespace character, stripped away above.
                    fields.insert(0, "\u3000")
                try:
                    entry, index = fields
                    entries[entry] = int(index)
                except ValueError:
                    raise ConversionError(f"{path}, line {number}: expected `entry<TAB>id`, got {line!r}.") from None
    except UnicodeDecodeError as error:
        raise ConversionError(f"{path} is not UTF-8: {error}") from None
    return entries


def check_dic_ids(entries: dict[str, int], rows: int, path: Path, what: str) -> None:
    """The package builds an embedding of ``len(entries)`` rows and loads the pickled one into it."""
    if len(entries) != rows:
        raise ConversionError(
            f"{path} has {len(entries)} distinct entries but the pickled {what} has {rows} rows (the package could not "
            "load this model either)."
        )
    out_of_range = [(entry, index) for entry, index in entries.items() if not 0 <= index < rows]
    if out_of_range:
        raise ConversionError(f"{path}: ids must be in [0, {rows}) (the {what}'s rows), got {out_of_range[:3]}.")


def character_vocabulary(characters: dict[str, int], words: dict[str, int] | None, directory: Path) -> CharacterVocabulary:
    missing = [entry for entry in CHARACTER_MARKER_ENTRIES.values() if entry not in characters]
    if missing:
        raise ConversionError(f"{directory / CHARACTER_DIC}: missing the package's marker entries {missing}.")
    if words is not None:
        missing_words = [word for word in REQUIRED_WORDS if word not in words]
        if missing_words:
            raise ConversionError(f"{directory / WORD_DIC}: missing the package's entries {missing_words}.")
    return CharacterVocabulary(
        # Other multi-character entries (none in the package's own files) could never match a character.
        {character: index + ID_SHIFT for character, index in characters.items() if len(character) == 1},
        **{marker: characters[entry] + ID_SHIFT for marker, entry in CHARACTER_MARKER_ENTRIES.items()},
        boundary_words=BOUNDARY_WORDS,
        words=None if words is None else {word: index + ID_SHIFT for word, index in words.items()},
        unknown_word=None if words is None else words[UNKNOWN_WORD] + ID_SHIFT,
    )


def load_pickled_state_dict(path: Path, allow_pickle: bool) -> dict[str, torch.Tensor]:
    """A pickled state dict, tensors only unless ``allow_pickle``; refused when it is anything else."""
    if not path.is_file():
        raise ConversionError(f"{path}: missing (a pickled torch state dict of the package).")
    unrestricted = False
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if not allow_pickle:
            reason = str(error).splitlines()[-1] if str(error).strip() else type(error).__name__
            raise ConversionError(
                f"{path} holds more than tensors, so torch.load(weights_only=True) refuses it ({reason.strip()}). "
                "Unpickling it can run any code it names: pass --allow-pickle (allow_pickle=True) only if you trust "
                "where the file came from."
            ) from None
        state, unrestricted = _load_unrestricted(path), True
    except (RuntimeError, EOFError, KeyError, ValueError, OSError) as error:
        raise ConversionError(f"{path} cannot be read as a torch state dict (truncated or damaged?): {error}") from None
    if not isinstance(state, Mapping) or not all(
        isinstance(name, str) and isinstance(tensor, torch.Tensor) for name, tensor in state.items()
    ):
        found = type(state).__name__ if not isinstance(state, Mapping) else "a mapping holding other things than named tensors"
        raise ConversionError(
            f"{path}: expected a state dict (names -> tensors), got {found}"
            + (
                ": it is not an ELMoForManyLangs weight file. It was unpickled without restrictions (--allow-pickle), "
                "so any code it names has already run: do not trust where it came from."
                if unrestricted else "."
            )
        )
    return {name: tensor.float() for name, tensor in state.items()}


def _load_unrestricted(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # an arbitrary pickle fails in arbitrary ways
        raise ConversionError(f"{path} cannot be unpickled: {type(error).__name__}: {error}") from None


# ---- the renaming -----------------------------------------------------------------------------------------------------


# A pickle's layout: each package tensor -> (its shape, the model tensors it becomes).
PackageLayout = dict[str, tuple[tuple[int, ...], Callable[[torch.Tensor], dict[str, torch.Tensor]]]]


def padding_row_first(embedding: torch.Tensor) -> torch.Tensor:
    """(rows, dim) -> (1 + rows, dim): the all-zero row of the padding token (id 0) in front (every id was shifted)."""
    return torch.cat([embedding.new_zeros(1, embedding.shape[1]), embedding])


def _renamed(name: str) -> Callable[[torch.Tensor], dict[str, torch.Tensor]]:
    return lambda tensor: {name: tensor}


def token_embedder_layout(config: ELMoConfig, num_characters: int, num_words: int) -> PackageLayout:
    """token_embedder.pkl -> ``char_embeddings.*``."""
    size, word_dim, char_dim = config.char_cnn_output_dim, config.word_embedding_dim, config.char_embedding_dim
    embeddings = [("char_emb_layer", num_characters, char_dim, "embedding")] + ([("word_emb_layer", num_words, word_dim, "word_embedding")] if word_dim else [])
    layout: PackageLayout = {
        f"{source}.embedding.weight": ((rows, dim), lambda tensor, name=f"char_embeddings.{target}.weight": {name: padding_row_first(tensor)})
        for source, rows, dim, target in embeddings
    }
    for index, (width, count) in enumerate(config.char_cnn_filters):  # Conv1d (count, char_dim, width) in both
        layout[f"convolutions.{index}.weight"] = ((count, char_dim, width), _renamed(f"char_embeddings.convolutions.{index}.weight"))
        layout[f"convolutions.{index}.bias"] = ((count,), _renamed(f"char_embeddings.convolutions.{index}.bias"))
    for index in range(config.num_highway_layers):
        for kind, shape in (("weight", (2 * size, size)), ("bias", (2 * size,))):
            prefix = f"char_embeddings.highways.{index}"
            # Stored [A; B]. AllenNLP's gate multiplies the input (g * x + (1 - g) * f); TF's multiplies f:
            # 1 - sigmoid(z) = sigmoid(-z).
            layout[f"highways._layers.{index}.{kind}"] = (
                shape, lambda tensor, p=prefix, k=kind: {f"{p}.transform.{k}": tensor[:size], f"{p}.gate.{k}": -tensor[size:]}
            )
    # The package projects [word; characters]; elmo-hf concatenates [characters; word].
    layout["projection.weight"] = (
        (config.projection_dim, word_dim + size),
        lambda tensor: {"char_embeddings.projection.weight": torch.cat([tensor[:, word_dim:], tensor[:, :word_dim]], dim=1)},
    )
    layout["projection.bias"] = ((config.projection_dim,), _renamed("char_embeddings.projection.bias"))
    return layout


def encoder_layout(config: ELMoConfig) -> PackageLayout:
    """encoder.pkl -> ``encoder.*``: AllenNLP's cell keeps its only bias on the recurrent side, elmo-hf on the input
    side (the sum is the same); gate blocks are (input, forget, candidate, output) in both."""
    gates, projection_dim = 4 * config.lstm_cell_size, config.projection_dim
    layout: PackageLayout = {}
    for layer in range(config.num_lstm_layers):
        for direction in ("forward", "backward"):
            source, target = f"{direction}_layer_{layer}", f"encoder.{direction}_layers.{layer}"
            for name, shape, model_name in (
                ("input_linearity.weight", (gates, projection_dim), "input_to_gates.weight"),
                ("state_linearity.weight", (gates, projection_dim), "state_to_gates.weight"),
                ("state_linearity.bias", (gates,), "input_to_gates.bias"),
                ("state_projection.weight", (projection_dim, config.lstm_cell_size), "state_projection.weight"),
            ):
                layout[f"{source}.{name}"] = (shape, _renamed(f"{target}.{model_name}"))
    return layout


def model_state_of_package(state: dict[str, torch.Tensor], layout: PackageLayout, path: Path, allow_non_finite: bool) -> dict:
    """The model tensors of one pickle, after checking it holds exactly the layout's tensors, finite, of their shapes."""
    missing = sorted(set(layout) - set(state))
    unexpected = sorted(set(state) - set(layout))
    if missing or unexpected:
        raise ConversionError(
            f"{path} does not match the network configuration: missing {missing}, unexpected {unexpected}."
        )
    model_state = {}
    for name, (shape, to_model) in layout.items():
        if tuple(state[name].shape) != shape:
            raise ConversionError(
                f"{path} does not match the network configuration: {name!r} has shape {tuple(state[name].shape)}, "
                f"expected {shape}."
            )
        check_finite(state[name].numpy(), f"{path}: {name!r}", allow_non_finite)
        model_state.update(to_model(state[name]))
    return model_state


def read_elmoformanylangs(directory: str | Path, allow_pickle: bool = False, allow_non_finite: bool = False) -> ElmoForManyLangsModel:
    """Read and check an ELMoForManyLangs model directory; ``ConversionError`` on anything the package would not load
    the same way or elmo-hf cannot compute the same way."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ConversionError(f"{directory}: not a directory (expected an ELMoForManyLangs model directory).")
    config_file = network_config_path(directory)
    network = check_network(read_json(config_file, "the network configuration"), config_file)
    token_embedder = load_pickled_state_dict(directory / TOKEN_EMBEDDER_FILE, allow_pickle)
    encoder = load_pickled_state_dict(directory / ENCODER_FILE, allow_pickle)
    characters = read_dic(directory / CHARACTER_DIC)
    character_rows = _rows_of(token_embedder, "char_emb_layer.embedding.weight", directory / TOKEN_EMBEDDER_FILE)
    check_dic_ids(characters, character_rows, directory / CHARACTER_DIC, "character embedding")
    words = None
    if network["token_embedder"]["word_dim"]:
        words = read_dic(directory / WORD_DIC)
        word_rows = _rows_of(token_embedder, "word_emb_layer.embedding.weight", directory / TOKEN_EMBEDDER_FILE)
        check_dic_ids(words, word_rows, directory / WORD_DIC, "word embedding")
    vocabulary = character_vocabulary(characters, words, directory)
    num_words = 0 if words is None else len(words)
    config = elmo_config(network, vocabulary, len(characters) + ID_SHIFT, num_words + ID_SHIFT, config_file)
    state = {
        **model_state_of_package(token_embedder, token_embedder_layout(config, len(characters), num_words), directory / TOKEN_EMBEDDER_FILE, allow_non_finite),
        **model_state_of_package(encoder, encoder_layout(config), directory / ENCODER_FILE, allow_non_finite),
        **{name: torch.from_numpy(array) for name, array in model_state_not_in_hdf5(config).items()},
    }
    return ElmoForManyLangsModel(directory, config_file, network, config, vocabulary, state)


def _rows_of(state: dict[str, torch.Tensor], name: str, path: Path) -> int:
    if name not in state or state[name].dim() != 2:
        raise ConversionError(f"{path}: expected a 2-D {name!r} (the embedding the network configuration implies).")
    return state[name].shape[0]


def build_tokenizer(read: ElmoForManyLangsModel) -> ELMoTokenizer:
    """The package takes words already split; text is split at whitespace (set ``word_splitter`` for another)."""
    return ELMoTokenizer(
        max_characters_per_token=read.config.max_characters_per_token, word_splitter="whitespace",
        character_vocabulary=read.vocabulary,
    )


# ---- writing the output -----------------------------------------------------------------------------------------------


def model_card(read: ElmoForManyLangsModel, model: ELMoModel, output_dir: Path, repo_id: str | None) -> str:
    directory = read.directory
    files = [read.network_config_file, directory / CHARACTER_DIC, directory / TOKEN_EMBEDDER_FILE, directory / ENCODER_FILE]
    if read.config.word_embedding_dim:
        files.insert(2, directory / WORD_DIC)
    provenance = "\n".join(
        [
            f"Converted from the ELMoForManyLangs model directory `{directory.name}` (HIT-SCIR, "
            "https://github.com/HIT-SCIR/ELMoForManyLangs):",
            "",
            *(f"- `{path.name}` (sha256 `{sha256_of_file(path)}`)" for path in files),
            "",
            f"The network configuration is kept next to the weights as `{ORIGINAL_ELMOFORMANYLANGS_CONFIG_FILE_NAME}`, the character"
            + (" and word vocabularies" if read.config.word_embedding_dim else " vocabulary")
            + f" as `{CHARACTER_VOCABULARY_FILE_NAME}` (ids + 1: 0 is the padding token). Words are given already "
            "split, as to the package (`is_split_into_words=True`); raw text is split at whitespace.",
            "",
            "ELMoForManyLangs: Che, Liu, Wang, Zheng and Liu (2018), \"Towards Better UD Parsing: Deep Contextualized "
            "Word Embeddings, Ensemble, and Treebank Concatenation\", CoNLL 2018 Shared Task. The package's code is "
            "MIT-licensed; check the licence of the weights where you downloaded them (the NLPL vector repository "
            "hosts the 44 released models).",
        ]
    )
    words = read.vocabulary.words
    description = (
        f"The ELMoForManyLangs model `{directory.name}` converted to Hugging Face format: a character vocabulary of "
        f"{len(read.vocabulary.characters):,} characters"
        + (f" and a word embedding of {len(words):,} words ({read.config.word_embedding_dim} dimensions)" if words else "")
        + "."
    )
    command = conversion_command(["--elmoformanylangs", directory.name], output_dir, repo_id)
    return render_model_card(
        model.config, model.num_parameters(), repo_id or output_dir.name, f"ELMoForManyLangs ({directory.name})",
        description, provenance, command, PARITY.format(parity=MEASURED_PARITY), language=None, license="other",
    )


def convert_elmoformanylangs(
    directory: str | Path,
    output_dir: str | Path,
    overwrite: bool = False,
    allow_pickle: bool = False,
    allow_non_finite: bool = False,
    push_to_hub: str | None = None,
    private: bool = False,
    revision: str | None = None,
    token: str | None = None,
) -> ElmoForManyLangsReport:
    """Convert the model directory ``directory`` into ``output_dir`` (atomically, under elmo-hf's output policy),
    optionally push it to the Hub repo ``push_to_hub``. Raises ``ConversionError`` (nothing written) or
    ``HubPushError`` (written, not pushed)."""
    directory, output_dir = Path(directory), Path(output_dir)
    with staged_output_directory(output_dir, CONVERTED_MODEL_OUTPUT, overwrite=overwrite, inputs=[directory]) as staging_dir:
        read = read_elmoformanylangs(directory, allow_pickle, allow_non_finite)
        model = model_from_state(ELMoModel, read.config, read.state_dict)
        card = model_card(read, model, output_dir, push_to_hub)
        write_converted(staging_dir, model, build_tokenizer(read), card, {ORIGINAL_ELMOFORMANYLANGS_CONFIG_FILE_NAME: read.network_config_file})
    report = ElmoForManyLangsReport(
        output_dir, read.config, model.num_parameters(), len(read.vocabulary.characters), len(read.vocabulary.words or ()),
        ignored_keys=sorted(set(read.network) & TRAINING_ONLY_SECTIONS),
    )
    if push_to_hub is not None:
        report.pushed_to = push_directory_to_hub(output_dir, push_to_hub, private, revision, token)
    return report


__all__ = [
    "ConversionError", "ElmoForManyLangsModel", "ElmoForManyLangsReport", "convert_elmoformanylangs",
    "read_elmoformanylangs",
]
