"""The original ELMo weight file (bilm-tf / AllenNLP ``weights.hdf5``) and how each dataset maps onto ``ELMoModel``:
the only place that knows the HDF5 layout and TF's conventions (listed in docs/design/conversion.md).
``weight_mappings(config)`` is the renaming table as data; every transform is a transpose, a row insertion/removal or
a permutation of gate blocks, so HDF5 -> HF -> HDF5 is bit-exact.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..configuration_elmo import ELMoConfig

DIRECTION_NAMES = ("forward", "backward")  # RNN_0 is the forward LM, RNN_1 the backward LM

# Gate blocks of W_0 / B: TF order (i, j, f, o); index k of the model's order (i, f, j, o) comes from TF block k.
TF_BLOCK_FOR_MODEL_GATE = (0, 2, 1, 3)
MODEL_GATE_FOR_TF_BLOCK = (0, 2, 1, 3)  # the permutation swaps blocks 1 and 2, so it is its own inverse


@dataclass(frozen=True)
class WeightMapping:
    """One HDF5 dataset, the model parameter(s) it fills, and the transforms between the two layouts."""

    hdf5_name: str
    hdf5_shape: tuple[int, ...]
    parameter_names: tuple[str, ...]
    to_model: Callable[[np.ndarray], tuple[np.ndarray, ...]]
    to_hdf5: Callable[..., np.ndarray]


# ---- transforms: one small function per kind of dataset -------------------------------------------------------------


def char_embedding_to_model(char_embed: np.ndarray) -> tuple[np.ndarray]:
    """(261, E) -> (262, E): insert the all-zero row of the padding token (id 0)."""
    return (np.concatenate([np.zeros((1, char_embed.shape[1]), dtype=char_embed.dtype), char_embed]),)


def char_embedding_to_hdf5(embedding: np.ndarray) -> np.ndarray:
    """(262, E) -> (261, E): drop the padding token's row, which must be zero (the original has no such row)."""
    if np.any(embedding[0] != 0):
        raise ValueError("char_embeddings.embedding.weight[0] (padding token) is not zero; the original format cannot store it.")
    return embedding[1:]


def conv_kernel_to_model(kernel: np.ndarray) -> tuple[np.ndarray]:
    """TF conv2d (1, width, E, count) -> Conv1d (count, E, width)."""
    return (np.ascontiguousarray(kernel[0].transpose(2, 1, 0)),)


def conv_kernel_to_hdf5(weight: np.ndarray) -> np.ndarray:
    """Conv1d (count, E, width) -> TF conv2d (1, width, E, count)."""
    return np.ascontiguousarray(weight.transpose(2, 1, 0)[np.newaxis])


def dense_kernel_to_model(kernel: np.ndarray) -> tuple[np.ndarray]:
    """TF (in, out) -> nn.Linear (out, in)."""
    return (np.ascontiguousarray(kernel.T),)


def dense_kernel_to_hdf5(weight: np.ndarray) -> np.ndarray:
    """nn.Linear (out, in) -> TF (in, out)."""
    return np.ascontiguousarray(weight.T)


def unchanged_to_model(array: np.ndarray) -> tuple[np.ndarray]:
    return (array,)


def unchanged_to_hdf5(array: np.ndarray) -> np.ndarray:
    return array


def reorder_gate_blocks(array: np.ndarray, block_order: tuple[int, ...]) -> np.ndarray:
    """Permute the four gate blocks along axis 0 of a (4D, ...) array: output block k = input block order[k]."""
    blocks = np.split(array, 4, axis=0)
    return np.ascontiguousarray(np.concatenate([blocks[index] for index in block_order], axis=0))


def lstm_kernel_to_model(kernel: np.ndarray, input_size: int) -> tuple[np.ndarray, np.ndarray]:
    """W_0 (input + P, 4D), TF gate order -> input_to_gates.weight (4D, input), state_to_gates.weight (4D, P)."""
    input_part = reorder_gate_blocks(kernel[:input_size].T, TF_BLOCK_FOR_MODEL_GATE)
    state_part = reorder_gate_blocks(kernel[input_size:].T, TF_BLOCK_FOR_MODEL_GATE)
    return input_part, state_part


def lstm_kernel_to_hdf5(input_to_gates: np.ndarray, state_to_gates: np.ndarray) -> np.ndarray:
    """Inverse of :func:`lstm_kernel_to_model`."""
    stacked = np.concatenate([input_to_gates, state_to_gates], axis=1)  # (4D, input + P), model gate order
    return np.ascontiguousarray(reorder_gate_blocks(stacked, MODEL_GATE_FOR_TF_BLOCK).T)


def lstm_bias_to_model(bias: np.ndarray) -> tuple[np.ndarray]:
    """B (4D,), TF gate order -> input_to_gates.bias, PyTorch gate order. TF's +1.0 forget bias is not folded in:
    the model adds it at run time, exactly as TF does."""
    return (reorder_gate_blocks(bias, TF_BLOCK_FOR_MODEL_GATE),)


def lstm_bias_to_hdf5(bias: np.ndarray) -> np.ndarray:
    return reorder_gate_blocks(bias, MODEL_GATE_FOR_TF_BLOCK)


# ---- the table ------------------------------------------------------------------------------------------------------

