"""ELMoForTokenClassification with a CRF (the paper's NER tagger) and with a predicate indicator (its SRL tagger):
the CRF module itself is proven against brute force in tests/test_crf_elmo.py; here its wiring into the head."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from torch.nn import functional as F
from transformers import DataCollatorForTokenClassification, Trainer, pipeline

from elmo_hf import DEFAULT_MODEL_DIR, ELMoForTokenClassification, ELMoTokenizer
from elmo_hf.integrations.token_classification_pipeline import ELMoTokenClassificationPipeline

from .helpers import SENTENCES, run_without_elmo_hf, torch_threads
from .test_modeling_elmo_downstream import REMOTE_CODE_SCRIPT, bilm_parameters, encode, tiny_head, token_labels
from .test_modeling_elmo_downstream import trainer_arguments

BIO_TAGS = ["O", "B-ENT", "I-ENT", "B-LOC", "I-LOC"]  # tiny_head's NUM_LABELS is 4: the tests pass num_labels
CRF_FIELDS = dict(
    num_labels=len(BIO_TAGS),
    id2label=dict(enumerate(BIO_TAGS)),
    label2id={tag: index for index, tag in enumerate(BIO_TAGS)},
    task_crf=True,
    task_crf_constraints="BIO",
)


@pytest.fixture(autouse=True)
def one_torch_thread():
    with torch_threads(1):
        yield


def crf_head(seed: int = 0, **fields):
    """A tiny CRF head with random (not zero) transition and classifier scores, so that the CRF matters."""
    model = tiny_head(ELMoForTokenClassification, seed=seed, **{**CRF_FIELDS, **fields}).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in (model.crf.transitions, model.crf.start_transitions, model.crf.end_transitions):
            parameter.copy_(torch.randn(parameter.shape, generator=generator))
        model.classifier.weight.copy_(3 * torch.randn(model.classifier.weight.shape, generator=generator))
    return model


def forbidden_steps(path: list[int], model) -> list[tuple[int, int]]:
    """The (previous, next) tag pairs of `path` (start and end included as None) that the model's masks forbid."""
    crf = model.crf
    found = [(None, path[0])] if path and not crf.allowed_start[path[0]] else []
    found += [(a, b) for a, b in zip(path, path[1:]) if not crf.allowed_transitions[a, b]]
    return found + ([(path[-1], None)] if path and not crf.allowed_end[path[-1]] else [])


# ----------------------------------------------------------------------------------------------------------------------
# The head's outputs with and without a CRF
# ----------------------------------------------------------------------------------------------------------------------


def test_without_crf_the_head_is_unchanged():
    """logits = the classifier's scores and loss = mean cross-entropy, bit for bit; no `crf`, no `emissions`."""
    model = tiny_head(ELMoForTokenClassification).eval()
    inputs = encode(SENTENCES)
    labels = token_labels(inputs)
    output = model(**inputs, labels=labels)
    features, _, _ = model.word_features(inputs["input_ids"], inputs["attention_mask"])
    assert model.crf is None and output.emissions is None
    assert torch.equal(output.logits, model.classifier(features))
    is_labelled = labels != -100
    cross_entropy = F.cross_entropy(output.logits[is_labelled], labels[is_labelled], reduction="sum") / is_labelled.sum()
    assert torch.equal(output.loss, cross_entropy + model.mix_l2_penalty())
    assert len(model(**inputs, labels=labels, return_dict=False)) == 2  # (loss, logits), as before
    assert model.decode(**inputs) == [row[: len(words)].tolist() for row, words in zip(output.logits.argmax(-1), SENTENCES)]


def test_crf_logits_are_max_marginals_whose_argmax_is_the_viterbi_path():
    model = crf_head()
    with torch.no_grad():
        model.classifier.bias[2] += 10.0  # I-ENT everywhere: the classifier alone breaks BIO at every start
    inputs = encode(SENTENCES)
    output = model(**inputs)
    paths = model.decode(**inputs)
    assert [len(path) for path in paths] == [len(words) for words in SENTENCES]
    assert torch.equal(output.logits, model.crf.max_marginals(output.emissions, inputs["attention_mask"]))
    assert torch.equal(output.emissions, model.classifier(model.word_features(inputs["input_ids"], inputs["attention_mask"])[0]))
    for row, path in enumerate(paths):
        assert output.logits[row, : len(path)].argmax(-1).tolist() == path
        assert forbidden_steps(path, model) == []
    # The classifier alone would break the scheme somewhere: the constraints are doing work.
    greedy = [output.emissions[row, : len(path)].argmax(-1).tolist() for row, path in enumerate(paths)]
    assert any(forbidden_steps(path, model) for path in greedy)


