"""ELMoLanguageModelScorer: sentence perplexity against the model's own loss and a hand computation, batching
invariance, next / previous words against the full softmax, in-context substitutes, save / load, errors."""

from __future__ import annotations

import math
import random

import pytest
import torch

from elmo_hf import ELMoConfig, ELMoForPreTraining, ELMoModel, ELMoTokenizer
from elmo_hf.pretraining.data import DataCollatorForBiLM
from elmo_hf.scoring.lm_scoring import ELMoLanguageModelScorer, LexicalSubstitute, SentenceScore, WordPrediction
from elmo_hf.modeling_elmo_pretraining import perplexity_from_totals
from elmo_hf.corpus.vocabulary import BOS_WORD_ID, EOS_WORD_ID, UNK_WORD_ID, ELMoWordVocabulary

from ..helpers import TOY_SENTENCES, torch_threads

# Sentences of different lengths, one with words outside the vocabulary (zebra, purple).
SCORED_SENTENCES = TOY_SENTENCES + [["zebra"], "the purple cat sat on a zebra".split(), ["a", "dog"]]


def tiny_pretraining_config(vocabulary_size: int) -> ELMoConfig:
    return ELMoConfig(
        char_cnn_filters=[[1, 4], [2, 8]],
        num_highway_layers=1,
        projection_dim=8,
        lstm_cell_size=16,
        num_lstm_layers=2,
        char_embedding_dim=4,
        word_vocab_size=vocabulary_size,
    )


def tiny_pretraining_model(vocabulary_size: int, seed: int = 0, std: float = 0.5) -> ELMoForPreTraining:
    """Random weights large enough that every position's distribution is far from uniform."""
    model = ELMoForPreTraining(tiny_pretraining_config(vocabulary_size))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "scalar_mixes" not in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)
        model.elmo.char_embeddings.embedding.weight[0].zero_()
    return model.eval()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def vocabulary() -> ELMoWordVocabulary:
    return ELMoWordVocabulary.from_sentences(TOY_SENTENCES)


@pytest.fixture(scope="module")
def tokenizer() -> ELMoTokenizer:
    return ELMoTokenizer(word_splitter="whitespace")


@pytest.fixture(scope="module")
def scorer(vocabulary, tokenizer) -> ELMoLanguageModelScorer:
    return ELMoLanguageModelScorer(tiny_pretraining_model(len(vocabulary)), tokenizer, vocabulary)


