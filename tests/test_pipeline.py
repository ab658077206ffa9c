"""The stock feature-extraction pipeline serves ELMo: one vector (the top layer) per input word."""

import numpy as np
import torch
from transformers import pipeline

from elmo_hf import ELMoModel, ELMoTokenizer


def test_feature_extraction_pipeline_gives_one_vector_per_word(converted_fixture_dir):
    extractor = pipeline("feature-extraction", model=str(converted_fixture_dir), tokenizer=str(converted_fixture_dir))
    model = ELMoModel.from_pretrained(converted_fixture_dir).eval()
    tokenizer = ELMoTokenizer.from_pretrained(converted_fixture_dir)
    texts = ["The bank raised its rates .", "I don't know, said the banker."]

    single = np.array(extractor(texts[0]))
    assert single.shape == (1, 6, 32)  # (1, words, 2P)
    batch = extractor(texts)
    assert [np.array(vectors).shape for vectors in batch] == [(1, 6, 32), (1, 9, 32)]
    for text, vectors in zip(texts, batch):
        with torch.no_grad():
            expected = model(**tokenizer(text, return_tensors="pt")).last_hidden_state.numpy()
        np.testing.assert_allclose(np.array(vectors), expected, rtol=0, atol=1e-6)
