"""The fast inference path (elmo_hf/token_cache_elmo.py, fast_recurrence_elmo.py) against the reference path
(modeling_elmo.py), its selector (recurrence_elmo.select_route), the character-slot trimming, the token-layer cache
and reduced precision."""

import logging

import pytest
import torch
from transformers.utils import logging as transformers_logging

from benchmarks.gates_forms import GATES_FORMS, first_layer_inputs_in, lstm_gates_in
from benchmarks.inference_speed import random_model as benchmark_random_model
from elmo_hf import ELMoConfig, ELMoModel, ELMoTokenizer
from elmo_hf import fast_recurrence_elmo, modeling_elmo, recurrence_elmo, token_cache_elmo
from elmo_hf.fast_recurrence_elmo import PackedBatch
from elmo_hf.token_cache_elmo import needed_character_slots, token_layer_on_rows, word_slot_counts
from elmo_hf.tokenization_elmo import word_to_character_ids
from elmo_hf.validation_elmo import is_close, largest, max_abs_difference

from .conftest import EWT_TEST
from .helpers import SENTENCES, random_model, requires_cuda, tiny_config, torch_threads

# The bound for float32; the measured differences are about 1e-6 (README, "Inference speed").
FAST_PATH_TOLERANCE = 1e-4
# Per-word cosine similarity of bfloat16 / float16 vectors to float32 ones on real sentences.
REDUCED_PRECISION_MIN_COSINE = 0.999


def trained_scale_random_model(config: ELMoConfig, seed: int = 0) -> ELMoModel:
    """Random weights at the scale of a trained ELMo (the benchmark's), so activations are O(1) and the comparison is
    not dominated by saturated, chaotic units. (With std 0.3 everywhere the original shape's reference path disagrees
    with itself by up to 6.0 between batch sizes.)"""
    return benchmark_random_model(config, seed)


def encode(tokenizer, sentences):
    return tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")


def run(model, path, skip_boundary_steps=True, **inputs):
    model.set_inference_path(path, skip_boundary_steps=skip_boundary_steps)
    try:
        with torch.no_grad():
            return model(**inputs)
    finally:
        model.set_inference_path("auto")


def max_difference(first, second) -> float:
    """Largest difference over every output (layers, mixes, state); NaN if any output has a NaN."""
    tensors = zip(
        (*first.hidden_states, *first.elmo_representations, *(first.lstm_state or ())),
        (*second.hidden_states, *second.elmo_representations, *(second.lstm_state or ())),
    )
    return largest(max_abs_difference(a.float(), b.float()) for a, b in tensors)


@pytest.fixture(scope="module")
def original_model():
    """The original shape (4096 / 512, 2048 filters, 2 highway), 93.6M random parameters."""
    return trained_scale_random_model(ELMoConfig())


@pytest.fixture(scope="module")
def tiny_model():
    return random_model()


def real_sentences(count: int, max_words: int = 40) -> list[str]:
    """Sentences of UD English-EWT test (real text), in file order."""
    sentences = []
    with open(EWT_TEST, encoding="utf-8") as lines:
        for line in lines:
            if line.startswith("# text = "):
                text = line[len("# text = ") :].strip()
                if len(text.split()) <= max_words:
                    sentences.append(text)
                if len(sentences) == count:
                    break
    return sentences


# ----------------------------------------------------------------------------------------------------------------------
# fast == reference
# ----------------------------------------------------------------------------------------------------------------------


def test_fast_equals_reference_on_the_original_shape(original_model, tokenizer):
    """float32, 93.6M random parameters, padded batch, stateful threading with more and fewer rows, boundaries kept.
    (Its default gates form, two matmuls; both forms run on every architecture variant below.)"""
    first = encode(tokenizer, [["The", "bank", "raised", "rates", "."], ["Hello"], ["We", "sat", "by", "the", "river"]])
    second = encode(tokenizer, [["Größe", "und", "Übung"], ["a"] * 7])
    third = encode(tokenizer, [["one"], ["two", "words"], ["three", "more", "words"], ["and", "a", "fourth", "one"]])
    state = {"reference": None, "fast": None}
    for inputs, keep in ((first, False), (second, True), (third, False)):
        outputs = {}
        for path in ("reference", "fast"):
            outputs[path] = run(
                original_model, path, **inputs, lstm_state=state[path], return_lstm_state=True, keep_sentence_boundaries=keep
            )
            state[path] = outputs[path].lstm_state
        assert max_difference(outputs["reference"], outputs["fast"]) <= FAST_PATH_TOLERANCE
    assert state["fast"][0].shape[2] == 4  # rows carried over like the reference


def test_fast_equals_reference_from_a_warm_initial_state(original_model, tokenizer):
    inputs = encode(tokenizer, SENTENCES[:3])
    hidden = torch.randn(2, 2, 512, generator=torch.Generator().manual_seed(1)).clamp(-3, 3)
    cell = torch.randn(2, 2, 4096, generator=torch.Generator().manual_seed(2)).clamp(-3, 3)
    original_model.set_initial_lstm_state(hidden, cell)
    try:
        reference = run(original_model, "reference", **inputs, return_lstm_state=True)
        fast = run(original_model, "fast", **inputs, return_lstm_state=True)
    finally:
        original_model.set_initial_lstm_state(torch.zeros_like(hidden), torch.zeros_like(cell))
    assert max_difference(reference, fast) <= FAST_PATH_TOLERANCE


