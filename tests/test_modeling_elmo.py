import pytest
import torch

from elmo_hf import ELMoModel, ELMoModelOutput, ELMoScalarMix, ELMoTokenizer
from elmo_hf.modeling_elmo import ELMoLstmLayer, add_sentence_boundaries, reverse_padded_sequences
from elmo_hf.tokenization_elmo import word_to_character_ids

from .helpers import SENTENCES, random_model, tiny_config


def encode(tokenizer, sentences):
    return tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")


@pytest.fixture(scope="module")
def model():
    return random_model()


def test_output_shapes_and_fields(model, tokenizer):
    inputs = encode(tokenizer, SENTENCES)
    output = model(**inputs, return_lstm_state=True)
    batch, words = inputs["attention_mask"].shape
    assert isinstance(output, ELMoModelOutput)
    assert output.last_hidden_state.shape == (batch, words, 16)
    assert len(output.hidden_states) == 3 and all(layer.shape == (batch, words, 16) for layer in output.hidden_states)
    assert len(output.elmo_representations) == 1 and output.elmo_representations[0].shape == (batch, words, 16)
    assert torch.equal(output.mask, inputs["attention_mask"].bool())
    assert output.lstm_state[0].shape == (2, 2, batch, 8) and output.lstm_state[1].shape == (2, 2, batch, 16)
    assert torch.equal(output.last_hidden_state, output.hidden_states[-1])
    # layer 0 is the token layer duplicated; padding positions are zero everywhere
    token_layer = output.hidden_states[0]
    assert torch.equal(token_layer[..., :8], token_layer[..., 8:])
    padding = ~output.mask
    for tensor in (*output.hidden_states, *output.elmo_representations):
        assert torch.all(tensor[padding] == 0)


def test_return_dict_false_gives_the_same_tuple(model, tokenizer):
    inputs = encode(tokenizer, SENTENCES)
    as_dict = model(**inputs)
    as_tuple = model(**inputs, return_dict=False)
    assert isinstance(as_tuple, tuple) and len(as_tuple) == 5  # last_hidden_state, hidden_states, mixes, mask, word_mask
    assert torch.equal(as_tuple[0], as_dict.last_hidden_state)
    assert all(torch.equal(a, b) for a, b in zip(as_tuple[1], as_dict.hidden_states))
    assert torch.equal(as_tuple[2][:, 0], as_dict.elmo_representations[0])
    assert torch.equal(as_tuple[4], as_dict.word_mask)
    assert torch.equal(as_tuple[3], as_dict.mask)


def test_padding_invariance(model, tokenizer):
    batched = model(**encode(tokenizer, SENTENCES))
    reordered = model(**encode(tokenizer, SENTENCES[::-1] + [["padding", "partner"] * 12]))
    for index, sentence in enumerate(SENTENCES):
        alone = model(**encode(tokenizer, [sentence]))
        n = len(sentence)
        for layer_alone, layer_batched, layer_reordered in zip(alone.hidden_states, batched.hidden_states, reordered.hidden_states):
            assert (layer_alone[0, :n] - layer_batched[index, :n]).abs().max() <= 1e-5
            assert (layer_alone[0, :n] - layer_reordered[len(SENTENCES) - 1 - index, :n]).abs().max() <= 1e-5


def test_sentence_boundaries_can_be_kept(model, tokenizer):
    inputs = encode(tokenizer, SENTENCES)
    dropped = model(**inputs)
    kept = model(**inputs, keep_sentence_boundaries=True)
    lengths = inputs["attention_mask"].sum(1)
    assert kept.last_hidden_state.shape[1] == dropped.last_hidden_state.shape[1] + 2
    assert torch.equal(kept.mask.sum(1), lengths + 2)
    for row, length in enumerate(lengths.tolist()):
        assert torch.equal(kept.last_hidden_state[row, 1 : length + 1], dropped.last_hidden_state[row, :length])
        # both boundaries have the same token vector in every sentence
        assert torch.equal(kept.hidden_states[0][row, 0], kept.hidden_states[0][0, 0])
        assert torch.equal(kept.hidden_states[0][row, length + 1], kept.hidden_states[0][0, lengths[0] + 1])