def model_logits(scorer, words: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's own full-softmax logits (T + 2, V) per direction for one sentence, positions <S> w1 .. wn </S>."""
    batch = DataCollatorForBiLM(scorer.vocabulary, label_boundary_positions=True)([{"words": words}])
    with torch.no_grad():
        output = scorer.model(**batch, return_logits=True)
    return output.forward_logits[0], output.backward_logits[0]


def assert_same_scores(first: SentenceScore, second: SentenceScore, tolerance: float = 1e-5) -> None:
    assert first.words == second.words and first.num_predictions == second.num_predictions
    assert first.unknown_word_positions == second.unknown_word_positions
    torch.testing.assert_close(
        torch.tensor(first.forward_prediction_nlls + first.backward_prediction_nlls),
        torch.tensor(second.forward_prediction_nlls + second.backward_prediction_nlls),
        rtol=tolerance,
        atol=tolerance,
    )


# ---- 1. sentence perplexity ----
def test_corpus_totals_equal_the_models_own_negative_log_likelihood(scorer, vocabulary):
    features = [{"words": words} for words in SCORED_SENTENCES]
    batch = DataCollatorForBiLM(vocabulary, label_boundary_positions=True)(features)
    with torch.no_grad():
        output = scorer.model(**batch)
    corpus = scorer.score(SCORED_SENTENCES, batch_size=4)

    expected_count = sum(len(words) + 1 for words in SCORED_SENTENCES)
    assert output.num_predictions.tolist() == [expected_count, expected_count] == [corpus.num_predictions] * 2
    assert corpus.forward_negative_log_likelihood == pytest.approx(float(output.negative_log_likelihood[0]), rel=1e-5)
    assert corpus.backward_negative_log_likelihood == pytest.approx(float(output.negative_log_likelihood[1]), rel=1e-5)
    reference = perplexity_from_totals(output.negative_log_likelihood, output.num_predictions)
    assert corpus.forward_perplexity == pytest.approx(reference["forward_perplexity"], rel=1e-5)
    assert corpus.backward_perplexity == pytest.approx(reference["backward_perplexity"], rel=1e-5)
    assert corpus.perplexity == pytest.approx(reference["perplexity"], rel=1e-5)
    assert corpus.num_unknown_words == 3  # zebra twice, purple
    assert corpus.forward_negative_log_likelihood == pytest.approx(
        sum(score.forward_negative_log_likelihood for score in corpus.sentences)
    )


def test_sentence_scores_equal_a_hand_computation_from_the_logits(scorer, vocabulary):
    corpus = scorer.score(SCORED_SENTENCES)
    for words, score in zip(SCORED_SENTENCES, corpus.sentences):
        forward_logits, backward_logits = model_logits(scorer, words)
        ids = vocabulary.encode(words)
        n = len(words)
        # Forward: positions 0 (<S>) .. n predict w1 .. wn, </S>; backward: positions 1 .. n + 1 predict <S>, w1 .. wn.
        forward_targets, backward_targets = torch.tensor(ids + [EOS_WORD_ID]), torch.tensor([BOS_WORD_ID] + ids)
        forward_nlls = -torch.log_softmax(forward_logits[: n + 1], dim=-1).gather(1, forward_targets[:, None])
        backward_nlls = -torch.log_softmax(backward_logits[1 : n + 2], dim=-1).gather(1, backward_targets[:, None])
        assert score.words == tuple(words) and score.num_predictions == n + 1
        for actual, expected in (
            (score.forward_prediction_nlls, forward_nlls),
            (score.backward_prediction_nlls, backward_nlls),
        ):
            torch.testing.assert_close(torch.tensor(actual), expected.squeeze(1), rtol=1e-5, atol=1e-5)
        assert score.forward_negative_log_likelihood == pytest.approx(float(forward_nlls.sum()), rel=1e-5)
        assert score.backward_negative_log_likelihood == pytest.approx(float(backward_nlls.sum()), rel=1e-5)
        assert score.forward_perplexity == pytest.approx(math.exp(score.forward_negative_log_likelihood / (n + 1)))
        assert score.backward_perplexity == pytest.approx(math.exp(score.backward_negative_log_likelihood / (n + 1)))
        assert score.perplexity == pytest.approx(math.sqrt(score.forward_perplexity * score.backward_perplexity))


def test_unknown_words_are_scored_as_unk_and_reported(scorer):
    score = scorer.score_sentence("the purple cat sat on a zebra".split())
    assert score.unknown_word_positions == (1, 6) and score.num_unknown_words == 2
    same_with_unk = scorer.score_sentence("the <UNK> cat sat on a <UNK>".split())
    torch.testing.assert_close(
        torch.tensor(score.forward_prediction_nlls[:1]), torch.tensor(same_with_unk.forward_prediction_nlls[:1])
    )  # the <UNK> target's probability; later positions read different characters
    assert scorer.score_sentence(["the", "cat"]).num_unknown_words == 0


def test_scores_do_not_depend_on_batching_or_order(scorer):
    reference = scorer.score(SCORED_SENTENCES, batch_size=1).sentences
    for batch_size in (2, 3, 100):
        for expected, actual in zip(reference, scorer.score(SCORED_SENTENCES, batch_size=batch_size).sentences):
            assert_same_scores(expected, actual)
    order = list(range(len(SCORED_SENTENCES)))
    random.Random(0).shuffle(order)
    shuffled = scorer.score([SCORED_SENTENCES[index] for index in order], batch_size=4).sentences
    for index, actual in zip(order, shuffled):
        assert_same_scores(reference[index], actual)
    assert_same_scores(reference[0], scorer.score_sentence(SCORED_SENTENCES[0]))


def test_strings_are_split_by_the_tokenizer(scorer):
    assert_same_scores(scorer.score_sentence("the cat sat on the mat"), scorer.score_sentence(TOY_SENTENCES[0]))
    mixed = scorer.score(["a cat and a dog", ["a", "dog"]])
    assert [score.words for score in mixed.sentences] == [("a", "cat", "and", "a", "dog"), ("a", "dog")]


def test_scoring_restores_the_models_mode_and_ignores_dropout(vocabulary, tokenizer):
    model = tiny_pretraining_model(len(vocabulary))
    model.config.lm_dropout = 0.5
    model.output_dropout.p = 0.5
    scorer = ELMoLanguageModelScorer(model, tokenizer, vocabulary)
    evaluated = scorer.score_sentence(TOY_SENTENCES[0])
    model.train()
    assert_same_scores(evaluated, scorer.score_sentence(TOY_SENTENCES[0]), tolerance=0)
    assert model.training


# ---- 2. next and previous words ----
def test_next_words_are_the_forward_softmax_after_the_context(scorer, vocabulary):
    context = ["the", "red", "cat"]
    forward_logits, _ = model_logits(scorer, context)
    probabilities = torch.softmax(forward_logits[len(context)].double(), dim=-1)  # read <S> the red cat
    predictions = scorer.next_words(context, k=5)
    assert len(predictions) == 5 and all(isinstance(prediction, WordPrediction) for prediction in predictions)
    allowed = [word_id for word_id in range(len(vocabulary)) if word_id not in (BOS_WORD_ID, UNK_WORD_ID)]
    expected_ids = sorted(allowed, key=lambda word_id: -float(probabilities[word_id]))[:5]
    assert [prediction.word_id for prediction in predictions] == expected_ids
    for prediction in predictions:
        assert prediction.word == vocabulary.id_to_word(prediction.word_id)
        assert prediction.probability == pytest.approx(float(probabilities[prediction.word_id]), rel=1e-5)
        assert prediction.log_probability == pytest.approx(math.log(prediction.probability))
    assert [p.probability for p in predictions] == sorted((p.probability for p in predictions), reverse=True)
    assert scorer.next_words("the red cat", k=5) == predictions

    everything = scorer.next_words(context, k=len(vocabulary), exclude_unknown=False)
    assert {p.word_id for p in everything} == set(range(len(vocabulary))) - {BOS_WORD_ID}
    assert sum(p.probability for p in everything) == pytest.approx(1 - float(probabilities[BOS_WORD_ID]))
    no_end = scorer.next_words(context, k=len(vocabulary), exclude_end_of_sentence=True)
    assert {p.word_id for p in no_end} == set(range(len(vocabulary))) - {BOS_WORD_ID, EOS_WORD_ID, UNK_WORD_ID}


def test_previous_words_are_the_backward_softmax_before_the_context(scorer, vocabulary):
    context = ["sat", "on", "the", "mat"]
    _, backward_logits = model_logits(scorer, context)
    probabilities = torch.softmax(backward_logits[1].double(), dim=-1)  # read </S> mat the on sat
    predictions = scorer.previous_words(context, k=4)
    allowed = [word_id for word_id in range(len(vocabulary)) if word_id not in (EOS_WORD_ID, UNK_WORD_ID)]
    expected_ids = sorted(allowed, key=lambda word_id: -float(probabilities[word_id]))[:4]
    assert [prediction.word_id for prediction in predictions] == expected_ids
    for prediction in predictions:
        assert prediction.probability == pytest.approx(float(probabilities[prediction.word_id]), rel=1e-5)
    no_begin = scorer.previous_words(context, k=len(vocabulary), exclude_begin_of_sentence=True)
    assert BOS_WORD_ID not in {p.word_id for p in no_begin} and len(no_begin) == len(vocabulary) - 3


def test_an_empty_context_gives_the_first_and_last_words_of_a_sentence(scorer, vocabulary):
    forward_logits, backward_logits = model_logits(scorer, ["a", "log"])
    first_words = torch.softmax(forward_logits[0].double(), dim=-1)  # the forward LM at <S>
    last_words = torch.softmax(backward_logits[3].double(), dim=-1)  # the backward LM at </S>
    for prediction in scorer.next_words([], k=3):
        assert prediction.probability == pytest.approx(float(first_words[prediction.word_id]), rel=1e-5)
    for prediction in scorer.previous_words("", k=3):
        assert prediction.probability == pytest.approx(float(last_words[prediction.word_id]), rel=1e-5)


# ---- 3. in-context substitutes ----
def test_substitutes_combine_both_directions_and_ignore_the_word_itself(scorer, vocabulary):
    sentence = "the cat sat on the mat".split()
    position = 2  # sat
    forward_logits, backward_logits = model_logits(scorer, sentence)
    forward_log_probabilities = torch.log_softmax(forward_logits[position].double(), dim=-1)  # read <S> the cat
    backward_log_probabilities = torch.log_softmax(backward_logits[position + 2].double(), dim=-1)  # </S> mat the on
    joint = forward_log_probabilities + backward_log_probabilities
    words_only = torch.arange(len(vocabulary)) >= 2  # <S> and </S> cannot fill a word position
    combined = joint - torch.logsumexp(joint[words_only], dim=0)

    substitutes = scorer.substitutes(sentence, position, k=4)
    assert all(isinstance(substitute, LexicalSubstitute) for substitute in substitutes)
    excluded = {BOS_WORD_ID, EOS_WORD_ID, UNK_WORD_ID, vocabulary.word_to_id("sat")}
    allowed = [word_id for word_id in range(len(vocabulary)) if word_id not in excluded]
    assert [s.word_id for s in substitutes] == sorted(allowed, key=lambda word_id: -float(combined[word_id]))[:4]
    for substitute in substitutes:
        assert substitute.probability == pytest.approx(math.exp(float(combined[substitute.word_id])), rel=1e-5)
        forward, backward = forward_log_probabilities[substitute.word_id], backward_log_probabilities[substitute.word_id]
        assert substitute.forward_probability == pytest.approx(math.exp(float(forward)), rel=1e-5)
        assert substitute.backward_probability == pytest.approx(math.exp(float(backward)), rel=1e-5)
    keep_everything = dict(k=len(vocabulary), exclude_original=False, exclude_unknown=False)
    every_word = scorer.substitutes(sentence, position, **keep_everything)
    assert len(every_word) == len(vocabulary) - 2 and sum(s.probability for s in every_word) == pytest.approx(1.0)
    assert "sat" in {s.word for s in every_word}

    for replacement in ("dog", "zebra", "a-much-longer-word"):
        changed = sentence[:position] + [replacement] + sentence[position + 1 :]
        with_original = scorer.substitutes(changed, position, **keep_everything)
        assert [s.word_id for s in with_original] == [s.word_id for s in every_word]
        for expected, actual in zip(every_word, with_original):
            assert actual.probability == pytest.approx(expected.probability, rel=1e-5, abs=1e-12)


def test_substitutes_at_the_sentence_edges(scorer, vocabulary):
    sentence = "a cat and a dog".split()
    forward_logits, backward_logits = model_logits(scorer, sentence)
    for position, forward_row, backward_row in ((0, 0, 2), (4, 4, 6)):
        joint = torch.log_softmax(forward_logits[forward_row].double(), -1) + torch.log_softmax(
            backward_logits[backward_row].double(), -1
        )
        joint[:2] = -math.inf
        best = scorer.substitutes(sentence, position, k=1, exclude_original=False, exclude_unknown=False)[0]
        assert best.word_id == int(joint.argmax())
    assert len(scorer.substitutes(["dog"], 0, k=3)) == 3


# ---- save / load ----
def test_from_pretrained_round_trip_gives_identical_scores(scorer, tmp_path):
    scorer.model.save_pretrained(tmp_path)
    scorer.tokenizer.save_pretrained(tmp_path)
    scorer.vocabulary.save(tmp_path)
    loaded = ELMoLanguageModelScorer.from_pretrained(tmp_path)
    assert loaded.vocabulary == scorer.vocabulary and loaded.tokenizer.word_splitter == "whitespace"
    # Same weights; the fast path's packed weights may round differently in the last float32 bit.
    for expected, actual in zip(scorer.score(SCORED_SENTENCES).sentences, loaded.score(SCORED_SENTENCES).sentences):
        assert_same_scores(expected, actual, tolerance=1e-6)
    for expected, actual in (
        (scorer.next_words("the cat"), loaded.next_words("the cat")),
        (scorer.previous_words("the cat"), loaded.previous_words("the cat")),
        (scorer.substitutes("the cat sat", 1), loaded.substitutes("the cat sat", 1)),
    ):
        assert [prediction.word for prediction in actual] == [prediction.word for prediction in expected]
        assert [p.probability for p in actual] == pytest.approx([p.probability for p in expected], rel=1e-6)


def test_from_pretrained_names_what_is_missing(scorer, tmp_path):
    scorer.model.save_pretrained(tmp_path)
    scorer.tokenizer.save_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"lacks vocab\.txt \(written by vocabulary\.save") as error:
        ELMoLanguageModelScorer.from_pretrained(tmp_path)
    assert str(tmp_path) in str(error.value)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="config.json.*tokenizer_config.json.*vocab.txt"):
        ELMoLanguageModelScorer.from_pretrained(empty)
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        ELMoLanguageModelScorer.from_pretrained(tmp_path / "missing")