@pytest.mark.parametrize("gates", GATES_FORMS)
def test_fast_equals_reference_where_the_cell_and_the_projection_are_clipped(tokenizer, gates):
    """Clips small enough to bite on many units: a fast path that skipped either clip would differ."""
    model = random_model(tiny_config(cell_clip=0.5, projection_clip=0.1))
    inputs = encode(tokenizer, SENTENCES)
    reference = run(model, "reference", **inputs, return_lstm_state=True)
    with lstm_gates_in(model, gates):
        fast = run(model, "fast", **inputs, return_lstm_state=True)
    top_forward = reference.last_hidden_state[..., : model.config.projection_dim][reference.mask]
    # The first layer has no skip connection: its outputs are the clipped projections themselves.
    first_layer = reference.hidden_states[1][reference.mask]
    assert (first_layer.abs() == 0.1).float().mean() > 0.2, "the projection clip does not bite"
    assert (reference.lstm_state[1].abs() == 0.5).float().mean() > 0.2, "the cell clip does not bite"
    assert top_forward.abs().max() <= 0.1 * 2 + 1e-6  # skip connection: at most two clipped outputs
    assert max_difference(reference, fast) <= 1e-5


ARCHITECTURE_VARIANTS = [
    dict(),
    dict(char_cnn_filters=[[1, 4], [2, 4]], projection_dim=8),  # F == P: no token projection
    dict(projection_dim=16, lstm_cell_size=16),  # P == D: no LSTM projection
    dict(num_highway_layers=0, use_skip_connections=False, cell_clip=None, projection_clip=None),
    dict(num_highway_layers=3, num_lstm_layers=3, char_cnn_activation="tanh", num_output_representations=2),
]


@pytest.mark.parametrize("gates", GATES_FORMS)
@pytest.mark.parametrize("overrides", ARCHITECTURE_VARIANTS)
def test_fast_equals_reference_on_every_architecture_variant(overrides, tokenizer, gates):
    """With the state returned, with boundaries kept, and as embedding runs it (neither: each direction's final step
    skipped, the first step shared)."""
    model = random_model(tiny_config(**overrides))
    inputs = encode(tokenizer, SENTENCES + [[]])  # mixed lengths and a sentence with no words
    for keep, return_state in ((False, True), (True, True), (False, False)):
        options = dict(return_lstm_state=return_state, keep_sentence_boundaries=keep)
        reference = run(model, "reference", **inputs, **options)
        with lstm_gates_in(model, gates):
            fast = run(model, "fast", **inputs, **options)
        assert max_difference(reference, fast) <= 1e-5
        assert torch.equal(reference.mask, fast.mask)
        assert (fast.lstm_state is None) == (not return_state)


def test_each_direction_skips_its_final_step_only_where_the_caller_drops_it(tiny_model, tokenizer, monkeypatch):
    """The forward direction's </S> and the backward one's <S> are computed only when the model returns them (kept
    boundaries) or the state after them; skipped, they are zeros and the other positions are unchanged."""
    needed = []
    real_forward = fast_recurrence_elmo.fast_encoder_forward

    def spy(*args, **kwargs):
        needed.append(args[6] if len(args) > 6 else kwargs.get("needs_final_step", True))
        return real_forward(*args, **kwargs)

    monkeypatch.setattr(modeling_elmo, "fast_encoder_forward", spy)
    inputs = encode(tokenizer, SENTENCES)
    for options in (dict(), dict(return_lstm_state=True), dict(keep_sentence_boundaries=True)):
        run(tiny_model, "fast", **inputs, **options)
    run(tiny_model, "fast", skip_boundary_steps=False, **inputs)
    assert needed == [False, True, True, True]

    encoder, lengths = tiny_model.encoder, torch.tensor([4, 2, 6])
    embeddings = torch.randn(3, 6, 8, generator=torch.Generator().manual_seed(0)) * (torch.arange(6) < lengths[:, None])[..., None]
    with torch.no_grad():
        arguments = (encoder.prepared_fast_path_weights(), embeddings, lengths, encoder.default_state(3), True, None)
        every_step, state = fast_recurrence_elmo.fast_encoder_forward(*arguments, True)
        skipped, no_state = fast_recurrence_elmo.fast_encoder_forward(*arguments, False)
    assert state is not None and no_state is None
    projection_dim = embeddings.shape[-1]
    for full, short in zip(every_step, skipped):
        for row, length in enumerate(lengths.tolist()):
            assert torch.all(short[row, length - 1, :projection_dim] == 0) and torch.all(short[row, 0, projection_dim:] == 0)
            assert torch.all(full[row, length - 1, :projection_dim] != 0) and torch.all(full[row, 0, projection_dim:] != 0)
            torch.testing.assert_close(short[row, : length - 1, :projection_dim], full[row, : length - 1, :projection_dim], rtol=0, atol=1e-6)
            torch.testing.assert_close(short[row, 1:length, projection_dim:], full[row, 1:length, projection_dim:], rtol=0, atol=1e-6)


