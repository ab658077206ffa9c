"""Sentence pairs (entailment, paraphrase): `tokenizer(text, text_pair)` gives each side its own keys, padding and
truncation; `ELMoForSequenceClassification` with `task_sentence_pairs` reads each side on its own and classifies
`[a; b; |a - b|; a * b]` (with `task_pair_attention`, ESIM's aligned words); the text-classification pipeline takes
`{"text", "text_pair"}` inputs."""

from __future__ import annotations

import json
import random
import textwrap

import numpy as np
import pytest
import torch
from transformers import (
    AutoModelForSequenceClassification,
    DataCollatorWithPadding,
    pipeline,
)

from elmo_hf import (
    DEFAULT_MODEL_DIR,
    ELMoConfig,
    ELMoForSequenceClassification,
    ELMoTokenizer,
)
from elmo_hf.modeling_elmo_downstream import (
    compare_pooled_pair,
    enhance_aligned,
    soft_align,
)
from elmo_hf.pooling_elmo import pool_words

from .helpers import (
    random_model,
    run_without_elmo_hf,
    tiny_config,
    torch_threads,
    trainer_arguments,
)
from .test_modeling_elmo_downstream import train_only_the_head

TEXTS = ["A man is playing a guitar .", "Nobody is here", "The cat sat on the mat ."]
PAIRS = ["Someone plays music .", "The room is empty and quiet tonight .", "A cat sits ."]


@pytest.fixture(autouse=True)
def one_torch_thread():
    with torch_threads(1):
        yield


def pair_head(seed: int = 0, **task_fields) -> ELMoForSequenceClassification:
    """A pair classifier whose biLM has random weights large enough for every layer to matter."""
    values = dict(num_labels=3, task_encoder_hidden_size=6, task_sentence_pairs=True)
    values.update(task_fields)
    config = tiny_config(**values)
    torch.manual_seed(seed)
    model = ELMoForSequenceClassification(config)
    model.elmo.load_state_dict(random_model(config, seed=seed).state_dict())
    return model.eval()


# ----------------------------------------------------------------------------------------------------------------------
# Tokenizer
# ----------------------------------------------------------------------------------------------------------------------


def test_each_side_is_encoded_and_padded_on_its_own():
    tokenizer = ELMoTokenizer()
    batch = tokenizer(TEXTS, PAIRS, padding=True, return_tensors="pt", return_offsets_mapping=True)
    assert {key: tuple(value.shape) for key, value in batch.items()} == {
        "input_ids": (3, 7, 50), "attention_mask": (3, 7), "offset_mapping": (3, 7, 2),
        "pair_input_ids": (3, 8, 50), "pair_attention_mask": (3, 8), "pair_offset_mapping": (3, 8, 2),
    }
    alone = [tokenizer(texts, padding=True, return_tensors="pt", return_offsets_mapping=True) for texts in (TEXTS, PAIRS)]
    for prefix, side in zip(("", "pair_"), alone):
        for key, value in side.items():
            assert torch.equal(batch[prefix + key], value), prefix + key
    assert tokenizer.batch_decode(batch["pair_input_ids"]) == [" ".join(tokenizer.tokenize(text)) for text in PAIRS]
    one = tokenizer(TEXTS[0], PAIRS[0])
    assert (len(one["input_ids"]), len(one["pair_input_ids"]), one["pair_attention_mask"]) == (7, 4, [1] * 4)


def test_pre_split_pairs_and_truncation_per_side():
    tokenizer = ELMoTokenizer()
    words = [text.split() for text in TEXTS]
    pair_words = [text.split() for text in PAIRS]
    split = tokenizer(words, pair_words, is_split_into_words=True, padding=True, return_tensors="np")
    raw = tokenizer(TEXTS, PAIRS, padding=True, return_tensors="np")
    assert all(np.array_equal(split[key], raw[key]) for key in raw)
    one = tokenizer(words[0], pair_words[0], is_split_into_words=True)
    assert (len(one["input_ids"]), len(one["pair_input_ids"])) == (7, 4)

    def lengths(truncation):
        encoding = tokenizer(TEXTS, PAIRS, truncation=truncation, max_length=3)
        return [len(mask) for mask in encoding["attention_mask"]], [len(mask) for mask in encoding["pair_attention_mask"]]

    assert lengths(True) == lengths("longest_first") == ([3, 3, 3], [3, 3, 3])
    assert lengths("only_first") == ([3, 3, 3], [4, 8, 4])
    assert lengths("only_second") == ([7, 3, 7], [3, 3, 3])


