"""Convert an ELMo TF-Hub module in the TF1 Hub format (google/elmo 2-3, DeepPavlov's, a bilm-tf model exported
"for Hub") to a Hugging Face directory, without TensorFlow (``elmo-hf convert --tfhub MODULE``). Every variable is
accounted for: the biLM (renamed to its ``weights.hdf5`` name and mapped with the one layout table), the trained
scalar mix (the model's mix 0), bilm-tf's LSTM state buffers (checked, not converted). The sizes come from the shapes
unless ``--options`` is given. Where each variable goes and what is refused: docs/design/conversion.md.
"""

from __future__ import annotations

import re
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..configuration_elmo import ELMoConfig
from ..modeling_elmo import ELMoModel
from ..storage.output_directory import staged_output_directory
from ..tokenization_elmo import ELMoTokenizer
from .convert_tf_checkpoint import dump_weights_name, read_variable
from .hdf5_layout import ARCHITECTURE_DATASET_PATTERN, model_state_not_in_hdf5, weight_mappings
from .model_cards import conversion_command, render_model_card
from .shared import (
    CONVERTED_MODEL_OUTPUT, ORIGINAL_OPTIONS_FILE_NAME, ConversionError, ConversionReport, model_from_state,
    push_directory_to_hub, read_options, write_converted,
)
from .tf_checkpoint import TFCheckpoint
from .tfhub_module import VARIABLES_PREFIX, ModuleGraph, extracted_module, module_directory, read_module_graph

BILM_SCOPE = "bilm/"  # bilm-tf's BidirectionalLanguageModelGraph builds under tf.variable_scope('bilm')
STATE_BUFFER_PATTERN = re.compile(r"^bilm(?:_\d+)?/Variable(?:_(\d+))?$")  # unnamed tf.Variable()s, per graph
# google/elmo's names; bilm-tf's weight_layers' (under aggregation/ in DeepPavlov's exporter, at the root when called
# as bilm-tf's README does)
MIX_WEIGHTS_PATTERN = re.compile(r"^(aggregation/weights|(aggregation/)?\w+_ELMo_W)$")
MIX_SCALING_PATTERN = re.compile(r"^(aggregation/scaling|(aggregation/)?\w+_ELMo_gamma)$")
CHAR_EMBED = "char_embed"
GOOGLE_MIX_NAMES = ("aggregation/weights", "aggregation/scaling")
SPACE_WORD_SPLITTER = "space"  # the default signature's tf.string_split(sentences, " ")
# What the `default` output of the module's graph is the mean of (decoded from saved_model.pb).
POOLS_ELMO, POOLS_MIX_BEFORE_SCALING, POOLS_UNKNOWN = "elmo", "the mix before scaling", "unknown"


def hdf5_name_of_module_variable(variable: str) -> str:
    """The ``weights.hdf5`` dataset of a variable of bilm-tf's inference graph: ``bilm/`` removed, and the LSTM's
    ``RNN_d/RNN/MultiRNNCell/Celll/rnn/lstm_cell/kernel`` -> ``.../LSTMCell/W_0`` (bias -> B, projection/kernel ->
    W_P_0), the map bilm-tf's ``_pretrained_initializer`` loads the HDF5 file with."""
    name = variable.removeprefix(BILM_SCOPE)
    return dump_weights_name(name.replace("/rnn/lstm_cell/", "/lstm_cell/"))


# ---- the variables --------------------------------------------------------------------------------------------------


@dataclass
class ModuleVariables:
    """The module's variables by role: biLM weights (HDF5 name -> variable), the mix, the state buffers."""

    bilm: dict[str, str]
    mix_weights: str
    mix_scaling: str
    state_buffers: list[str]