@pytest.mark.parametrize("needs_final_step", [True, False])
@pytest.mark.parametrize("skip_boundary_steps", [True, False])
@pytest.mark.parametrize("backward_stream", [False, True])
def test_both_paths_return_the_same_things_for_every_argument(tiny_model, needs_final_step, skip_boundary_steps, backward_stream):
    """The encoder's contract does not depend on the path: the same outputs, zeros where the final steps are
    skipped, and a state exactly when the reference path would need its final steps (None otherwise, on both)."""
    encoder, lengths = tiny_model.encoder, torch.tensor([4, 2, 6, 1])
    generator = torch.Generator().manual_seed(0)
    in_length = (torch.arange(6) < lengths[:, None])[..., None]
    embeddings = torch.randn(4, 6, 8, generator=generator) * in_length
    backward = torch.randn(4, 6, 8, generator=generator) * in_length if backward_stream else None
    state = (torch.randn(2, 2, 4, 8, generator=generator), torch.randn(2, 2, 4, 16, generator=generator))
    returned = {}
    for path in ("reference", "fast"):
        tiny_model.set_inference_path(path, skip_boundary_steps=skip_boundary_steps)
        try:
            with torch.no_grad():
                returned[path] = encoder(embeddings, lengths, state, backward, needs_final_step)
        finally:
            tiny_model.set_inference_path("auto")
    (reference_layers, reference_state), (fast_layers, fast_state) = returned["reference"], returned["fast"]
    expects_state = needs_final_step or not skip_boundary_steps
    assert (reference_state is not None) == (fast_state is not None) == expects_state
    assert len(reference_layers) == len(fast_layers) == 2
    for reference, fast in zip((*reference_layers, *(reference_state or ())), (*fast_layers, *(fast_state or ()))):
        torch.testing.assert_close(fast, reference, rtol=0, atol=1e-6)
    if not expects_state:  # zeros exactly where each direction's last read position is
        for reference, fast in zip(reference_layers, fast_layers):
            assert torch.equal(reference == 0, fast == 0)
            for row, length in enumerate(lengths.tolist()):
                assert torch.all(fast[row, length - 1, :8] == 0)
                assert torch.all(fast[row, length - 1 if backward_stream else 0, 8:] == 0)


@pytest.mark.parametrize("gates", GATES_FORMS)
def test_a_first_step_all_sentences_share_is_computed_once(tokenizer, gates, monkeypatch):
    """Sentences that start alike (the same <S> from the same initial state) need their first step once; with a
    carried state that differs per row every row is computed. Three sentences of equal length: no other step has a
    single row."""
    model = random_model(tiny_config(projection_dim=16, lstm_cell_size=32))
    step_rows = []
    for method in ("__call__", "add_into"):
        real = getattr(fast_recurrence_elmo.Matmul, method)
        monkeypatch.setattr(fast_recurrence_elmo.Matmul, method, lambda self, *args, _real=real: step_rows.append(args[-1].shape[0]) or _real(self, *args))
    inputs = encode(tokenizer, [["a", "b", "c"], ["d", "e", "f"], ["g", "h", "i"]])
    with lstm_gates_in(model, gates):
        shared = run(model, "fast", **inputs)
        assert 1 in step_rows
        step_rows.clear()
        carried = torch.randn(2, 2, 3, 16, generator=torch.Generator().manual_seed(0)), torch.zeros(2, 2, 3, 32)
        carried_fast = run(model, "fast", **inputs, lstm_state=carried)
        assert 1 not in step_rows
        every_step = run(model, "fast", skip_boundary_steps=False, **inputs)
        assert 1 not in step_rows
    reference = run(model, "reference", **inputs)
    assert max_difference(reference, shared) <= 1e-5
    assert max_difference(run(model, "reference", **inputs, lstm_state=carried), carried_fast) <= 1e-5
    assert max_difference(every_step, shared) <= 1e-6  # equal bytes on this project's CPU; not promised elsewhere
    with pytest.raises(ValueError, match="skip_boundary_steps must be a bool"):
        model.set_inference_path("auto", skip_boundary_steps="no")


def test_the_first_layer_projects_each_distinct_input_once(tokenizer, monkeypatch):
    """In the two-matmul form the first layer's input projection runs on the distinct token vectors and its products
    are gathered to the positions: here each direction reads 11 positions of 4 distinct tokens (<S> or </S>, "the",
    "bank", "river"; each skips its final boundary). The outputs are those of a projection per position."""
    model = random_model(tiny_config(projection_dim=16, lstm_cell_size=32, num_lstm_layers=3))
    inputs = encode(tokenizer, [["the", "bank", "the", "bank"], ["the", "river", "bank"], ["bank"]])
    projected_rows = []  # rows of the matrix each input projection reads
    real = fast_recurrence_elmo._rows_rounded_up
    monkeypatch.setattr(fast_recurrence_elmo, "_rows_rounded_up", lambda matrix, *rows: projected_rows.append(matrix.shape[0]) or real(matrix, *rows))
    outputs = {}
    with lstm_gates_in(model, "two matmuls"):
        for form in ("distinct", "every position"):
            projected_rows.clear()
            with first_layer_inputs_in(model, form):
                outputs[form] = run(model, "fast", **inputs)
            assert projected_rows[:2] == ([4, 4] if form == "distinct" else [11, 11])  # layer 1, both directions
            assert 4 not in projected_rows[2:]  # the deeper layers read contextual vectors: every position
    assert max_difference(outputs["distinct"], outputs["every position"]) <= 1e-6  # equal bytes on this project's CPU
    assert max_difference(run(model, "reference", **inputs), outputs["distinct"]) <= 1e-5