# Each kind of dataset: its (to the model, back to HDF5) transforms.
TRANSFORMS = {
    "as is": (unchanged_to_model, unchanged_to_hdf5),
    "dense": (dense_kernel_to_model, dense_kernel_to_hdf5),
    "conv": (conv_kernel_to_model, conv_kernel_to_hdf5),
    "char embedding": (char_embedding_to_model, char_embedding_to_hdf5),
    "lstm bias": (lstm_bias_to_model, lstm_bias_to_hdf5),
}


def _mapping(kind: str, hdf5_name: str, hdf5_shape: tuple[int, ...], *parameter_names: str) -> WeightMapping:
    return WeightMapping(hdf5_name, hdf5_shape, parameter_names, *TRANSFORMS[kind])


def lstm_cell_prefix(direction: int, layer: int) -> str:
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"


def weight_mappings(config: ELMoConfig) -> list[WeightMapping]:
    """Every dataset the original file holds for this architecture, in file order."""
    return _token_layer_mappings(config) + _lstm_mappings(config)


def _token_layer_mappings(config: ELMoConfig) -> list[WeightMapping]:
    """The character embedding, the CNN's filters, the highway layers and the projection, in file order."""
    embedding_dim, cnn_width, projection_dim = config.char_embedding_dim, config.char_cnn_output_dim, config.projection_dim
    mappings = [_mapping("char embedding", "char_embed", (config.num_characters - 1, embedding_dim), "char_embeddings.embedding.weight")]
    for index, (width, count) in enumerate(config.char_cnn_filters):
        convolution = f"char_embeddings.convolutions.{index}"
        mappings += [
            _mapping("conv", f"CNN/W_cnn_{index}", (1, width, embedding_dim, count), f"{convolution}.weight"),
            _mapping("as is", f"CNN/b_cnn_{index}", (count,), f"{convolution}.bias"),
        ]
    for index in range(config.num_highway_layers):
        for tf_name, module_name in (("transform", "transform"), ("carry", "gate")):
            prefix = f"char_embeddings.highways.{index}.{module_name}"
            mappings += [
                _mapping("dense", f"CNN_high_{index}/W_{tf_name}", (cnn_width, cnn_width), f"{prefix}.weight"),
                _mapping("as is", f"CNN_high_{index}/b_{tf_name}", (cnn_width,), f"{prefix}.bias"),
            ]
    if cnn_width != projection_dim:
        mappings += [
            _mapping("dense", "CNN_proj/W_proj", (cnn_width, projection_dim), "char_embeddings.projection.weight"),
            _mapping("as is", "CNN_proj/b_proj", (projection_dim,), "char_embeddings.projection.bias"),
        ]
    return mappings


def _lstm_mappings(config: ELMoConfig) -> list[WeightMapping]:
    """Each direction's layers: the gates' kernel (input and state rows in one), their bias, the projection."""
    projection_dim, cell_size = config.projection_dim, config.lstm_cell_size
    mappings = []
    for direction, direction_name in enumerate(DIRECTION_NAMES):
        for layer in range(config.num_lstm_layers):
            prefix, module = lstm_cell_prefix(direction, layer), f"encoder.{direction_name}_layers.{layer}"
            mappings += [
                WeightMapping(
                    f"{prefix}/W_0",
                    (projection_dim + projection_dim, 4 * cell_size),  # rows: the input (P), then the state (P)
                    (f"{module}.input_to_gates.weight", f"{module}.state_to_gates.weight"),
                    lambda kernel, input_size=projection_dim: lstm_kernel_to_model(kernel, input_size),
                    lstm_kernel_to_hdf5,
                ),
                _mapping("lstm bias", f"{prefix}/B", (4 * cell_size,), f"{module}.input_to_gates.bias"),
            ]
            if projection_dim < cell_size:
                mappings.append(_mapping("dense", f"{prefix}/W_P_0", (cell_size, projection_dim), f"{module}.state_projection.weight"))
    return mappings


# Datasets that belong to the biLM architecture. One of these left over after conversion means options.json and
# the weight file describe different networks (e.g. an extra highway layer or LSTM layer in the file).
ARCHITECTURE_DATASET_PATTERN = re.compile(r"^(char_embed|CNN/|CNN_high_\d+/|CNN_proj/|RNN_\d+/)")


def model_state_not_in_hdf5(config: ELMoConfig) -> dict[str, np.ndarray]:
    """Model state that the original format does not hold, with the value a converted model starts from: the zero
    initial LSTM state (the original's cold start) and untrained scalar mixes (w = 0, gamma = 1)."""
    state = {
        "encoder.initial_hidden_state": np.zeros((config.num_lstm_layers, 2, config.projection_dim), dtype=np.float32),
        "encoder.initial_cell_state": np.zeros((config.num_lstm_layers, 2, config.lstm_cell_size), dtype=np.float32),
    }
    for index in range(config.num_output_representations):
        state[f"scalar_mixes.{index}.scalar_weights"] = np.zeros(config.num_representation_layers, dtype=np.float32)
        state[f"scalar_mixes.{index}.gamma"] = np.ones(1, dtype=np.float32)
    return state


__all__ = ["WeightMapping", "weight_mappings", "model_state_not_in_hdf5", "ARCHITECTURE_DATASET_PATTERN"]
