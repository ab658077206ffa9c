"""transformers' ``token-classification`` pipeline for [`ELMoForTokenClassification`] (NER, with or without a CRF).

The stock pipeline assumes one id per token: it names a token by ``convert_ids_to_tokens(id)`` and, for a slow
tokenizer, neither asks for character offsets nor merges words. ELMo's tokenizer gives one row of character ids per
word and the words' offsets, so this subclass asks for the offsets and names each word by its span of the text. The
rest is the stock pipeline: a softmax of the model's `logits` per word (with a CRF these are its max-marginals, so the
per-word best tag is the Viterbi path), then its grouping (`aggregation_strategy="simple"` joins B-/I- words of one
type; a word is never a sub-word, so "first", "average" and "max" group the same way).

Example:

```python
>>> from transformers import pipeline
>>> from elmo_hf.integrations.token_classification_pipeline import ELMoTokenClassificationPipeline
>>> tagger = pipeline("token-classification", model=model, tokenizer=tokenizer,
...                   pipeline_class=ELMoTokenClassificationPipeline, aggregation_strategy="simple")
>>> tagger("we saw Anna Maria in Paris")  # [{"entity_group": "ENT", "word": "Anna Maria", "start": 7, ...}, ...]
```
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
from transformers import TokenClassificationPipeline


class ELMoTokenClassificationPipeline(TokenClassificationPipeline):
    """`TokenClassificationPipeline` for ELMo's word tokenizer: one input text (a str) per call item, each word an
    entity candidate named by its span of the text. `stride` and `is_split_into_words` are not supported."""

    def preprocess(self, sentence: Any, offset_mapping: Any = None, **preprocess_params) -> Iterator[dict]:
        if preprocess_params.get("is_split_into_words") or preprocess_params.get("tokenizer_params"):
            raise ValueError(
                "ELMoTokenClassificationPipeline takes text (a str): is_split_into_words and stride are not supported "
                "(ELMo reads a whole sentence at once; split words are joined by the word splitter anyway)."
            )
        if not isinstance(sentence, str):
            raise ValueError(f"ELMoTokenClassificationPipeline takes text (a str), got {type(sentence).__name__}.")
        inputs = dict(
            self.tokenizer(sentence, return_tensors="pt", return_special_tokens_mask=True, return_offsets_mapping=True)
        )
        if offset_mapping is not None:  # the caller's own offsets win, as in the stock pipeline
            inputs["offset_mapping"] = offset_mapping
        yield {**inputs, "sentence": sentence, "is_last": True}

    def gather_pre_entities(
        self,
        sentence: str,
        input_ids: Any,
        scores: np.ndarray,
        offset_mapping: Any,
        special_tokens_mask: np.ndarray,
        aggregation_strategy: Any,
        word_ids: Any = None,
        word_to_chars_map: Any = None,
    ) -> list[dict]:
        """One candidate per word (sentence boundary words skipped): its text span, its scores (labels,)."""
        pre_entities = []
        for index, word_scores in enumerate(scores):
            if special_tokens_mask[index]:
                continue
            start, end = (int(value) for value in offset_mapping[index])
            pre_entities.append(
                {"word": sentence[start:end], "scores": word_scores, "start": start, "end": end, "index": index,
                 "is_subword": False}
            )
        return pre_entities

    def group_sub_entities(self, entities: list[dict]) -> dict:
        """The stock grouping of consecutive words of one entity, its words joined by a space (the stock method asks
        the tokenizer to join sub-word pieces, which ELMo's words are not)."""
        return {
            "entity_group": entities[0]["entity"].split("-", 1)[-1],
            "score": np.nanmean([entity["score"] for entity in entities]),
            "word": " ".join(entity["word"] for entity in entities),
            "start": entities[0]["start"],
            "end": entities[-1]["end"],
        }


__all__ = ["ELMoTokenClassificationPipeline"]