def test_distinct_vectors_compare_bits():
    vectors = torch.tensor([[1.0, 0.0], [1.0, -0.0], [1.0, 0.0], [float("nan"), 2.0], [float("nan"), 2.0]])
    for dtype in (torch.float32, torch.bfloat16):
        distinct, index = token_cache_elmo.distinct_vectors(vectors.to(dtype))
        assert len(distinct) == 3  # 0.0 and -0.0 are two vectors; the same NaN is one
        assert torch.equal(distinct[index].view(torch.int16), vectors.to(dtype).view(torch.int16))


@pytest.mark.parametrize("gates", GATES_FORMS)
@pytest.mark.parametrize("broken", ["input_to_gates", "state_to_gates", "state_projection"])
def test_a_nan_in_a_weight_reaches_the_output_in_either_gates_form(tokenizer, gates, broken):
    """A NaN in any LSTM weight must come out as NaN, clips or not: an activation or a clip that turned it into a
    number would hide it (oneDNN's fused clip does)."""
    model = random_model(tiny_config(cell_clip=0.5, projection_clip=0.1))
    with torch.no_grad():
        getattr(model.encoder.forward_layers[0], broken).weight[0, 0] = float("nan")
    with lstm_gates_in(model, gates):
        output = run(model, "fast", **encode(tokenizer, SENTENCES[:2]))
    assert output.hidden_states[1][output.mask].isnan().any(), f"a NaN in {broken} vanished"


