"""ELMoForPreTraining: the biLM objective, exact perplexity, sampled softmax, the windowed regime (the state passed in
and out; tests/pretraining/test_trainer.py covers the training loop that carries it), the stock Trainer, save / load."""

from __future__ import annotations

import logging
import math
import random

import pytest
import torch
from torch.nn import functional as F
from transformers import AutoModel, AutoModelForPreTraining, Trainer

from elmo_hf import ELMoForPreTraining, ELMoModel
from elmo_hf.pretraining.data import DataCollatorForBiLM, WindowedBiLMStream
from elmo_hf.pretraining.trainer import CarriedLstmState
import elmo_hf.modeling_elmo_pretraining as pretraining_module
from elmo_hf.modeling_elmo_pretraining import (
    log_expected_counts,
    log_uniform_log_probabilities,
    perplexity_from_totals,
    sample_distinct_log_uniform,
    sampled_softmax_negative_log_likelihood,
)
from elmo_hf.corpus.vocabulary import ELMoWordVocabulary

from .helpers import TOY_SENTENCES, pretraining_model, stream_totals, tiny_config, trainer_arguments



@pytest.fixture(scope="module")
def vocabulary() -> ELMoWordVocabulary:
    return ELMoWordVocabulary.from_sentences(TOY_SENTENCES)


def sentence_batch(vocabulary, sentences=TOY_SENTENCES, boundaries=True):
    return DataCollatorForBiLM(vocabulary, label_boundary_positions=boundaries)([{"words": words} for words in sentences])


