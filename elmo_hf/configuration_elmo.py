"""ELMo model configuration.

Every field of the original ``options.json`` (bilm-tf / AllenNLP) is here under a descriptive name; the mapping is
the table ``OPTIONS_FIELDS`` below, used by :meth:`ELMoConfig.from_options_dict` and
:meth:`ELMoConfig.to_options_dict`.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, ClassVar

from transformers import PretrainedConfig

from .choices_elmo import POOLINGS, TAGGING_SCHEMES
from .characters_elmo import (
    CHARACTER_VOCABULARIES,
    MAX_CHARACTERS_PER_TOKEN,
    NUM_CHARACTERS,
    byte_sentence_boundary_rows,
)
from .validation_elmo import check_bool, check_choice, check_int, check_number, is_int

# Keys found in options files written for *training* (bilm-tf's train_elmo.py). They do not change the network
# computed at inference time, so they are accepted and ignored.
TRAINING_ONLY_OPTION_KEYS = frozenset({
    "n_tokens_vocab", "batch_size", "unroll_steps", "n_epochs", "n_train_tokens", "dropout", "all_clip_norm_val",
    "n_negative_samples_batch", "bidirectional", "share_embedding_softmax", "sample_softmax", "lr", "learning_rate",
})
# Same, inside the "lstm" / "char_cnn" sections.
TRAINING_ONLY_SECTION_KEYS = frozenset({"use_skip_connections_in_training"})

# (options.json section, options.json key, ELMoConfig field)
OPTIONS_FIELDS = (
    ("char_cnn", "embedding.dim", "char_embedding_dim"),
    ("char_cnn", "filters", "char_cnn_filters"),
    ("char_cnn", "n_highway", "num_highway_layers"),
    ("char_cnn", "activation", "char_cnn_activation"),
    ("char_cnn", "n_characters", "num_characters"),
    ("char_cnn", "max_characters_per_token", "max_characters_per_token"),
    ("lstm", "projection_dim", "projection_dim"),
    ("lstm", "dim", "lstm_cell_size"),
    ("lstm", "n_layers", "num_lstm_layers"),
    ("lstm", "cell_clip", "cell_clip"),
    ("lstm", "proj_clip", "projection_clip"),
    ("lstm", "use_skip_connections", "use_skip_connections"),
)


def pretraining_fields_from_options(options: dict[str, Any]) -> dict[str, Any]:
    """The `ELMoConfig` fields set by the training keys of an original `options.json` (bilm-tf's): `dropout` ->
    `lm_dropout`, `n_negative_samples_batch` -> `softmax_num_samples` (unless `sample_softmax` is false). The
    inference fields are `OPTIONS_FIELDS`, read by `ELMoConfig.from_options_dict`."""
    fields = {}
    if "dropout" in options:
        fields["lm_dropout"] = options["dropout"]
    if options.get("sample_softmax", True) and "n_negative_samples_batch" in options:
        fields["softmax_num_samples"] = options["n_negative_samples_batch"]
    return fields


# The original trains with 261 characters (no padding-token row) and runs inference with 262 (NUM_CHARACTERS): ids
# are shifted by +1 and id 0 is the all-zero padding token. This package always uses the inference layout.
TRAINING_NUM_CHARACTERS = NUM_CHARACTERS - 1

CHAR_CNN_ACTIVATIONS = ("relu", "tanh")

# Choices of the downstream task heads' fields.
TASK_INPUT_EMBEDDINGS = ("char_cnn", "none")
TASK_MIX_POSITIONS = ("input", "output")

# The 2048-filter character CNN shared by all four released models.
RELEASED_CHAR_CNN_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]


# The most character slots per word a config may ask for: every word of every batch holds that many ids, so 10**9
# (once accepted) made the first batch a MemoryError; released models use 50.
MAX_CHARACTERS_PER_TOKEN_LIMIT = 1024

class ELMoConfig(PretrainedConfig):
    r"""
    Configuration of an [`ELMoModel`]: the character CNN, highway layers, projection and the bidirectional LSTM
    language model of Peters et al. (2018), plus run-time options for the representations it returns.

    The defaults are those of the original ELMo (`elmo_2x4096_512_2048cnn_2xhighway`, 93.6M parameters).

    Args:
        char_embedding_dim (`int`, *optional*, defaults to 16):
            Size of each character embedding (options.json `char_cnn.embedding.dim`).
        char_cnn_filters (`list[list[int]]`, *optional*, defaults to the released 2048-filter CNN):
            `[[width, count], ...]` of the character convolutions (`char_cnn.filters`). Their counts add up to the
            CNN output size F.
        num_highway_layers (`int`, *optional*, defaults to 2):
            Highway layers after the CNN (`char_cnn.n_highway`).
        char_cnn_activation (`str`, *optional*, defaults to `"relu"`):
            `"relu"` or `"tanh"`, applied after max-pooling each filter (`char_cnn.activation`).
        num_characters (`int`, *optional*, defaults to 262):
            Size of the character vocabulary (`char_cnn.n_characters`). Must be 262 with the byte scheme: 256 bytes, 5
            special characters, and id 0 for padding tokens. (Training-time options files say 261; the converter maps
            them.) With `character_vocabulary="unicode_characters"`: the rows of the character embedding, id 0 (the
            padding token) included.
        max_characters_per_token (`int`, *optional*, defaults to 50):
            Character slots per word, including begin/end-of-word (`char_cnn.max_characters_per_token`).
        projection_dim (`int`, *optional*, defaults to 512):
            P: size of the token layer and of each LSTM direction's (projected) output (`lstm.projection_dim`).
        lstm_cell_size (`int`, *optional*, defaults to 4096):
            D: size of the LSTM memory cell (`lstm.dim`). When `projection_dim == lstm_cell_size` the LSTM has no
            output projection.
        num_lstm_layers (`int`, *optional*, defaults to 2):
            L: LSTM layers per direction (`lstm.n_layers`).
        cell_clip (`float`, *optional*, defaults to 3.0):
            The LSTM cell is clamped to `[-cell_clip, cell_clip]` (`lstm.cell_clip`); 0 or `None` disables it.
        projection_clip (`float`, *optional*, defaults to 3.0):
            The projected LSTM output is clamped to `[-projection_clip, projection_clip]` (`lstm.proj_clip`); 0 or
            `None` disables it.
        use_skip_connections (`bool`, *optional*, defaults to `True`):
            Add each LSTM layer's input to its output for layers 2..L (`lstm.use_skip_connections`).

        Other token inputs and LSTM conventions (ELMoForManyLangs models, `elmo-hf convert --elmoformanylangs`; the
        defaults are the original ELMo's and change nothing):

        character_vocabulary (`str`, *optional*, defaults to `"utf8_bytes"`):
            How words become character ids. `"utf8_bytes"`: the original's fixed scheme (262 ids, the
            `max_characters_per_token` limit counts UTF-8 bytes, `<S>` / `</S>` around sentences).
            `"unicode_characters"`: a vocabulary of Unicode characters held by the tokenizer
            (`characters_elmo.CharacterVocabulary`): `num_characters` ids, the limit counts characters, and the
            rows around sentences are `begin_sentence_ids` / `end_sentence_ids`.
        begin_sentence_ids, end_sentence_ids (`list[int]`, *optional*):
            With `"unicode_characters"`: the rows of ids (`token_row_width` each) the model puts before and after
            every sentence, the tokenizer's rows of its boundary words (`<bos>`, `<eos>`). Unset with `"utf8_bytes"`.
        word_embedding_dim (`int`, *optional*, defaults to 0):
            W > 0: every token also has a word id, the first id of its row in `input_ids` (rows are then
            `max_characters_per_token + 1` long), and its W-dim embedding is concatenated after the highway layers'
            F features, before the projection to P (then `F + W -> P`). Needs `"unicode_characters"` (the tokenizer's
            vocabulary holds the words).
        word_embedding_vocab_size (`int`, *optional*, defaults to 0):
            Rows of that word embedding, id 0 (the padding token) included.
        tf_forget_gate_bias (`bool`, *optional*, defaults to `True`):
            Add TF's constant 1.0 to the forget gate at run time, as bilm-tf's `LSTMCell` does (its stored bias lacks
            it). `False` for weights trained with AllenNLP's LSTM cell (ELMoForManyLangs), whose stored bias is the
            whole bias.
        num_output_representations (`int`, *optional*, defaults to 1):
            How many independent scalar mixes `gamma * sum_j softmax(w)_j h_j` the model returns (e.g. one for the
            input and one for the output of a task model).
        scalar_mix_layer_norm (`bool`, *optional*, defaults to `False`):
            Normalise each layer before mixing, bilm-tf style: statistics over the real words of the batch only
            (sentence boundaries excluded), epsilon 1e-12.
        keep_sentence_boundaries (`bool`, *optional*, defaults to `False`):
            Return the vectors of the `<S>` / `</S>` positions the model adds around each sentence (outputs then
            have `words + 2` positions) instead of aligning outputs 1:1 with the input words.
        representation_dropout (`float`, *optional*, defaults to 0.0):
            Dropout applied to each scalar-mix output in training mode.
        initializer_range (`float`, *optional*, defaults to 0.02):
            Standard deviation of the normal initialisation of a randomly initialised model.

        Pre-training (used by [`ELMoForPreTraining`]; they change nothing in [`ELMoModel`] at inference):

        word_vocab_size (`int`, *optional*, defaults to 0):
            Number of word classes of the language-model softmax shared by both directions (an
            `ELMoWordVocabulary`'s size, `<S>`, `</S>` and `<UNK>` included). 0: no LM head.
        softmax_num_samples (`int`, *optional*, defaults to 0):
            Sampled softmax in training: distinct negative classes drawn per batch from a log-uniform distribution
            over frequency-ranked word ids, as TF's default sampler (`unique=True`) draws them (bilm-tf's
            `n_negative_samples_batch`, 8192 for the released models). 0 (or a number >= `word_vocab_size`) trains
            with the full softmax. Evaluation always uses the full softmax.
        lm_dropout (`float`, *optional*, defaults to 0.0):
            bilm-tf's training dropout (`dropout`, 0.1 for the released models): on the input of every LSTM layer
            and on the top layer's output before the softmax. Only active in training mode.

        Downstream task heads (used by [`ELMoForTokenClassification`], [`ELMoForSequenceClassification`] and
        [`ELMoForQuestionAnswering`]; they change nothing in [`ELMoModel`]). The paper's stage 2: freeze the biLM,
        learn per task `ELMo_task = gamma * sum_j softmax(w)_j h_j`, feed `[x_k; ELMo_task_k]` to a task encoder
        (optionally with a second mix at its output), with dropout on the mixes and `task_mix_l2 * ||w||^2` added to
        the loss. The number of classes is `num_labels` (`id2label` / `label2id`), as for every transformers head.

        task_use_elmo (`bool`, *optional*, defaults to `True`):
            Feed learned mixes of the biLM layers to the task model. `False` is the baseline without ELMo: the task
            model sees `x_k` alone (needs `task_input_embeddings="char_cnn"`) and the biLSTM is not run.
        task_freeze_elmo (`bool`, *optional*, defaults to `True`):
            Keep the biLM fixed, as in the paper: its parameters get `requires_grad=False` and it runs in eval mode
            (no dropout) under `torch.no_grad()`, so its fast inference path is used; `model.train()` leaves it in
            eval mode. `False` fine-tunes the biLM with the task. The biLM's own `scalar_mixes` are not used by the
            heads and stay frozen either way.
        task_input_embeddings (`str`, *optional*, defaults to `"char_cnn"`):
            The context-independent `x_k` concatenated with ELMo at the task encoder's input: `"char_cnn"`, the
            biLM's own token layer (layer 0 of `hidden_states`, `projection_dim` wide, frozen with the biLM), or
            `"none"`.
        task_mix_positions (`list[str]`, *optional*, defaults to `["input"]`):
            Where a learned mix of the biLM layers is used, each with its own `w` and `gamma`: `"input"`
            (`[x_k; ELMo_k]` into the task encoder) and/or `"output"` (concatenated to the task encoder's output
            before the classifier; needs `task_encoder_layers >= 1`). Ignored when `task_use_elmo=False`.
        task_mix_dropout (`float`, *optional*, defaults to 0.5):
            Dropout on each mix's output (the paper used 0.5 on ELMo). Training mode only.
        task_mix_l2 (`float`, *optional*, defaults to 0.001):
            lambda of the penalty `lambda * sum over the mixes of ||w||^2` added to the loss (the paper compares
            lambda = 1 with the better lambda = 0.001). 0 disables it.
        task_mix_layer_norm (`bool`, *optional*, defaults to `False`):
            Normalise each biLM layer before the head's mixes, bilm-tf style. The statistics are over the real words
            of the batch, so a sentence's outputs then depend on the rest of the batch.
        task_encoder_layers (`int`, *optional*, defaults to 1):
            Layers of the task encoder, a bidirectional `torch.nn.LSTM` over packed sequences (padding never
            reaches the backward direction). 0: no encoder; the classifier reads `[x_k; ELMo_k]` directly.
        task_encoder_hidden_size (`int`, *optional*, defaults to 256):
            Hidden size of each direction of the task encoder (its output is twice as wide).
        task_dropout (`float`, *optional*, defaults to 0.2):
            Dropout on the task encoder's output and between its layers. Training mode only.
        task_pooling (`str`, *optional*, defaults to `"mean"`):
            Sentence vector of [`ELMoForSequenceClassification`] (`POOLINGS`, see `pooling_elmo.pool_words`):
            `"mean"` or `"max"` over the real words' features, `"mean_max"` both concatenated, or `"first_last"`,
            the first word's features concatenated with the last word's.
        task_sentence_pairs (`bool`, *optional*, defaults to `False`):
            [`ELMoForSequenceClassification`] classifies sentence pairs (entailment, paraphrase): each side is read by
            the biLM and the task encoder on its own, pooled to `a` and `b`, and the classifier reads
            `[a; b; |a - b|; a * b]` (four times as wide). Such a model needs `pair_input_ids` at every call; a model
            without it refuses them.
        task_pair_attention (`bool`, *optional*, defaults to `False`):
            With `task_sentence_pairs`: ESIM's soft alignment between the two sides before pooling. Each word's
            features `x` are aligned with the other sentence (`x~`, the attention-weighted sum of its words'
            features, weights the softmax of the dot products) and enhanced to `[x; x~; x - x~; x * x~]`; each side
            is then pooled to `a` and `b` and the classifier reads `[a; b]` (the comparison is in the words).
        task_crf (`bool`, *optional*, defaults to `False`):
            [`ELMoForTokenClassification`] only: a linear-chain CRF over the classifier's per-word scores (the
            paper's NER tagger, `[x_k; ELMo_k]` -> biLSTM -> CRF; `crf_elmo.ConditionalRandomField`). The loss is
            the CRF's negative log-likelihood, `logits` its max-marginals (their per-word argmax is the Viterbi path).
        task_crf_constraints (`str`, *optional*):
            With `task_crf`: forbid the transitions a tagging scheme cannot produce (`TAGGING_SCHEMES`, `"BIO"` or
            `"BIOUL"`), read from the names in `id2label` when the model is built or loaded. None: no constraints.
        task_predicate_embedding_dim (`int`, *optional*, defaults to 0):
            Width of a learned embedding of a per-word 0/1 `predicate_mask` (SRL: which word is the predicate, as in
            He et al. 2017), concatenated to the task encoder's input. 0: off, and `predicate_mask` is refused.
        task_qa_modeling_layers (`int`, *optional*, defaults to 2):
            [`ELMoForQuestionAnswering`] only: layers of BiDAF's modelling biLSTM, which reads the context's words
            after the attention flow between context and question (`task_encoder_hidden_size` per direction).

    Example:

    ```python
    >>> from elmo_hf import ELMoConfig
    >>> config = ELMoConfig(projection_dim=16, lstm_cell_size=64, char_cnn_filters=[[1, 4], [2, 8]])
    >>> config.num_representation_layers  # token layer + 2 biLSTM layers
    3
    ```
    """

    model_type = "elmo"
    # Outputs that Trainer's evaluation must not collect as predictions (the carried LSTM state of pre-training).
    keys_to_ignore_at_inference = ["lstm_state", "emissions"]
    # While set, called with no arguments at the end of every config's initialisation. `elmo_hf/__init__.py` sets it to register the
    # model classes with transformers' AutoModel classes (it then clears it): every model and every AutoModel call
    # starts from a config, and `import elmo_hf` need not import the modeling code (seconds). None in remote code.
    _on_first_instance: ClassVar[Callable[[], None] | None] = None

    # The fields (a dataclass, as every transformers 5 config; the docstring's Args say what each means), checked by
    # `__post_init__`.
    char_embedding_dim: int = 16
    char_cnn_filters: list[list[int]] | None = None
    num_highway_layers: int = 2
    char_cnn_activation: str = "relu"
    num_characters: int = NUM_CHARACTERS
    max_characters_per_token: int = MAX_CHARACTERS_PER_TOKEN
    projection_dim: int = 512
    lstm_cell_size: int = 4096
    num_lstm_layers: int = 2
    cell_clip: float | None = 3.0
    projection_clip: float | None = 3.0
    use_skip_connections: bool = True
    character_vocabulary: str = "utf8_bytes"
    begin_sentence_ids: list[int] | None = None
    end_sentence_ids: list[int] | None = None
    word_embedding_dim: int = 0
    word_embedding_vocab_size: int = 0
    tf_forget_gate_bias: bool = True
    num_output_representations: int = 1
    scalar_mix_layer_norm: bool = False
    keep_sentence_boundaries: bool = False
    representation_dropout: float = 0.0
    initializer_range: float = 0.02
    word_vocab_size: int = 0
    softmax_num_samples: int = 0
    lm_dropout: float = 0.0
    # Downstream task heads (see the "Downstream task heads" block of the docstring).
    task_use_elmo: bool = True
    task_freeze_elmo: bool = True
    task_input_embeddings: str = "char_cnn"
    task_mix_positions: list[str] | None = None
    task_mix_dropout: float = 0.5
    task_mix_l2: float = 0.001
    task_mix_layer_norm: bool = False
    task_encoder_layers: int = 1
    task_encoder_hidden_size: int = 256
    task_dropout: float = 0.2
    task_pooling: str = "mean"
    task_sentence_pairs: bool = False
    task_pair_attention: bool = False
    task_crf: bool = False
    task_crf_constraints: str | None = None
    task_predicate_embedding_dim: int = 0
    task_qa_modeling_layers: int = 2

    def __post_init__(self, **kwargs):
        if self.char_cnn_filters is None:
            self.char_cnn_filters = copy.deepcopy(RELEASED_CHAR_CNN_FILTERS)
        self.char_cnn_filters = [list(width_and_count) for width_and_count in _validated_filters(self.char_cnn_filters)]
        for name in ("begin_sentence_ids", "end_sentence_ids"):
            if getattr(self, name) is not None:
                setattr(self, name, list(getattr(self, name)))
        positions = self.task_mix_positions
        self.task_mix_positions = _validated_mix_positions(["input"] if positions is None else positions)
        self._validate()
        self._validate_task_fields()
        super().__post_init__(**kwargs)
        _call_on_first_instance()

    def _validate(self) -> None:
        field = lambda name: f"ELMoConfig.{name}"  # noqa: E731
        check_int(field("char_embedding_dim"), self.char_embedding_dim, 1)
        check_int(field("num_highway_layers"), self.num_highway_layers, 0)
        check_choice(field("char_cnn_activation"), self.char_cnn_activation, CHAR_CNN_ACTIVATIONS)
        check_choice(field("character_vocabulary"), self.character_vocabulary, CHARACTER_VOCABULARIES)
        if self.character_vocabulary == "utf8_bytes" and self.num_characters != NUM_CHARACTERS:
            raise ValueError(
                f"ELMoConfig.num_characters must be {NUM_CHARACTERS} (256 bytes + 5 special characters + the padding "
                f"token 0), got {self.num_characters!r}."
            )
        check_int(field("num_characters"), self.num_characters, 2, hint="the padding token 0 and at least one character")
        widest_filter = max(width for width, _ in self.char_cnn_filters)
        check_int(
            field("max_characters_per_token"), self.max_characters_per_token, 3, MAX_CHARACTERS_PER_TOKEN_LIMIT + 1,
            hint="character slots per word; released models use 50, and every word costs that many ids in every batch",
        )
        if self.max_characters_per_token < widest_filter:
            raise ValueError(
                f"ELMoConfig.max_characters_per_token ({self.max_characters_per_token}) must be >= the widest "
                f"character filter ({widest_filter})."
            )
        check_int(field("projection_dim"), self.projection_dim, 1)
        check_int(field("lstm_cell_size"), self.lstm_cell_size, 1)
        if self.projection_dim > self.lstm_cell_size:
            raise ValueError(
                f"ELMoConfig.projection_dim ({self.projection_dim}) must be <= lstm_cell_size ({self.lstm_cell_size}): "
                "the LSTM output would be lstm_cell_size wide and could not be stacked with the token layer."
            )
        check_int(field("num_lstm_layers"), self.num_lstm_layers, 1)
        for name in ("cell_clip", "projection_clip"):
            check_number(field(name), getattr(self, name), 0, allow_none=True, hint="0 or None = no clipping")
        for name in ("use_skip_connections", "scalar_mix_layer_norm", "keep_sentence_boundaries"):
            check_bool(field(name), getattr(self, name))
        check_int(field("num_output_representations"), self.num_output_representations, 0)
        for name in ("representation_dropout", "lm_dropout"):
            check_number(field(name), getattr(self, name), 0.0, 1.0, maximum_inclusive=False)
        check_int(field("word_vocab_size"), self.word_vocab_size, 0)
        check_int(field("softmax_num_samples"), self.softmax_num_samples, 0)
        self._validate_token_input()

    def _validate_token_input(self) -> None:
        """The character vocabulary, the boundary rows and the word embedding (see the docstring's block on them)."""
        field = lambda name: f"ELMoConfig.{name}"  # noqa: E731
        check_bool(field("tf_forget_gate_bias"), self.tf_forget_gate_bias)
        check_int(field("word_embedding_dim"), self.word_embedding_dim, 0)
        check_int(field("word_embedding_vocab_size"), self.word_embedding_vocab_size, 0)
        if (self.word_embedding_dim > 0) != (self.word_embedding_vocab_size > 0):
            raise ValueError(
                f"ELMoConfig.word_embedding_dim ({self.word_embedding_dim}) and word_embedding_vocab_size "
                f"({self.word_embedding_vocab_size}) must both be > 0 (a word embedding) or both 0 (none)."
            )
        boundary_rows = (self.begin_sentence_ids, self.end_sentence_ids)
        if self.character_vocabulary == "utf8_bytes":
            if self.word_embedding_dim or any(row is not None for row in boundary_rows):
                raise ValueError(
                    "ELMoConfig: begin_sentence_ids, end_sentence_ids and a word embedding need "
                    "character_vocabulary='unicode_characters' (with 'utf8_bytes' the rows are fixed and there are no "
                    "word ids)."
                )
            return
        for name, row in zip(("begin_sentence_ids", "end_sentence_ids"), boundary_rows):
            self._check_boundary_row(name, row)

    def _check_boundary_row(self, name: str, row: Any) -> None:
        width = self.token_row_width
        if not isinstance(row, (list, tuple)) or len(row) != width or not all(is_int(value) for value in row):
            raise ValueError(
                f"ELMoConfig.{name} must be a row of {width} ids (token_row_width) with "
                f"character_vocabulary='unicode_characters', got {row!r}."
            )
        leading = self.num_word_id_slots
        if leading and not 1 <= row[0] < self.word_embedding_vocab_size:
            raise ValueError(
                f"ELMoConfig.{name}[0] is a word id and must be in [1, {self.word_embedding_vocab_size}), got {row[0]}."
            )
        characters = row[leading:]
        if not all(1 <= value < self.num_characters for value in characters):
            raise ValueError(f"ELMoConfig.{name}: character ids must be in [1, {self.num_characters}), got {row!r}.")

    def _validate_task_fields(self) -> None:
        field = lambda name: f"ELMoConfig.{name}"  # noqa: E731
        for name in ("task_use_elmo", "task_freeze_elmo", "task_mix_layer_norm", "task_sentence_pairs", "task_pair_attention"):
            check_bool(field(name), getattr(self, name))
        check_choice(field("task_input_embeddings"), self.task_input_embeddings, TASK_INPUT_EMBEDDINGS)
        for name in ("task_mix_dropout", "task_dropout"):
            check_number(field(name), getattr(self, name), 0.0, 1.0, maximum_inclusive=False)
        check_number(field("task_mix_l2"), self.task_mix_l2, 0.0, hint="0 disables the penalty")
        check_int(field("task_encoder_layers"), self.task_encoder_layers, 0)
        check_int(field("task_encoder_hidden_size"), self.task_encoder_hidden_size, 1)
        check_choice(field("task_pooling"), self.task_pooling, POOLINGS)
        if self.task_pair_attention and not self.task_sentence_pairs:
            raise ValueError(
                "ELMoConfig.task_pair_attention aligns the two sides of sentence pairs: it needs task_sentence_pairs=True."
            )
        check_bool(field("task_crf"), self.task_crf)
        check_int(field("task_predicate_embedding_dim"), self.task_predicate_embedding_dim, 0, hint="0 is off")
        check_int(field("task_qa_modeling_layers"), self.task_qa_modeling_layers, 1)
        if self.task_crf_constraints is not None:
            check_choice(field("task_crf_constraints"), self.task_crf_constraints, TAGGING_SCHEMES)
            if not self.task_crf:
                raise ValueError(
                    f"ELMoConfig.task_crf_constraints={self.task_crf_constraints!r} constrains a CRF, but task_crf is "
                    "False: set task_crf=True, or task_crf_constraints=None."
                )
        if not self.task_use_elmo and self.task_input_embeddings == "none":
            raise ValueError(
                "ELMoConfig.task_use_elmo=False with task_input_embeddings='none' leaves the task model no input: use "
                "task_input_embeddings='char_cnn' for the baseline without ELMo."
            )
        if self.task_use_elmo and "output" in self.task_mix_positions and self.task_encoder_layers == 0:
            raise ValueError(
                "ELMoConfig.task_mix_positions contains 'output' (a mix at the output of the task encoder), which "
                "needs task_encoder_layers >= 1, got 0."
            )
        if self.task_use_elmo and "input" not in self.task_mix_positions and self.task_input_embeddings == "none":
            raise ValueError(
                "ELMoConfig.task_mix_positions has no 'input' mix and task_input_embeddings='none': the task encoder "
                "would have no input. Add 'input' to task_mix_positions or use task_input_embeddings='char_cnn'."
            )

    @property
    def char_cnn_output_dim(self) -> int:
        """F: the number of character filters, i.e. the width of the CNN output and of the highway layers."""
        return sum(count for _, count in self.char_cnn_filters)

    @property
    def widest_char_filter(self) -> int:
        return max(width for width, _ in self.char_cnn_filters)

    @property
    def num_word_id_slots(self) -> int:
        """Ids in front of a token's character ids: 1 (its word id) when the model has a word embedding, else 0."""
        return 1 if self.word_embedding_dim else 0

    @property
    def token_row_width(self) -> int:
        """Ids per token in `input_ids`: `max_characters_per_token`, plus the word id in front when the model has a
        word embedding."""
        return self.max_characters_per_token + self.num_word_id_slots

    @property
    def largest_input_id(self) -> int:
        """The largest id a slot of `input_ids` may hold: a character id, or a word id when the model has a word
        embedding (which can be far larger)."""
        return max(self.num_characters, self.word_embedding_vocab_size) - 1

    @property
    def sentence_boundary_rows(self) -> tuple[list[int], list[int]]:
        """The rows of ids the model puts before and after every sentence (`<S>` / `</S>` for the byte scheme)."""
        if self.character_vocabulary == "utf8_bytes":
            return byte_sentence_boundary_rows(self.max_characters_per_token)
        return list(self.begin_sentence_ids), list(self.end_sentence_ids)

    @property
    def num_representation_layers(self) -> int:
        """L + 1: the token layer (duplicated to 2P) and the L biLSTM layers, i.e. the paper's 2L + 1 vectors R_k
        packed as L + 1 tensors of size 2P."""
        return self.num_lstm_layers + 1

    @property
    def output_dim(self) -> int:
        """2P: the size of every representation the model returns."""
        return 2 * self.projection_dim

    @classmethod
    def from_options_dict(cls, options: dict[str, Any], **runtime_options) -> "ELMoConfig":
        """Build a config from a parsed original ``options.json``.

        Training-only keys (``n_tokens_vocab``, ``batch_size``, ``dropout``, ...) are ignored; any other unknown
        key, a missing section or a missing field raises ``ValueError`` naming it. ``n_characters: 261`` (the
        training-time value) is accepted and mapped to the inference layout (262).
        """
        if not isinstance(options, dict):
            raise ValueError(f"options must be a JSON object with 'lstm' and 'char_cnn' sections, got {type(options).__name__}.")
        unknown_top = set(options) - {"lstm", "char_cnn"} - TRAINING_ONLY_OPTION_KEYS
        if unknown_top:
            raise ValueError(f"options.json: unknown top-level key(s) {sorted(unknown_top)}; expected 'lstm' and 'char_cnn'.")
        known_keys = {section: set() for section in ("lstm", "char_cnn")}
        fields: dict[str, Any] = {}
        for section, key, field in OPTIONS_FIELDS:
            if section not in options or not isinstance(options[section], dict):
                raise ValueError(f"options.json: missing section {section!r} (an object).")
            value: Any = options[section]
            for part in key.split("."):
                if not isinstance(value, dict) or part not in value:
                    if (section, key) in (("lstm", "cell_clip"), ("lstm", "proj_clip"), ("lstm", "use_skip_connections")):
                        value = None  # optional in bilm-tf: absent means no clipping / no skip connections
                        break
                    raise ValueError(f"options.json: missing field {section}.{key}.")
                value = value[part]
            known_keys[section].add(key.split(".")[0])
            fields[field] = value
        for section, keys in known_keys.items():
            unknown = set(options[section]) - keys - TRAINING_ONLY_OPTION_KEYS - TRAINING_ONLY_SECTION_KEYS
            if unknown:
                raise ValueError(f"options.json: unknown key(s) {sorted(unknown)} in section {section!r}.")
        if not isinstance(options["char_cnn"]["embedding"], dict) or set(options["char_cnn"]["embedding"]) != {"dim"}:
            raise ValueError(f"options.json: char_cnn.embedding must be {{'dim': int}}, got {options['char_cnn']['embedding']!r}.")
        if fields["num_characters"] == TRAINING_NUM_CHARACTERS:
            fields["num_characters"] = NUM_CHARACTERS
        # Absent means no skip connections (bilm-tf's default); anything but a JSON bool is refused: "false" is truthy.
        if fields["use_skip_connections"] is None:
            fields["use_skip_connections"] = False
        check_bool("options.json: lstm.use_skip_connections", fields["use_skip_connections"])
        for clip in ("cell_clip", "projection_clip"):
            if fields[clip] == 0:
                fields[clip] = None
        return cls(**fields, **runtime_options)

    def to_options_dict(self) -> dict[str, Any]:
        """The original ``options.json`` content for this architecture (inference layout, 262 characters);
        ``ValueError`` for a model the format cannot describe."""
        if self.character_vocabulary != "utf8_bytes" or self.word_embedding_dim or not self.tf_forget_gate_bias:
            raise ValueError(
                "options.json (bilm-tf / AllenNLP) cannot describe this model: it has "
                + ", ".join(
                    reason
                    for reason, applies in (
                        ("a vocabulary of Unicode characters", self.character_vocabulary != "utf8_bytes"),
                        ("a word embedding", self.word_embedding_dim > 0),
                        ("an LSTM without TF's run-time forget bias", not self.tf_forget_gate_bias),
                    )
                    if applies
                )
                + "."
            )
        options: dict[str, Any] = {"lstm": {}, "char_cnn": {}}
        for section, key, field in OPTIONS_FIELDS:
            value = getattr(self, field)
            if field in ("cell_clip", "projection_clip") and value is None:
                value = 0
            if field == "char_cnn_filters":
                value = [list(width_and_count) for width_and_count in value]
            target = options[section]
            *parents, leaf = key.split(".")
            for parent in parents:
                target = target.setdefault(parent, {})
            target[leaf] = value
        return options


def _validated_mix_positions(positions: Any) -> list[str]:
    if isinstance(positions, str):
        positions = [positions]
    if (
        not isinstance(positions, (list, tuple))
        or not positions
        or any(position not in TASK_MIX_POSITIONS for position in positions)
        or len(set(positions)) != len(positions)
    ):
        raise ValueError(
            f"ELMoConfig.task_mix_positions must be a non-empty list of distinct values from {TASK_MIX_POSITIONS}, "
            f"got {positions!r}."
        )
    return [position for position in TASK_MIX_POSITIONS if position in positions]


def _call_on_first_instance() -> None:
    hook = ELMoConfig._on_first_instance
    if hook is not None:
        hook()


def _validated_filters(filters: Any) -> list[list[int]]:
    if not isinstance(filters, (list, tuple)) or not filters:
        raise ValueError(f"ELMoConfig.char_cnn_filters must be a non-empty list of [width, count] pairs, got {filters!r}.")
    for index, pair in enumerate(filters):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not all(is_int(v) and v >= 1 for v in pair):
            raise ValueError(
                f"ELMoConfig.char_cnn_filters[{index}] must be a [width, count] pair of positive integers, got {pair!r}."
            )
    return [list(pair) for pair in filters]


__all__ = ["ELMoConfig", "pretraining_fields_from_options"]