def _one_match(names: list[str], pattern: re.Pattern, what: str, prefix: Path) -> str:
    matches = [name for name in names if pattern.match(name)]
    if len(matches) != 1:
        found = f"found {matches}" if matches else "found none"
        raise ConversionError(f"TF-Hub module {prefix}: expected one variable for {what} ({pattern.pattern}), {found}.")
    return matches[0]


def classify_variables(checkpoint: TFCheckpoint, module: Path) -> ModuleVariables:
    """Sort every variable into a role; an unknown name is refused, naming every such variable."""
    names = sorted(checkpoint.entries)
    state_buffers = [name for name in names if STATE_BUFFER_PATTERN.match(name)]
    weights = _one_match(names, MIX_WEIGHTS_PATTERN, "the scalar mix's weights", module)
    scaling = _one_match(names, MIX_SCALING_PATTERN, "the scalar mix's scaling", module)
    bilm = {
        hdf5_name_of_module_variable(name): name
        for name in names
        if name.startswith(BILM_SCOPE) and name not in state_buffers
    }
    unknown = [name for name in names if name not in {*state_buffers, weights, scaling, *bilm.values()}]
    unknown += [variable for name, variable in bilm.items() if not ARCHITECTURE_DATASET_PATTERN.match(name)]
    if unknown:
        raise ConversionError(
            f"TF-Hub module {module}: unknown variable(s) {sorted(unknown)}; an ELMo module holds bilm-tf's biLM under "
            "bilm/, its LSTM state buffers bilm*/Variable*, and the scalar mix under aggregation/."
        )
    return ModuleVariables(bilm, weights, scaling, state_buffers)


def _shape(checkpoint: TFCheckpoint, variables: ModuleVariables, hdf5_name: str, rank: int) -> tuple[int, ...]:
    """The shape of a biLM variable the sizes are read from; refused when missing or of another rank."""
    variable = variables.bilm.get(hdf5_name, BILM_SCOPE + hdf5_name)
    if variable not in checkpoint.entries:
        raise ConversionError(f"TF-Hub module {checkpoint.prefix}: missing variable {variable!r} (the network's sizes are read from it).")
    shape = checkpoint.entries[variable].shape
    if len(shape) != rank:
        raise ConversionError(f"TF-Hub module {checkpoint.prefix}: variable {variable!r} has shape {shape}, expected {rank} dimensions.")
    return shape


def config_from_shapes(checkpoint: TFCheckpoint, variables: ModuleVariables) -> ELMoConfig:
    """The network's sizes from the variables' shapes; the rest (clips, activation, skip connections, characters per
    token) is the original ELMo's: ``ELMoConfig``'s defaults. Every shape is then checked by the layout table."""
    rows, embedding_dim = _shape(checkpoint, variables, CHAR_EMBED, 2)
    filters, highways, layers = [], 0, 0
    while f"CNN/W_cnn_{len(filters)}" in variables.bilm or not filters:
        _, width, _, count = _shape(checkpoint, variables, f"CNN/W_cnn_{len(filters)}", 4)
        filters.append([width, count])
    while f"CNN_high_{highways}/W_carry" in variables.bilm:
        highways += 1
    while f"RNN_0/RNN/MultiRNNCell/Cell{layers}/LSTMCell/W_0" in variables.bilm or not layers:
        kernel_rows, gates = _shape(checkpoint, variables, f"RNN_0/RNN/MultiRNNCell/Cell{layers}/LSTMCell/W_0", 2)
        layers += 1
        if layers == 1:
            projection_dim, cell_size = kernel_rows // 2, gates // 4
    try:
        return ELMoConfig(
            char_embedding_dim=embedding_dim, char_cnn_filters=filters, num_highway_layers=highways,
            projection_dim=projection_dim, lstm_cell_size=cell_size, num_lstm_layers=layers,
        )
    except ValueError as error:
        raise ConversionError(f"TF-Hub module {checkpoint.prefix}: the shapes describe no ELMo ({error}).") from None