def test_add_sentence_boundaries_places_eos_after_each_sentence(tokenizer):
    inputs = encode(tokenizer, [["a", "b", "c"], ["d"]])
    ids, mask = add_sentence_boundaries(inputs["input_ids"], inputs["attention_mask"].bool())
    bos, eos = tokenizer([["<S>", "</S>"]], is_split_into_words=True, return_tensors="pt")["input_ids"][0]
    assert torch.equal(ids[0, 0], bos) and torch.equal(ids[0, 4], eos) and torch.equal(ids[1, 0], bos) and torch.equal(ids[1, 2], eos)
    assert torch.all(ids[1, 3:] == 0)
    assert mask.tolist() == [[True] * 5, [True, True, True, False, False]]


def test_reverse_padded_sequences_reverses_within_length():
    sequences = torch.tensor([[1, 2, 3, 4], [5, 6, 0, 0]]).unsqueeze(-1)
    reversed_ = reverse_padded_sequences(sequences, torch.tensor([4, 2]))
    assert reversed_.squeeze(-1).tolist() == [[4, 3, 2, 1], [6, 5, 0, 0]]


def test_lstm_cell_matches_a_hand_computation():
    config = tiny_config(projection_dim=2, lstm_cell_size=3, cell_clip=0.5, projection_clip=0.05)
    layer = ELMoLstmLayer(2, config)
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.copy_(torch.randn(parameter.shape))
    inputs = torch.randn(1, 2, 2)
    hidden, cell = torch.zeros(1, 2), torch.zeros(1, 3)
    expected = []
    for step in range(2):
        z = inputs[:, step] @ layer.input_to_gates.weight.T + layer.input_to_gates.bias + hidden @ layer.state_to_gates.weight.T
        i, f, j, o = z[:, :3], z[:, 3:6], z[:, 6:9], z[:, 9:]
        cell = torch.clamp(torch.sigmoid(f + 1.0) * cell + torch.sigmoid(i) * torch.tanh(j), -0.5, 0.5)
        hidden = torch.clamp((torch.sigmoid(o) * torch.tanh(cell)) @ layer.state_projection.weight.T, -0.05, 0.05)
        expected.append(hidden)
    outputs, (final_hidden, final_cell) = layer(inputs, torch.tensor([2]), (torch.zeros(1, 2), torch.zeros(1, 3)))
    torch.testing.assert_close(outputs[0], torch.cat(expected), rtol=0, atol=1e-6)
    torch.testing.assert_close(final_cell, cell, rtol=0, atol=1e-6)
    assert final_hidden.abs().max() <= 0.05 and final_cell.abs().max() <= 0.5