def test_the_gates_form_follows_the_layer_size():
    """One matmul over [x; h] for small layers (P_in + P <= FUSED_GATES_MAX_INNER_SIZE), two above; the
    candidate's rows doubled exactly for the shared sigmoid."""
    limit = fast_recurrence_elmo.FUSED_GATES_MAX_INNER_SIZE
    for projection_dim, fused in ((limit // 2, True), (limit // 2 + 8, False)):
        model = random_model(tiny_config(projection_dim=projection_dim, lstm_cell_size=2 * projection_dim))
        prepared = model.encoder.prepared_fast_path_weights()
        if not prepared.pre_packed:
            pytest.skip("this torch build has no oneDNN pre-packing")
        assert all((layer.gates is not None) == fused for layer in prepared.layers)
        assert all((layer.input_projection is None) == fused for layer in prepared.layers)
    direction = fast_recurrence_elmo.LstmDirectionWeights.of_layer(model.encoder.forward_layers[0])
    doubled = fast_recurrence_elmo._candidate_doubled(direction)
    doubling = torch.tensor([1.0, 1.0, 2.0, 1.0]).repeat_interleave(direction.gate_bias.shape[0] // 4)
    assert torch.equal(doubled.input_weight, direction.input_weight * doubling[:, None])
    assert torch.equal(doubled.recurrent_weight, direction.recurrent_weight * doubling[:, None])
    assert torch.equal(doubled.gate_bias, direction.gate_bias * doubling)
    weight, bias = fast_recurrence_elmo._sigmoid_gates_weights(doubled)
    assert torch.equal(weight, torch.cat([doubled.input_weight, doubled.recurrent_weight], 1)) and bias is doubled.gate_bias


def test_tanh_of_the_cell_by_the_sigmoid_identity_is_within_two_ulp_of_one():
    """``tanh_into`` on CPU (2 sigmoid(2c) - 1) against torch.tanh, over the range a clipped cell takes and beyond;
    NaN stays NaN and infinities go to +-1, as with torch.tanh."""
    values = torch.cat([torch.linspace(-20, 20, 400_001), torch.tensor([0.0, -0.0, 1e-30, -1e-30, float("inf"), float("-inf")])])
    out = torch.empty_like(values)
    assert recurrence_elmo.tanh_into(values, out) is out
    assert is_close(max_abs_difference(out, torch.tanh(values)), 2 * torch.finfo(torch.float32).eps)
    assert out[-2:].tolist() == [1.0, -1.0]
    assert recurrence_elmo.tanh_into(torch.tensor([float("nan")]), torch.empty(1)).isnan().all()


def test_fast_path_is_padding_invariant_and_zero_at_padding(tiny_model, tokenizer):
    batched = run(tiny_model, "fast", **encode(tokenizer, SENTENCES))
    assert all(torch.all(layer[~batched.mask] == 0) for layer in batched.hidden_states)
    for index, sentence in enumerate(SENTENCES):
        alone = run(tiny_model, "fast", **encode(tokenizer, [sentence]))
        for layer_alone, layer_batched in zip(alone.hidden_states, batched.hidden_states):
            assert (layer_alone[0] - layer_batched[index, : len(sentence)]).abs().max() <= 1e-5


def test_encoder_fast_path_handles_empty_rows_and_extra_padding_columns(tiny_model):
    """Called directly (ELMoModel never passes length 0): empty rows keep their initial state."""
    encoder = tiny_model.encoder
    generator = torch.Generator().manual_seed(0)
    lengths = torch.tensor([3, 0, 5, 1])
    inputs = torch.randn(4, 7, 8, generator=generator) * (torch.arange(7) < lengths.unsqueeze(1)).unsqueeze(-1)
    state = (torch.randn(2, 2, 4, 8, generator=generator), torch.randn(2, 2, 4, 16, generator=generator))
    with torch.no_grad():
        reference_layers, reference_state = encoder.reference_forward(inputs, lengths, state)
        fast_layers, fast_state = fast_recurrence_elmo.fast_encoder_forward(
            encoder.prepared_fast_path_weights(), inputs, lengths, state, encoder.use_skip_connections
        )
    for reference, fast in zip((*reference_layers, *reference_state), (*fast_layers, *fast_state)):
        torch.testing.assert_close(fast, reference, rtol=0, atol=1e-6)
    assert torch.equal(fast_state[0][:, :, 1], state[0][:, :, 1]) and torch.equal(fast_state[1][:, :, 1], state[1][:, :, 1])


def test_packed_batch_layout():
    packing = PackedBatch.build(torch.tensor([2, 4, 0, 3]), time=5)
    assert packing.order.tolist() == [1, 3, 0, 2]
    assert packing.step_rows == [3, 3, 2, 1] and packing.step_starts == [0, 3, 6, 8]
    # step 0 holds position 0 of rows 1, 3, 0; the backward sequence starts at each row's last word
    assert packing.forward_index[:3].tolist() == [1 * 5 + 0, 3 * 5 + 0, 0 * 5 + 0]
    assert packing.backward_index[:3].tolist() == [1 * 5 + 3, 3 * 5 + 2, 0 * 5 + 1]
    assert packing.last_row[~packing.is_empty].tolist() == [8, 7, 5]


def test_packed_batch_layout_without_the_final_step():
    """Each direction reads one position fewer: the forward one stops before the last position, the backward one
    starts at the last and stops before position 0."""
    packing = PackedBatch.build(torch.tensor([2, 4, 0, 3]), time=5, skip_final_step=True)
    assert packing.order.tolist() == [1, 3, 0, 2]
    assert packing.step_rows == [3, 2, 1] and packing.step_starts == [0, 3, 5]
    assert packing.forward_index.tolist() == [5, 15, 0, 6, 16, 7]
    assert packing.backward_index.tolist() == [1 * 5 + 3, 3 * 5 + 2, 0 * 5 + 1, 1 * 5 + 2, 3 * 5 + 1, 1 * 5 + 1]


def test_parity_fixture_runs_through_the_fast_path_by_default(fixture_model, tokenizer, monkeypatch):
    calls = []
    monkeypatch.setattr(modeling_elmo, "fast_encoder_forward", lambda *args, **kwargs: calls.append(1) or fast_recurrence_elmo.fast_encoder_forward(*args, **kwargs))
    with torch.no_grad():
        fixture_model(**encode(tokenizer, SENTENCES[:2]))
    assert calls == [1] and fixture_model.inference_path == "auto"


# ----------------------------------------------------------------------------------------------------------------------
# Dispatcher
# ----------------------------------------------------------------------------------------------------------------------


class CountingHandler(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_dispatcher_falls_back_when_gradients_are_needed_and_says_so_once(tiny_model, tokenizer, monkeypatch):
    fast_calls = []
    monkeypatch.setattr(modeling_elmo, "fast_encoder_forward", lambda *args, **kwargs: fast_calls.append(1) or fast_recurrence_elmo.fast_encoder_forward(*args, **kwargs))
    handler = CountingHandler()
    logger = transformers_logging.get_logger(recurrence_elmo.__name__)
    logger.addHandler(handler)
    logging.Logger.warning_once.cache_clear()  # transformers' warning_once remembers messages process-wide
    try:
        inputs = encode(tokenizer, SENTENCES[:2])
        for _ in range(3):
            output = tiny_model(**inputs)  # gradients recorded: reference path
        assert output.last_hidden_state.requires_grad and fast_calls == []
        fallbacks = [message for message in handler.messages if "using the reference path" in message]
        assert len(fallbacks) == 2  # once for the token layer, once for the biLM
        assert all("gradients are being recorded" in message for message in fallbacks)
        with torch.no_grad():
            tiny_model(**inputs)
        assert fast_calls == [1]
    finally:
        logger.removeHandler(handler)


def test_inference_path_can_be_forced(tiny_model, tokenizer, monkeypatch):
    fast_calls = []
    monkeypatch.setattr(modeling_elmo, "fast_encoder_forward", lambda *args, **kwargs: fast_calls.append(1) or fast_recurrence_elmo.fast_encoder_forward(*args, **kwargs))
    inputs = encode(tokenizer, SENTENCES[:2])
    run(tiny_model, "reference", **inputs)
    assert fast_calls == []
    tiny_model.set_inference_path("fast")
    try:
        assert tiny_model.inference_path == "fast"
        with pytest.raises(RuntimeError, match="fast inference path was requested but cannot run: gradients"):
            tiny_model(**inputs)
    finally:
        tiny_model.set_inference_path("auto")
    with pytest.raises(ValueError, match="inference path must be one of"):
        tiny_model.set_inference_path("quick")


# ----------------------------------------------------------------------------------------------------------------------
# Token layer: trimming and cache
# ----------------------------------------------------------------------------------------------------------------------


def test_needed_character_slots():
    rows = torch.tensor(
        [word_to_character_ids("abc"), word_to_character_ids("hello"), [0] * 50, word_to_character_ids("x" * 60)]
    )
    assert needed_character_slots(rows[:2], widest_filter=7) == 5 + 2 + 7  # longest word + 2 + widest filter
    assert needed_character_slots(rows[2:3], widest_filter=7) == 7  # padding rows only
    assert needed_character_slots(rows, widest_filter=7) == 50  # a 48-byte word fills the row


def max_pooled_features(char_embeddings, run_token_layer) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The token layer's output and each convolution's max-pooled output (where trimming could change anything)."""
    pooled = []
    hooks = [
        convolution.register_forward_hook(lambda module, inputs, output: pooled.append(output.max(dim=-1).values))
        for convolution in char_embeddings.convolutions
    ]
    try:
        with torch.no_grad():
            return run_token_layer(), pooled
    finally:
        for hook in hooks:
            hook.remove()


@pytest.mark.parametrize("threads", [1, 2])
def test_trimmed_character_slots_keep_every_window_and_one_fewer_does_not(original_model, threads):
    """The invariant that holds: trimming keeps every distinct convolution window, so the max-pooled features equal
    those of all 50 slots up to float32 rounding (a convolution of another width may sum in another order; measured
    0 to 1.8e-7 at a feature scale of about 2, depending on the thread count). Dropping one more slot loses a
    window and changes a feature by far more than rounding."""
    with torch_threads(threads):
        char_embeddings = original_model.char_embeddings
        words = ["a", "bank", "Größe", "unbelievably", "<S>", "</S>", "x" * 60, ""]
        rows = torch.tensor([word_to_character_ids(word) for word in words] + [[0] * 50])
        for subset in (rows[:2], rows[:4], rows[4:6], rows[8:], rows):
            full, full_pooled = max_pooled_features(char_embeddings, lambda: char_embeddings.reference_forward(subset))
            # The fast path runs each word on its own slots (word_slot_counts): the same max-pooled features.
            for row, slots in enumerate(word_slot_counts(subset, char_embeddings.widest_filter).tolist()):
                _, trimmed_pooled = max_pooled_features(
                    char_embeddings, lambda: char_embeddings.reference_forward(subset[row : row + 1, :slots])
                )
                assert largest(max_abs_difference(a[0], b[row]) for a, b in zip(trimmed_pooled, full_pooled)) <= 1e-6
            trimmed = token_layer_on_rows(char_embeddings.reference_forward, subset, char_embeddings.widest_filter)
            torch.testing.assert_close(trimmed, full, rtol=0, atol=1e-5)
        # The formula, longest word + 2 + (widest filter - 1), loses the all-padding window of the widest
        # filter for the longest word (here "unbelievably": 12 bytes + 2 marks + 6 slots) and changes its vector.
        full, _ = max_pooled_features(char_embeddings, lambda: char_embeddings.reference_forward(rows[:4]))
        one_fewer, _ = max_pooled_features(char_embeddings, lambda: char_embeddings.reference_forward(rows[:4, : 12 + 2 + 6]))
        assert max_abs_difference(one_fewer[3], full[3]) > 1e-3


def test_token_cache_equals_the_cnn_and_falls_back_for_unknown_words(tokenizer):
    model = random_model()
    sentences = SENTENCES[:2]
    inputs = encode(tokenizer, sentences)
    uncached = run(model, "fast", **inputs)
    reference = run(model, "reference", **inputs)
    vocabulary = ["The", "bank", "raised", "its", "interest"]  # the rest of the words are unknown
    assert model.cache_token_embeddings(vocabulary) == len(vocabulary) + 2  # + <S> and </S>
    cached = run(model, "fast", **inputs)
    assert max_difference(cached, uncached) <= 1e-6 and max_difference(cached, reference) <= 1e-5

    # The cache is really used: spoil the vector of "bank" and only the positions of "bank" change.
    cache = model.char_embeddings.token_embedding_cache
    bank = cache.lookup(torch.tensor([word_to_character_ids("bank")]))
    cache.vectors[bank] += 1.0
    spoiled = run(model, "fast", **inputs)
    changed = (spoiled.hidden_states[0] != cached.hidden_states[0]).any(dim=-1)
    is_bank = torch.tensor([[word == "bank" for word in sentence] + [False] * (inputs["input_ids"].shape[1] - len(sentence)) for sentence in sentences])
    assert torch.equal(changed, is_bank)

    # Changing the weights refreshes the cache.
    with torch.no_grad():
        model.char_embeddings.highways[0].transform.bias.add_(0.1)
    refreshed = run(model, "fast", **inputs)
    model.cache_token_embeddings(None)
    assert model.char_embeddings.token_embedding_cache is None
    assert max_difference(refreshed, run(model, "reference", **inputs)) <= 1e-5


CACHE_WORDS = ["a", "bank", "Größe", "unbelievably", "<S>", "</S>", "x" * 60, "", "of", "the", "banks", "Ünïcödé"]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("overrides", ARCHITECTURE_VARIANTS + ["original"])
def test_a_words_token_vector_does_not_depend_on_its_batch(overrides, threads, original_model):
    """What makes the automatic cache exact: a word's vector is the same bits alone, in any company, at any row."""
    model = original_model if overrides == "original" else random_model(tiny_config(**overrides))
    token_layer = model.char_embeddings
    rows = torch.tensor([word_to_character_ids(word) for word in CACHE_WORDS] + [[0] * 50])
    with torch_threads(threads), torch.no_grad():
        together = token_layer_on_rows(token_layer.reference_forward, rows, token_layer.widest_filter)
        permutation = torch.randperm(len(rows), generator=torch.Generator().manual_seed(0))
        shuffled = token_layer_on_rows(token_layer.reference_forward, rows[permutation], token_layer.widest_filter)
        assert torch.equal(shuffled, together[permutation])
        many = rows.repeat(11, 1)  # 143 rows: past CNN_ROW_MULTIPLE, so the CNN runs on another row count
        assert torch.equal(token_layer_on_rows(token_layer.reference_forward, many, token_layer.widest_filter), together.repeat(11, 1))
        for index in range(len(rows)):
            alone = token_layer_on_rows(token_layer.reference_forward, rows[index : index + 1], token_layer.widest_filter)
            assert torch.equal(alone[0], together[index]), CACHE_WORDS[index] if index < len(CACHE_WORDS) else "padding"
        assert token_cache_elmo.is_batch_invariant(token_layer.reference_forward, token_layer.widest_filter, 50, torch.device("cpu"))


def test_the_batch_invariance_probe_fails_where_the_row_count_changes_a_vector():
    token_layer = random_model().char_embeddings

    def row_count_dependent(rows):
        return token_layer.reference_forward(rows) * (1 + 1e-7 * len(rows))

    assert not token_cache_elmo.is_batch_invariant(row_count_dependent, token_layer.widest_filter, 50, torch.device("cpu"))


@pytest.mark.parametrize("threads", [1, 2])
def test_a_growing_token_cache_changes_no_bit_and_keeps_its_bound(tokenizer, threads):
    model = random_model()
    batches = [SENTENCES[:2], SENTENCES[1:], SENTENCES]
    with torch_threads(threads):
        uncached = [run(model, "fast", **encode(tokenizer, batch)) for batch in batches]
        assert model.cache_token_embeddings(max_words=10) == 2  # <S> and </S>, then every word met up to 10
        for batch, expected in zip(batches, uncached):
            cached = run(model, "fast", **encode(tokenizer, batch))
            assert max_difference(cached, expected) == 0.0
        cache = model.char_embeddings.token_embedding_cache
        assert len(cache) == 10 and len(cache.vectors) == 10 and len(cache.row_of) == 10
        # What it kept are the first words met, with their own vectors.
        held = torch.cat(cache._rows)
        assert torch.equal(cache.vectors, token_layer_on_rows(model.char_embeddings.reference_forward, held, model.char_embeddings.widest_filter))
        # New weights: every kept vector is recomputed, and the output follows the reference path.
        with torch.no_grad():
            model.char_embeddings.highways[0].transform.bias.add_(0.1)
        inputs = encode(tokenizer, SENTENCES)
        assert max_difference(run(model, "fast", **inputs), run(model, "reference", **inputs)) <= 1e-5
        assert len(model.char_embeddings.token_embedding_cache) == 10


def test_a_token_cache_grown_in_inference_mode_keeps_growing_under_no_grad(tokenizer):
    """The embedder runs the model in `torch.inference_mode()`, a user's code often under `torch.no_grad()`: the
    cache's storage, reallocated as it grows past its first capacity (1,026 words here), must stay updatable in both."""
    model = random_model()
    model.cache_token_embeddings(max_words=5000)
    words = [f"w{index}" for index in range(1500)]
    first, then = encode(tokenizer, [words[:1200]]), encode(tokenizer, [words[1200:]])
    with torch.inference_mode():
        model(**first)
    with torch.no_grad():
        cached = model(**then)
    vectors = model.char_embeddings.token_embedding_cache.vectors
    assert len(vectors) == 1502 and not vectors.is_inference() and not vectors.requires_grad
    model.cache_token_embeddings(None)
    assert max_difference(cached, run(model, "fast", **then)) == 0.0


def test_a_token_cache_does_not_grow_where_the_probe_fails(tokenizer, monkeypatch):
    monkeypatch.setattr(token_cache_elmo, "is_batch_invariant", lambda *args: False)
    model = random_model()
    inputs = encode(tokenizer, SENTENCES)
    model.cache_token_embeddings(max_words=100)
    assert max_difference(run(model, "fast", **inputs), run(model, "reference", **inputs)) <= 1e-5
    assert len(model.char_embeddings.token_embedding_cache) == 2


def test_token_cache_size_is_checked():
    with pytest.raises(ValueError, match="max_words"):
        random_model().cache_token_embeddings(max_words=0)


# ----------------------------------------------------------------------------------------------------------------------
# Reduced precision
# ----------------------------------------------------------------------------------------------------------------------


def per_word_cosines(low_precision_output, float32_output) -> torch.Tensor:
    mask = float32_output.mask
    return torch.cat(
        [
            torch.nn.functional.cosine_similarity(low[mask].float(), high[mask], dim=-1)
            for low, high in zip(low_precision_output.hidden_states, float32_output.hidden_states)
        ]
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reduced_precision_on_real_sentences_of_the_trained_fixture_model(converted_fixture_dir, dtype):
    sentences = real_sentences(64)
    tokenizer = ELMoTokenizer()
    inputs = tokenizer(sentences, padding=True, return_tensors="pt")
    float32_model = ELMoModel.from_pretrained(converted_fixture_dir).eval()
    low_model = ELMoModel.from_pretrained(converted_fixture_dir, dtype=dtype).eval()
    with torch.no_grad():
        expected = float32_model(**inputs)
        actual = low_model(**inputs, return_lstm_state=True)
    assert actual.last_hidden_state.dtype == dtype
    assert actual.lstm_state[1].dtype == torch.float32  # the cell is kept in float32
    assert per_word_cosines(actual, expected).min() >= REDUCED_PRECISION_MIN_COSINE


def test_bfloat16_on_real_sentences_of_the_small_shape():
    """The released small shape (1024 / 128, 13.6M parameters), random weights at a trained model's scale."""
    config = ELMoConfig(projection_dim=128, lstm_cell_size=1024, num_highway_layers=1)
    model = trained_scale_random_model(config)
    inputs = ELMoTokenizer()(real_sentences(16), padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = model(**inputs)
        actual = model.to(torch.bfloat16)(**inputs)
    assert per_word_cosines(actual, expected).min() >= REDUCED_PRECISION_MIN_COSINE


# ----------------------------------------------------------------------------------------------------------------------
# Remote code carries the fast path
# ----------------------------------------------------------------------------------------------------------------------


def test_checkpoints_carry_the_fast_path_module(tmp_path, tiny_model):
    tiny_model.save_pretrained(tmp_path)
    for module in (recurrence_elmo, fast_recurrence_elmo, token_cache_elmo):
        name = module.__name__.rsplit(".", 1)[-1] + ".py"
        assert (tmp_path / name).read_text() == open(module.__file__, encoding="utf-8").read(), name


# ----------------------------------------------------------------------------------------------------------------------
# Full size (slow) and GPU
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_fast_equals_reference_on_the_original_shape_with_real_sentences(original_model):
    inputs = ELMoTokenizer()(real_sentences(32), padding=True, return_tensors="pt")
    reference = run(original_model, "reference", **inputs, return_lstm_state=True)
    fast = run(original_model, "fast", **inputs, return_lstm_state=True)
    assert max_difference(reference, fast) <= FAST_PATH_TOLERANCE
    as_embedding_runs_it = run(original_model, "fast", **inputs)  # final steps skipped, first step shared
    assert max_difference(reference, as_embedding_runs_it) <= FAST_PATH_TOLERANCE


@pytest.mark.slow
def test_bfloat16_on_real_sentences_of_the_original_shape(original_model):
    inputs = ELMoTokenizer()(real_sentences(8), padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = original_model(**inputs)
    low_model = trained_scale_random_model(ELMoConfig()).to(torch.bfloat16)
    with torch.no_grad():
        actual = low_model(**inputs)
    assert per_word_cosines(actual, expected).min() >= REDUCED_PRECISION_MIN_COSINE


@pytest.mark.gpu
@requires_cuda
def test_fast_equals_reference_on_cuda(original_model):
    inputs = {key: value.cuda() for key, value in ELMoTokenizer()(real_sentences(16), padding=True, return_tensors="pt").items()}
    model = trained_scale_random_model(ELMoConfig()).cuda()
    reference = run(model, "reference", **inputs, return_lstm_state=True)
    fast = run(model, "fast", **inputs, return_lstm_state=True)
    assert max_difference(reference, fast) <= FAST_PATH_TOLERANCE
    on_cpu = run(original_model, "reference", **{key: value.cpu() for key, value in inputs.items()})
    assert is_close(largest(max_abs_difference(a.cpu(), b) for a, b in zip(fast.hidden_states, on_cpu.hidden_states)), FAST_PATH_TOLERANCE)


@pytest.mark.gpu
@requires_cuda
def test_float32_on_cuda_is_float32_unless_tf32_is_allowed():
    """Against float64 on the CPU: measured on an H100 (issue 13) 4.4e-5 in full float32, 2.2e-2 with cuDNN's TF32."""
    inputs = ELMoTokenizer()(real_sentences(16), padding=True, return_tensors="pt")
    model = trained_scale_random_model(ELMoConfig())
    exact = run(model.double(), "reference", **inputs).hidden_states
    model.float().cuda()
    on_cuda_inputs = {key: value.cuda() for key, value in inputs.items()}
    on_cuda = run(model, "auto", **on_cuda_inputs).hidden_states
    model.allow_tf32 = True
    with_tf32 = run(model, "auto", **on_cuda_inputs).hidden_states
    difference = largest(max_abs_difference(a.cpu().double(), b) for a, b in zip(on_cuda, exact))
    tf32_difference = largest(max_abs_difference(a.cpu().double(), b) for a, b in zip(with_tf32, exact))
    print(f"float32 on CUDA vs float64: {difference:.2e}; with TF32 allowed: {tf32_difference:.2e}")
    assert is_close(difference, FAST_PATH_TOLERANCE)


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reduced_precision_on_cuda(dtype):
    inputs = {key: value.cuda() for key, value in ELMoTokenizer()(real_sentences(32), padding=True, return_tensors="pt").items()}
    model = trained_scale_random_model(ELMoConfig()).cuda()
    with torch.no_grad():
        expected = model(**inputs)
        actual = model.to(dtype)(**inputs, return_lstm_state=True)
    assert actual.lstm_state[1].dtype == torch.float32
    assert per_word_cosines(actual, expected).min() >= REDUCED_PRECISION_MIN_COSINE


def test_ids_beyond_int16_get_wide_keys_and_never_collide():
    """Rows holding ids above 32,767 (a big word vocabulary's ids) are keyed as int32: 1 and 65,537 are the same
    int16 (65,537 wraps to 1), so narrow keys would make two words one."""
    from elmo_hf.token_cache_elmo import INT16_MAX, TokenEmbeddingCache, distinct_rows

    rows = torch.tensor([[1, 5], [65537, 5], [1, 5], [INT16_MAX + 1, 5]])
    distinct, inverse = distinct_rows(rows)
    assert len(distinct) == 3 and inverse[0] == inverse[2] and len({int(inverse[0]), int(inverse[1]), int(inverse[3])}) == 3
    cache = TokenEmbeddingCache(rows, largest_id=70000)
    assert cache.wide_keys and len(cache) == 3
    indices = cache.lookup(torch.tensor([[65537, 5], [1, 5], [INT16_MAX + 1, 5], [2, 5]]))
    assert len(set(indices[:3].tolist())) == 3 and indices[3] == -1