def test_from_pretrained_refuses_a_checkpoint_without_trained_softmax(scorer, tmp_path):
    ELMoModel(scorer.model.config).save_pretrained(tmp_path)  # word_vocab_size in the config, but no softmax weights
    scorer.tokenizer.save_pretrained(tmp_path)
    scorer.vocabulary.save(tmp_path)
    with pytest.raises(ValueError, match="no trained weights for.*softmax"):
        ELMoLanguageModelScorer.from_pretrained(tmp_path)


# ---- errors ----
def test_errors_name_the_input_and_what_was_expected(scorer, vocabulary, tokenizer):
    with pytest.raises(ValueError, match="sentence 1 has no words"):
        scorer.score([["a"], []])
    with pytest.raises(ValueError, match=r"sentence 0 \('   ' split by the 'whitespace' splitter\) has no words"):
        scorer.score(["   "])
    with pytest.raises(ValueError, match="sentences is empty"):
        scorer.score([])
    with pytest.raises(TypeError, match="use score_sentence"):
        scorer.score("the cat")
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        scorer.score(["the cat"], batch_size=0)
    with pytest.raises(ValueError, match="sentence-boundary words"):
        scorer.score_sentence(["the", "</S>"])
    with pytest.raises(ValueError, match=r"position must be an int in \[0, 3\).*got 3"):
        scorer.substitutes("the cat sat", 3)
    with pytest.raises(ValueError, match=r"position must be an int in \[0, 3\).*got -1"):
        scorer.substitutes("the cat sat", -1)
    with pytest.raises(ValueError, match="sentence has no words"):
        scorer.substitutes([], 0)
    for call in (scorer.next_words, scorer.previous_words, lambda context, k: scorer.substitutes(context, 0, k=k)):
        with pytest.raises(ValueError, match="k must be an int >= 1"):
            call("the cat", k=0)
    with pytest.raises(TypeError, match="model must be an ELMoForPreTraining.*got ELMoModel"):
        ELMoLanguageModelScorer(ELMoModel(scorer.model.config), tokenizer, vocabulary)
    inconsistent = tiny_pretraining_model(len(vocabulary))
    inconsistent.config.word_vocab_size = len(vocabulary) + 1
    with pytest.raises(ValueError, match=f"word_vocab_size must be the size of the model's softmax.*{len(vocabulary)}"):
        ELMoLanguageModelScorer(inconsistent, tokenizer, vocabulary)
    smaller = ELMoWordVocabulary.from_sentences(TOY_SENTENCES[:1])
    with pytest.raises(ValueError, match=f"vocabulary has {len(smaller)} words but .*= {len(vocabulary)}"):
        ELMoLanguageModelScorer(scorer.model, tokenizer, smaller)
    with pytest.raises(ValueError, match="max_characters_per_token"):
        ELMoLanguageModelScorer(scorer.model, ELMoTokenizer(max_characters_per_token=20), vocabulary)


# ---- behaviour of a trained model ----
def test_a_trained_model_predicts_the_corpus(vocabulary, tokenizer):
    """60 full-batch Adam steps on the toy corpus (the checks hold for seeds 0-5)."""
    torch.manual_seed(0)
    model = ELMoForPreTraining(tiny_pretraining_config(len(vocabulary)))
    collator = DataCollatorForBiLM(vocabulary, label_boundary_positions=True)
    batch = collator([{"words": words} for words in TOY_SENTENCES])
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
    model.train()
    for _ in range(60):
        optimizer.zero_grad()
        model(**batch).loss.backward()
        optimizer.step()
    scorer = ELMoLanguageModelScorer(model, tokenizer, vocabulary)
    assert scorer.next_words(["the", "cat"], k=1)[0].word == "sat"  # "the cat" is always followed by "sat"
    assert scorer.previous_words("sat on the mat", k=1)[0].word == "cat"  # ... and "sat on the mat" preceded by "cat"
    best = scorer.substitutes("the cat sat on the mat", 2, k=1, exclude_original=False)[0]
    assert best.word == "sat" and best.probability > 0.5
    assert scorer.score(TOY_SENTENCES).perplexity < scorer.score(["mat the on sat cat the"]).perplexity