def read_char_embed(checkpoint: TFCheckpoint, variable: str, config: ELMoConfig, why: str, allow_non_finite: bool) -> np.ndarray:
    """``char_embed`` as the HDF5 file holds it (261 rows): bilm-tf's graph has 262, row 0 the padding token's zeros."""
    shape = checkpoint.entries[variable].shape if variable in checkpoint.entries else None
    rows = config.num_characters if shape and shape[0] == config.num_characters else config.num_characters - 1
    array = read_module_variable(checkpoint, variable, (rows, config.char_embedding_dim), why, allow_non_finite)
    if rows == config.num_characters:
        if np.any(array[0] != 0):
            raise ConversionError(
                f"TF-Hub module {checkpoint.prefix}: row 0 of {variable!r} (the padding token) is not zero; bilm-tf "
                "keeps it at zero, and elmo-hf's layout has no place for another value."
            )
        array = array[1:]
    return array


def read_module_variable(
    checkpoint: TFCheckpoint, variable: str, shape: tuple[int, ...], why: str, allow_non_finite: bool
) -> np.ndarray:
    """One float32 variable of the expected shape (``read_variable``), with this format's wording of a mismatch."""
    if variable in checkpoint.entries and checkpoint.entries[variable].shape != shape:
        raise ConversionError(
            f"TF-Hub module {checkpoint.prefix}: inconsistent shapes: variable {variable!r} has shape "
            f"{checkpoint.entries[variable].shape}, expected {shape} ({why})."
        )
    return read_variable(checkpoint, variable, shape, why, allow_non_finite)


def read_bilm_state(
    checkpoint: TFCheckpoint, variables: ModuleVariables, config: ELMoConfig, why: str, allow_non_finite: bool
) -> tuple[dict[str, np.ndarray], set[str]]:
    """(the model's parameters from the biLM variables, the variables used); leftover biLM variables are refused."""
    state, used = {}, set()
    for mapping in weight_mappings(config):
        variable = variables.bilm.get(mapping.hdf5_name, BILM_SCOPE + mapping.hdf5_name)
        if mapping.hdf5_name == CHAR_EMBED:
            array = read_char_embed(checkpoint, variable, config, why, allow_non_finite)
        else:
            array = read_module_variable(checkpoint, variable, mapping.hdf5_shape, why, allow_non_finite)
        state.update(zip(mapping.parameter_names, mapping.to_model(array)))
        used.add(variable)
    leftover = sorted(set(variables.bilm.values()) - used)
    if leftover:
        raise ConversionError(
            f"TF-Hub module {checkpoint.prefix}: inconsistent shapes: biLM variable(s) {leftover} belong to no layer "
            f"of the network the other variables describe ({why}; check n_highway, n_layers, filters, projection_dim)."
        )
    return state, used


def check_state_buffers(checkpoint: TFCheckpoint, variables: ModuleVariables, config: ELMoConfig) -> list[str]:
    """bilm-tf's state buffers: per graph (``bilm/``, ``bilm_1/``, ...) one (c, h) pair per direction and layer,
    (rows, cell) then (rows, projection), the same rows everywhere. Returns the buffers that are not all zeros."""
    scopes: dict[str, list[str]] = {}
    for name in variables.state_buffers:
        scopes.setdefault(name.split("/")[0], []).append(name)
    rows, non_zero = set(), []
    for scope, names in scopes.items():
        names.sort(key=lambda name: int(STATE_BUFFER_PATTERN.match(name).group(1) or 0))
        expected_count = 2 * config.num_lstm_layers * 2
        if len(names) != expected_count:
            raise ConversionError(
                f"TF-Hub module {checkpoint.prefix}: {len(names)} LSTM state buffers under {scope}/, expected "
                f"{expected_count} (2 directions x {config.num_lstm_layers} layers x (cell, hidden)): {names}."
            )
        for index, name in enumerate(names):
            shape, width = checkpoint.entries[name].shape, (config.lstm_cell_size, config.projection_dim)[index % 2]
            if len(shape) != 2 or shape[1] != width or (rows and shape[0] not in rows):
                raise ConversionError(
                    f"TF-Hub module {checkpoint.prefix}: inconsistent shapes: LSTM state buffer {name!r} has shape "
                    f"{shape}, expected ({next(iter(rows), 'rows')}, {width})."
                )
            rows.add(shape[0])
            if np.any(read_variable(checkpoint, name, shape, "an LSTM state buffer", allow_non_finite=True) != 0):
                non_zero.append(name)
    return non_zero


