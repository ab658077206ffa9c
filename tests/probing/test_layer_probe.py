"""Linear probes per layer and over a learned mix (`elmo_hf/probing`), on a tiny tagged corpus."""

import pytest
import torch

from elmo_hf import DEFAULT_MODEL_DIR, ELMoModel, ELMoTokenizer
from elmo_hf.probing import ProbeInputError, ProbeOptions, TaggedSentences, plot_mix_weights, plot_probe_report, probe_layers
from elmo_hf.probing.layer_probe import layer_features

SENTENCES = [
    "The cat sat on the mat .", "I saw 3 dogs in the park .", "She gave him 12 apples !", "We run , they walk .",
    "A bank raised its rates by 2 points .", "He sat on the bank of the river .", "Birds sing at 5 in the morning .",
    "Do you know the way ?", "They bought 40 books and 7 pens .", "It rained , so we stayed in .",
]


def tag(word: str) -> str:
    """A task any layer can learn: numbers, punctuation, capitalised words, the rest."""
    if word.isdigit():
        return "NUM"
    if not word.isalnum():
        return "PUNCT"
    return "CAP" if word[0].isupper() else "WORD"


def corpus(sentences, name):
    words = [sentence.split() for sentence in sentences]
    return TaggedSentences(words, [[tag(word) for word in sentence] for sentence in words], name)


@pytest.fixture(scope="module")
def model_and_tokenizer():
    return ELMoModel.from_pretrained(DEFAULT_MODEL_DIR).eval(), ELMoTokenizer.from_pretrained(DEFAULT_MODEL_DIR)


def test_each_layer_and_the_mix_are_probed_and_beat_the_majority_tag(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    train, test = corpus(SENTENCES * 3, "train"), corpus(SENTENCES[::-1], "test")
    stages = []
    report = probe_layers(model, tokenizer, train, test, ProbeOptions(epochs=15, batch_size=32, learning_rate=1e-2),
                          progress=lambda stage, amount: stages.append((stage, amount)))
    assert [layer["name"] for layer in report.layers] == ["layer 0 (token)", "layer 1 (biLSTM 1)", "layer 2 (biLSTM 2)"]
    assert report.tags == ["CAP", "NUM", "PUNCT", "WORD"]
    assert report.test_words == sum(len(sentence.split()) for sentence in SENTENCES)
    majority = report.baselines["most_frequent_tag"]
    assert all(layer["accuracy"] > majority + 0.2 for layer in report.layers), report.table()
    assert report.mix["accuracy"] > majority + 0.2
    assert abs(sum(report.mix["layer_weights"]) - 1.0) < 1e-6 and report.mix["gamma"] > 0
    assert sum(amount for stage, amount in stages if stage == "read") == len(train.words) + len(test.words)
    assert sum(amount for stage, amount in stages if stage == "probe") == 4
    assert "scalar mix (softmax(w) =" in report.table() and "baseline: most frequent tag per word" in report.table()


def test_the_same_seed_gives_the_same_report(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    train, test = corpus(SENTENCES[:6], "train"), corpus(SENTENCES[6:], "test")
    options = ProbeOptions(epochs=3, batch_size=16, seed=5)
    first = probe_layers(model, tokenizer, train, test, options).to_dict()
    second = probe_layers(model, tokenizer, train, test, ProbeOptions(epochs=3, batch_size=16, seed=5)).to_dict()
    assert first == second
    third = probe_layers(model, tokenizer, train, test, ProbeOptions(epochs=3, batch_size=16, seed=6)).to_dict()
    assert third["mix"]["layer_weights"] != first["mix"]["layer_weights"]


def test_features_are_the_models_hidden_states_at_each_word(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    words = [sentence.split() for sentence in SENTENCES[:3]] + [[]]
    features = layer_features(model, tokenizer, words, sentence_batch_size=2)
    assert features.shape == (sum(map(len, words)), 3, model.config.output_dim)
    encoding = tokenizer([words[1]], is_split_into_words=True, return_tensors="pt")
    with torch.inference_mode():
        alone = torch.stack(model(**encoding).hidden_states, dim=2)[0]  # (T, 3, 2P)
    start = len(words[0])
    difference = (features[start : start + len(words[1])] - alone).abs().max()
    assert difference <= 1e-5, difference  # NaN fails this comparison too


def test_corpora_the_probes_cannot_use_are_refused_by_name(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    good = corpus(SENTENCES[:2], "good")
    with pytest.raises(ProbeInputError, match="ragged: sentence 1 has 2 words and 1 tags"):
        probe_layers(model, tokenizer, TaggedSentences([["a", "b"]], [["X"]], "ragged"), good)
    with pytest.raises(ProbeInputError, match="one tag only"):
        probe_layers(model, tokenizer, TaggedSentences([["a", "b"]], [["X", "X"]], "single"), good)
    with pytest.raises(ProbeInputError, match="empty: no tagged words"):
        probe_layers(model, tokenizer, good, TaggedSentences([[]], [[]], "empty"))
    with pytest.raises(ValueError, match="epochs must be"):
        probe_layers(model, tokenizer, good, good, ProbeOptions(epochs=0))


def test_pictures_of_a_report_and_of_a_heads_mixes(model_and_tokenizer, tmp_path):
    model, tokenizer = model_and_tokenizer
    report = probe_layers(model, tokenizer, corpus(SENTENCES[:4], "train"), corpus(SENTENCES[4:6], "test"), ProbeOptions(epochs=1))
    png = plot_probe_report(report, tmp_path / "probe.png")
    svg = plot_probe_report(report, tmp_path / "nested" / "probe.svg")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and b"<svg" in svg.read_bytes()[:1000]
    mixes = {"input": {"layer_weights": [0.2, 0.5, 0.3], "gamma": 1.1}, "output": {"layer_weights": [0.6, 0.2, 0.2], "gamma": 0.9}}
    assert plot_mix_weights(mixes, tmp_path / "mixes.png").stat().st_size > 1000
    with pytest.raises(ValueError, match=r"must end in one of \.png, \.svg, \.pdf"):
        plot_probe_report(report, tmp_path / "probe.jpeg")
    with pytest.raises(ValueError, match="no learned mixes"):
        plot_mix_weights({}, tmp_path / "none.png")