def test_crf_loss_is_the_mean_negative_log_likelihood_over_sentences_with_open_words():
    model = crf_head()
    inputs = encode(SENTENCES)
    labels = token_labels(inputs).masked_fill(token_labels(inputs, seed=1) == 0, -100)  # some words left open
    output = model(**inputs, labels=labels)
    likelihood = model.crf.negative_log_likelihood(output.emissions, labels, inputs["attention_mask"])
    assert torch.equal(output.loss, likelihood.mean() + model.mix_l2_penalty())
    assert torch.isfinite(output.loss) and (likelihood > 0).all()
    with pytest.raises(ValueError, match=r"class ids in \[0, num_labels=5\) or -100"):
        model(**inputs, labels=labels.masked_fill(labels == 1, 7))


def test_crf_config_errors_name_the_field_and_the_label():
    with pytest.raises(ValueError, match="task_crf_constraints='BIO' constrains a CRF, but task_crf is False"):
        tiny_head(ELMoForTokenClassification, **{**CRF_FIELDS, "task_crf": False})
    with pytest.raises(ValueError, match="task_crf_constraints must be one of"):
        tiny_head(ELMoForTokenClassification, **{**CRF_FIELDS, "task_crf_constraints": "IOB2"})
    with pytest.raises(ValueError, match="label 'U-ENT' is not a BIO tag"):
        tiny_head(ELMoForTokenClassification, **{**CRF_FIELDS, "id2label": {**CRF_FIELDS["id2label"], 1: "U-ENT"}})
    bioul = ["O", "B-ENT", "I-ENT", "L-ENT", "U-ENT"]
    model = tiny_head(ELMoForTokenClassification, **{**CRF_FIELDS, "id2label": dict(enumerate(bioul)), "task_crf_constraints": "BIOUL"})
    assert not model.crf.allowed_transitions[1, 0] and model.crf.allowed_transitions[3, 0]  # B -> O no, L -> O yes


def test_crf_head_saves_and_loads_with_its_masks_derived_from_the_labels(tmp_path):
    model = crf_head()
    model.save_pretrained(tmp_path)
    loaded = ELMoForTokenClassification.from_pretrained(tmp_path).eval()
    for name in ("allowed_start", "allowed_transitions", "allowed_end"):
        assert torch.equal(getattr(loaded.crf, name), getattr(model.crf, name)), name  # not saved: rebuilt
    inputs = encode(SENTENCES)
    assert torch.equal(loaded(**inputs).logits, model(**inputs).logits)
    assert loaded.decode(**inputs) == model.decode(**inputs)
    assert not any(parameter.requires_grad for parameter in bilm_parameters(loaded).values())


