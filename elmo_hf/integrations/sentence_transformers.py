"""An elmo-hf model as a sentence-transformers module (sentence-transformers 6.x, the ``sentence-transformers`` extra).

[`ELMoForSentenceTransformers`] is the input module: it splits texts into words with the model's `ELMoTokenizer`,
runs the biLM and hands on one representation per word as ``token_embeddings``, with the word mask as
``attention_mask``. sentence-transformers' own ``Pooling`` module turns them into the sentence vector, so that
`SentenceTransformer.encode`, ``fit``, the evaluators and ``save``/``SentenceTransformer(path)`` work as for any
model. [`elmo_sentence_transformer`] builds the two-module model for a pooling of `POOLINGS`:

| elmo-hf pooling | sentence-transformers ``Pooling`` mode |
|---|---|
| ``mean`` | ``"mean"`` |
| ``max`` | ``"max"`` |
| ``mean_max`` | ``("mean", "max")`` (concatenated in that order) |
| ``first_last`` | ``("cls", "lasttoken")`` (the first word, then the last) |

``encode`` then equals `ELMoModelOutput.sentence_vectors` (and `elmo-hf embed --pooling`) to float rounding; the one
difference is a text without words, which elmo-hf pools to zeros and ``Pooling``'s ``"max"`` to ``-inf``.

A saved model holds the ELMo directory itself at its root (``config.json``, the weights, the tokenizer files: it
loads with `ELMoModel.from_pretrained` too), this module's options in ``elmo_sentence_transformers.json``, and the
pooling module in ``1_Pooling/``. Loading it needs elmo-hf installed (``modules.json`` names this class).

Example:

```python
>>> from elmo_hf.integrations.sentence_transformers import elmo_sentence_transformer
>>> model = elmo_sentence_transformer("models/elmo-original", pooling="mean")
>>> model.encode(["The bank raised rates .", "We sat on the river bank ."]).shape
(2, 1024)
>>> model.save("models/elmo-original-st")  # SentenceTransformer("models/elmo-original-st") loads it back
```
"""

from __future__ import annotations

from typing import Any, Sequence

try:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import InputModule
    from sentence_transformers.sentence_transformer.modules import Pooling
except ImportError as error:  # the optional extra
    raise ImportError(
        f"elmo_hf.integrations.sentence_transformers needs sentence-transformers 6.x: "
        f"pip install 'elmo-hf[sentence-transformers]' ({error})"
    ) from error

from ..choices_elmo import POOLINGS
from ..modeling_elmo import ELMoModel
from ..pooling_elmo import check_representation
from ..tokenization_elmo import ELMoTokenizer
from ..validation_elmo import check_choice

# sentence-transformers' Pooling modes giving each of elmo-hf's poolings (module docstring's table).
SENTENCE_TRANSFORMERS_POOLING_MODES: dict[str, str | tuple[str, ...]] = {
    "mean": "mean",
    "max": "max",
    "mean_max": ("mean", "max"),
    "first_last": ("cls", "lasttoken"),
}