def train(model, batches, steps: int, learning_rate: float = 1e-2) -> list[float]:
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    model.train()
    losses = []
    for step in range(steps):
        loss = model(**batches[step % len(batches)]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def test_loss_decreases_on_a_tiny_corpus_within_a_few_dozen_steps(vocabulary):
    model = pretraining_model(len(vocabulary))
    losses = train(model, [sentence_batch(vocabulary)], steps=40, learning_rate=2e-2)
    assert losses[-1] < 0.6 * losses[0], losses


def test_exact_perplexity_is_exp_of_the_mean_nll_computed_by_hand(vocabulary):
    model = pretraining_model(len(vocabulary)).eval()
    batch = sentence_batch(vocabulary, TOY_SENTENCES[:3])
    with torch.no_grad():
        output = model(**batch, return_logits=True)
    for direction, logits, labels in (
        (0, output.forward_logits, batch["next_word_labels"]),
        (1, output.backward_logits, batch["previous_word_labels"]),
    ):
        by_hand = 0.0
        count = 0
        for row in range(labels.shape[0]):
            for position in range(labels.shape[1]):
                target = int(labels[row, position])
                if target == -100:
                    continue
                scores = logits[row, position].double()
                by_hand -= float(scores[target] - torch.logsumexp(scores, dim=0))
                count += 1
        assert int(output.num_predictions[direction]) == count
        assert float(output.negative_log_likelihood[direction]) == pytest.approx(by_hand, rel=1e-5)
    # n + 1 predictions per sentence and direction with boundary labels.
    assert output.num_predictions.tolist() == [sum(len(words) + 1 for words in TOY_SENTENCES[:3])] * 2
    totals = perplexity_from_totals(output.negative_log_likelihood, output.num_predictions)
    forward_mean = float(output.negative_log_likelihood[0]) / int(output.num_predictions[0])
    assert totals["forward_perplexity"] == pytest.approx(math.exp(forward_mean), rel=1e-6)
    assert output.loss.item() == pytest.approx((totals["forward_nll"] + totals["backward_nll"]) / 2, rel=1e-5)


def test_word_position_labels_match_the_word_part_of_boundary_labels(vocabulary):
    """Labels of width T are the boundary layout minus `<S>` -> w1 and `</S>` -> wn: same logits at word positions."""
    model = pretraining_model(len(vocabulary)).eval()
    with torch.no_grad():
        words_only = model(**sentence_batch(vocabulary, boundaries=False), return_logits=True)
        with_boundaries = model(**sentence_batch(vocabulary, boundaries=True), return_logits=True)
    num_words = len(TOY_SENTENCES[0])
    torch.testing.assert_close(words_only.forward_logits[0, :num_words], with_boundaries.forward_logits[0, 1 : num_words + 1])
    torch.testing.assert_close(words_only.backward_logits[0, :num_words], with_boundaries.backward_logits[0, 1 : num_words + 1])
    assert words_only.num_predictions.tolist() == [sum(len(words) for words in TOY_SENTENCES)] * 2


def test_eval_mode_uses_the_full_softmax_even_when_sampling_is_configured(vocabulary):
    model = pretraining_model(len(vocabulary), softmax_num_samples=4)
    batch = sentence_batch(vocabulary)
    reference = pretraining_model(len(vocabulary))
    reference.load_state_dict(model.state_dict())
    with torch.no_grad():
        sampled_eval = model.eval()(**batch)
        full = reference.eval()(**batch)
        torch.manual_seed(1)
        sampled_train = model.train()(**batch)
    torch.testing.assert_close(sampled_eval.negative_log_likelihood, full.negative_log_likelihood)
    assert not torch.allclose(sampled_train.negative_log_likelihood, full.negative_log_likelihood)


def test_log_uniform_probabilities_sum_to_one():
    probabilities = log_uniform_log_probabilities(torch.arange(50), 50).exp()
    assert float(probabilities.sum()) == pytest.approx(1.0, abs=1e-5)


def test_the_sampler_draws_distinct_ids_deterministically_from_its_generator():
    """TF's unique sampling: S distinct ids in range (drawing with replacement repeats the frequent ids here)."""
    vocab_size, num_samples = 50, 20
    draw = lambda seed: sample_distinct_log_uniform(  # noqa: E731
        num_samples, vocab_size, torch.device("cpu"), torch.Generator().manual_seed(seed)
    )
    for seed in range(20):
        ids, num_tries = draw(seed)
        assert ids.shape == (num_samples,) and ids.dtype == torch.long
        assert ids.unique().numel() == num_samples and 0 <= int(ids.min()) and int(ids.max()) < vocab_size
        assert num_tries > num_samples  # 20 distinct of 50 Zipfian ids always takes repeats
        again = draw(seed)
        assert torch.equal(again.ids, ids) and again.num_tries == num_tries
    assert not torch.equal(draw(0).ids, draw(1).ids)
    everything = sample_distinct_log_uniform(vocab_size, vocab_size, torch.device("cpu"), torch.Generator().manual_seed(0))
    assert torch.equal(everything.ids.sort().values, torch.arange(vocab_size))
    with pytest.raises(ValueError, match="num_samples must be in"):
        sample_distinct_log_uniform(vocab_size + 1, vocab_size, torch.device("cpu"))


def test_the_sampler_keeps_first_occurrences_in_draw_order_and_counts_the_draws(monkeypatch):
    """What one-by-one drawing until S distinct ids gives: repeats skipped, num_tries = draws up to the last new id."""
    stream = iter([torch.tensor([3, 0, 3, 0, 1, 0]), torch.tensor([0, 0, 7, 2, 9, 9, 9, 9, 9, 9, 9, 9])])
    monkeypatch.setattr(pretraining_module, "_log_uniform_draws", lambda count, *_: next(stream)[:count])
    ids, num_tries = sample_distinct_log_uniform(5, 10, torch.device("cpu"))
    assert ids.tolist() == [3, 0, 1, 7, 2] and num_tries == 10


def test_the_sampler_follows_the_log_uniform_distribution():
    """Each draw is log-uniform: with one sample, num_tries is 1 and the id frequencies are the probabilities."""
    vocab_size, generator = 30, torch.Generator().manual_seed(0)
    probabilities = log_uniform_log_probabilities(torch.arange(vocab_size), vocab_size).exp().double()
    samples = [sample_distinct_log_uniform(1, vocab_size, torch.device("cpu"), generator) for _ in range(20_000)]
    assert {sample.num_tries for sample in samples} == {1}
    frequencies = torch.bincount(torch.cat([sample.ids for sample in samples]), minlength=vocab_size).double() / 20_000
    torch.testing.assert_close(frequencies, probabilities, atol=0.01, rtol=0)


def test_expected_counts_are_tfs_formula():
    """1 - (1 - p)^num_tries after repeats, S * p (TF's shortcut) when the first S draws were distinct."""
    vocab_size, ids = 100, torch.tensor([0, 1, 10, 99])
    p = [math.log((k + 2) / (k + 1)) / math.log(vocab_size + 1) for k in ids.tolist()]
    with_repeats = log_expected_counts(ids, vocab_size, num_samples=20, num_tries=37).exp()
    torch.testing.assert_close(with_repeats, torch.tensor([1 - (1 - q) ** 37 for q in p]))
    no_repeats = log_expected_counts(ids, vocab_size, num_samples=20, num_tries=20).exp()
    torch.testing.assert_close(no_repeats, torch.tensor([20 * q for q in p]))


def test_sampled_softmax_removes_accidental_hits_and_is_exact_when_it_samples_everything(monkeypatch):
    """With every class sampled exactly once, the corrections cancel and the loss is the full softmax's."""
    torch.manual_seed(0)
    softmax = torch.nn.Linear(6, 5)
    hidden, targets = torch.randn(7, 6), torch.randint(0, 5, (7,))
    full = F.cross_entropy(softmax(hidden), targets, reduction="none")
    everything = torch.arange(5)
    for num_tries in (5, 9):  # the first 5 draws distinct (S * p), or 4 repeats (1 - (1 - p)^9)
        sample = pretraining_module.DistinctLogUniformSample(everything, num_tries)
        monkeypatch.setattr(pretraining_module, "sample_distinct_log_uniform", lambda *_: sample)
        with torch.no_grad():
            sampled = sampled_softmax_negative_log_likelihood(hidden, targets, softmax, num_samples=5)
        # The target appears once as the true class and once as a (removed) accidental hit; every class carries the
        # correction -log(expected count), so the result differs from the full softmax only by those corrections.
        corrected = softmax(hidden).detach() - log_expected_counts(everything, 5, 5, num_tries)
        torch.testing.assert_close(sampled, F.cross_entropy(corrected, targets, reduction="none"))
        assert not torch.allclose(sampled, full)


def synthetic_corpus(num_sentences: int, vocab_words: int, seed: int) -> list[list[str]]:
    """A Zipf-ish corpus with structure a tiny LM can learn: word k is usually followed by word k + 1."""
    generator = random.Random(seed)
    words = [f"w{index}" for index in range(vocab_words)]
    sentences = []
    for _ in range(num_sentences):
        start = min(int(generator.paretovariate(1.0)) - 1, vocab_words - 1)
        sentence = [words[(start + offset) % vocab_words] for offset in range(generator.randint(3, 8))]
        sentences.append(sentence)
    return sentences


def test_training_with_sampled_softmax_lowers_the_exact_full_softmax_perplexity():
    sentences = synthetic_corpus(400, vocab_words=120, seed=0)
    vocabulary = ELMoWordVocabulary.from_sentences(sentences)
    model = pretraining_model(len(vocabulary), softmax_num_samples=16)
    assert model.config.softmax_num_samples < len(vocabulary)
    batches = [sentence_batch(vocabulary, sentences[start : start + 40]) for start in range(0, 400, 40)]

    def exact_perplexity() -> float:
        model.eval()
        with torch.no_grad():
            outputs = [model(**batch) for batch in batches]
        nll = torch.stack([output.negative_log_likelihood for output in outputs])
        counts = torch.stack([output.num_predictions for output in outputs])
        return perplexity_from_totals(nll, counts)["perplexity"]

    before = exact_perplexity()
    torch.manual_seed(0)
    train(model, batches, steps=60, learning_rate=1e-2)
    after = exact_perplexity()
    assert after < 0.5 * before, (before, after)


# ----------------------------------------------------------------------------------------------------------------------
# Windowed regime
# ----------------------------------------------------------------------------------------------------------------------


def without_window_keys(batch: dict) -> dict:
    return {key: value for key, value in batch.items() if key not in ("window_index", "row_index")}


@pytest.mark.parametrize("path", ["fast", "reference"])
def test_one_sentence_window_equals_the_per_sentence_regime_with_boundary_labels(vocabulary, path):
    model = pretraining_model(len(vocabulary)).eval()
    model.elmo.set_inference_path(path)
    sentence = TOY_SENTENCES[5]
    stream = WindowedBiLMStream([sentence], vocabulary, num_rows=1, window_size=len(sentence) + 1, shuffle=False, remainder="pad")
    windowed = stream_totals(model, stream)
    with torch.no_grad():
        per_sentence = model(**sentence_batch(vocabulary, [sentence]))
    torch.testing.assert_close(windowed[0].float(), per_sentence.negative_log_likelihood, rtol=1e-5, atol=1e-5)
    assert windowed[1].tolist() == per_sentence.num_predictions.tolist() == [len(sentence) + 1] * 2


@pytest.mark.parametrize("path", ["fast", "reference"])
def test_carried_state_makes_short_windows_equal_one_long_window(vocabulary, path):
    """Row b of window k + 1 continues row b of window k, in both directions: cutting the rows into windows of 3 and
    carrying the state gives the NLL of reading each row in one piece."""
    model = pretraining_model(len(vocabulary)).eval()
    model.elmo.set_inference_path(path)
    corpus = TOY_SENTENCES * 3
    short = WindowedBiLMStream(corpus, vocabulary, num_rows=3, window_size=3, shuffle=False, remainder="pad")
    long = WindowedBiLMStream(corpus, vocabulary, num_rows=3, window_size=max(short.row_lengths), shuffle=False, remainder="pad")
    assert len(list(short.batches())) > 1 and len(list(long.batches())) == 1
    carried = stream_totals(model, short)
    whole = stream_totals(model, long)
    assert carried[1].tolist() == whole[1].tolist()
    torch.testing.assert_close(carried[0], whole[0], rtol=1e-5, atol=1e-4)
    # Without the carried state (every window from the initial state) the result is different.
    cold = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for batch in short.batches():
            cold += model(**without_window_keys(batch)).negative_log_likelihood.double()
    assert not torch.allclose(cold, whole[0], rtol=1e-3)


def test_the_model_keeps_no_state_between_calls(vocabulary):
    """Calling the model twice on one windowed batch gives the same outputs: the state is the caller's."""
    model = pretraining_model(len(vocabulary)).eval()
    stream = WindowedBiLMStream(TOY_SENTENCES * 3, vocabulary, num_rows=2, window_size=3, shuffle=False)
    first, second = list(stream.batches())[:2]
    with torch.no_grad():
        state = model(**first, return_lstm_state=True).lstm_state
        once = model(**second, lstm_state=state, return_lstm_state=True, return_logits=True)
        twice = model(**second, lstm_state=state, return_lstm_state=True, return_logits=True)
    for name in ("negative_log_likelihood", "forward_logits", "backward_logits"):
        assert torch.equal(getattr(once, name), getattr(twice, name)), name
    assert all(torch.equal(a, b) for a, b in zip(once.lstm_state, twice.lstm_state))
    assert "_carried_state" not in vars(model)


def test_explicit_state_threading_equals_the_carried_state(vocabulary):
    model = pretraining_model(len(vocabulary)).eval()
    stream = WindowedBiLMStream(TOY_SENTENCES * 2, vocabulary, num_rows=2, window_size=4, shuffle=False, remainder="pad")
    carried = stream_totals(model, stream)
    state, total = None, torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for batch in stream.batches():
            output = model(**without_window_keys(batch), lstm_state=state, return_lstm_state=True)
            state = output.lstm_state
            total += output.negative_log_likelihood.double()
    torch.testing.assert_close(total, carried[0])


def test_windowed_fast_path_equals_reference_with_padded_rows(vocabulary):
    model = pretraining_model(len(vocabulary)).eval()
    stream = WindowedBiLMStream(TOY_SENTENCES, vocabulary, num_rows=4, window_size=5, shuffle=False, remainder="pad")
    last = list(stream.batches())[-1]
    assert not last["attention_mask"].all()  # the final window is padded
    results = {}
    for path in ("fast", "reference"):
        model.elmo.set_inference_path(path)
        state, results[path] = None, []
        with torch.no_grad():
            for batch in stream.batches():
                output = model(**batch, lstm_state=state, return_lstm_state=True, return_logits=True)
                state = output.lstm_state
                results[path].append(output)
    for fast, reference in zip(results["fast"], results["reference"]):
        torch.testing.assert_close(fast.forward_logits, reference.forward_logits, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(fast.backward_logits, reference.backward_logits, rtol=1e-5, atol=1e-5)


def test_windows_out_of_order_or_split_are_refused(vocabulary):
    model = pretraining_model(len(vocabulary)).eval()
    stream = WindowedBiLMStream(TOY_SENTENCES * 3, vocabulary, num_rows=2, window_size=3, shuffle=False)
    batches = list(stream.batches())
    carried = CarriedLstmState()
    with torch.no_grad():
        carried.keep("eval", 0, model(**batches[0], return_lstm_state=True).lstm_state)
        with pytest.raises(ValueError, match="window_index 2 does not follow window 0"):
            carried.state_for("eval", 2, num_rows=2)
        with pytest.raises(ValueError, match="This window has 1 rows but the carried state has 2"):
            carried.state_for("eval", 1, num_rows=1)
        with pytest.raises(ValueError, match=r"row_index must be 0 \.\. 0"):
            model(**{key: value[1:] for key, value in batches[0].items()})
        assert carried.state_for("eval", 0, num_rows=2) is None  # window 0 restarts the stream
        carried.keep("eval", 0, model(**batches[0], return_lstm_state=True).lstm_state)
        model(**batches[1], lstm_state=carried.state_for("eval", 1, num_rows=2))


def test_a_window_without_carried_state_starts_from_the_initial_state(vocabulary, caplog):
    """Resuming from a checkpoint without a saved state: the window starts cold, and both the carrier and the model
    say so."""
    model = pretraining_model(len(vocabulary)).eval()
    stream = WindowedBiLMStream(TOY_SENTENCES * 3, vocabulary, num_rows=2, window_size=3, shuffle=False)
    batch = list(stream.batches())[2]
    with caplog.at_level(logging.WARNING):
        assert CarriedLstmState().state_for("train", 2, num_rows=2) is None
    assert "window 2 of the train stream arrives without a carried LSTM state" in caplog.text
    with torch.no_grad():
        resumed = model(**batch)
        cold = model(**without_window_keys(batch))
    torch.testing.assert_close(resumed.negative_log_likelihood, cold.negative_log_likelihood)


# ----------------------------------------------------------------------------------------------------------------------
# Trainer, save / load, errors
# ----------------------------------------------------------------------------------------------------------------------


def test_trainer_trains_per_sentence(vocabulary, tmp_path):
    from datasets import Dataset

    model = pretraining_model(len(vocabulary))
    dataset = Dataset.from_dict({"words": TOY_SENTENCES * 4})
    arguments = trainer_arguments(tmp_path, learning_rate=1e-2, max_steps=12, per_device_train_batch_size=6, remove_unused_columns=False)
    trainer = Trainer(model=model, args=arguments, train_dataset=dataset, data_collator=DataCollatorForBiLM(vocabulary))
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses[-1] < losses[0]


def test_save_and_load_with_auto_classes(vocabulary, tmp_path):
    model = pretraining_model(len(vocabulary), lm_dropout=0.1).eval()
    model.save_pretrained(tmp_path / "model")
    reloaded = AutoModelForPreTraining.from_pretrained(tmp_path / "model").eval()
    assert isinstance(reloaded, ELMoForPreTraining)
    batch = sentence_batch(vocabulary)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).negative_log_likelihood, model(**batch).negative_log_likelihood, rtol=1e-6, atol=1e-5)
        biLM = AutoModel.from_pretrained(tmp_path / "model").eval()
        assert isinstance(biLM, ELMoModel)
        inputs = {key: batch[key] for key in ("input_ids", "attention_mask")}
        torch.testing.assert_close(biLM(**inputs).last_hidden_state, model.elmo(**inputs).last_hidden_state, rtol=1e-6, atol=1e-6)


