"""PyTorch ELMo: the bidirectional language model of Peters et al. (2018), "Deep contextualized word representations".

The whole forward pass is in this file, in the order it runs:

1. ``ELMoCharacterEmbeddings``: character ids (50 per word) -> char embedding -> 1-D convolutions, max-pooled ->
   activation -> highway layers -> linear projection to P. This is the context-independent token layer.
2. ``add_sentence_boundaries``: every sentence is wrapped as ``<S> w1 ... wn </S>`` before the biLM, as the
   original does.
3. ``ELMoEncoder``: L layers of forward LSTMs and L layers of backward LSTMs (``ELMoLstmLayer``), each an LSTM with
   a projected, clipped output, residual connections from the second layer on. The backward direction reads each
   sentence reversed by its own length.
4. The L + 1 representations ``[token; token]``, ``[forward_l; backward_l]`` (2P each), boundaries removed by default,
   and the scalar mixes ``gamma * sum_j softmax(w)_j h_j`` (``ELMoScalarMix``).

The LSTM state is explicit: ``forward(..., lstm_state=...)`` takes it and ``return_lstm_state=True`` returns it.
By default every sentence starts from the model's fixed initial state (zeros, or a stored "warm" state), so a
sentence's vectors never depend on the rest of the batch or on earlier calls. Threading the returned state into the
next call reproduces the original's stateful behaviour.

The code in this file is the *reference path*, the definition. Faster routes compute the same vectors:
``recurrence_elmo.select_route``, the one selector, picks for each call of the token layer and of the biLM the *fast*
route whenever no gradients are needed (``token_cache_elmo.py``: distinct words only, trimmed character slots, the
token cache; ``fast_recurrence_elmo.py``: packed batches, pre-packed weights), the *training* route while gradients
are recorded (each distinct word once; on windows without padding, ``recurrence_elmo.lstm_window_forward``: the
LSTM with a hand-written backward), or this reference path; ``ELMoModel.set_inference_path`` forces a choice.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Iterable, Iterator, Sequence

import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.utils import ModelOutput

from .characters_elmo import byte_sentence_boundary_rows
from .choices_elmo import POOLINGS, REPRESENTATIONS
from .configuration_elmo import ELMoConfig
from .fast_recurrence_elmo import LstmDirectionWeights, PreparedLstmWeights, fast_encoder_forward
from .int8_elmo import Int8TokenLayer, int8_token_layer, int8_unavailable_reason
from .model_inputs_elmo import check_backward_stream, validated_lstm_state, validated_word_mask
from .pooling_elmo import check_representation, pool_words
from .recurrence_elmo import INFERENCE_PATHS, lstm_window_forward, parameter_key, select_route, without_final_steps
from .token_cache_elmo import TokenEmbeddingCache, fast_character_embeddings, token_cache_for_words
from .validation_elmo import check_choice, check_forward_arguments, check_model_directory_complete

# TF's LSTMCell adds a constant 1.0 to the forget gate at run time; it is not part of the stored bias.
FORGET_GATE_BIAS = 1.0

# Epsilon of the bilm-tf layer normalisation used by the scalar mix (`weight_layers(..., do_layer_norm=True)`).
SCALAR_MIX_LAYER_NORM_EPSILON = 1e-12

# Label value that the losses of every head ignore (PyTorch's `ignore_index` default, transformers' convention).
IGNORE_INDEX = -100

LstmState = tuple[torch.Tensor, torch.Tensor]


@dataclass
class ELMoModelOutput(ModelOutput):
    r"""
    Outputs of [`ELMoModel`]. T is the number of input words (T + 2 with `keep_sentence_boundaries`).

    Args:
        last_hidden_state (`torch.FloatTensor` of shape `(batch, T, 2 * projection_dim)`):
            Top biLSTM layer, `[forward; backward]` (with the skip connection when the model has them). Zero at
            padding positions.
        hidden_states (`tuple(torch.FloatTensor)`, L + 1 tensors of shape `(batch, T, 2 * projection_dim)`):
            All representations of the paper's R_k: index 0 is the token layer duplicated `[token; token]`, index l is
            biLSTM layer l `[forward_l; backward_l]`.
        mixed_representations (`torch.FloatTensor` of shape `(batch, num_output_representations, T,
            2 * projection_dim)`):
            The scalar mixes `gamma * sum_j softmax(w)_j hidden_states[j]`, stacked after the batch axis so that
            every batched output splits by row (transformers' pipelines do that); `elmo_representations` gives them
            as a tuple, AllenNLP's way.
        mask (`torch.BoolTensor` of shape `(batch, T)`):
            True at real positions (words, and boundaries when they are kept).
        lstm_state (`tuple(torch.FloatTensor)`, *optional*, returned when `return_lstm_state=True`):
            `(hidden, cell)` of shapes `(L, 2, state_batch, projection_dim)` and `(L, 2, state_batch, lstm_cell_size)`;
            direction 0 is forward, 1 backward. Pass it as `lstm_state` to the next call to carry the state over.
        word_mask (`torch.BoolTensor` of shape `(batch, T)`):
            True at the words only (never at kept boundaries): what `sentence_vectors` pools over.
    """

    last_hidden_state: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    mixed_representations: torch.FloatTensor | None = None
    mask: torch.BoolTensor | None = None
    lstm_state: LstmState | None = None
    word_mask: torch.BoolTensor | None = None

    @property
    def elmo_representations(self) -> tuple[torch.FloatTensor, ...]:
        """The scalar mixes as `num_output_representations` tensors of shape `(batch, T, 2 * projection_dim)`:
        `elmo_representations[k]` is mix k (views into `mixed_representations`)."""
        return tuple(self.mixed_representations.unbind(1))

    def word_vectors(self, representation: str | int = "mix", mix_index: int = 0) -> torch.FloatTensor:
        """One representation (`REPRESENTATIONS` or a layer index, 0 = token layer): `(batch, T, 2P)`, or
        `(batch, T, L + 1, 2P)` for `"all"`. `"mix"` is scalar mix `mix_index`."""
        check_representation(representation, len(self.hidden_states), self.mixed_representations.shape[1], mix_index)
        if representation == "mix":
            return self.mixed_representations[:, mix_index]
        if representation == "top":
            return self.last_hidden_state
        if representation == "average":
            return torch.stack(self.hidden_states).mean(dim=0)
        if representation == "all":
            return torch.stack(self.hidden_states, dim=2)
        return self.hidden_states[representation]

    def sentence_vectors(
        self, pooling: str = "mean", representation: str | int = "mix", mix_index: int = 0
    ) -> torch.FloatTensor:
        """One vector per sentence: `word_vectors(representation, mix_index)` pooled over the real words
        (`pool_words`): `(batch, 2P)` (`(batch, L + 1, 2P)` for `"all"`), twice as wide for `"mean_max"` and
        `"first_last"`. A sentence without words gets zeros."""
        check_choice("pooling", pooling, POOLINGS)
        return pool_words(self.word_vectors(representation, mix_index), self.word_mask, pooling)


class ELMoHighway(nn.Module):
    """One highway layer, in TF's form: ``g = sigmoid(x W_g + b_g)``, ``y = g * relu(x W_t + b_t) + (1 - g) * x``.
    (AllenNLP stores the gate negated and writes ``g * x + (1 - g) * f(x)``; the converter keeps TF's sign.)"""

    def __init__(self, size: int):
        super().__init__()
        self.transform = nn.Linear(size, size)
        self.gate = nn.Linear(size, size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., F) -> (..., F)"""
        return self.combine(self.gate(hidden), self.transform(hidden), hidden)

    @staticmethod
    def combine(gate: torch.Tensor, transform: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """The output from the two matmuls' results (before their activations) and the input, all (..., F)."""
        gate = torch.sigmoid(gate)
        # The highway nonlinearity is always relu in the original, whatever the CNN activation.
        return gate * F.relu(transform) + (1.0 - gate) * hidden


class ELMoCharacterEmbeddings(nn.Module):
    """The context-independent token layer: character CNN -> highway layers -> projection to P.

    With a word embedding (``config.word_embedding_dim`` W > 0, ELMoForManyLangs) each row of ids starts with the
    token's word id, and its W-dim embedding is concatenated after the highway layers' F features: the projection
    maps F + W to P.
    """

    def __init__(self, config: ELMoConfig):
        super().__init__()
        # Row 0 is the padding token; it stays all zero (the original file has no row for it).
        self.embedding = nn.Embedding(config.num_characters, config.char_embedding_dim, padding_idx=0)
        self.convolutions = nn.ModuleList(
            nn.Conv1d(config.char_embedding_dim, count, kernel_size=width) for width, count in config.char_cnn_filters
        )
        self.activation = torch.tanh if config.char_cnn_activation == "tanh" else F.relu
        self.highways = nn.ModuleList(ELMoHighway(config.char_cnn_output_dim) for _ in range(config.num_highway_layers))
        self.word_embedding = (
            nn.Embedding(config.word_embedding_vocab_size, config.word_embedding_dim, padding_idx=0)
            if config.word_embedding_dim
            else None
        )
        features = config.char_cnn_output_dim + config.word_embedding_dim
        # The original has no projection when the CNN is already P wide.
        self.projection = nn.Linear(features, config.projection_dim) if features != config.projection_dim else None
        # What the fast path's slot trimming keeps after a row's constant tail starts: the widest filter, plus the
        # word-id slot in front (so that a padding row, all zeros, still keeps a whole window of characters).
        self.widest_filter = config.widest_char_filter + config.num_word_id_slots
        # The largest id every slot accepts (the token cache's probe stays below it; a word id may be far larger).
        self.largest_id_of_every_slot = min(config.num_characters, config.word_embedding_vocab_size or config.num_characters) - 1
        self.inference_path, self.int8_matmuls = "auto", False  # see ELMoModel.set_inference_path
        self.token_embedding_cache: TokenEmbeddingCache | None = None  # see ELMoModel.cache_token_embeddings
        self.int8_prepared: Int8TokenLayer | None = None  # int8_elmo.int8_token_layer

    def forward(self, character_ids: torch.LongTensor) -> torch.Tensor:
        """(..., max_characters_per_token) character ids -> (..., projection_dim) token vectors."""
        route = select_route(self.inference_path, self, (character_ids,))
        if route == "reference":
            return self.reference_forward(character_ids)
        # The training route is the fast one without its cache (each distinct word once, on its own slots).
        cache = self.token_embedding_cache if route == "fast" else None
        token_vectors, key = self.reference_forward, parameter_key(self)
        if route == "fast" and self.int8_matmuls:  # the CNN's and the highways' products in int8 (int8_elmo.py)
            token_vectors, key = partial(self.reference_forward, int8=int8_token_layer(self, key)), (key, "int8")
        if cache is not None:
            cache.refresh(token_vectors, self.widest_filter, key, self.embedding.weight.device)
        return fast_character_embeddings(character_ids, token_vectors, self.widest_filter, cache)

    def reference_forward(self, character_ids: torch.LongTensor, int8: Int8TokenLayer | None = None) -> torch.Tensor:
        """The definition of the token layer: (..., C) character ids (with a word embedding: (..., 1 + C), the word id
        first) -> (..., projection_dim) token vectors. ``int8``: the convolutions and highways in int8 instead."""
        leading_shape = character_ids.shape[:-1]
        rows = character_ids.reshape(-1, character_ids.shape[-1])  # (N, C) or (N, 1 + C)
        if self.word_embedding is not None:
            word_ids, rows = rows[:, 0], rows[:, 1:]  # (N,), (N, C)
        if int8 is None:
            characters = self.embedding(rows).transpose(1, 2)  # (N, E, C)
            # Max over positions, then the activation (the original's order; both activations are monotonic).
            pooled = torch.cat([convolution(characters).max(dim=-1).values for convolution in self.convolutions], dim=-1)
        else:
            pooled = int8.character_cnn(rows)  # (N, F)
        hidden = self.activation(pooled)  # (N, F)
        for highway in self.highways if int8 is None else int8.highways:
            hidden = highway(hidden)
        if self.word_embedding is not None:
            hidden = torch.cat([hidden, self.word_embedding(word_ids)], dim=-1)  # (N, F + W)
        if self.projection is not None:
            hidden = self.projection(hidden)  # (N, P)
        return hidden.reshape(*leading_shape, hidden.shape[-1])


class ELMoLstmLayer(nn.Module):
    """One direction of one biLM layer: an LSTM whose output is projected to P and clipped (TF's LSTMCell with
    ``num_proj``, ``cell_clip``, ``proj_clip``, no peepholes).

    Gates are stored in PyTorch's order (input, forget, candidate, output); the original's W_0 is split into the part
    acting on the layer input (``input_to_gates``, which holds the only bias) and the part acting on the previous
    projected output (``state_to_gates``).
    """

    def __init__(self, input_size: int, config: ELMoConfig):
        super().__init__()
        self.cell_size = config.lstm_cell_size
        self.output_size = config.projection_dim
        self.cell_clip = config.cell_clip or None
        self.projection_clip = config.projection_clip or None
        # TF's run-time forget bias; AllenNLP's cell (ELMoForManyLangs) adds none: its stored bias is the whole bias.
        self.forget_gate_bias = FORGET_GATE_BIAS if config.tf_forget_gate_bias else 0.0
        self.input_to_gates = nn.Linear(input_size, 4 * self.cell_size, bias=True)
        self.state_to_gates = nn.Linear(self.output_size, 4 * self.cell_size, bias=False)
        # The original has no projection when P == D.
        self.state_projection = (
            nn.Linear(self.cell_size, self.output_size, bias=False) if self.output_size < self.cell_size else None
        )

    def forward(
        self, inputs: torch.Tensor, lengths: torch.LongTensor, initial_state: LstmState, training_window: bool = False
    ) -> tuple[torch.Tensor, LstmState]:
        """``reference_forward``; with ``training_window`` (the selector's training route: gradients recorded, every
        row real at every step) the same computation with a hand-written backward
        (``recurrence_elmo.lstm_window_forward``)."""
        if training_window:
            return lstm_window_forward(
                self.input_to_gates(inputs),
                initial_state,
                self.state_to_gates.weight,
                None if self.state_projection is None else self.state_projection.weight,
                self.forget_gate_bias,
                self.cell_clip,
                self.projection_clip,
            )
        return self.reference_forward(inputs, lengths, initial_state)

    def reference_forward(
        self, inputs: torch.Tensor, lengths: torch.LongTensor, initial_state: LstmState
    ) -> tuple[torch.Tensor, LstmState]:
        """The definition of the layer: run it over right-padded sequences.

        Args:
            inputs: (batch, time, input_size).
            lengths: (batch,) number of real positions per row.
            initial_state: (hidden (batch, P), cell (batch, D)).

        Returns:
            outputs (batch, time, P), zero at padding positions, and the state after each row's last real position.
        """
        hidden, cell = initial_state
        # All time steps' input projections at once, split into per-step views by one unbind (its backward stacks the
        # steps' gradients once; indexing [:, step] would zero-fill a (B, T, 4D) gradient at every step).
        gate_inputs = self.input_to_gates(inputs).unbind(1)  # T x (B, 4D)
        outputs = []
        # Every row real at every step (training windows): the padding masks below would change nothing.
        all_real = bool((lengths >= len(gate_inputs)).all())
        for step, step_gate_inputs in enumerate(gate_inputs):
            gates = step_gate_inputs + self.state_to_gates(hidden)  # (B, 4D)
            input_gate, forget_gate, candidate, output_gate = gates.chunk(4, dim=1)
            new_cell = torch.sigmoid(forget_gate + self.forget_gate_bias) * cell + torch.sigmoid(input_gate) * torch.tanh(
                candidate
            )
            if self.cell_clip is not None:
                new_cell = new_cell.clamp(-self.cell_clip, self.cell_clip)
            new_hidden = torch.sigmoid(output_gate) * torch.tanh(new_cell)  # (B, D)
            if self.state_projection is not None:
                new_hidden = self.state_projection(new_hidden)  # (B, P)
            if self.projection_clip is not None:
                new_hidden = new_hidden.clamp(-self.projection_clip, self.projection_clip)
            if all_real:
                cell, hidden = new_cell, new_hidden
                outputs.append(new_hidden)
                continue
            # Padding steps leave the state untouched, so the final state is the one after the last real word.
            is_real = (lengths > step).unsqueeze(1)  # (B, 1)
            cell = torch.where(is_real, new_cell, cell)
            hidden = torch.where(is_real, new_hidden, hidden)
            outputs.append(new_hidden * is_real)
        if not outputs:  # no time step
            return inputs.new_zeros(inputs.shape[0], 0, self.output_size), (hidden, cell)
        return torch.stack(outputs, dim=1), (hidden, cell)


def reverse_padded_sequences(sequences: torch.Tensor, lengths: torch.LongTensor) -> torch.Tensor:
    """Reverse each row of (batch, time, ...) within its own length; padding stays at the end."""
    time = sequences.shape[1]
    positions = torch.arange(time, device=sequences.device).unsqueeze(0)  # (1, T)
    lengths = lengths.unsqueeze(1)  # (B, 1)
    source = torch.where(positions < lengths, lengths - 1 - positions, positions)  # (B, T)
    source = source.reshape(*source.shape, *([1] * (sequences.dim() - 2))).expand_as(sequences)
    return sequences.gather(1, source)


class ELMoEncoder(nn.Module):
    """The biLM: independent forward and backward stacks of ``ELMoLstmLayer``, joined only at each layer's output.

    Holds the fixed initial LSTM state used when the caller passes none: ``initial_hidden_state`` (L, 2, P) and
    ``initial_cell_state`` (L, 2, D), zeros unless a warm state was stored (see ``ELMoModel.set_initial_lstm_state``).
    """

    def __init__(self, config: ELMoConfig):
        super().__init__()
        self.use_skip_connections = config.use_skip_connections
        self.forward_layers = nn.ModuleList(ELMoLstmLayer(config.projection_dim, config) for _ in range(config.num_lstm_layers))
        self.backward_layers = nn.ModuleList(ELMoLstmLayer(config.projection_dim, config) for _ in range(config.num_lstm_layers))
        self.register_buffer("initial_hidden_state", torch.zeros(config.num_lstm_layers, 2, config.projection_dim))
        self.register_buffer("initial_cell_state", torch.zeros(config.num_lstm_layers, 2, config.lstm_cell_size))
        # bilm-tf's training dropout on every layer's input (a DropoutWrapper around the residual wrapper, so the skip
        # connection adds the dropped-out input). Identity in eval mode.
        self.layer_input_dropout = nn.Dropout(config.lm_dropout)
        self.inference_path = "auto"  # see ELMoModel.set_inference_path
        self.pre_pack_weights = True  # see ELMoModel.set_inference_path
        self.int8_matmuls = False  # see ELMoModel.set_inference_path
        self.skip_boundary_steps = True  # see ELMoModel.set_inference_path
        # The fast path's copy of the LSTM weights (see prepared_fast_path_weights); derived data, never saved.
        self.fast_path_weights: PreparedLstmWeights | None = None

    def default_state(self, batch_size: int) -> LstmState:
        """The fixed initial state for ``batch_size`` rows: (L, 2, B, P) and (L, 2, B, D)."""
        hidden = self.initial_hidden_state.unsqueeze(2).expand(-1, -1, batch_size, -1)
        cell = self.initial_cell_state.unsqueeze(2).expand(-1, -1, batch_size, -1)
        return hidden, cell

    def prepared_fast_path_weights(self) -> PreparedLstmWeights:
        """The LSTM weights as the fast path reads them, prepared on first use and again whenever a parameter changes
        (in place, by ``.to()``, by loading) or ``pre_pack_weights`` or ``int8_matmuls`` is switched."""
        key = (parameter_key(self), self.pre_pack_weights, self.int8_matmuls)
        if self.fast_path_weights is None or self.fast_path_weights.key != key:
            self.fast_path_weights = None  # free the old copy before making the new one
            layers = [
                (LstmDirectionWeights.of_layer(forward_layer), LstmDirectionWeights.of_layer(backward_layer))
                for forward_layer, backward_layer in zip(self.forward_layers, self.backward_layers)
            ]
            self.fast_path_weights = PreparedLstmWeights(layers, key, pre_pack=self.pre_pack_weights, int8=self.int8_matmuls)
        return self.fast_path_weights

    def _apply(self, fn, *args, **kwargs):
        # .to() / .cuda() / .half() replace the parameters: free the prepared copy of the old ones now, not on next use.
        self.fast_path_weights = None
        return super()._apply(fn, *args, **kwargs)

    def forward(
        self,
        token_embeddings: torch.Tensor,
        lengths: torch.LongTensor,
        state: LstmState,
        backward_token_embeddings: torch.Tensor | None = None,
        needs_final_step: bool = True,
    ) -> tuple[list[torch.Tensor], LstmState | None]:
        """Runs the biLM on the route ``select_route`` picks; see ``reference_forward`` for the arguments and what is
        computed.

        ``needs_final_step=False`` says the caller drops each direction's output at the last position it reads (the
        forward direction's </S>, the backward one's <S>) and the state after the batch. Unless
        ``skip_boundary_steps`` is off, every route then returns zeros there (``without_final_steps``) and no state
        (None): the fast route skips those steps, the others compute them and drop them. All routes return the same
        things for every argument.
        """
        needs_final_step = needs_final_step or not self.skip_boundary_steps
        extra_inputs = () if backward_token_embeddings is None else (backward_token_embeddings,)
        inputs = (token_embeddings, *state, *extra_inputs)
        route = select_route(self.inference_path, self, inputs, self.layer_input_dropout.p, lengths)
        if route == "fast":
            return fast_encoder_forward(
                self.prepared_fast_path_weights(),
                token_embeddings,
                lengths,
                state,
                self.use_skip_connections,
                backward_token_embeddings,
                needs_final_step=needs_final_step,
                share_first_step=self.skip_boundary_steps,
            )
        layer_outputs, final_state = self.reference_forward(
            token_embeddings, lengths, state, backward_token_embeddings, training_windows=route == "training"
        )
        if needs_final_step:
            return layer_outputs, final_state
        return without_final_steps(layer_outputs, lengths, backward_token_embeddings is not None), None

    def reference_forward(
        self,
        token_embeddings: torch.Tensor,
        lengths: torch.LongTensor,
        state: LstmState,
        backward_token_embeddings: torch.Tensor | None = None,
        training_windows: bool = False,
    ) -> tuple[list[torch.Tensor], LstmState]:
        """The definition of the biLM.

        Args:
            token_embeddings: (batch, time, P), sentences with boundaries, zero at padding.
            lengths: (batch,) real positions per row (boundaries included).
            state: (hidden (L, 2, batch, P), cell (L, 2, batch, D)).
            backward_token_embeddings: (batch, time, P), optional. By default the backward stack reads each row of
                ``token_embeddings`` reversed within its length. When given (pre-training on bilm-tf's reversed
                stream, see ``ELMoForPreTraining``), the backward stack reads this tensor left to right instead, with
                the same ``lengths``, and its outputs stay in that reading order.
            training_windows: every layer direction runs with ``ELMoLstmLayer.forward``'s ``training_window`` (the
                selector's training route, the same computation).

        Returns:
            L tensors (batch, time, 2P), ``[forward_l; backward_l]`` aligned with the input positions (the backward
            half with ``backward_token_embeddings``' positions when given), and the state after the batch (forward:
            after the last real position; backward: after the last position it read, i.e. position 0 by default).
        """
        hidden_state, cell_state = state
        reads_separate_backward_input = backward_token_embeddings is not None
        forward_input = token_embeddings
        backward_input = (
            backward_token_embeddings
            if reads_separate_backward_input
            else reverse_padded_sequences(token_embeddings, lengths)
        )
        layer_outputs, final_hidden, final_cell = [], [], []
        for layer_index, (forward_layer, backward_layer) in enumerate(zip(self.forward_layers, self.backward_layers)):
            forward_input = self.layer_input_dropout(forward_input)
            backward_input = self.layer_input_dropout(backward_input)
            forward_output, (forward_hidden, forward_cell) = forward_layer(
                forward_input, lengths, (hidden_state[layer_index, 0], cell_state[layer_index, 0]), training_windows
            )
            backward_output, (backward_hidden, backward_cell) = backward_layer(
                backward_input, lengths, (hidden_state[layer_index, 1], cell_state[layer_index, 1]), training_windows
            )
            # Residual from the second layer on, added to the output only (never to the recurrent state).
            if self.use_skip_connections and layer_index > 0:
                forward_output = forward_output + forward_input
                backward_output = backward_output + backward_input
            aligned_backward = backward_output if reads_separate_backward_input else reverse_padded_sequences(backward_output, lengths)
            layer_outputs.append(torch.cat([forward_output, aligned_backward], dim=-1))
            final_hidden.append(torch.stack([forward_hidden, backward_hidden]))
            final_cell.append(torch.stack([forward_cell, backward_cell]))
            forward_input, backward_input = forward_output, backward_output
        return layer_outputs, (torch.stack(final_hidden), torch.stack(final_cell))


class ELMoScalarMix(nn.Module):
    """The paper's task-specific mix ``gamma * sum_j softmax(w)_j h_j`` over the L + 1 representations.

    ``w`` starts at 0 (a plain average) and ``gamma`` at 1. With ``layer_norm=True`` each layer is first normalised
    the bilm-tf way: one mean and variance per layer over all real words of the batch (sentence boundaries excluded,
    epsilon 1e-12). Note that this makes a sentence's vectors depend on the rest of the batch.
    """

    def __init__(self, num_layers: int, layer_norm: bool = False):
        super().__init__()
        self.layer_norm = layer_norm
        self.scalar_weights = nn.Parameter(torch.zeros(num_layers))
        self.gamma = nn.Parameter(torch.ones(1))

    @property
    def layer_weights(self) -> torch.Tensor:
        """softmax(w): the normalised weight of each layer, (num_layers,)."""
        return torch.softmax(self.scalar_weights, dim=0)

    def forward(self, layers: Sequence[torch.Tensor], word_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``layers``: num_layers tensors (batch, time, H); ``word_mask`` (batch, time), needed with layer norm."""
        if len(layers) != self.scalar_weights.shape[0]:
            raise ValueError(f"ELMoScalarMix expects {self.scalar_weights.shape[0]} layers, got {len(layers)}.")
        if self.layer_norm:
            if word_mask is None:
                raise ValueError("ELMoScalarMix with layer_norm=True needs word_mask (batch, time).")
            layers = [_masked_layer_norm(layer, word_mask) for layer in layers]
        weights = self.layer_weights
        mixed = weights[0] * layers[0]
        for weight, layer in zip(weights[1:], layers[1:]):
            mixed = mixed + weight * layer
        return self.gamma * mixed


def _masked_layer_norm(layer: torch.Tensor, word_mask: torch.Tensor) -> torch.Tensor:
    """bilm-tf's normalisation: one mean/variance over every element at real positions. (B, T, H) -> (B, T, H)."""
    mask = word_mask.unsqueeze(-1).to(layer.dtype)  # (B, T, 1)
    count = (mask.sum() * layer.shape[-1]).clamp(min=1.0)
    mean = (layer * mask).sum() / count
    variance = (((layer - mean) * mask) ** 2).sum() / count
    return (layer - mean) / torch.sqrt(variance + SCALAR_MIX_LAYER_NORM_EPSILON)


def add_sentence_boundaries(
    character_ids: torch.LongTensor,
    word_mask: torch.BoolTensor,
    boundary_rows: tuple[Sequence[int], Sequence[int]] | None = None,
) -> tuple[torch.LongTensor, torch.BoolTensor]:
    """Wrap every sentence as ``<S> w1 ... wn </S>``, as the original's batcher does.

    (batch, T, C), (batch, T) -> (batch, T + 2, C), (batch, T + 2). ``</S>`` goes right after each sentence's last
    word, so padding stays at the end. ``boundary_rows``: the rows to put before and after
    (``config.sentence_boundary_rows``; ELMoForManyLangs' ``<bos>`` / ``<eos>``); by default the byte scheme's.
    """
    batch_size, _, num_slots = character_ids.shape
    lengths = word_mask.sum(dim=1)  # (B,)
    if boundary_rows is None:
        boundary_rows = byte_sentence_boundary_rows(num_slots)  # for this many slots (not always the released 50)
    bos = torch.tensor(boundary_rows[0], dtype=character_ids.dtype, device=character_ids.device)
    eos = torch.tensor(boundary_rows[1], dtype=character_ids.dtype, device=character_ids.device)
    padding = character_ids.new_zeros(batch_size, 1, num_slots)
    with_boundaries = torch.cat([bos.expand(batch_size, 1, num_slots), character_ids, padding], dim=1)
    with_boundaries[torch.arange(batch_size, device=character_ids.device), lengths + 1] = eos
    boundary_mask = torch.cat([word_mask.new_ones(batch_size, 1), word_mask, word_mask.new_zeros(batch_size, 1)], dim=1)
    boundary_mask[torch.arange(batch_size, device=word_mask.device), lengths + 1] = True
    return with_boundaries, boundary_mask


class ELMoPreTrainedModel(PreTrainedModel):
    config_class = ELMoConfig
    base_model_prefix = "elmo"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False
    # A pre-training checkpoint (ELMoForPreTraining) also holds the LM softmax; the biLM and the task heads drop it.
    _keys_to_ignore_on_load_unexpected = [r"(^|\.)softmax\.(weight|bias)$"]

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """``PreTrainedModel.from_pretrained``; a local directory lacking a file it names fails first, naming it
        (``check_model_directory_complete``)."""
        check_model_directory_complete(args[0] if args else kwargs.get("pretrained_model_name_or_path"))
        return super().from_pretrained(*args, **kwargs)

    def _init_weights(self, module: nn.Module) -> None:
        """bilm-tf's initialisation for a model trained from scratch (loaded weights are never touched).

        transformers calls this only on modules that own parameters or buffers directly (for remote-code models it
        skips the others), so the ELMo-specific rules are keyed on each leaf's parent module."""
        super()._init_weights(module)
        parent = self._parent_module(module)
        if isinstance(module, ELMoScalarMix):
            init.zeros_(module.scalar_weights)
            init.ones_(module.gamma)
        elif isinstance(module, ELMoEncoder):
            init.zeros_(module.initial_hidden_state)
            init.zeros_(module.initial_cell_state)
        elif isinstance(parent, ELMoCharacterEmbeddings) and module is parent.embedding:
            init.uniform_(module.weight, -1.0, 1.0)
            if not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[0])  # the padding token
        elif isinstance(module, nn.Conv1d) and isinstance(parent, ELMoCharacterEmbeddings):
            if self.config.char_cnn_activation == "relu":
                init.uniform_(module.weight, -0.05, 0.05)  # bilm-tf for relu (Kim et al. 2015)
            else:
                init.normal_(module.weight, std=math.sqrt(1.0 / (module.kernel_size[0] * module.in_channels)))
            init.zeros_(module.bias)
        elif isinstance(parent, ELMoCharacterEmbeddings) and module is parent.projection:
            init.normal_(module.weight, std=math.sqrt(1.0 / module.in_features))
            init.zeros_(module.bias)
        elif isinstance(parent, ELMoHighway):
            init.normal_(module.weight, std=math.sqrt(1.0 / module.in_features))
            # Gate bias -2: the layer starts close to the identity (bilm-tf's carry bias).
            init.constant_(module.bias, -2.0 if module is parent.gate else 0.0)
        elif isinstance(parent, ELMoLstmLayer) and module is parent.state_projection:
            init.xavier_uniform_(module.weight)
        elif isinstance(parent, ELMoLstmLayer):
            # TF's glorot_uniform over the cell's single kernel [input + P, 4D], which we store as two matrices.
            limit = math.sqrt(6.0 / (parent.input_to_gates.in_features + parent.output_size + 4 * parent.cell_size))
            init.uniform_(module.weight, -limit, limit)
            if module.bias is not None:
                init.zeros_(module.bias)

    def _parent_module(self, module: nn.Module | None) -> nn.Module | None:
        """The module that holds ``module`` as a direct child (through a ModuleList: the list's owner)."""
        if "_parents_for_init" not in self.__dict__:
            parents = {}
            for owner in self.modules():
                for child in owner.children():
                    parents[child] = owner
            for module_list, owner in list(parents.items()):
                if isinstance(module_list, nn.ModuleList):
                    for child in module_list.children():
                        parents[child] = owner
            self.__dict__["_parents_for_init"] = parents
        return self.__dict__["_parents_for_init"].get(module)


@contextmanager
def float32_precision(allow_tf32: bool) -> Iterator[None]:
    """Float32 convolutions (cuDNN) and matmuls (cuBLAS) on CUDA in full float32, or in TF32 where ``allow_tf32``; the
    previous settings come back afterwards, also on an error. No effect on CPU computations.

    torch lets cuDNN run float32 convolutions in TF32 by default, far from float32 (docs/design/numerics.md, "TF32").
    The settings are process-wide while they last: CUDA work of other threads in that time runs under them too."""
    settings = (torch.backends.cudnn.conv, torch.backends.cuda.matmul)
    saved = [setting.fp32_precision for setting in settings]
    for setting in settings:
        setting.fp32_precision = "tf32" if allow_tf32 else "ieee"
    try:
        yield
    finally:
        for setting, value in zip(settings, saved):
            setting.fp32_precision = value


class ELMoModel(ELMoPreTrainedModel):
    """ELMo: character-aware bidirectional LM returning per-word contextual representations (see the module
    docstring for the steps). Inputs come from [`ELMoTokenizer`]: ``input_ids`` (batch, words, 50) and
    ``attention_mask`` (batch, words), right-padded."""

    def __init__(self, config: ELMoConfig):
        super().__init__(config)
        self.char_embeddings = ELMoCharacterEmbeddings(config)
        self.encoder = ELMoEncoder(config)
        self.scalar_mixes = nn.ModuleList(
            ELMoScalarMix(config.num_representation_layers, layer_norm=config.scalar_mix_layer_norm)
            for _ in range(config.num_output_representations)
        )
        self.representation_dropout = nn.Dropout(config.representation_dropout)
        # float32 on CUDA in full precision (`float32_precision`); True lets cuDNN and cuBLAS use TF32, faster and less
        # exact (docs/design/numerics.md, "TF32"). Not saved with the model.
        self.allow_tf32 = False
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.char_embeddings.embedding

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.char_embeddings.embedding = value

    @property
    def inference_path(self) -> str:
        """``"auto"``, ``"fast"`` or ``"reference"``: see :meth:`set_inference_path`."""
        return self.encoder.inference_path

    def set_inference_path(self, path: str, pre_pack: bool = True, skip_boundary_steps: bool = True, int8: bool = False) -> None:
        """Choose how the token layer and the biLM are computed (not saved with the model).

        - ``"auto"`` (default): the fast path whenever it can run (no gradients being recorded, a CPU or CUDA device,
          float32 / bfloat16 / float16 weights); otherwise, saying why once in the log, the training route while
          gradients are recorded (on windows without padding for the biLM), else the reference path
          (``recurrence_elmo.select_route`` decides).
        - ``"fast"``: always the fast path; a call it cannot run raises ``RuntimeError``.
        - ``"reference"``: always the reference path, the readable definition in this file (per-step loop).

        ``pre_pack`` (default True): on CPU in float32 the fast path keeps a copy of the LSTM weights pre-packed for
        oneDNN, faster for most of the model's size again (docs/results/fast-path-constants.md); False saves it.

        ``skip_boundary_steps`` (default True): the fast path computes a first step that every sentence shares (the
        same ``<S>`` from the same initial state) once, and, where the output drops the boundaries and no
        ``lstm_state`` is returned, skips each direction's last step (``</S>`` forward, ``<S>`` backward): about n
        steps per direction instead of n + 2, the same vectors up to float32 rounding (docs/design/numerics.md,
        "Boundary steps"). False computes every step (``benchmarks/gates_forms.py --compare boundary-steps``).

        ``int8`` (default False; CPU, float32 weights): the fast path's LSTM, CNN and highway products in int8 on quantized
        copies of the weights (``int8_elmo.py``), not exact: cosine >= 0.999 to float32 (docs/results/int8.md).
        """
        if path not in INFERENCE_PATHS:
            raise ValueError(f"inference path must be one of {INFERENCE_PATHS}, got {path!r}.")
        for name, value in (("pre_pack", pre_pack), ("skip_boundary_steps", skip_boundary_steps), ("int8", int8)):
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be a bool, got {value!r}.")
        unavailable = int8_unavailable_reason(self.device, self.dtype) if int8 else None
        if unavailable is not None:
            raise ValueError(f"int8: {unavailable}.")
        self.char_embeddings.inference_path = path
        self.encoder.inference_path = path
        self.encoder.pre_pack_weights = pre_pack
        self.encoder.int8_matmuls = self.char_embeddings.int8_matmuls = int8
        self.encoder.skip_boundary_steps = skip_boundary_steps

    @torch.no_grad()
    def cache_token_embeddings(self, words: Iterable[str] | None = (), *, max_words: int | None = None) -> int:
        """Keep token-layer vectors so that the fast path looks words up instead of running the character CNN.

        ``words``: a vocabulary computed now (``<S>`` and ``</S>`` are always included); ``None`` removes the cache.
        (A model with a character vocabulary of its own maps words through its tokenizer: give it ``max_words`` only.)
        ``max_words``: also keep every other word the model meets, until the cache holds this many (first come,
        first kept; the original shape's vectors take 2 KB a word). The cached vectors are exactly what the CNN
        computes for the word in any batch, they are recomputed on next use if the weights change, and they are not
        saved with the model. Returns the number of cached words."""
        token_layer = self.char_embeddings
        if words is None:
            token_layer.token_embedding_cache = None
            return 0
        token_layer.token_embedding_cache = token_cache_for_words(
            self.config, words, max_words, token_layer.reference_forward, token_layer.widest_filter,
            token_layer.largest_id_of_every_slot, parameter_key(token_layer), self.device,
        )
        return len(token_layer.token_embedding_cache)

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        lstm_state: LstmState | None = None,
        return_lstm_state: bool = False,
        keep_sentence_boundaries: bool | None = None,
        backward_input_ids: torch.LongTensor | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> ELMoModelOutput | tuple:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch, words, max_characters_per_token)`):
                Character ids from [`ELMoTokenizer`]; padding words are all-zero rows at the end of each sentence.
                With a word embedding (`config.word_embedding_dim > 0`) each row starts with the word id: the last
                axis is `config.token_row_width`.
            attention_mask (`torch.Tensor` of shape `(batch, words)`, *optional*):
                1 for words, 0 for padding (right padding only). Derived from `input_ids` when omitted.
            lstm_state (`tuple(torch.FloatTensor)`, *optional*):
                `(hidden (L, 2, S, P), cell (L, 2, S, D))` from a previous call's `lstm_state` output. Row b of the
                batch starts from row b of this state; rows beyond the batch (S > batch) are returned unchanged,
                missing rows (S < batch) start from the model's initial state. Omitted: every sentence starts from
                the model's fixed initial state.
            return_lstm_state (`bool`, *optional*, defaults to `False`):
                Return the state after this batch as `lstm_state`.
            keep_sentence_boundaries (`bool`, *optional*):
                Overrides `config.keep_sentence_boundaries` for this call.
            backward_input_ids (`torch.LongTensor` of shape `(batch, words, max_characters_per_token)`, *optional*):
                bilm-tf's windowed regime (pre-training, `WindowedBiLMStream`): rows are windows of a stream that holds
                the boundaries already, and the backward stack reads this reversed stream left to right instead of
                `input_ids` backwards; every layer's backward half (layer 0: `[forward token; backward token]`) is
                aligned with it. Both streams share `attention_mask`.
        """
        input_ids, word_mask, backward_input_ids = self._checked_inputs(input_ids, attention_mask, backward_input_ids, kwargs)
        reads_stream = backward_input_ids is not None
        keep_boundaries = self.config.keep_sentence_boundaries if keep_sentence_boundaries is None else keep_sentence_boundaries

        # 1. Add <S> and </S> around every sentence, as the original does (a stream's windows already hold them).
        if reads_stream:
            character_ids, position_mask = input_ids, word_mask  # (B, T, C), (B, T)
        else:  # (B, T+2, C), (B, T+2)
            character_ids, position_mask = add_sentence_boundaries(input_ids, word_mask, self.config.sentence_boundary_rows)
        lengths = position_mask.sum(dim=1)  # (B,)

        with float32_precision(self.allow_tf32):
            # 2. Context-independent token layer (one call for both streams of a window): (B, T(+2), P) each.
            token_embeddings, backward_token_embeddings = self._token_embeddings(character_ids, position_mask, backward_input_ids)
            # 3. The biLM, starting from the caller's state or the fixed initial state.
            initial_state = self._initial_state_for_batch(lstm_state, len(word_mask))
            # Without kept boundaries or a returned state, each direction's last step (at a boundary) is not needed.
            needs_final_step = keep_boundaries or reads_stream or return_lstm_state
            lstm_outputs, final_state = self.encoder(token_embeddings, lengths, initial_state, backward_token_embeddings, needs_final_step)

        # 4. The L + 1 representations and their mixes, and the state after the batch when asked for.
        returned_state = self._merge_state(lstm_state, final_state, len(word_mask)) if return_lstm_state else None
        token_layers = (token_embeddings, backward_token_embeddings)
        output = self._representations(token_layers, lstm_outputs, position_mask, word_mask, keep_boundaries, returned_state)
        return output if (self.config.return_dict if return_dict is None else return_dict) else output.to_tuple()

    def _checked_inputs(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, backward_input_ids: torch.Tensor | None, kwargs: dict
    ) -> tuple[torch.LongTensor, torch.BoolTensor, torch.LongTensor | None]:
        """``forward``'s inputs checked (``model_inputs_elmo.py``): the ids as int64 (batch, words, C), the word mask
        (batch, words), the backward stream's ids as int64 or None."""
        check_forward_arguments("ELMoModel", kwargs)
        word_mask = validated_word_mask(self.config, input_ids, attention_mask)  # (B, T)
        input_ids = input_ids.long()  # int16 / int32 ids are fine; the embedding takes int64
        if backward_input_ids is not None:
            check_backward_stream(self.config, backward_input_ids, input_ids, word_mask)
            backward_input_ids = backward_input_ids.long()
        return input_ids, word_mask, backward_input_ids

    def _token_embeddings(
        self, character_ids: torch.LongTensor, position_mask: torch.BoolTensor, backward_input_ids: torch.LongTensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Step 2 of ``forward``: the token layer of ``character_ids`` (B, T, C), zero where ``position_mask`` (B, T)
        is False: (B, T, P), and that of the backward stream (B, T, P) when there is one, else None."""
        if backward_input_ids is None:
            return self.char_embeddings(character_ids) * position_mask.unsqueeze(-1), None
        both_streams = self.char_embeddings(torch.cat([character_ids, backward_input_ids]))  # (2B, T, P)
        both_masks = torch.cat([position_mask, position_mask]).unsqueeze(-1)  # (2B, T, 1)
        token_embeddings, backward_token_embeddings = (both_streams * both_masks).chunk(2)  # (B, T, P) each
        return token_embeddings, backward_token_embeddings

    def _representations(
        self,
        token_layers: tuple[torch.Tensor, torch.Tensor | None],
        lstm_outputs: list[torch.Tensor],
        position_mask: torch.BoolTensor,
        word_mask: torch.BoolTensor,
        keep_boundaries: bool,
        lstm_state: LstmState | None,
    ) -> ELMoModelOutput:
        """Step 4 of ``forward``: the L + 1 representations (layer 0 is the token layer twice; a window's backward half:
        the backward stream's tokens) and their mixes, boundaries removed unless ``keep_boundaries``.

        Args:
            token_layers: (token_embeddings, backward_token_embeddings or None), (B, T', P) each, T' = T + 2 with
                boundaries, T for a stream.
            lstm_outputs: L tensors (B, T', 2P); position_mask: (B, T'); word_mask: (B, T) the words.
            lstm_state: the state returned with the output, or None.
        """
        token_embeddings, backward_token_embeddings = token_layers
        batch_size, num_words = word_mask.shape
        backward_tokens = token_embeddings if backward_token_embeddings is None else backward_token_embeddings
        layers = [torch.cat([token_embeddings, backward_tokens], dim=-1)] + lstm_outputs
        if backward_token_embeddings is not None:  # every position of a window is a token of the stream
            output_mask = word_only_mask = position_mask
        elif keep_boundaries:
            output_mask = position_mask
            word_only_mask = torch.zeros_like(position_mask)
            word_only_mask[:, 1 : num_words + 1] = word_mask
        else:
            layers = [layer[:, 1 : num_words + 1] * word_mask.unsqueeze(-1) for layer in layers]
            output_mask = word_only_mask = word_mask
        mixes = [
            self.representation_dropout(mix(layers, word_only_mask)) * output_mask.unsqueeze(-1) for mix in self.scalar_mixes
        ]  # num_output_representations x (B, T, 2P)
        mixed = torch.stack(mixes, dim=1) if mixes else layers[-1].new_zeros(batch_size, 0, *layers[-1].shape[1:])
        return ELMoModelOutput(
            last_hidden_state=layers[-1],
            hidden_states=tuple(layers),
            mixed_representations=mixed,  # (B, num_output_representations, T, 2P)
            mask=output_mask,
            lstm_state=lstm_state,
            word_mask=word_only_mask,
        )

    def token_layer(
        self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.BoolTensor]:
        """The context-independent token layer alone (the character CNN, no biLSTM), checked like ``forward``'s input:
        vectors (batch, words, projection_dim), zero at padding, and the word mask (batch, words)."""
        word_mask = validated_word_mask(self.config, input_ids, attention_mask)  # (B, T)
        with float32_precision(self.allow_tf32):
            return self.char_embeddings(input_ids.long()) * word_mask.unsqueeze(-1), word_mask

    def _initial_state_for_batch(self, lstm_state: LstmState | None, batch_size: int) -> LstmState:
        default_hidden, default_cell = self.encoder.default_state(batch_size)
        if lstm_state is None:
            return default_hidden, default_cell
        hidden, cell = validated_lstm_state(self.config, lstm_state)
        carried = min(hidden.shape[2], batch_size)
        hidden = torch.cat([hidden[:, :, :carried], default_hidden[:, :, carried:]], dim=2)
        cell = torch.cat([cell[:, :, :carried], default_cell[:, :, carried:]], dim=2)
        return hidden, cell

    def _merge_state(self, previous: LstmState | None, final: LstmState, batch_size: int) -> LstmState:
        """Rows of ``previous`` beyond this batch keep their state, as in the original."""
        if previous is None or previous[0].shape[2] <= batch_size:
            return final
        return (
            torch.cat([final[0], previous[0][:, :, batch_size:]], dim=2),
            torch.cat([final[1], previous[1][:, :, batch_size:]], dim=2),
        )

    @torch.no_grad()
    def compute_warm_initial_state(self, batches: Iterable[dict[str, torch.Tensor]]) -> LstmState:
        """Run ``batches`` (dicts with ``input_ids`` and optionally ``attention_mask``) in order with the state
        carried over, as the original does, and return the final state averaged over batch rows: (hidden (L, 2, P),
        cell (L, 2, D)). Store it with :meth:`set_initial_lstm_state` to get deterministic vectors without the
        original's zero-state cold start."""
        state = None
        for batch in batches:
            state = self(
                input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask"), lstm_state=state, return_lstm_state=True
            ).lstm_state
        if state is None:
            raise ValueError("compute_warm_initial_state needs at least one batch of text.")
        return state[0].mean(dim=2), state[1].mean(dim=2)

    @torch.no_grad()
    def set_initial_lstm_state(self, hidden: torch.Tensor, cell: torch.Tensor) -> None:
        """Store the fixed initial state used when no ``lstm_state`` is passed (saved with the checkpoint).
        ``hidden`` (L, 2, P), ``cell`` (L, 2, D); zeros restore the original's cold start."""
        states = {"hidden": (hidden, self.encoder.initial_hidden_state), "cell": (cell, self.encoder.initial_cell_state)}
        for name, (value, buffer) in states.items():
            if value.shape != buffer.shape:
                raise ValueError(f"initial {name} state must have shape {tuple(buffer.shape)}, got {tuple(value.shape)}.")
            buffer.copy_(value)


__all__ = [
    "ELMoCharacterEmbeddings",
    "ELMoEncoder",
    "ELMoHighway",
    "ELMoLstmLayer",
    "ELMoModel",
    "ELMoModelOutput",
    "ELMoPreTrainedModel",
    "ELMoScalarMix",
    "REPRESENTATIONS",
    "add_sentence_boundaries",
    "float32_precision",
    "reverse_padded_sequences",
]