def test_crf_head_loads_as_remote_code_without_elmo_hf(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    model = crf_head()
    model.save_pretrained(checkpoint)
    ELMoTokenizer().save_pretrained(checkpoint)
    assert (checkpoint / "crf_elmo.py").is_file()  # copied as a relative import of modeling_elmo_downstream.py
    result = run_without_elmo_hf(REMOTE_CODE_SCRIPT, tmp_path, str(checkpoint), json.dumps(SENTENCES), str(tmp_path / "logits.npy"))
    assert result.returncode == 0, result.stderr[-3000:]
    with torch.no_grad():
        local = model(**encode(SENTENCES)).logits.numpy()
    np.testing.assert_allclose(np.load(tmp_path / "logits.npy"), local, rtol=0, atol=1e-5)


# ----------------------------------------------------------------------------------------------------------------------
# NER with a CRF: learned by Trainer on the shipped model, then the token-classification pipeline
# ----------------------------------------------------------------------------------------------------------------------

LOWER_WORDS = "the a cat sat on mat we saw it and then went to see old friends near".split()
NAMES = "Paris London Anna Berlin Tokyo John Rome Maria Oslo Peter".split()


def ner_sentences(count: int, seed: int) -> list[tuple[list[str], list[str]]]:
    """Lowercase words with runs of 1-3 capitalised names; each run is one ENT entity in BIO tags."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(count):
        words, tags = [], []
        while len(words) < 6:
            words.append(rng.choice(LOWER_WORDS))
            tags.append("O")
            if rng.random() < 0.5:
                run = rng.randint(1, 3)
                words += [rng.choice(NAMES) for _ in range(run)]
                tags += ["B-ENT"] + ["I-ENT"] * (run - 1)
        sentences.append((words, tags))
    return sentences


def tagging_dataset(tokenizer, sentences, label2id, predicates=None):
    from datasets import Dataset

    rows = {"words": [words for words, _ in sentences], "tags": [tags for _, tags in sentences]}
    if predicates is not None:
        rows["predicate_mask"] = predicates

    def tokenize_and_label(batch):
        encoding = tokenizer(batch["words"], is_split_into_words=True)
        encoding["labels"] = [[label2id[tag] for tag in tags] for tags in batch["tags"]]
        return encoding

    return Dataset.from_dict(rows).map(tokenize_and_label, batched=True, remove_columns=["words", "tags"])


def test_crf_tagger_learns_bio_entities_and_the_pipeline_groups_viterbi_paths(tmp_path):
    tags = ["O", "B-ENT", "I-ENT"]
    label2id = {tag: index for index, tag in enumerate(tags)}
    tokenizer = ELMoTokenizer()
    model = ELMoForTokenClassification.from_pretrained(
        DEFAULT_MODEL_DIR, num_labels=3, id2label=dict(enumerate(tags)), label2id=label2id, task_crf=True,
        task_crf_constraints="BIO", task_encoder_hidden_size=16, task_mix_dropout=0.1, task_dropout=0.1,
    )
    bilm_before = {name: value.clone() for name, value in bilm_parameters(model).items()}
    train = tagging_dataset(tokenizer, ner_sentences(32, seed=0), label2id)
    arguments = trainer_arguments(tmp_path, max_steps=30, per_device_train_batch_size=8)
    trainer = Trainer(model=model, args=arguments, train_dataset=train, data_collator=DataCollatorForTokenClassification(tokenizer))
    trainer.train()
    for name, value in bilm_parameters(model).items():
        assert torch.equal(value, bilm_before[name]), name

    model.eval()
    held_out = ner_sentences(20, seed=1)
    inputs = tokenizer([words for words, _ in held_out], is_split_into_words=True, padding=True, return_tensors="pt")
    paths = model.decode(**inputs)
    gold = [label2id[tag] for _, sentence_tags in held_out for tag in sentence_tags]
    predicted = [tag for path in paths for tag in path]
    accuracy = np.mean(np.array(predicted) == np.array(gold))
    assert accuracy >= 0.95, accuracy
    assert all(forbidden_steps(path, model) == [] for path in paths)
    # Trainer's predictions are the logits alone (emissions are left out), and their argmax is the Viterbi path.
    predictions = trainer.predict(tagging_dataset(tokenizer, held_out, label2id)).predictions
    assert isinstance(predictions, np.ndarray) and predictions.shape[-1] == 3
    assert [row[: len(path)].argmax(-1).tolist() for row, path in zip(predictions, paths)] == paths

    tagger = pipeline(
        "token-classification", model=model, tokenizer=tokenizer, pipeline_class=ELMoTokenClassificationPipeline,
        aggregation_strategy="simple",
    )
    text = "we saw Anna Maria near Paris"
    entities = tagger(text)
    assert [(entity["entity_group"], entity["word"], text[entity["start"] : entity["end"]]) for entity in entities] == [
        ("ENT", "Anna Maria", "Anna Maria"), ("ENT", "Paris", "Paris")
    ]
    inputs = tokenizer(text, return_tensors="pt")
    per_word = tagger(text, aggregation_strategy="none")
    assert [model.config.label2id[word["entity"]] for word in per_word] == [tag for tag in model.decode(**inputs)[0] if tag]


# ----------------------------------------------------------------------------------------------------------------------
# SRL-style tagging: a predicate indicator
# ----------------------------------------------------------------------------------------------------------------------

POSITION_TAGS = ["BEFORE", "PREDICATE", "AFTER"]


def predicate_sentences(count: int, seed: int):
    """Random words, a random predicate position, and each word's tag: before, at or after the predicate. The words
    say nothing about the tags: only the indicator does."""
    rng = random.Random(seed)
    sentences, predicates = [], []
    for _ in range(count):
        length = rng.randint(3, 7)
        at = rng.randrange(length)
        words = [rng.choice(LOWER_WORDS) for _ in range(length)]
        sentences.append((words, [POSITION_TAGS[(index > at) - (index < at) + 1] for index in range(length)]))
        predicates.append([int(index == at) for index in range(length)])
    return sentences, predicates


def position_accuracy(tmp_path, predicate_embedding_dim: int) -> float:
    label2id = {tag: index for index, tag in enumerate(POSITION_TAGS)}
    tokenizer = ELMoTokenizer()
    model = ELMoForTokenClassification.from_pretrained(
        DEFAULT_MODEL_DIR, num_labels=3, id2label=dict(enumerate(POSITION_TAGS)), label2id=label2id,
        task_predicate_embedding_dim=predicate_embedding_dim, task_encoder_hidden_size=16, task_dropout=0.0,
        task_use_elmo=False,  # the words say nothing here: the character CNN alone keeps the run short
    )
    sentences, predicates = predicate_sentences(48, seed=0)
    with_indicator = predicate_embedding_dim > 0
    train = tagging_dataset(tokenizer, sentences, label2id, predicates if with_indicator else None)
    arguments = trainer_arguments(
        tmp_path / str(predicate_embedding_dim), max_steps=150, learning_rate=1e-2, lr_scheduler_type="constant",
        per_device_train_batch_size=8,
    )
    Trainer(model=model, args=arguments, train_dataset=train, data_collator=DataCollatorForTokenClassification(tokenizer)).train()
    model.eval()
    held_out, held_out_predicates = predicate_sentences(30, seed=1)
    features = [tokenizer(words, is_split_into_words=True) for words, _ in held_out]
    if with_indicator:
        features = [dict(feature, predicate_mask=mask) for feature, mask in zip(features, held_out_predicates)]
    batch = DataCollatorForTokenClassification(tokenizer)(features)  # pads predicate_mask with 0
    paths = model.decode(**batch)
    gold = [label2id[tag] for _, tags in held_out for tag in tags]
    return float(np.mean(np.array([tag for path in paths for tag in path]) == np.array(gold)))


def test_predicate_indicator_makes_position_relative_to_the_predicate_learnable(tmp_path):
    assert position_accuracy(tmp_path, predicate_embedding_dim=8) >= 0.95
    assert position_accuracy(tmp_path, predicate_embedding_dim=0) < 0.75  # the words alone cannot tell


def test_predicate_mask_is_required_exactly_when_configured():
    inputs = encode(SENTENCES)
    predicate_mask = torch.zeros_like(inputs["attention_mask"])
    predicate_mask[:, 0] = 1
    with_indicator = tiny_head(ELMoForTokenClassification, task_predicate_embedding_dim=3).eval()
    without = tiny_head(ELMoForTokenClassification).eval()
    with pytest.raises(ValueError, match=r"predicate_mask \(batch, words\) of 0/1 is required"):
        with_indicator(**inputs)
    with pytest.raises(ValueError, match="predicate_mask was given, but this model has no predicate indicator"):
        without(**inputs, predicate_mask=predicate_mask)
    with pytest.raises(ValueError, match=r"predicate_mask must be a tensor of shape \(batch, words\)"):
        with_indicator(**inputs, predicate_mask=predicate_mask[:, :-1])
    with pytest.raises(ValueError, match="predicate_mask must hold 0 or 1"):
        with_indicator(**inputs, predicate_mask=predicate_mask * 2)
    moved = predicate_mask.roll(1, dims=1)
    assert not torch.equal(with_indicator(**inputs, predicate_mask=predicate_mask).logits, with_indicator(**inputs, predicate_mask=moved).logits)
