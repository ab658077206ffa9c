"""The training route (elmo_hf/recurrence_elmo.py's hand-written LSTM backward, token_cache_elmo.py without its cache)
against the reference path (modeling_elmo.py): outputs and every gradient, on every architecture variant, and the
selector's choice of it."""

import math

import pytest
import torch

from elmo_hf import modeling_elmo
from elmo_hf.modeling_elmo import ELMoEncoder, ELMoLstmLayer
from elmo_hf.recurrence_elmo import lstm_window_forward, select_route
from elmo_hf.token_cache_elmo import fast_character_embeddings
from elmo_hf.modeling_elmo_pretraining import ELMoForPreTraining
from elmo_hf.tokenization_elmo import word_to_character_ids
from elmo_hf.validation_elmo import is_close, largest, max_abs_difference

from .helpers import tiny_config

# Measured differences are about 1e-6 (float32 summation order); the bound leaves room, no more.
TOLERANCE = 2e-5

# ELMoForManyLangs' shape: a word embedding beside the characters (each row's word id first).
WORD_EMBEDDING = dict(
    character_vocabulary="unicode_characters", num_characters=262, word_embedding_dim=6, word_embedding_vocab_size=40,
    begin_sentence_ids=[1] + word_to_character_ids("<s>", 50), end_sentence_ids=[2] + word_to_character_ids("</s>", 50),
)
# Every switch of the architecture the training path must follow (the inference tests' variants, the word embedding of
# ELMoForManyLangs, AllenNLP's cell without TF's forget bias, and clipping of one kind only).
ARCHITECTURE_VARIANTS = [
    dict(),
    dict(char_cnn_filters=[[1, 4], [2, 4]], projection_dim=8),  # F == P: no token projection
    dict(projection_dim=16, lstm_cell_size=16),  # P == D: no LSTM projection
    dict(num_highway_layers=0, use_skip_connections=False, cell_clip=None, projection_clip=None),
    dict(num_highway_layers=3, num_lstm_layers=3, char_cnn_activation="tanh"),
    dict(WORD_EMBEDDING, tf_forget_gate_bias=False),
    dict(cell_clip=0.5, projection_clip=None),
    dict(cell_clip=None, projection_clip=0.3),
]
WORDS = ["the", "king", "the", "queen", "a", "crown", "the", "king", "of", "honorificabilitudinitatibus", "a", "x"]


def largest_difference(first: list, second: list) -> float:
    """Largest |a - b| over pairs of tensors (None pairs skipped); NaN if any element is NaN."""
    return largest(
        max_abs_difference(a.detach(), b.detach()) for a, b in zip(first, second) if a is not None or b is not None
    )


def window_batch(config, rows: int = 3, window: int = 6, vocabulary_size: int = 30, seed: int = 0) -> dict:
    """A windowed pre-training batch of words drawn from WORDS (so words repeat within and across both streams)."""
    generator = torch.Generator().manual_seed(seed)

    def stream() -> torch.Tensor:
        picks = torch.randint(len(WORDS), (rows * window,), generator=generator).tolist()
        ids = []
        for index, pick in enumerate(picks):
            characters = word_to_character_ids(WORDS[pick], config.max_characters_per_token)
            if config.word_embedding_dim:
                characters = [1 + (index + pick) % (config.word_embedding_vocab_size - 1)] + characters
            ids.append(characters)
        return torch.tensor(ids).reshape(rows, window, -1)

    def labels() -> torch.Tensor:
        return torch.randint(vocabulary_size, (rows, window), generator=generator)

    return dict(input_ids=stream(), backward_input_ids=stream(), next_word_labels=labels(), previous_word_labels=labels())