def read_mix(
    checkpoint: TFCheckpoint, variables: ModuleVariables, config: ELMoConfig, allow_non_finite: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(the mix's weights (L + 1,), its scaling as (1,)): the scaling may be stored as a scalar or as (1,)."""
    why = f"the scalar mix over the {config.num_representation_layers} representations"
    weights = read_module_variable(checkpoint, variables.mix_weights, (config.num_representation_layers,), why, allow_non_finite)
    stored = checkpoint.entries[variables.mix_scaling].shape
    scaling = read_module_variable(checkpoint, variables.mix_scaling, stored if stored in ((), (1,)) else (1,), why, allow_non_finite)
    return weights, scaling.reshape(1)


def default_pooling(graph: ModuleGraph, variables: ModuleVariables) -> str:
    """What the ``default`` output of the ``default`` signature (else of any signature) is the mean of: ``elmo``
    (it is computed from the scaling), the mix before its scaling (from the weights only: DeepPavlov's exporter), or
    unknown."""
    signatures = sorted(graph.outputs, key=lambda name: name != "default")
    node = next((graph.outputs[name]["default"] for name in signatures if "default" in graph.outputs[name]), None)
    if node is None:
        return POOLS_UNKNOWN
    if graph.depends_on(node, variables.mix_scaling):
        return POOLS_ELMO
    return POOLS_MIX_BEFORE_SCALING if graph.depends_on(node, variables.mix_weights) else POOLS_UNKNOWN


# ---- the model ------------------------------------------------------------------------------------------------------


@dataclass
class HubModuleModel:
    """A TF-Hub module read into elmo-hf: the model (eval mode) and what the conversion found."""

    model: ELMoModel
    module: Path
    options_file: Path | None
    variables: ModuleVariables
    default_pooling: str
    non_zero_state_buffers: list[str] = field(default_factory=list)
    num_shards: int = 1


def load_tfhub_module(module: str | Path, options_file: str | Path | None = None, allow_non_finite: bool = False) -> HubModuleModel:
    """Read a module directory (or a download folder holding one version folder) into an ``ELMoModel`` in eval mode.
    Raises ``ConversionError``."""
    directory = module_directory(module)
    checkpoint = TFCheckpoint(directory / VARIABLES_PREFIX)
    graph = read_module_graph(directory)
    variables = classify_variables(checkpoint, directory)
    if options_file is not None:
        config, why = read_options(Path(options_file)), f"from {Path(options_file).name}"
    else:
        config, why = config_from_shapes(checkpoint, variables), "the size the other variables' shapes imply"
    state, _ = read_bilm_state(checkpoint, variables, config, why, allow_non_finite)
    non_zero = check_state_buffers(checkpoint, variables, config)
    weights, scaling = read_mix(checkpoint, variables, config, allow_non_finite)
    state.update(model_state_not_in_hdf5(config))
    state["scalar_mixes.0.scalar_weights"], state["scalar_mixes.0.gamma"] = weights, scaling
    return HubModuleModel(
        model_from_state(ELMoModel, config, state), directory, Path(options_file) if options_file is not None else None, variables,
        default_pooling(graph, variables), non_zero, checkpoint.num_shards,
    )


def tfhub_tokenizer(config: ELMoConfig) -> ELMoTokenizer:
    """Raw text split on spaces only, as the module's ``default`` signature splits its sentences."""
    return ELMoTokenizer(max_characters_per_token=config.max_characters_per_token, word_splitter=SPACE_WORD_SPLITTER)


# ---- the directory --------------------------------------------------------------------------------------------------


@dataclass
class HubModuleConversionReport(ConversionReport):
    source: Path
    mix_weights: list[float]
    mix_scaling: float
    default_pooling: str
    num_state_buffers: int
    non_zero_state_buffers: list[str]
    options_given: bool

    def describe(self) -> list[str]:
        sizes = "from --options" if self.options_given else "sizes from the shapes, clips / relu / skip connections the original's"
        lines = [
            f"Converted TF-Hub module {self.source.name}: {self.architecture()} ({sizes}); "
            f"{self.num_parameters:,} parameters -> {self.output_dir}",
            f"  scalar mix: weights {[round(value, 6) for value in self.mix_weights]}, scaling {self.mix_scaling:.6g} "
            "(the module's elmo output)",
            f"  the module's default output: the mean of {self.default_pooling}",
            f"  not converted: {self.num_state_buffers} LSTM state buffer(s) (the converted model starts from zeros: "
            "the module's first call)",
        ]
        if self.non_zero_state_buffers:
            lines.append(
                f"  note: {len(self.non_zero_state_buffers)} state buffer(s) are not zero (e.g. {self.non_zero_state_buffers[0]}): "
                "this module's first call does not start from zeros, the converted model does"
            )
        return lines


def trained_mix(model: ELMoModel) -> tuple[list[float], float]:
    """(softmax's weights w, gamma) of scalar mix 0."""
    mix = model.scalar_mixes[0]
    return mix.scalar_weights.detach().tolist(), float(mix.gamma.detach())


def is_google_elmo(converted: HubModuleModel) -> bool:
    """Named as google/elmo names its mix, with the released original's network (2 x 4096 cells, projection 512)."""
    config = converted.model.config
    names = (converted.variables.mix_weights, converted.variables.mix_scaling)
    return names == GOOGLE_MIX_NAMES and (config.lstm_cell_size, config.projection_dim, config.num_lstm_layers) == (4096, 512, 2)


def pooling_sentence(pooling: str, scaling: float) -> str:
    """How to get the module's ``default`` output from the converted model, in one sentence of the card."""
    if pooling == POOLS_ELMO:
        return "`default` is `output.sentence_vectors(\"mean\")` (the mean of `elmo` over the words)."
    if pooling == POOLS_MIX_BEFORE_SCALING:
        return (
            "`default` is `output.sentence_vectors(\"mean\") / gamma` (this module pools the mix before its scaling, "
            f"as DeepPavlov's exporter does; gamma = {scaling:.9g}, `model.scalar_mixes[0].gamma`)."
        )
    return "What `default` pools could not be read from the module's graph; google/elmo's is the mean of `elmo`."


def module_card(converted: HubModuleModel, source: Path, repo_id: str, command: str) -> str:
    model, variables = converted.model, converted.variables
    weights, scaling = trained_mix(model)
    google = is_google_elmo(converted)
    sizes = "from --options " + converted.options_file.name if converted.options_file else (
        "read from the variables' shapes; cell and projection clip 3, relu, skip connections and 50 characters per "
        "word are the original ELMo's (the module does not store them)"
    )
    provenance = "\n".join(
        [
            f"Converted from the TF-Hub module `{source.name}` (TF1 Hub format" + (", google/elmo" if google else "") + "):",
            "",
            f"- the biLM: bilm-tf's graph under `bilm/`, {converted.num_shards} variable shard(s); sizes {sizes};",
            f"- the trained scalar mix `{variables.mix_weights}` = {[round(value, 6) for value in weights]}, "
            f"`{variables.mix_scaling}` = {scaling:.6g}: the model's scalar mix 0, so `elmo_representations[0]` is the "
            "module's `elmo` output;",
            f"- {len(variables.state_buffers)} LSTM state buffers, not converted (see below).",
            "",
            "Outputs: `word_emb` is `hidden_states[0][..., :projection_dim]`, `lstm_outputs1` and `lstm_outputs2` are "
            "`hidden_states[1]` and `hidden_states[2]`, `elmo` is `elmo_representations[0]`; "
            + pooling_sentence(converted.default_pooling, scaling)
            + " Raw text is split on spaces only (`word_splitter=\"space\"`), as the `default` signature splits it.",
            "",
            "Licence: google/elmo is published under Apache-2.0." if google else
            "Licence: that of the module you converted (google/elmo is Apache-2.0; check the terms where you "
            "downloaded this one).",
        ]
    )
    parity = (
        "The variables are copied exactly. elmo-hf's tests convert modules exported by tensorflow-hub's own exporter "
        "around bilm-tf's graph and compare all five outputs of both signatures with the module's own (first call) "
        "within 1e-6. The module's LSTMs carry state from call to call; these vectors are its first call, from the "
        "zero state."
    )
    return render_model_card(
        model.config, model.num_parameters(), repo_id, f"ELMo from a TF-Hub module ({repo_id})",
        "An ELMo converted from a TF-Hub module in the TF1 Hub format to Hugging Face format, its trained scalar mix "
        "included.",
        provenance, command, parity, language="en" if google else None, license="apache-2.0" if google else "other",
        mix_description="the module's trained scalar mix, its `elmo` output",
    )


def convert_tfhub_module(
    module: str | Path,
    output_dir: str | Path,
    options_file: str | Path | None = None,
    overwrite: bool = False,
    allow_non_finite: bool = False,
    push_to_hub: str | None = None,
    private: bool = False,
    revision: str | None = None,
    token: str | None = None,
) -> HubModuleConversionReport:
    """Convert a TF-Hub module (its directory, a download folder holding one version folder, or its ``.tar.gz``)
    into ``output_dir`` (written beside it and renamed into place, under elmo-hf's output policy): ``config.json`` +
    ``model.safetensors`` (``ELMoModel`` with the module's mix), the tokenizer (split on spaces), a model card, and
    the ``--options`` file as ``original_options.json`` when one was given; optionally push it to the Hub repo
    ``push_to_hub``. Raises ``ConversionError`` (nothing written) or ``HubPushError``."""
    source, output_dir = Path(module), Path(output_dir)
    inputs = [source] + ([Path(options_file)] if options_file is not None else [])
    with staged_output_directory(output_dir, CONVERTED_MODEL_OUTPUT, overwrite=overwrite, inputs=inputs) as staging_dir:
        with extracted_module(source, output_dir) if source.is_file() else nullcontext(source) as directory:
            converted = load_tfhub_module(directory, options_file, allow_non_finite)
        model = converted.model
        sources = ["--tfhub", source.name] + (["--options", converted.options_file.name] if converted.options_file else [])
        card = module_card(converted, source, push_to_hub or output_dir.name, conversion_command(sources, output_dir, push_to_hub))
        write_converted(staging_dir, model, tfhub_tokenizer(model.config), card, {ORIGINAL_OPTIONS_FILE_NAME: converted.options_file})
    report = HubModuleConversionReport(
        output_dir, model.config, model.num_parameters(), source, *trained_mix(model), converted.default_pooling,
        len(converted.variables.state_buffers), converted.non_zero_state_buffers, converted.options_file is not None,
    )
    if push_to_hub is not None:
        report.pushed_to = push_directory_to_hub(output_dir, push_to_hub, private, revision, token)
    return report


__all__ = [
    "HubModuleConversionReport", "HubModuleModel", "convert_tfhub_module", "hdf5_name_of_module_variable",
    "load_tfhub_module", "tfhub_tokenizer",
]
