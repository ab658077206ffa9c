"""Sentence pairs (entailment, paraphrase): `tokenizer(text, text_pair)` gives each side its own keys, padding and
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
truncation; `ELMoForSequenceClassification` with `task_sentence_pairs` reads each side on its own and classifies
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
a - b|a - b|; a * b]`; the text-classification pipeline takes `{"text", "text_pair"}` inputs."""
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
from __future__ import annotations
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
import json
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
import random
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
import textwrap
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
import numpy as np
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
import pytest
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
import torch
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
from transformers import (
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    AutoModelForSequenceClassification,
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    DataCollatorWithPadding,
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    pipeline,
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
from elmo_hf import (
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    DEFAULT_MODEL_DIR,
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    ELMoConfig,
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    ELMoForSequenceClassification,
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    ELMoTokenizer,
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
from elmo_hf.modeling_elmo_downstream import (
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    compare_pooled_pair,
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    enhance_aligned,
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    soft_align,
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
from elmo_hf.pooling_elmo import pool_words
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
from .helpers import (
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    random_model,
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    run_without_elmo_hf,
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    tiny_config,
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    torch_threads,
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    trainer_arguments,
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
from .test_modeling_elmo_downstream import train_only_the_head
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
TEXTS = ["A man is playing a guitar .", "Nobody is here", "The cat sat on the mat ."]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
PAIRS = ["Someone plays music .", "The room is empty and quiet tonight .", "A cat sits ."]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
@pytest.fixture(autouse=True)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
def one_torch_thread():
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    with torch_threads(1):
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        yield
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
def pair_head(seed: int = 0, **task_fields) -> ELMoForSequenceClassification:
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    """A pair classifier whose biLM has random weights large enough for every layer to matter."""
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    values = dict(num_labels=3, task_encoder_hidden_size=6, task_sentence_pairs=True)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    values.update(task_fields)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    config = tiny_config(**values)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    torch.manual_seed(seed)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    model = ELMoForSequenceClassification(config)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    model.elmo.load_state_dict(random_model(config, seed=seed).state_dict())
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    return model.eval()
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
# ----------------------------------------------------------------------------------------------------------------------
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
# Tokenizer
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
# ----------------------------------------------------------------------------------------------------------------------
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
def test_each_side_is_encoded_and_padded_on_its_own():
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    tokenizer = ELMoTokenizer()
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    batch = tokenizer(TEXTS, PAIRS, padding=True, return_tensors="pt", return_offsets_mapping=True)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert {key: tuple(value.shape) for key, value in batch.items()} == {
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        "input_ids": (3, 7, 50), "attention_mask": (3, 7), "offset_mapping": (3, 7, 2),
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        "pair_input_ids": (3, 8, 50), "pair_attention_mask": (3, 8), "pair_offset_mapping": (3, 8, 2),
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    }
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    alone = [tokenizer(texts, padding=True, return_tensors="pt", return_offsets_mapping=True) for texts in (TEXTS, PAIRS)]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    for prefix, side in zip(("", "pair_"), alone):
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        for key, value in side.items():
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
            assert torch.equal(batch[prefix + key], value), prefix + key
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert tokenizer.batch_decode(batch["pair_input_ids"]) == [" ".join(tokenizer.tokenize(text)) for text in PAIRS]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    one = tokenizer(TEXTS[0], PAIRS[0])
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert (len(one["input_ids"]), len(one["pair_input_ids"]), one["pair_attention_mask"]) == (7, 4, [1] * 4)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
def test_pre_split_pairs_and_truncation_per_side():
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    tokenizer = ELMoTokenizer()
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    words = [text.split() for text in TEXTS]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    pair_words = [text.split() for text in PAIRS]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    split = tokenizer(words, pair_words, is_split_into_words=True, padding=True, return_tensors="np")
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    raw = tokenizer(TEXTS, PAIRS, padding=True, return_tensors="np")
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert all(np.array_equal(split[key], raw[key]) for key in raw)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    one = tokenizer(words[0], pair_words[0], is_split_into_words=True)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert (len(one["input_ids"]), len(one["pair_input_ids"])) == (7, 4)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    def lengths(truncation):
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        encoding = tokenizer(TEXTS, PAIRS, truncation=truncation, max_length=3)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        return [len(mask) for mask in encoding["attention_mask"]], [len(mask) for mask in encoding["pair_attention_mask"]]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert lengths(True) == lengths("longest_first") == ([3, 3, 3], [3, 3, 3])
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert lengths("only_first") == ([3, 3, 3], [4, 8, 4])
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert lengths("only_second") == ([7, 3, 7], [3, 3, 3])
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
def test_pad_and_the_data_collator_pad_both_sides():
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    tokenizer = ELMoTokenizer()
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    features = [dict(tokenizer(text, pair), label=index % 2) for index, (text, pair) in enumerate(zip(TEXTS, PAIRS))]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    batch = DataCollatorWithPadding(tokenizer)(features)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert {key: tuple(value.shape) for key, value in batch.items()} == {
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        "input_ids": (3, 7, 50), "attention_mask": (3, 7), "pair_input_ids": (3, 8, 50), "pair_attention_mask": (3, 8),
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        "labels": (3,),
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    }
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert batch["pair_attention_mask"].sum(dim=1).tolist() == [4, 8, 4]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    padded = tokenizer.pad(tokenizer(TEXTS[0], PAIRS[0]), padding="max_length", max_length=9)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert (len(padded["input_ids"]), padded["pair_attention_mask"]) == (9, [1] * 4 + [0] * 5)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
@pytest.mark.parametrize(
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    "text, text_pair, options, message",
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    [
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        (TEXTS, PAIRS[:2], {}, "text has 3 sentences but text_pair has 2"),
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        (TEXTS, PAIRS[0], {}, "text is a batch but text_pair is one sentence"),
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        (TEXTS[0], PAIRS, {}, "text is one sentence but text_pair is a batch"),
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        (TEXTS, [1, 2, 3], {}, r"text_pair\[0\] must be a string"),
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        ([["a"]], [["b"], ["c"]], {"is_split_into_words": True}, "text has 1 sentences but text_pair has 2"),
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        (TEXTS, None, {"truncation": "only_second", "max_length": 2}, "only_second.*no text_pair was given"),
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    ],
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
def test_mismatched_pairs_are_refused(text, text_pair, options, message):
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    with pytest.raises((ValueError, TypeError), match=message):
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        ELMoTokenizer()(text, text_pair, **options)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
def test_pad_refuses_sides_of_different_sizes():
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    tokenizer = ELMoTokenizer()
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    encoding = dict(tokenizer(TEXTS, PAIRS))
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    encoding["pair_input_ids"] = encoding["pair_input_ids"][:2]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    encoding["pair_attention_mask"] = encoding["pair_attention_mask"][:2]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    with pytest.raises(ValueError, match="input_ids has 3, pair_input_ids 2"):
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        tokenizer.pad(encoding)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
# ----------------------------------------------------------------------------------------------------------------------
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
# Model
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
# ----------------------------------------------------------------------------------------------------------------------
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
def test_a_pair_is_each_side_read_on_its_own_then_compared():
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    model = pair_head(task_pooling="mean_max")
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    batch = ELMoTokenizer()(TEXTS, PAIRS, padding=True, return_tensors="pt")
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    with torch.no_grad():
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        logits = model(**batch).logits
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        sides = []
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        for prefix in ("", "pair_"):
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
            features, _, mask = model.word_features(batch[prefix + "input_ids"], batch[prefix + "attention_mask"])
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
            sides.append(pool_words(features, mask, "mean_max"))
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        expected = model.classifier(compare_pooled_pair(*sides))
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        # One pair alone, unpadded: the other pairs and the padding change nothing.
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        alone = model(**ELMoTokenizer()(TEXTS[1], PAIRS[1], return_tensors="pt")).logits
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert logits.shape == (3, 3) and model.classifier.in_features == 4 * sides[0].shape[-1]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert torch.equal(logits, expected)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    torch.testing.assert_close(alone[0], logits[1], rtol=0, atol=1e-6)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    a, b = torch.tensor([[1.0, -2.0]]), torch.tensor([[3.0, 4.0]])
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert compare_pooled_pair(a, b).tolist() == [[1.0, -2.0, 3.0, 4.0, 2.0, 6.0, 3.0, -8.0]]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
def test_soft_alignment_reads_only_the_real_words_of_each_side():
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    generator = torch.Generator().manual_seed(0)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    first, second = torch.randn(3, 5, 4, generator=generator), torch.randn(3, 6, 4, generator=generator)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    first_mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    second_mask = torch.tensor([[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], dtype=torch.bool)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    aligned, pair_aligned = soft_align(first, first_mask, second, second_mask)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    for row in range(2):
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        a, b = first[row][first_mask[row]], second[row][second_mask[row]]  # the real words alone
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        torch.testing.assert_close(aligned[row][first_mask[row]], (a @ b.T).softmax(dim=1) @ b, rtol=0, atol=1e-6)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        torch.testing.assert_close(pair_aligned[row][second_mask[row]], (b @ a.T).softmax(dim=1) @ a, rtol=0, atol=1e-6)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert torch.equal(pair_aligned[2], torch.zeros(6, 4))  # the first side has no words: nothing to align with
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    x, x_aligned = torch.tensor([[[2.0, 1.0]]]), torch.tensor([[[0.5, -1.0]]])
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert enhance_aligned(x, x_aligned).tolist() == [[[2.0, 1.0, 0.5, -1.0, 1.5, 2.0, 1.0, -1.0]]]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
def test_pair_attention_model_reads_each_pair_as_if_alone():
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    model = pair_head(task_pair_attention=True, task_pooling="mean_max")
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert model.classifier.in_features == 2 * 2 * 4 * model.task_encoder.output_size
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    batch = ELMoTokenizer()(TEXTS, PAIRS, padding=True, return_tensors="pt")
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    with torch.no_grad():
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        logits = model(**batch).logits
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        for row in range(len(TEXTS)):
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
            alone = model(**ELMoTokenizer()(TEXTS[row], PAIRS[row], return_tensors="pt")).logits
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
            torch.testing.assert_close(alone[0], logits[row], rtol=0, atol=1e-6)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    with pytest.raises(ValueError, match="task_pair_attention .*needs task_sentence_pairs=True"):
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        ELMoConfig(task_pair_attention=True)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
def test_single_sentences_take_the_path_they_always_took():
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    """Without pairs: pooled features into the classifier, bit for bit, and the classifier as wide as before."""
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    model = pair_head(task_sentence_pairs=False, task_pooling="max")
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    batch = ELMoTokenizer()(TEXTS, padding=True, return_tensors="pt")
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    with torch.no_grad():
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        features, _, mask = model.word_features(batch["input_ids"], batch["attention_mask"])
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        expected = model.classifier(pool_words(features, mask, "max"))
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        logits = model(**batch).logits
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert torch.equal(logits, expected)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert model.classifier.in_features == model.task_encoder.output_size
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
@pytest.mark.parametrize(
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    "sentence_pairs, drop, message",
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    [
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        (False, (), "pair_input_ids was given, but this model classifies single sentences"),
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        (True, ("pair_input_ids", "pair_attention_mask"), "classifies sentence pairs.*pass pair_input_ids"),
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        (True, ("pair_input_ids",), "pair_attention_mask was given without pair_input_ids"),
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    ],
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
def test_pair_inputs_must_match_the_model(sentence_pairs, drop, message):
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    model = pair_head(task_sentence_pairs=sentence_pairs)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    batch = dict(ELMoTokenizer()(TEXTS, PAIRS, padding=True, return_tensors="pt"))
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    for key in drop:
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        del batch[key]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    with pytest.raises(ValueError, match=message):
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        model(**batch)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
def test_pair_batches_must_have_one_second_sentence_per_first():
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    batch = dict(ELMoTokenizer()(TEXTS, PAIRS, padding=True, return_tensors="pt"))
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    batch["pair_input_ids"], batch["pair_attention_mask"] = batch["pair_input_ids"][:2], batch["pair_attention_mask"][:2]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    with pytest.raises(ValueError, match="input_ids has 3, pair_input_ids 2"):
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        pair_head()(**batch)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
# Runs where elmo_hf cannot be imported (tests/helpers.run_without_elmo_hf).
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
REMOTE_CODE_SCRIPT = textwrap.dedent(
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    """
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    import json, sys
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    import numpy as np
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    import torch
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    checkpoint, texts, pairs, output_file = sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[5]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    model = AutoModelForSequenceClassification.from_pretrained(checkpoint, trust_remote_code=True).eval()
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    tokenizer = AutoTokenizer.from_pretrained(checkpoint, trust_remote_code=True)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    with torch.no_grad():
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        logits = model(**tokenizer(texts, pairs, padding=True, return_tensors="pt")).logits
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    np.save(output_file, logits.numpy())
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    """
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
@pytest.mark.parametrize("pair_attention", [False, True])
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
def test_save_load_auto_classes_and_remote_code_give_the_same_logits(pair_attention, tmp_path):
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    checkpoint = tmp_path / "checkpoint"
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    model = pair_head(task_mix_positions=["input", "output"], task_pair_attention=pair_attention)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    model.save_pretrained(checkpoint)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    ELMoTokenizer().save_pretrained(checkpoint)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert json.loads((checkpoint / "config.json").read_text())["task_sentence_pairs"] is True
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert (checkpoint / "sentence_pairs_elmo.py").is_file()
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    batch = ELMoTokenizer()(TEXTS, PAIRS, padding=True, return_tensors="pt")
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    with torch.no_grad():
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        expected = model(**batch).logits
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        reloaded = AutoModelForSequenceClassification.from_pretrained(checkpoint)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        assert type(reloaded) is ELMoForSequenceClassification and reloaded.config.task_sentence_pairs
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        assert reloaded.config.task_pair_attention is pair_attention
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        torch.testing.assert_close(reloaded(**batch).logits, expected, rtol=0, atol=1e-6)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    result = run_without_elmo_hf(
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        REMOTE_CODE_SCRIPT, tmp_path, str(checkpoint), json.dumps(TEXTS), json.dumps(PAIRS), str(tmp_path / "logits.npy")
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    )
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert result.returncode == 0, result.stderr[-3000:]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    np.testing.assert_allclose(np.load(tmp_path / "logits.npy"), expected.numpy(), rtol=0, atol=1e-6)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
# ----------------------------------------------------------------------------------------------------------------------
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
# Training a pair task, and the pipeline
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
# ----------------------------------------------------------------------------------------------------------------------
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
WORDS = ["cat", "dog", "bird", "fish", "horse", "cow", "ran", "sat", "ate", "slept", "jumped", "sang", "red", "blue", "green", "old"]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
def paraphrase_pairs(count: int, seed: int):
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    """Three words, then either the same words shuffled (label 1, a paraphrase) or three other words (label 0)."""
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    from datasets import Dataset
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    generator = random.Random(seed)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    rows = {"text": [], "text_pair": [], "label": []}
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    for index in range(count):
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        words = generator.sample(WORDS, 6)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        second = generator.sample(words[:3], 3) if index % 2 else words[3:]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        rows["text"].append(" ".join(words[:3]))
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        rows["text_pair"].append(" ".join(second))
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        rows["label"].append(index % 2)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    return Dataset.from_dict(rows)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
@pytest.mark.parametrize("pair_attention", [False, True])
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
def test_trainer_learns_a_paraphrase_task_and_the_pipeline_takes_pairs(pair_attention, tmp_path):
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    tokenizer = ELMoTokenizer(word_splitter="whitespace")
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    def encode(batch):
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        return tokenizer(batch["text"], batch["text_pair"])
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    train = paraphrase_pairs(64, seed=0).map(encode, batched=True, remove_columns=["text", "text_pair"])
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    held_out = paraphrase_pairs(64, seed=1)[:]  # columns as lists
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    # The shipped (trained) biLM; no task LSTM: the task hinges on which words each side holds.
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    model = ELMoForSequenceClassification.from_pretrained(
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        DEFAULT_MODEL_DIR, num_labels=2, id2label={0: "different", 1: "paraphrase"},
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        label2id={"different": 0, "paraphrase": 1}, task_sentence_pairs=True, task_pair_attention=pair_attention,
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        task_encoder_layers=0,
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        task_mix_dropout=0.1, task_dropout=0.1,
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    )
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    arguments = trainer_arguments(tmp_path, learning_rate=5e-2, max_steps=60, per_device_train_batch_size=8)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    train_only_the_head(model, train, DataCollatorWithPadding(tokenizer), arguments)  # also: the biLM is unchanged
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    model.eval()
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    with torch.no_grad():
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        logits = model(**tokenizer(held_out["text"], held_out["text_pair"], padding=True, return_tensors="pt")).logits
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    accuracy = (logits.argmax(-1) == torch.tensor(held_out["label"])).float().mean().item()
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert accuracy >= 0.95, accuracy
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|

* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    model.save_pretrained(tmp_path / "pairs")
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    tokenizer.save_pretrained(tmp_path / "pairs")
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    classifier = pipeline("text-classification", model=str(tmp_path / "pairs"), tokenizer=str(tmp_path / "pairs"))
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    inputs = [{"text": text, "text_pair": pair} for text, pair in zip(held_out["text"][:4], held_out["text_pair"][:4])]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    one = classifier(inputs[0])
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert set(one) == {"label", "score"} and one["label"] in ("different", "paraphrase")
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    several = classifier(inputs)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert [result["label"] for result in several] == [model.config.id2label[int(index)] for index in logits[:4].argmax(-1)]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    np.testing.assert_allclose(
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
        [result["score"] for result in several], logits[:4].softmax(-1).max(-1).values.numpy(), rtol=0, atol=1e-5
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    )
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert classifier(inputs, batch_size=3) == several
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    every_label = classifier(inputs[0], top_k=None)
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
    assert sorted(result["label"] for result in every_label) == ["different", "paraphrase"]
* b]`; the text-classification pipeline|`[a; b; |a - b|; a * b]` (or, with `task_pair_attention`, ESIM-aligned words); the text-classification pipeline|