def test_pad_and_the_data_collator_pad_both_sides():
    tokenizer = ELMoTokenizer()
    features = [dict(tokenizer(text, pair), label=index % 2) for index, (text, pair) in enumerate(zip(TEXTS, PAIRS))]
    batch = DataCollatorWithPadding(tokenizer)(features)
    assert {key: tuple(value.shape) for key, value in batch.items()} == {
        "input_ids": (3, 7, 50), "attention_mask": (3, 7), "pair_input_ids": (3, 8, 50), "pair_attention_mask": (3, 8),
        "labels": (3,),
    }
    assert batch["pair_attention_mask"].sum(dim=1).tolist() == [4, 8, 4]
    padded = tokenizer.pad(tokenizer(TEXTS[0], PAIRS[0]), padding="max_length", max_length=9)
    assert (len(padded["input_ids"]), padded["pair_attention_mask"]) == (9, [1] * 4 + [0] * 5)


@pytest.mark.parametrize(
    "text, text_pair, options, message",
    [
        (TEXTS, PAIRS[:2], {}, "text has 3 sentences but text_pair has 2"),
        (TEXTS, PAIRS[0], {}, "text is a batch but text_pair is one sentence"),
        (TEXTS[0], PAIRS, {}, "text is one sentence but text_pair is a batch"),
        (TEXTS, [1, 2, 3], {}, r"text_pair\[0\] must be a string"),
        ([["a"]], [["b"], ["c"]], {"is_split_into_words": True}, "text has 1 sentences but text_pair has 2"),
        (TEXTS, None, {"truncation": "only_second", "max_length": 2}, "only_second.*no text_pair was given"),
    ],
)
def test_mismatched_pairs_are_refused(text, text_pair, options, message):
    with pytest.raises((ValueError, TypeError), match=message):
        ELMoTokenizer()(text, text_pair, **options)


def test_pad_refuses_sides_of_different_sizes():
    tokenizer = ELMoTokenizer()
    encoding = dict(tokenizer(TEXTS, PAIRS))
    encoding["pair_input_ids"] = encoding["pair_input_ids"][:2]
    encoding["pair_attention_mask"] = encoding["pair_attention_mask"][:2]
    with pytest.raises(ValueError, match="input_ids has 3, pair_input_ids 2"):
        tokenizer.pad(encoding)


# ----------------------------------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------------------------------