class ELMoForSentenceTransformers(InputModule):
    r"""
    An ELMo biLM as the input module of a `SentenceTransformer`: texts in, one vector per word out.

    Args:
        model_name_or_path (`str`, *optional*): an ELMo directory or Hub repo id, loaded with
            `ELMoModel.from_pretrained` and `ELMoTokenizer.from_pretrained`, unless ``model`` is given.
        representation (`str` or `int`, defaults to `"mix"`): the per-word vectors (`ELMoModelOutput.word_vectors`):
            `"mix"`, `"top"`, `"average"` or a layer index; not `"all"` (a sentence vector is one vector).
        mix_index (`int`, defaults to 0): which scalar mix, with `representation="mix"`.
        model ([`ELMoModel`], *optional*) and tokenizer ([`ELMoTokenizer`], *optional*): already loaded ones.
        revision (`str`, *optional*): Hub revision for ``model_name_or_path``.

    Features in: ``input_ids`` `(batch, words, max_characters_per_token)` and ``attention_mask`` `(batch, words)`
    (from `preprocess`). Out, added: ``token_embeddings`` `(batch, words, 2P)` and ``attention_mask`` set to the
    model's word mask.
    """

    config_file_name = "elmo_sentence_transformers.json"
    config_keys = ["representation", "mix_index"]
    save_in_root = True

    def __init__(
        self,
        model_name_or_path: str | None = None,
        representation: str | int = "mix",
        mix_index: int = 0,
        *,
        model: ELMoModel | None = None,
        tokenizer: ELMoTokenizer | None = None,
        revision: str | None = None,
    ):
        super().__init__()
        if model is None and model_name_or_path is None:
            raise ValueError("ELMoForSentenceTransformers needs model_name_or_path or a loaded model")
        if model is None:
            model = ELMoModel.from_pretrained(str(model_name_or_path), revision=revision)
        if tokenizer is None:
            tokenizer_source = model_name_or_path or model.name_or_path
            if not tokenizer_source:
                raise ValueError("the model was not loaded from a directory: pass its tokenizer= as well")
            tokenizer = ELMoTokenizer.from_pretrained(str(tokenizer_source), revision=revision)
        config = model.config
        if representation == "all":
            raise ValueError('representation "all" gives several vectors per word; choose "mix", "top", "average" or a layer')
        check_representation(representation, config.num_representation_layers, config.num_output_representations, mix_index)
        self.model = model
        self.tokenizer = tokenizer
        self.representation = representation
        self.mix_index = mix_index

    def preprocess(self, inputs: Sequence[str], prompt: str | None = None, **kwargs) -> dict[str, Any]:
        """Character ids of the texts' words, padded to the longest text: ``input_ids`` and ``attention_mask``; with a
        ``prompt`` (put before every text), ``prompt_length``, its number of words, which ``Pooling(include_prompt=
        False)`` leaves out."""
        texts = list(inputs)
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise ValueError(f"inputs[{index}] is {type(text).__name__}; ELMo encodes text (str) only")
        if not prompt:
            return dict(self.tokenizer(texts, padding=True, return_tensors="pt"))
        features = dict(self.tokenizer(self._prepend_prompt(texts, prompt), padding=True, return_tensors="pt"))
        features["prompt_length"] = len(self.tokenizer.split_words(prompt))
        return features

    def forward(self, features: dict[str, Any], **kwargs) -> dict[str, Any]:
        output = self.model(input_ids=features["input_ids"], attention_mask=features["attention_mask"])
        features["token_embeddings"] = output.word_vectors(self.representation, self.mix_index)  # (B, T, 2P)
        features["attention_mask"] = output.word_mask.long()  # (B, T) the words (never kept <S>/</S>)
        return features

    def get_embedding_dimension(self) -> int:
        """Width of one word's vector (2P)."""
        return self.model.config.output_dim

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        self.model.save_pretrained(output_path, safe_serialization=safe_serialization)
        self.save_tokenizer(output_path)
        self.save_config(output_path)

    @classmethod
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        token: bool | str | None = None,
        cache_folder: str | None = None,
        revision: str | None = None,
        local_files_only: bool = False,
        **kwargs,
    ) -> "ELMoForSentenceTransformers":
        location = {
            "subfolder": subfolder, "token": token, "cache_folder": cache_folder, "revision": revision,
            "local_files_only": local_files_only,
        }
        options = cls.load_config(model_name_or_path, **location)
        return cls(cls.load_dir_path(model_name_or_path, **location), **options)


def elmo_sentence_transformer(
    model_name_or_path: str | None = None,
    pooling: str = "mean",
    representation: str | int = "mix",
    mix_index: int = 0,
    *,
    model: ELMoModel | None = None,
    tokenizer: ELMoTokenizer | None = None,
    device: str | None = None,
) -> SentenceTransformer:
    """A `SentenceTransformer` of [`ELMoForSentenceTransformers`] and sentence-transformers' ``Pooling`` doing
    ``pooling`` (`POOLINGS`, see the module docstring's table)."""
    check_choice("pooling", pooling, POOLINGS)
    elmo = ELMoForSentenceTransformers(
        model_name_or_path, representation, mix_index, model=model, tokenizer=tokenizer
    )
    pooling_module = Pooling(elmo.get_embedding_dimension(), pooling_mode=SENTENCE_TRANSFORMERS_POOLING_MODES[pooling])
    return SentenceTransformer(modules=[elmo, pooling_module], device=device)


__all__ = ["ELMoForSentenceTransformers", "SENTENCE_TRANSFORMERS_POOLING_MODES", "elmo_sentence_transformer"]
