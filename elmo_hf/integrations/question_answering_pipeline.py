"""Extractive question answering with [`ELMoForQuestionAnswering`]: transformers' question-answering pipeline, for
ELMo's word tokenizer.

transformers 5 removed its ``question-answering`` pipeline (``pipeline("question-answering")`` raises a ``KeyError``
for every model, pointing to text generation), and the one it had needed a fast tokenizer's sequence ids. This
pipeline is built directly, ``ELMoQuestionAnsweringPipeline(model=..., tokenizer=...)`` (a model object or a saved
directory), and answers as that pipeline did: ``{"score", "start", "end", "answer"}`` per answer, ``start`` and
``end`` character offsets into the context and ``answer == context[start:end]``; a list of ``top_k`` of them when
``top_k > 1``, and a list per example for a list of examples.

Each answer is a span of the context's words (ELMo's tokenizer gives one row per word and each word's offsets), the
best by ``softmax(start_logits)[start] * softmax(end_logits)[end]`` with ``start <= end`` and at most
``max_answer_len`` words (``best_answer_spans``). A context of any length is read whole (the biLM and the task model
are recurrent), so ``doc_stride`` and ``max_seq_len`` are not taken; neither is ``handle_impossible_answer`` (the head
has no "no answer" output).

Example:

```python
>>> from elmo_hf.integrations.question_answering_pipeline import ELMoQuestionAnsweringPipeline
>>> answerer = ELMoQuestionAnsweringPipeline(model="my-qa-model")  # a saved ELMoForQuestionAnswering and tokenizer
>>> answerer(question="what follows red", context="cat red dog ran blue fish")
{'score': 0.97, 'start': 8, 'end': 15, 'answer': 'dog ran'}
```
"""

from __future__ import annotations

import os
from typing import Any

from transformers import Pipeline

from ..modeling_elmo_question_answering import ELMoForQuestionAnswering, best_answer_spans
from ..tokenization_elmo import ELMoTokenizer
from ..validation_elmo import check_int

class ELMoQuestionAnsweringPipeline(Pipeline):
    """Answers a question from a context with an [`ELMoForQuestionAnswering`] (see the module docstring).

    Args:
        model ([`ELMoForQuestionAnswering`] or `str`): the model, or a directory (or Hub id) holding it and, unless
            ``tokenizer`` is given, its tokenizer. Call ``model.eval()`` first on a model object you train.
        tokenizer ([`ELMoTokenizer`] or `str`, *optional*): the tokenizer, or where to load it from.
        top_k (`int`, defaults to 1), max_answer_len (`int`, defaults to 15): the defaults of every call.

    Call with ``question=..., context=...`` (strings, or lists of the same length), or with a dict ``{"question",
    "context"}`` or a list of them.
    """

    def __init__(self, model: Any, tokenizer: Any = None, **kwargs):
        if isinstance(model, (str, os.PathLike)):
            tokenizer = model if tokenizer is None else tokenizer
            model = ELMoForQuestionAnswering.from_pretrained(str(model))
        if tokenizer is None:
            raise ValueError("ELMoQuestionAnsweringPipeline needs the model's tokenizer: pass tokenizer=...")
        if isinstance(tokenizer, (str, os.PathLike)):
            tokenizer = ELMoTokenizer.from_pretrained(str(tokenizer))
        super().__init__(model=model, tokenizer=tokenizer, task="question-answering", **kwargs)

    def __call__(self, inputs: Any = None, *, question: Any = None, context: Any = None, **kwargs):
        if inputs is None:
            inputs = questions_with_contexts(question, context)
        elif question is not None or context is not None:
            raise ValueError(
                "Give either the examples (dicts of question and context) or question= and context=, not both."
            )
        return super().__call__(inputs, **kwargs)

    def _sanitize_parameters(self, top_k: int | None = None, max_answer_len: int | None = None):
        options = {"top_k": top_k, "max_answer_len": max_answer_len}
        for name, value in options.items():
            if value is not None:
                check_int(name, value, 1)
        return {}, {}, {name: value for name, value in options.items() if value is not None}

    def preprocess(self, example: Any) -> dict[str, Any]:
        question, context = checked_example(example)
        encoding = self.tokenizer(question, context, return_offsets_mapping=True, return_tensors="pt")
        offsets = encoding.pop("pair_offset_mapping")  # (1, context_words, 2)
        if offsets.shape[1] == 0:
            raise ValueError(f"The context has no words to answer from: {context!r}.")
        encoding.pop("offset_mapping")
        return {**encoding, "context_offsets": offsets, "context": context}

    def _forward(self, model_inputs: dict[str, Any]) -> dict[str, Any]:
        context_offsets, context = model_inputs.pop("context_offsets"), model_inputs.pop("context")
        output = self.model(**model_inputs, return_dict=True)
        return {
            "start_logits": output.start_logits, "end_logits": output.end_logits,
            "context_mask": model_inputs["pair_attention_mask"], "context_offsets": context_offsets, "context": context,
        }

    def postprocess(self, model_outputs: dict[str, Any], top_k: int = 1, max_answer_len: int = 15):
        """The ``top_k`` best answers of one example (the defaults are those of transformers' former pipeline)."""
        num_words = int(model_outputs["context_mask"][0].sum())
        offsets, context = model_outputs["context_offsets"][0].tolist(), model_outputs["context"]
        spans = best_answer_spans(
            model_outputs["start_logits"][0], model_outputs["end_logits"][0], num_words, max_answer_len, top_k
        )
        answers = []
        for start_word, end_word, score in spans:
            start, end = int(offsets[start_word][0]), int(offsets[end_word][1])
            answers.append({"score": score, "start": start, "end": end, "answer": context[start:end]})
        return answers[0] if top_k == 1 else answers


def questions_with_contexts(question: Any, context: Any) -> dict[str, str] | list[dict[str, str]]:
    """``question=`` and ``context=`` as the pipeline's examples: one dict for two strings, a list of dicts for two
    lists of the same length."""
    if isinstance(question, str) and isinstance(context, str):
        return {"question": question, "context": context}
    if isinstance(question, (list, tuple)) and isinstance(context, (list, tuple)):
        if len(question) != len(context):
            raise ValueError(
                f"question has {len(question)} entries but context {len(context)}: give one context per question."
            )
        return [{"question": one, "context": other} for one, other in zip(question, context)]
    raise ValueError(
        "question= and context= must be two strings or two lists of strings of the same length, got "
        f"{type(question).__name__} and {type(context).__name__}."
    )


def checked_example(example: Any) -> tuple[str, str]:
    """(question, context) of one example, a dict with the two texts."""
    if not isinstance(example, dict) or set(example) != {"question", "context"}:
        keys = sorted(example) if isinstance(example, dict) else type(example).__name__
        raise ValueError(f"Each example must be a dict with the keys 'question' and 'context', got {keys}.")
    for name in ("question", "context"):
        if not isinstance(example[name], str):
            raise ValueError(f"The example's {name} must be a str, got {type(example[name]).__name__}.")
    return example["question"], example["context"]


__all__ = ["ELMoQuestionAnsweringPipeline", "checked_example", "questions_with_contexts"]