def test_a_pair_is_each_side_read_on_its_own_then_compared():
    model = pair_head(task_pooling="mean_max")
    batch = ELMoTokenizer()(TEXTS, PAIRS, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
        sides = []
        for prefix in ("", "pair_"):
            features, _, mask = model.word_features(batch[prefix + "input_ids"], batch[prefix + "attention_mask"])
            sides.append(pool_words(features, mask, "mean_max"))
        expected = model.classifier(compare_pooled_pair(*sides))
        # One pair alone, unpadded: the other pairs and the padding change nothing.
        alone = model(**ELMoTokenizer()(TEXTS[1], PAIRS[1], return_tensors="pt")).logits
    assert logits.shape == (3, 3) and model.classifier.in_features == 4 * sides[0].shape[-1]
    assert torch.equal(logits, expected)
    torch.testing.assert_close(alone[0], logits[1], rtol=0, atol=1e-6)
    a, b = torch.tensor([[1.0, -2.0]]), torch.tensor([[3.0, 4.0]])
    assert compare_pooled_pair(a, b).tolist() == [[1.0, -2.0, 3.0, 4.0, 2.0, 6.0, 3.0, -8.0]]


def test_soft_alignment_reads_only_the_real_words_of_each_side():
    generator = torch.Generator().manual_seed(0)
    first, second = torch.randn(3, 5, 4, generator=generator), torch.randn(3, 6, 4, generator=generator)
    first_mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)
    second_mask = torch.tensor([[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], dtype=torch.bool)
    aligned, pair_aligned = soft_align(first, first_mask, second, second_mask)
    for row in range(2):
        a, b = first[row][first_mask[row]], second[row][second_mask[row]]  # the real words alone
        torch.testing.assert_close(aligned[row][first_mask[row]], (a @ b.T).softmax(dim=1) @ b, rtol=0, atol=1e-6)
        torch.testing.assert_close(pair_aligned[row][second_mask[row]], (b @ a.T).softmax(dim=1) @ a, rtol=0, atol=1e-6)
    assert torch.equal(pair_aligned[2], torch.zeros(6, 4))  # the first side has no words: nothing to align with
    x, x_aligned = torch.tensor([[[2.0, 1.0]]]), torch.tensor([[[0.5, -1.0]]])
    assert enhance_aligned(x, x_aligned).tolist() == [[[2.0, 1.0, 0.5, -1.0, 1.5, 2.0, 1.0, -1.0]]]


def test_pair_attention_model_reads_each_pair_as_if_alone():
    model = pair_head(task_pair_attention=True, task_pooling="mean_max")
    assert model.classifier.in_features == 2 * 2 * 4 * model.task_encoder.output_size
    batch = ELMoTokenizer()(TEXTS, PAIRS, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
        for row in range(len(TEXTS)):
            alone = model(**ELMoTokenizer()(TEXTS[row], PAIRS[row], return_tensors="pt")).logits
            torch.testing.assert_close(alone[0], logits[row], rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="task_pair_attention .*needs task_sentence_pairs=True"):
        ELMoConfig(task_pair_attention=True)


def test_single_sentences_take_the_path_they_always_took():
    """Without pairs: pooled features into the classifier, bit for bit, and the classifier as wide as before."""
    model = pair_head(task_sentence_pairs=False, task_pooling="max")
    batch = ELMoTokenizer()(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        features, _, mask = model.word_features(batch["input_ids"], batch["attention_mask"])
        expected = model.classifier(pool_words(features, mask, "max"))
        logits = model(**batch).logits
    assert torch.equal(logits, expected)
    assert model.classifier.in_features == model.task_encoder.output_size


@pytest.mark.parametrize(
    "sentence_pairs, drop, message",
    [
        (False, (), "pair_input_ids was given, but this model classifies single sentences"),
        (True, ("pair_input_ids", "pair_attention_mask"), "classifies sentence pairs.*pass pair_input_ids"),
        (True, ("pair_input_ids",), "pair_attention_mask was given without pair_input_ids"),
    ],
)
def test_pair_inputs_must_match_the_model(sentence_pairs, drop, message):
    model = pair_head(task_sentence_pairs=sentence_pairs)
    batch = dict(ELMoTokenizer()(TEXTS, PAIRS, padding=True, return_tensors="pt"))
    for key in drop:
        del batch[key]
    with pytest.raises(ValueError, match=message):
        model(**batch)


def test_pair_batches_must_have_one_second_sentence_per_first():
    batch = dict(ELMoTokenizer()(TEXTS, PAIRS, padding=True, return_tensors="pt"))
    batch["pair_input_ids"], batch["pair_attention_mask"] = batch["pair_input_ids"][:2], batch["pair_attention_mask"][:2]
    with pytest.raises(ValueError, match="input_ids has 3, pair_input_ids 2"):
        pair_head()(**batch)


# Runs where elmo_hf cannot be imported (tests/helpers.run_without_elmo_hf).
REMOTE_CODE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    checkpoint, texts, pairs, output_file = sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[5]
    model = AutoModelForSequenceClassification.from_pretrained(checkpoint, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(checkpoint, trust_remote_code=True)
    assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
    with torch.no_grad():
        logits = model(**tokenizer(texts, pairs, padding=True, return_tensors="pt")).logits
    np.save(output_file, logits.numpy())
    """
)


@pytest.mark.parametrize("pair_attention", [False, True])
def test_save_load_auto_classes_and_remote_code_give_the_same_logits(pair_attention, tmp_path):
    checkpoint = tmp_path / "checkpoint"
    model = pair_head(task_mix_positions=["input", "output"], task_pair_attention=pair_attention)
    model.save_pretrained(checkpoint)
    ELMoTokenizer().save_pretrained(checkpoint)
    assert json.loads((checkpoint / "config.json").read_text())["task_sentence_pairs"] is True
    assert (checkpoint / "sentence_pairs_elmo.py").is_file()
    batch = ELMoTokenizer()(TEXTS, PAIRS, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = model(**batch).logits
        reloaded = AutoModelForSequenceClassification.from_pretrained(checkpoint)
        assert type(reloaded) is ELMoForSequenceClassification and reloaded.config.task_sentence_pairs
        assert reloaded.config.task_pair_attention is pair_attention
        torch.testing.assert_close(reloaded(**batch).logits, expected, rtol=0, atol=1e-6)
    result = run_without_elmo_hf(
        REMOTE_CODE_SCRIPT, tmp_path, str(checkpoint), json.dumps(TEXTS), json.dumps(PAIRS), str(tmp_path / "logits.npy")
    )
    assert result.returncode == 0, result.stderr[-3000:]
    np.testing.assert_allclose(np.load(tmp_path / "logits.npy"), expected.numpy(), rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------------------------------------------------
# Training a pair task, and the pipeline
# ----------------------------------------------------------------------------------------------------------------------

WORDS = ["cat", "dog", "bird", "fish", "horse", "cow", "ran", "sat", "ate", "slept", "jumped", "sang", "red", "blue", "green", "old"]


def paraphrase_pairs(count: int, seed: int):
    """Three words, then either the same words shuffled (label 1, a paraphrase) or three other words (label 0)."""
    from datasets import Dataset

    generator = random.Random(seed)
    rows = {"text": [], "text_pair": [], "label": []}
    for index in range(count):
        words = generator.sample(WORDS, 6)
        second = generator.sample(words[:3], 3) if index % 2 else words[3:]
        rows["text"].append(" ".join(words[:3]))
        rows["text_pair"].append(" ".join(second))
        rows["label"].append(index % 2)
    return Dataset.from_dict(rows)


@pytest.mark.parametrize("pair_attention", [False, True])
def test_trainer_learns_a_paraphrase_task_and_the_pipeline_takes_pairs(pair_attention, tmp_path):
    tokenizer = ELMoTokenizer(word_splitter="whitespace")

    def encode(batch):
        return tokenizer(batch["text"], batch["text_pair"])

    train = paraphrase_pairs(64, seed=0).map(encode, batched=True, remove_columns=["text", "text_pair"])
    held_out = paraphrase_pairs(64, seed=1)[:]  # columns as lists
    # The shipped (trained) biLM; no task LSTM: the task hinges on which words each side holds.
    model = ELMoForSequenceClassification.from_pretrained(
        DEFAULT_MODEL_DIR, num_labels=2, id2label={0: "different", 1: "paraphrase"},
        label2id={"different": 0, "paraphrase": 1}, task_sentence_pairs=True, task_pair_attention=pair_attention,
        task_encoder_layers=0,
        task_mix_dropout=0.1, task_dropout=0.1,
    )
    arguments = trainer_arguments(tmp_path, learning_rate=5e-2, max_steps=60, per_device_train_batch_size=8)
    train_only_the_head(model, train, DataCollatorWithPadding(tokenizer), arguments)  # also: the biLM is unchanged
    model.eval()
    with torch.no_grad():
        logits = model(**tokenizer(held_out["text"], held_out["text_pair"], padding=True, return_tensors="pt")).logits
    accuracy = (logits.argmax(-1) == torch.tensor(held_out["label"])).float().mean().item()
    assert accuracy >= 0.95, accuracy

    model.save_pretrained(tmp_path / "pairs")
    tokenizer.save_pretrained(tmp_path / "pairs")
    classifier = pipeline("text-classification", model=str(tmp_path / "pairs"), tokenizer=str(tmp_path / "pairs"))
    inputs = [{"text": text, "text_pair": pair} for text, pair in zip(held_out["text"][:4], held_out["text_pair"][:4])]
    one = classifier(inputs[0])
    assert set(one) == {"label", "score"} and one["label"] in ("different", "paraphrase")
    several = classifier(inputs)
    assert [result["label"] for result in several] == [model.config.id2label[int(index)] for index in logits[:4].argmax(-1)]
    np.testing.assert_allclose(
        [result["score"] for result in several], logits[:4].softmax(-1).max(-1).values.numpy(), rtol=0, atol=1e-5
    )
    assert classifier(inputs, batch_size=3) == several
    every_label = classifier(inputs[0], top_k=None)
    assert sorted(result["label"] for result in every_label) == ["different", "paraphrase"]