def test_lstm_layer_without_padding_matches_the_padded_path():
    """Windows where every row is real skip the padding masks (training's case): the same rows beside a shorter
    one, which takes the masked path, give the same outputs, final states and gradients."""
    config = tiny_config(projection_dim=3, lstm_cell_size=5, cell_clip=0.5, projection_clip=0.4)
    layer = ELMoLstmLayer(4, config)
    torch.manual_seed(0)
    inputs = torch.randn(3, 6, 4)
    state = (torch.randn(3, 3), torch.randn(3, 5))

    def run(batch_inputs, lengths, batch_state):
        batch_inputs = batch_inputs.clone().requires_grad_(True)
        outputs, (hidden, cell) = layer(batch_inputs, lengths, batch_state)
        (outputs.sum() + hidden.sum() + cell.sum()).backward()
        gradients = [parameter.grad.clone() for parameter in layer.parameters()]
        layer.zero_grad(set_to_none=True)
        return outputs, hidden, cell, batch_inputs.grad, gradients

    full = run(inputs, torch.tensor([6, 6, 6]), state)
    padded_inputs = torch.cat([inputs, torch.randn(1, 6, 4)])
    padded_inputs[3, 2:] = 0.0
    padded_state = tuple(torch.cat([tensor, torch.zeros(1, tensor.shape[1])]) for tensor in state)
    layer.zero_grad(set_to_none=True)
    # The extra row's own gradient is kept out: only the three full rows' outputs and states enter the loss.
    padded_inputs = padded_inputs.clone().requires_grad_(True)
    outputs, (hidden, cell) = layer(padded_inputs, torch.tensor([6, 6, 6, 2]), padded_state)
    (outputs[:3].sum() + hidden[:3].sum() + cell[:3].sum()).backward()
    padded = (outputs[:3], hidden[:3], cell[:3], padded_inputs.grad[:3], [parameter.grad for parameter in layer.parameters()])
    for expected, actual in zip(full[:4], padded[:4]):
        torch.testing.assert_close(actual, expected)
    for expected, actual in zip(full[4], padded[4]):
        torch.testing.assert_close(actual, expected)


def test_scalar_mix_matches_a_hand_computation():
    torch.manual_seed(0)
    layers = [torch.randn(2, 3, 4) for _ in range(3)]
    mask = torch.tensor([[True, True, False], [True, False, False]])
    mix = ELMoScalarMix(3)
    assert torch.allclose(mix(layers), sum(layers) / 3, atol=1e-7)
    with torch.no_grad():
        mix.scalar_weights.copy_(torch.tensor([0.5, -1.0, 2.0]))
        mix.gamma.fill_(1.7)
    weights = torch.exp(torch.tensor([0.5, -1.0, 2.0]))
    weights = weights / weights.sum()
    expected = 1.7 * (weights[0] * layers[0] + weights[1] * layers[1] + weights[2] * layers[2])
    torch.testing.assert_close(mix(layers), expected)
    torch.testing.assert_close(mix.layer_weights, weights)

    normed = ELMoScalarMix(3, layer_norm=True)
    expected_normed = 0
    for layer in layers:
        real = layer[mask]  # statistics over real positions only (bilm-tf)
        expected_normed = expected_normed + (layer - real.mean()) / torch.sqrt(real.var(unbiased=False) + 1e-12) / 3
    torch.testing.assert_close(normed(layers, mask), expected_normed)
    with pytest.raises(ValueError, match="expects 3 layers, got 2"):
        mix(layers[:2])
    with pytest.raises(ValueError, match="needs word_mask"):
        normed(layers)


def test_several_mixes_and_layer_norm_run(tokenizer):
    model = random_model(tiny_config(num_output_representations=2, scalar_mix_layer_norm=True))
    output = model(**encode(tokenizer, SENTENCES))
    assert len(output.elmo_representations) == 2
    assert torch.all(output.elmo_representations[1][~output.mask] == 0)


def test_gradients_reach_every_parameter(tokenizer):
    model = random_model(tiny_config(num_output_representations=2)).train()
    output = model(**encode(tokenizer, SENTENCES))
    loss = sum(representation.pow(2).sum() for representation in output.elmo_representations)
    loss.backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
    assert torch.all(model.char_embeddings.embedding.weight.grad[0] == 0)  # padding token row never learns


