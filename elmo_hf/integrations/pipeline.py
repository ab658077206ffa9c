"""transformers' ``feature-extraction`` pipeline with ELMo's representations and sentence pooling.

The stock pipeline already serves an ELMo model: it returns the output's first field, ``last_hidden_state``, one
top-layer vector per word, as for every transformers model. This subclass adds three call (or construction)
arguments, checked before anything runs:

- ``representation``: ``"mix"`` (the default, as everywhere in elmo-hf: the model's ``word_vectors()``, the embedder,
  ``elmo-hf embed``, sentence-transformers; the scalar mix is how the paper uses ELMo), ``"top"`` (what the stock
  pipeline returns), ``"average"``, ``"all"`` or a layer index (``ELMoModelOutput.word_vectors``);
- ``mix_index``: which scalar mix, with ``representation="mix"``;
- ``pooling``: ``"none"`` (per-word vectors, the default) or one of ``POOLINGS`` (``OUTPUT_POOLINGS`` in all;
  ``ELMoModelOutput.sentence_vectors``: over the sentence's real words only, padding of a batch never counts).

Options given when the pipeline is built hold for every call that does not name them.

Example:

```python
>>> from transformers import pipeline
>>> from elmo_hf.integrations.pipeline import ELMoFeatureExtractionPipeline
>>> extractor = pipeline("feature-extraction", model=DEFAULT_MODEL_DIR, pipeline_class=ELMoFeatureExtractionPipeline)
>>> len(extractor("The bank raised rates .", pooling="mean")[0])  # (1, D): one vector for the sentence
256
```
"""

from __future__ import annotations

from transformers import FeatureExtractionPipeline

from ..choices_elmo import OUTPUT_POOLINGS
from ..modeling_elmo import ELMoModelOutput
from ..pooling_elmo import check_representation
from ..validation_elmo import check_choice

DEFAULT_OPTIONS = {"pooling": "none", "representation": "mix", "mix_index": 0}  # as ELMoModelOutput.word_vectors


class ELMoFeatureExtractionPipeline(FeatureExtractionPipeline):
    """`FeatureExtractionPipeline` for [`ELMoModel`]: per input, `(1, words, D)` per-word vectors or, with a
    ``pooling``, `(1, D')` for the sentence (`D'` twice `D` for `"mean_max"` and `"first_last"`); `"all"` adds a
    layer axis before `D`. Lists of floats, or tensors with ``return_tensors=True``, as the stock pipeline."""

    def _sanitize_parameters(self, truncation=None, tokenize_kwargs=None, return_tensors=None, **kwargs):
        elmo_options = {name: kwargs.pop(name) for name in ("pooling", "representation", "mix_index") if name in kwargs}
        preprocess_params, forward_params, postprocess_params = super()._sanitize_parameters(
            truncation=truncation, tokenize_kwargs=tokenize_kwargs, return_tensors=return_tensors, **kwargs
        )
        if elmo_options:
            # Options given when the pipeline was built stay unless this call names them; check what will be used.
            options = {**DEFAULT_OPTIONS, **getattr(self, "_postprocess_params", {}), **elmo_options}
            check_choice("pooling", options["pooling"], OUTPUT_POOLINGS)
            config = self.model.config
            check_representation(
                options["representation"], config.num_representation_layers, config.num_output_representations,
                options["mix_index"],
            )
            postprocess_params.update(elmo_options)
        return preprocess_params, forward_params, postprocess_params

    def postprocess(self, model_outputs, return_tensors=False, pooling="none", representation="mix", mix_index=0):
        model_outputs = ELMoModelOutput(**model_outputs)  # the pipeline hands back a plain ModelOutput
        if pooling == "none":
            vectors = model_outputs.word_vectors(representation, mix_index)  # (1, T, ...)
        else:
            vectors = model_outputs.sentence_vectors(pooling, representation, mix_index)  # (1, ...)
        return vectors if return_tensors else vectors.tolist()


__all__ = ["ELMoFeatureExtractionPipeline"]