def scaled_model(config, seed: int = 0) -> ELMoForPreTraining:
    """Weights large enough that gates saturate in places and both clips are reached."""
    torch.manual_seed(seed)
    model = ELMoForPreTraining(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "scalar_mixes" not in name:
                parameter.normal_(0.0, 0.4)
        model.elmo.char_embeddings.embedding.weight[0].zero_()
    return model


def loss_and_gradients(model: ELMoForPreTraining, path: str, batch: dict, state) -> list:
    model.elmo.set_inference_path(path)
    model.zero_grad(set_to_none=True)
    torch.manual_seed(1)  # the same sampled negatives for both paths
    output = model(**batch, lstm_state=state, return_lstm_state=True)
    output.loss.backward()
    model.elmo.set_inference_path("auto")
    return [output.loss, *output.lstm_state] + [parameter.grad for parameter in model.parameters()]


@pytest.mark.parametrize("overrides", ARCHITECTURE_VARIANTS)
def test_training_step_equals_reference_on_every_architecture_variant(overrides):
    """A windowed training step with a carried state: the loss, the state after the window and every parameter's
    gradient (token layer, LSTM, softmax) equal the reference path's."""
    config = tiny_config(word_vocab_size=30, softmax_num_samples=8, lm_dropout=0.0, **overrides)
    model = scaled_model(config).train()
    batch = window_batch(config)
    layers, rows = config.num_lstm_layers, 3
    generator = torch.Generator().manual_seed(2)
    state = (
        torch.randn(layers, 2, rows, config.projection_dim, generator=generator),
        torch.randn(layers, 2, rows, config.lstm_cell_size, generator=generator) * 2,
    )
    reference = loss_and_gradients(model, "reference", batch, state)
    fast = loss_and_gradients(model, "auto", batch, state)
    assert [g is None for g in reference] == [g is None for g in fast]
    assert sum(g is not None for g in fast[3:]) >= 10  # the token layer's, the LSTMs' and the softmax's
    difference = largest_difference(reference, fast)
    assert is_close(difference, TOLERANCE), difference


def test_training_step_runs_the_fast_path_where_it_applies(monkeypatch):
    """Windows without padding in training run the hand-written LSTM backward; padded rows, autocast or
    inference_path="reference" run the reference loop: the selector's choice, and what the encoder then runs."""
    config = tiny_config(word_vocab_size=30)
    encoder = ELMoEncoder(config)
    inputs = torch.randn(2, 4, config.projection_dim, requires_grad=True)
    state = encoder.default_state(2)
    full, padded = torch.tensor([4, 4]), torch.tensor([4, 2])
    backward_nodes = []

    def recorded(*args):
        outputs, final_state = lstm_window_forward(*args)
        backward_nodes.append(type(outputs.grad_fn).__name__)
        return outputs, final_state

    monkeypatch.setattr(modeling_elmo, "lstm_window_forward", recorded)

    def route_and_backward_nodes(lengths: torch.Tensor, path: str = "auto") -> tuple[str, list[str]]:
        backward_nodes.clear()
        encoder.inference_path = path
        route = select_route(path, encoder, (inputs, *state), encoder.layer_input_dropout.p, lengths)
        encoder(inputs, lengths, state)
        return route, list(backward_nodes)

    every_direction = 2 * config.num_lstm_layers
    assert route_and_backward_nodes(full) == ("training", ["_LstmWindowBackward"] * every_direction)
    assert route_and_backward_nodes(padded) == ("reference", [])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert route_and_backward_nodes(full) == ("reference", [])
    assert route_and_backward_nodes(full, "reference") == ("reference", [])
    layer = encoder.forward_layers[0]
    assert type(layer(inputs, full, (state[0][0, 0], state[1][0, 0]), training_window=True)[0].grad_fn).__name__ == "_LstmWindowBackward"
    assert type(layer(inputs, full, (state[0][0, 0], state[1][0, 0]))[0].grad_fn).__name__ != "_LstmWindowBackward"


def test_the_token_layer_takes_the_route_the_selector_gives():
    """The one selector decides for the token layer too: the fast route (with its cache) without gradients, the
    training route (each distinct word once, no cache) while gradients are recorded, the reference path when asked;
    "fast" with gradients raises."""
    config = tiny_config(word_vocab_size=30)
    token_layer = scaled_model(config).elmo.char_embeddings
    ids = window_batch(config)["input_ids"]
    assert select_route("auto", token_layer, (ids,)) == "training"
    assert select_route("reference", token_layer, (ids,)) == "reference"
    with pytest.raises(RuntimeError, match="fast inference path was requested but cannot run: gradients"):
        select_route("fast", token_layer, (ids,))
    with torch.no_grad():
        assert select_route("auto", token_layer, (ids,)) == "fast"
        assert select_route("fast", token_layer, (ids,)) == "fast"


@pytest.mark.parametrize(
    "clips", [(0.5, 0.4), (None, None), (0.2, None), (None, 0.1)], ids=["both", "none", "cell", "projection"]
)
@pytest.mark.parametrize("projected", [True, False])
def test_lstm_window_gradients_equal_the_reference_loop(clips, projected):
    """One layer direction alone, with gradients flowing into the outputs and into the final state (hidden and cell),
    clips reached often: every input's and weight's gradient equals the reference loop's."""
    cell_clip, projection_clip = clips
    config = tiny_config(
        projection_dim=8 if projected else 16, lstm_cell_size=16, cell_clip=cell_clip, projection_clip=projection_clip
    )
    layer = ELMoLstmLayer(config.projection_dim, config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.6)
    rows, steps = 4, 9
    inputs = torch.randn(rows, steps, config.projection_dim, generator=generator).requires_grad_()
    hidden = torch.randn(rows, config.projection_dim, generator=generator).requires_grad_()
    cell = (torch.randn(rows, config.lstm_cell_size, generator=generator) * 2).requires_grad_()
    upstream = [torch.randn(rows, steps, config.projection_dim, generator=generator), torch.randn(rows, config.projection_dim, generator=generator), torch.randn(rows, config.lstm_cell_size, generator=generator)]
    lengths = torch.full((rows,), steps)
    results = []
    for training_window in (False, True):
        layer.zero_grad(set_to_none=True)
        for tensor in (inputs, hidden, cell):
            tensor.grad = None
        outputs, (final_hidden, final_cell) = layer(inputs, lengths, (hidden, cell), training_window)
        sum((result * gradient).sum() for result, gradient in zip((outputs, final_hidden, final_cell), upstream)).backward()
        results.append([outputs, final_hidden, final_cell, inputs.grad, hidden.grad, cell.grad, *(p.grad for p in layer.parameters())])
    if cell_clip is not None:  # the clip mattered: some cells were clipped
        assert bool((results[0][2].abs() == cell_clip).any())
    difference = largest_difference(*results)
    assert is_close(difference, TOLERANCE), difference


def test_lstm_window_carries_nan_through():
    """A NaN in the inputs reaches the outputs and the gradients (never hidden by a clip or a mask)."""
    config = tiny_config()
    layer = ELMoLstmLayer(config.projection_dim, config)
    inputs = torch.randn(2, 3, config.projection_dim)
    inputs[1, 0, 0] = math.nan
    inputs.requires_grad_()
    state = (torch.zeros(2, config.projection_dim), torch.zeros(2, config.lstm_cell_size))
    outputs, _ = layer(inputs, torch.tensor([3, 3]), state, training_window=True)
    outputs.sum().backward()
    assert math.isnan(max_abs_difference(outputs, outputs))
    assert bool(inputs.grad[1].isnan().any()) and not bool(inputs.grad[0].isnan().any())


def test_lstm_window_forward_with_no_gradient_for_the_final_state():
    """The usual training case: the carried state is detached, so only the outputs send gradients back."""
    config = tiny_config()
    layer = ELMoLstmLayer(config.projection_dim, config)
    inputs = torch.randn(2, 5, config.projection_dim, requires_grad=True)
    state = (torch.zeros(2, config.projection_dim), torch.zeros(2, config.lstm_cell_size))
    outputs, _ = lstm_window_forward(
        layer.input_to_gates(inputs), state, layer.state_to_gates.weight, layer.state_projection.weight,
        layer.forget_gate_bias, layer.cell_clip, layer.projection_clip,
    )
    outputs.square().sum().backward()
    expected_inputs = inputs.detach().requires_grad_()
    reference, _ = layer(expected_inputs, torch.tensor([5, 5]), state)
    reference.square().sum().backward()
    assert is_close(max_abs_difference(inputs.grad, expected_inputs.grad), TOLERANCE)


@pytest.mark.parametrize("overrides", [dict(), WORD_EMBEDDING])
def test_training_token_layer_equals_the_token_layer_with_gradients(overrides):
    """Each distinct word once on its own slots: the vectors and the CNN's gradients equal the token layer on every
    row, all slots; repeated words, padding rows, boundaries and a word as long as the slots allow included."""
    config = tiny_config(**overrides)
    token_layer = scaled_model(tiny_config(word_vocab_size=30, **overrides)).elmo.char_embeddings
    batch = window_batch(config, rows=4, window=7)
    rows = torch.cat([batch["input_ids"], batch["backward_input_ids"]])
    rows[0, -1] = 0  # a padding row
    upstream = torch.randn(*rows.shape[:-1], config.projection_dim)
    results = []
    for compute in (token_layer.reference_forward, lambda ids: fast_character_embeddings(ids, token_layer.reference_forward, token_layer.widest_filter, None)):
        token_layer.zero_grad(set_to_none=True)
        vectors = compute(rows)
        (vectors * upstream).sum().backward()
        results.append([vectors, *(p.grad for p in token_layer.parameters())])
    difference = largest_difference(*results)
    assert is_close(difference, TOLERANCE), difference
    empty = fast_character_embeddings(rows[:0], token_layer.reference_forward, token_layer.widest_filter, None)
    assert empty.shape == (0, *rows.shape[1:-1], config.projection_dim)