def test_save_and_load_round_trip(tmp_path, tokenizer):
    model = random_model(tiny_config(num_output_representations=2))
    with torch.no_grad():
        model.scalar_mixes[1].scalar_weights.copy_(torch.tensor([0.1, 0.2, 0.3]))
        model.set_initial_lstm_state(torch.full((2, 2, 8), 0.25), torch.full((2, 2, 16), -0.5))
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    reloaded = ELMoModel.from_pretrained(tmp_path).eval()
    reloaded_tokenizer = ELMoTokenizer.from_pretrained(tmp_path)
    inputs = encode(reloaded_tokenizer, SENTENCES)
    assert torch.equal(inputs["input_ids"], encode(tokenizer, SENTENCES)["input_ids"])
    for a, b in zip(model.state_dict().values(), reloaded.state_dict().values()):
        assert torch.equal(a, b)
    # Parameters are bit-identical; outputs may differ in the last bits because safetensors hands back tensors that
    # are not 64-byte aligned and MKL then takes another code path (see docs/numerics.md).
    expected, actual = model(**inputs), reloaded(**inputs)
    for a, b in zip((*expected.hidden_states, *expected.elmo_representations), (*actual.hidden_states, *actual.elmo_representations)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_state_threading_follows_the_original(model, tokenizer):
    first = encode(tokenizer, SENTENCES[:3])
    second = encode(tokenizer, SENTENCES[3:])
    out1 = model(**first, return_lstm_state=True)
    out2 = model(**second, lstm_state=out1.lstm_state, return_lstm_state=True)
    hidden1, cell1 = out1.lstm_state
    hidden2, cell2 = out2.lstm_state
    assert hidden2.shape[2] == 3  # rows beyond the smaller batch are kept...
    assert torch.equal(hidden2[:, :, 1:], hidden1[:, :, 1:]) and torch.equal(cell2[:, :, 1:], cell1[:, :, 1:])
    # ...and row 0 continued from its own state, so it differs from a fresh start
    fresh = model(**second)
    assert not torch.allclose(fresh.last_hidden_state, out2.last_hidden_state)
    # passing the default state explicitly is the same as passing none
    zeros = (torch.zeros(2, 2, 1, 8), torch.zeros(2, 2, 1, 16))
    assert torch.equal(model(**second, lstm_state=zeros).last_hidden_state, fresh.last_hidden_state)
    # a state with fewer rows than the batch: new rows start from the initial state
    grown = model(**first, lstm_state=(hidden2[:, :, :1], cell2[:, :, :1]), return_lstm_state=True)
    assert grown.lstm_state[0].shape[2] == 3
    alone = model(**encode(tokenizer, SENTENCES[1:3]))
    torch.testing.assert_close(grown.last_hidden_state[1:, : alone.last_hidden_state.shape[1]], alone.last_hidden_state, rtol=0, atol=1e-5)


def test_final_state_is_after_the_last_word_forward_and_first_word_backward(model, tokenizer):
    short = encode(tokenizer, [SENTENCES[2]])
    padded = encode(tokenizer, [SENTENCES[2], SENTENCES[1]])
    state_short = model(**short, return_lstm_state=True).lstm_state
    state_padded = model(**padded, return_lstm_state=True).lstm_state
    torch.testing.assert_close(state_short[0][:, :, 0], state_padded[0][:, :, 0], rtol=0, atol=1e-6)
    torch.testing.assert_close(state_short[1][:, :, 0], state_padded[1][:, :, 0], rtol=0, atol=1e-6)


def test_warm_initial_state_is_stored_and_deterministic(tmp_path, tokenizer):
    model = random_model()
    batches = [encode(tokenizer, SENTENCES[:2]), encode(tokenizer, SENTENCES[2:])]
    hidden, cell = model.compute_warm_initial_state(batches)
    assert hidden.shape == (2, 2, 8) and cell.shape == (2, 2, 16) and hidden.abs().sum() > 0
    inputs = encode(tokenizer, SENTENCES[:1])
    cold = model(**inputs).last_hidden_state
    model.set_initial_lstm_state(hidden, cell)
    warm = model(**inputs).last_hidden_state
    assert not torch.allclose(cold, warm)
    explicit = model(**inputs, lstm_state=(hidden.unsqueeze(2), cell.unsqueeze(2))).last_hidden_state
    assert torch.equal(warm, explicit)
    assert torch.equal(model(**inputs).last_hidden_state, warm)  # no hidden state: same call, same vectors
    model.save_pretrained(tmp_path)
    reloaded = ELMoModel.from_pretrained(tmp_path).eval()
    assert torch.equal(reloaded.encoder.initial_hidden_state, hidden) and torch.equal(reloaded.encoder.initial_cell_state, cell)
    torch.testing.assert_close(reloaded(**inputs).last_hidden_state, warm, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match=r"initial hidden state must have shape \(2, 2, 8\)"):
        model.set_initial_lstm_state(hidden[:1], cell)
    with pytest.raises(ValueError, match="at least one batch"):
        model.compute_warm_initial_state([])


@pytest.mark.parametrize(
    "overrides",
    [
        dict(char_cnn_filters=[[1, 4], [2, 4]], projection_dim=8),  # F == P: no token projection
        dict(projection_dim=16, lstm_cell_size=16),  # P == D: no LSTM projection
        dict(num_highway_layers=0, use_skip_connections=False, cell_clip=None, projection_clip=None),
        dict(num_highway_layers=3, num_lstm_layers=3, char_cnn_activation="tanh"),
    ],
)
def test_optional_architecture_pieces(overrides, tokenizer):
    config = tiny_config(**overrides)
    model = random_model(config)
    assert (model.char_embeddings.projection is None) == (config.char_cnn_output_dim == config.projection_dim)
    assert (model.encoder.forward_layers[0].state_projection is None) == (config.projection_dim == config.lstm_cell_size)
    output = model(**encode(tokenizer, SENTENCES))
    assert len(output.hidden_states) == config.num_lstm_layers + 1
    assert torch.isfinite(output.last_hidden_state).all()


def test_parameter_counts_of_the_released_models(pretrained_options_dir):
    import json

    from elmo_hf import ELMoConfig

    published = {
        "elmo_2x1024_128_2048cnn_1xhighway_options.json": 13.6,
        "elmo_2x2048_256_2048cnn_1xhighway_options.DERIVED.json": 28.0,
        "elmo_2x4096_512_2048cnn_2xhighway_options.json": 93.6,
        "elmo_2x4096_512_2048cnn_2xhighway_5.5B_options.DERIVED.json": 93.6,
    }
    for file_name, millions in published.items():
        config = ELMoConfig.from_options_dict(json.loads((pretrained_options_dir / file_name).read_text()))
        with torch.device("meta"):
            model = ELMoModel(config)
        biLM_parameters = sum(p.numel() for name, p in model.named_parameters() if not name.startswith("scalar_mixes"))
        assert round(biLM_parameters / 1e6, 1) == millions, file_name


@pytest.mark.parametrize(
    "make_inputs, error, message",
    [
        (lambda ids, mask: (ids[0], mask), ValueError, r"input_ids must have shape \(batch, words, 50\).*got shape \(\d+, 50\)"),
        (lambda ids, mask: (ids[..., :49], mask), ValueError, r"got shape \(\d+, \d+, 49\)"),
        (lambda ids, mask: (ids.float(), mask), ValueError, r"must hold integer character ids"),
        (lambda ids, mask: (ids + 300, mask), ValueError, r"character ids in \[0, 262\)"),
        (lambda ids, mask: (ids - 5, mask), ValueError, r"character ids in \[0, 262\)"),
        (lambda ids, mask: (ids, mask[:, :-1]), ValueError, r"attention_mask must have shape \(batch, words\)"),
        (lambda ids, mask: (ids, torch.ones_like(mask)), ValueError, r"attention_mask and input_ids disagree at \(batch 0, word 7\): the mask says word but the character ids are all 0"),
        (lambda ids, mask: (ids.flip(1), mask.flip(1)), ValueError, r"padding before a word: ELMo needs right-padded input"),
        (lambda ids, mask: (ids.tolist(), mask), TypeError, r"input_ids must be a torch.LongTensor"),
        (lambda ids, mask: (ids.to(torch.uint8), mask), ValueError, r"int16, int32 or int64: torch.uint8 cannot hold the character ids up to 261"),
    ],
)
def test_bad_model_inputs_name_the_problem(model, tokenizer, make_inputs, error, message):
    inputs = encode(tokenizer, SENTENCES[:3])
    input_ids, attention_mask = make_inputs(inputs["input_ids"], inputs["attention_mask"])
    with pytest.raises(error, match=message):
        model(input_ids=input_ids, attention_mask=attention_mask)


def test_bad_state_and_arguments_name_the_problem(model, tokenizer):
    inputs = encode(tokenizer, SENTENCES[:2])
    with pytest.raises(ValueError, match=r"lstm_state hidden must have shape \(2, 2, batch, 8\)"):
        model(**inputs, lstm_state=(torch.zeros(2, 2, 8), torch.zeros(2, 2, 2, 16)))
    with pytest.raises(ValueError, match="disagree on the batch size"):
        model(**inputs, lstm_state=(torch.zeros(2, 2, 2, 8), torch.zeros(2, 2, 3, 16)))
    with pytest.raises(ValueError, match=r"\(hidden, cell\) pair"):
        model(**inputs, lstm_state=torch.zeros(2, 2, 2, 8))
    with pytest.raises(TypeError, match=r"unexpected argument\(s\) \['labels'\]"):
        model(**inputs, labels=torch.zeros(2))


def test_a_sentence_with_no_words_still_runs(model, tokenizer):
    inputs = encode(tokenizer, [[], ["a", "word"]])
    output = model(**inputs)
    assert output.mask[0].sum() == 0 and torch.all(output.last_hidden_state[0] == 0)
    alone = model(**encode(tokenizer, [["a", "word"]]))
    torch.testing.assert_close(output.last_hidden_state[1], alone.last_hidden_state[0], rtol=0, atol=1e-6)


def test_narrower_integer_ids_give_the_same_vectors(model, tokenizer):
    inputs = encode(tokenizer, SENTENCES[:3])
    expected = model(**inputs).last_hidden_state
    for dtype in (torch.int16, torch.int32):
        got = model(input_ids=inputs["input_ids"].to(dtype), attention_mask=inputs["attention_mask"]).last_hidden_state
        assert torch.equal(got, expected), dtype


# ----------------------------------------------------------------------------------------------------------------------
# Float32 is float32 on CUDA: no TF32 unless asked
# ----------------------------------------------------------------------------------------------------------------------


def _precisions() -> tuple[str, str]:
    return torch.backends.cudnn.conv.fp32_precision, torch.backends.cuda.matmul.fp32_precision


def test_forward_runs_cuda_float32_in_full_precision_unless_tf32_is_allowed(tmp_path):
    """torch's default lets cuDNN convolutions use TF32 (2.2e-2 off in the original shape's top layer on an H100).
    The settings are process-wide, so the model sets them for its forward pass only and puts the user's back."""
    from elmo_hf.modeling_elmo import float32_precision

    model = random_model()
    seen = []
    model.char_embeddings.register_forward_hook(lambda *args: seen.append(_precisions()))
    model.encoder.register_forward_hook(lambda *args: seen.append(_precisions()))
    inputs = {"input_ids": torch.tensor([[word_to_character_ids("bank")]])}
    users = _precisions()
    with torch.no_grad():
        model(**inputs)
        model.token_layer(**inputs)
        assert seen == [("ieee", "ieee")] * 3 and _precisions() == users
        model.allow_tf32 = True
        model(**inputs)
        assert seen[3:] == [("tf32", "tf32")] * 2 and _precisions() == users
    # Restored after an error too.
    with pytest.raises(RuntimeError, match="boom"):
        with float32_precision(False):
            raise RuntimeError("boom")
    assert _precisions() == users
    model.save_pretrained(tmp_path)  # the choice is not saved: a loaded model is exact again
    assert ELMoModel.from_pretrained(tmp_path).allow_tf32 is False