def test_lm_dropout_is_active_in_training_only(vocabulary):
    model = pretraining_model(len(vocabulary), lm_dropout=0.5)
    batch = sentence_batch(vocabulary)
    with torch.no_grad():
        model.eval()
        assert torch.equal(model(**batch).negative_log_likelihood, model(**batch).negative_log_likelihood)
        model.train()
        assert not torch.equal(model(**batch).negative_log_likelihood, model(**batch).negative_log_likelihood)


def test_user_errors_name_the_input(vocabulary):
    with pytest.raises(ValueError, match="word_vocab_size >= 3"):
        ELMoForPreTraining(tiny_config())
    model = pretraining_model(len(vocabulary)).eval()
    batch = sentence_batch(vocabulary)
    with torch.no_grad():
        with pytest.raises(ValueError, match="Pass both"):
            model(input_ids=batch["input_ids"], next_word_labels=batch["next_word_labels"])
        bad = dict(batch, next_word_labels=batch["next_word_labels"].clone())
        bad["next_word_labels"][0, 0] = len(vocabulary)
        with pytest.raises(ValueError, match=rf"next_word_labels must be word ids in \[0, {len(vocabulary)}\)"):
            model(**bad)
        with pytest.raises(ValueError, match="width 3"):
            model(**dict(batch, next_word_labels=batch["next_word_labels"][:, :3], previous_word_labels=batch["previous_word_labels"][:, :3]))
        with pytest.raises(ValueError, match="integer word ids"):
            model(**dict(batch, previous_word_labels=batch["previous_word_labels"].float()))
        with pytest.raises(ValueError, match="need backward_input_ids|needs backward_input_ids"):
            model(**batch, window_index=torch.zeros(len(TOY_SENTENCES), dtype=torch.long))
        stream = WindowedBiLMStream(TOY_SENTENCES, vocabulary, num_rows=2, window_size=3, shuffle=False)
        window = next(iter(stream.batches()))
        with pytest.raises(ValueError, match="backward_input_ids must have the shape of input_ids"):
            model(**dict(window, backward_input_ids=window["backward_input_ids"][:, :2]))
        with pytest.raises(TypeError, match="unexpected argument"):
            model(**batch, labels=batch["next_word_labels"])


def test_perplexity_from_totals_refuses_empty_directions():
    with pytest.raises(ValueError, match="at least one prediction"):
        perplexity_from_totals(torch.zeros(2), torch.tensor([3, 0]))


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_a_new_models_character_convolutions_start_as_bilm_tfs(activation):
    """bilm-tf: uniform(-0.05, 0.05) for relu (Kim et al. 2015), normal(0, 1 / (width x char dim)) for tanh."""
    filters = [[1, 256], [4, 512]]
    model = pretraining_model(10, char_cnn_activation=activation, char_embedding_dim=16, char_cnn_filters=filters)
    for convolution, (width, _) in zip(model.elmo.char_embeddings.convolutions, filters):
        weight = convolution.weight.detach()
        assert torch.equal(convolution.bias.detach(), torch.zeros_like(convolution.bias))
        if activation == "relu":
            assert float(weight.abs().max()) <= 0.05
            assert float(weight.std()) == pytest.approx(0.1 / math.sqrt(12), rel=0.05)
        else:
            assert float(weight.std()) == pytest.approx(math.sqrt(1.0 / (width * 16)), rel=0.05)
