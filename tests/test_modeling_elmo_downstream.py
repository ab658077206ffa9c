"""Downstream task heads (the paper's stage 2): ELMoForTokenClassification, ELMoForSequenceClassification."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
import torch
from torch.nn import functional as F
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    DataCollatorForTokenClassification,
    DataCollatorWithPadding,
    Trainer,
)

from elmo_hf import (
    ELMoConfig,
    ELMoForSequenceClassification,
    ELMoForTokenClassification,
    ELMoModel,
    ELMoTokenizer,
)
from elmo_hf.corpus.sentences import load_conllu_sentences
from elmo_hf.modeling_elmo_downstream import run_packed_lstm
from elmo_hf import DEFAULT_MODEL_DIR

from .helpers import SENTENCES, random_model, run_without_elmo_hf, tiny_config, torch_threads
from .helpers import trainer_arguments as shared_trainer_arguments

HEADS = (ELMoForTokenClassification, ELMoForSequenceClassification)
NUM_LABELS = 4
NO_DROPOUT = dict(task_mix_dropout=0.0, task_dropout=0.0)


@pytest.fixture(autouse=True)
def one_torch_thread():
    with torch_threads(1):
        yield


def head_config(**task_fields) -> ELMoConfig:
    values = dict(num_labels=NUM_LABELS, task_encoder_hidden_size=6)
    values.update(task_fields)
    return tiny_config(**values)


def tiny_head(head_class, seed: int = 0, **task_fields):
    """A head whose biLM has random weights large enough for every layer to matter."""
    config = head_config(**task_fields)
    model = head_class(config)
    model.elmo.load_state_dict(random_model(config, seed=seed).state_dict())
    return model


def encode(sentences):
    return ELMoTokenizer()(sentences, is_split_into_words=True, padding=True, return_tensors="pt")


def token_labels(inputs, seed: int = 0) -> torch.LongTensor:
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, NUM_LABELS, inputs["attention_mask"].shape, generator=generator)
    return labels.masked_fill(inputs["attention_mask"] == 0, -100)


def labels_for(head_class, inputs):
    if head_class is ELMoForTokenClassification:
        return token_labels(inputs)
    return torch.arange(inputs["input_ids"].shape[0]) % NUM_LABELS


def bilm_parameters(model):
    return {name: parameter for name, parameter in model.named_parameters() if name.startswith("elmo.")}


# ----------------------------------------------------------------------------------------------------------------------
# Building from a saved biLM; frozen vs fine-tuned
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("head_class", HEADS)
def test_from_saved_elmo_loads_the_bilm_and_initialises_only_the_head(head_class, tmp_path):
    bilm = random_model(tiny_config())
    bilm.save_pretrained(tmp_path / "elmo")
    model, info = head_class.from_pretrained(
        tmp_path / "elmo", num_labels=3, task_mix_positions=["input", "output"], output_loading_info=True
    )
    assert info["unexpected_keys"] == set() and info["mismatched_keys"] == set()
    assert info["missing_keys"] and all(key.startswith(("task_encoder.", "classifier.")) for key in info["missing_keys"])
    assert {"task_encoder.scalar_mixes.input.scalar_weights", "task_encoder.scalar_mixes.output.gamma"} <= info["missing_keys"]
    for name, value in bilm.state_dict().items():
        assert torch.equal(model.elmo.state_dict()[name], value), name
    # The head starts as the paper's: w = 0 (plain average), gamma = 1; frozen biLM after loading too.
    assert model.mix_layer_weights() == {
        position: {"layer_weights": pytest.approx([1 / 3] * 3), "gamma": 1.0} for position in ("input", "output")
    }
    assert not any(parameter.requires_grad for parameter in bilm_parameters(model).values())
    assert model.classifier.out_features == 3 and not model.elmo.training


def test_both_heads_share_one_base_for_their_shared_block():
    """The biLM, its freezing, the task encoder and the mixes' penalty live once, in ELMoTaskModel: no head redefines
    them."""
    from elmo_hf.modeling_elmo_downstream import ELMoTaskModel

    shared = ("frozen_submodules", "freeze_submodules", "train", "from_pretrained", "word_features", "mix_layer_weights", "mix_l2_penalty")
    for head_class in HEADS:
        assert issubclass(head_class, ELMoTaskModel), head_class
        assert not set(shared) & set(vars(head_class)), head_class
    for name in shared:
        assert name in vars(ELMoTaskModel), name


@pytest.mark.parametrize("head_class", HEADS)
def test_frozen_bilm_gets_no_gradients_and_the_mixes_do(head_class):
    model = tiny_head(head_class, task_mix_positions=["input", "output"]).train()
    assert not model.elmo.training and all(not module.training for module in model.elmo.modules())
    assert model.task_encoder.training and model.classifier.training
    grad_enabled_in_bilm = []
    model.elmo.encoder.register_forward_hook(lambda *_: grad_enabled_in_bilm.append(torch.is_grad_enabled()))

    inputs = encode(SENTENCES)
    model(**inputs, labels=labels_for(head_class, inputs)).loss.backward()

    assert grad_enabled_in_bilm == [False]  # no graph recorded: the fast path runs
    for name, parameter in bilm_parameters(model).items():
        assert not parameter.requires_grad and parameter.grad is None, name
    for position in ("input", "output"):
        mix = model.task_encoder.scalar_mixes[position]
        assert mix.scalar_weights.grad is not None and mix.scalar_weights.grad.abs().sum() > 0, position
        assert mix.gamma.grad is not None and mix.gamma.grad.abs().sum() > 0, position
    trainable = {name for name, parameter in model.named_parameters() if parameter.requires_grad}
    assert trainable == {name for name, _ in model.named_parameters() if not name.startswith("elmo.")}


@pytest.mark.parametrize("head_class", HEADS)
def test_fine_tuning_option_gives_the_bilm_gradients(head_class):
    model = tiny_head(head_class, task_freeze_elmo=False).train()
    assert model.elmo.training
    inputs = encode(SENTENCES)
    model(**inputs, labels=labels_for(head_class, inputs)).loss.backward()
    for name, parameter in bilm_parameters(model).items():
        if name.startswith("elmo.scalar_mixes."):  # the biLM's own mixes: unused by the heads, always frozen
            assert not parameter.requires_grad and parameter.grad is None, name
        elif name != "elmo.char_embeddings.embedding.weight":
            assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
    assert model.elmo.char_embeddings.embedding.weight.grad[1:].abs().sum() > 0  # row 0 (padding) stays zero


# ----------------------------------------------------------------------------------------------------------------------
# What is computed
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("head_class", HEADS)
def test_mix_l2_penalty_is_lambda_times_the_squared_mix_weights(head_class):
    model = tiny_head(head_class, task_mix_positions=["input", "output"], task_mix_l2=0.25, **NO_DROPOUT).train()
    with torch.no_grad():
        model.task_encoder.scalar_mixes["input"].scalar_weights.copy_(torch.tensor([0.5, -1.0, 2.0]))
        model.task_encoder.scalar_mixes["output"].scalar_weights.copy_(torch.tensor([1.5, 0.0, -0.25]))
    by_hand = 0.25 * ((0.25 + 1.0 + 4.0) + (2.25 + 0.0 + 0.0625))
    inputs = encode(SENTENCES)
    labels = labels_for(head_class, inputs)

    with_penalty = model(**inputs, labels=labels).loss
    model.config.task_mix_l2 = 0.0
    without_penalty = model(**inputs, labels=labels).loss
    assert model.mix_l2_penalty().item() == 0.0
    assert (with_penalty - without_penalty).item() == pytest.approx(by_hand, rel=1e-5)
    # Without the penalty the loss is exactly the task loss.
    logits = model(**inputs).logits
    if head_class is ELMoForTokenClassification:
        task_loss = F.cross_entropy(logits.reshape(-1, NUM_LABELS), labels.reshape(-1), ignore_index=-100)
    else:
        task_loss = F.cross_entropy(logits, labels)
    torch.testing.assert_close(without_penalty, task_loss)


def test_mix_layer_weights_reads_out_softmax_and_gamma():
    model = tiny_head(ELMoForTokenClassification, task_mix_positions=["output", "input"])
    with torch.no_grad():
        model.task_encoder.scalar_mixes["input"].scalar_weights.copy_(torch.tensor([0.0, 1.0, 2.0]))
        model.task_encoder.scalar_mixes["input"].gamma.fill_(0.5)
    weights = model.mix_layer_weights()
    assert list(weights) == ["input", "output"]
    assert weights["input"]["layer_weights"] == pytest.approx(torch.softmax(torch.tensor([0.0, 1.0, 2.0]), 0).tolist())
    assert weights["input"]["gamma"] == 0.5
    assert weights["output"] == {"layer_weights": pytest.approx([1 / 3] * 3), "gamma": 1.0}


@pytest.mark.parametrize(
    "head_class, task_fields",
    [
        (ELMoForTokenClassification, {}),
        (ELMoForTokenClassification, dict(task_mix_positions=["input", "output"], task_encoder_layers=2)),
        (ELMoForTokenClassification, dict(task_encoder_layers=0, task_input_embeddings="none")),
        (ELMoForTokenClassification, dict(task_use_elmo=False)),
        (ELMoForSequenceClassification, dict(task_pooling="mean")),
        (ELMoForSequenceClassification, dict(task_pooling="max", task_mix_positions=["output"])),
        (ELMoForSequenceClassification, dict(task_pooling="first_last", task_mix_positions=["input", "output"])),
    ],
)
def test_padding_invariance(head_class, task_fields):
    """A sentence's logits do not depend on the longer sentences it is batched with (eval mode)."""
    model = tiny_head(head_class, **task_fields).eval()
    # Non-trivial mixes, so that every biLM layer reaches the logits differently.
    with torch.no_grad():
        for mix in model.task_encoder.scalar_mixes.values():
            mix.scalar_weights.copy_(torch.tensor([0.3, -0.2, 0.6]))
    batch = [SENTENCES[2], SENTENCES[1], [], SENTENCES[0]]
    with torch.no_grad():
        batched = model(**encode(batch)).logits
        for index, sentence in enumerate(batch):
            alone = model(**encode([sentence])).logits
            if head_class is ELMoForTokenClassification:
                torch.testing.assert_close(batched[index, : len(sentence)], alone[0], rtol=0, atol=1e-5)
            else:
                torch.testing.assert_close(batched[index], alone[0], rtol=0, atol=1e-5)


def test_padding_does_not_reach_the_backward_direction_of_the_task_encoder():
    """The task BiLSTM reads each sentence over its own words only: the backward state at word 0 is the same with
    or without trailing padding words, compared through the encoder directly."""
    model = tiny_head(ELMoForTokenClassification).eval()
    inputs = torch.randn(1, 5, model.task_encoder.lstm.input_size)
    mask = torch.tensor([[True, True, True, False, False]])
    with torch.no_grad():
        padded = run_packed_lstm(model.task_encoder.lstm, inputs, mask)
        trimmed = run_packed_lstm(model.task_encoder.lstm, inputs[:, :3], mask[:, :3])
        # Without packing, the padding positions would change the backward half.
        unpacked, _ = model.task_encoder.lstm(inputs)
    torch.testing.assert_close(padded[:, :3], trimmed, rtol=0, atol=1e-6)
    assert padded[:, 3:].abs().max() == 0
    assert (unpacked[:, :3] - trimmed).abs().max() > 1e-4


def test_char_cnn_baseline_never_runs_the_bilstm():
    model = tiny_head(ELMoForTokenClassification, task_use_elmo=False).eval()

    def fail(*_):
        raise AssertionError("the biLSTM ran")

    model.elmo.encoder.register_forward_hook(fail)
    inputs = encode(SENTENCES)
    with torch.no_grad():
        logits = model(**inputs).logits
        for parameter in model.elmo.encoder.parameters():
            parameter.add_(1.0)
        assert torch.equal(model(**inputs).logits, logits)
        model.elmo.char_embeddings.projection.weight.mul_(2.0)  # the token layer does matter
        assert not torch.allclose(model(**inputs).logits, logits)
    assert model.mix_layer_weights() == {} and len(model.task_encoder.scalar_mixes) == 0
    assert model.task_encoder.lstm.input_size == model.config.projection_dim  # x alone
    assert model.mix_l2_penalty().item() == 0.0


def test_elmo_heads_do_use_the_bilstm_and_the_token_layer_choice():
    """The counterpart of the baseline test: with ELMo, the biLSTM weights change the logits; with
    task_input_embeddings='char_cnn' the encoder reads [x; ELMo] (P + 2P), with 'none' ELMo alone (2P)."""
    inputs = encode(SENTENCES)
    for input_embeddings, input_size in (("char_cnn", 8 + 16), ("none", 16)):
        model = tiny_head(ELMoForTokenClassification, task_input_embeddings=input_embeddings).eval()
        assert model.task_encoder.lstm.input_size == input_size
        with torch.no_grad():
            logits = model(**inputs).logits
            model.elmo.encoder.forward_layers[1].input_to_gates.weight.add_(0.5)
            assert (model(**inputs).logits - logits).abs().max() > 1e-4


def test_token_layer_input_is_layer_zero_of_the_bilm():
    """x_k is the biLM's token layer: with ELMo off at the input, the first LSTM step's input is hidden_states[0]."""
    model = tiny_head(ELMoForTokenClassification, task_mix_positions=["output"]).eval()
    seen = []
    model.task_encoder.lstm.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    inputs = encode(SENTENCES[:2])
    with torch.no_grad():
        output = model(**inputs, output_hidden_states=True)
    packed_input = torch.nn.utils.rnn.pad_packed_sequence(seen[0], batch_first=True, total_length=inputs["input_ids"].shape[1])[0]
    expected = output.hidden_states[0][..., :8] * inputs["attention_mask"].unsqueeze(-1)
    torch.testing.assert_close(packed_input, expected)
    assert len(output.hidden_states) == 3


def test_sequence_losses_follow_the_problem_type_convention():
    inputs = encode(SENTENCES)
    regression = tiny_head(ELMoForSequenceClassification, num_labels=1, task_mix_l2=0.0).eval()
    targets = torch.tensor([0.5, -1.0, 2.0, 0.0])
    output = regression(**inputs, labels=targets)
    torch.testing.assert_close(output.loss, F.mse_loss(output.logits.squeeze(-1), targets))
    torch.testing.assert_close(regression(**inputs, labels=targets[:, None]).loss, output.loss)

    multi_label = tiny_head(ELMoForSequenceClassification, task_mix_l2=0.0).eval()
    targets = torch.tensor([[1, 0, 1, 0], [0, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0]], dtype=torch.float32)
    output = multi_label(**inputs, labels=targets)
    torch.testing.assert_close(output.loss, F.binary_cross_entropy_with_logits(output.logits, targets))
    assert output.logits.shape == (4, NUM_LABELS)


def test_tuple_outputs_and_hidden_states():
    model = tiny_head(ELMoForTokenClassification).eval()
    inputs = encode(SENTENCES)
    labels = token_labels(inputs)
    with torch.no_grad():
        as_dict = model(**inputs, labels=labels, output_hidden_states=True)
        as_tuple = model(**inputs, labels=labels, return_dict=False)
    assert len(as_tuple) == 2
    torch.testing.assert_close(as_tuple[0], as_dict.loss)
    torch.testing.assert_close(as_tuple[1], as_dict.logits)
    assert as_dict.logits.shape == (4, inputs["input_ids"].shape[1], NUM_LABELS)
    assert len(as_dict.hidden_states) == 3 and as_dict.hidden_states[0].shape[-1] == 16
    # A batch without any labelled word: loss is the penalty alone (0 here), not NaN.
    assert model(**inputs, labels=torch.full_like(labels, -100)).loss.item() == pytest.approx(model.mix_l2_penalty().item())


# ----------------------------------------------------------------------------------------------------------------------
# Save / load, Auto classes, remote code
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "head_class, auto_class",
    [(ELMoForTokenClassification, AutoModelForTokenClassification), (ELMoForSequenceClassification, AutoModelForSequenceClassification)],
)
def test_save_load_round_trip_with_auto_classes(head_class, auto_class, tmp_path):
    model = tiny_head(head_class, task_mix_positions=["input", "output"], task_pooling="max", task_mix_l2=0.01)
    with torch.no_grad():
        for mix in model.task_encoder.scalar_mixes.values():
            mix.scalar_weights.copy_(torch.tensor([0.1, 0.2, -0.3]))
    model.config.id2label = {index: f"TAG{index}" for index in range(NUM_LABELS)}
    model.config.label2id = {label: index for index, label in model.config.id2label.items()}
    model.save_pretrained(tmp_path)

    saved_config = json.loads((tmp_path / "config.json").read_text())
    assert saved_config["auto_map"][auto_class.__name__] == f"modeling_elmo_downstream.{head_class.__name__}"
    assert (tmp_path / "modeling_elmo_downstream.py").is_file()
    assert isinstance(AutoConfig.from_pretrained(tmp_path), ELMoConfig)

    reloaded = auto_class.from_pretrained(tmp_path)
    assert type(reloaded) is head_class and not reloaded.training
    assert reloaded.config.task_mix_positions == ["input", "output"] and reloaded.config.task_pooling == "max"
    assert reloaded.config.id2label[2] == "TAG2"
    assert not any(parameter.requires_grad for parameter in bilm_parameters(reloaded).values())
    inputs = encode(SENTENCES)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**inputs).logits, model.eval()(**inputs).logits, rtol=0, atol=1e-6)
    assert reloaded.mix_layer_weights() == model.mix_layer_weights()
    # The biLM alone loads from a head checkpoint too.
    bilm = AutoModel.from_pretrained(tmp_path)
    assert type(bilm) is ELMoModel
    torch.testing.assert_close(bilm.encoder.forward_layers[0].input_to_gates.weight, model.elmo.encoder.forward_layers[0].input_to_gates.weight)


def test_existing_biLM_configs_get_the_task_defaults(tmp_path):
    """A config.json written before the task fields existed loads with their defaults."""
    config = tiny_config().to_dict()
    for key in [key for key in config if key.startswith("task_")]:
        del config[key]
    (tmp_path / "config.json").write_text(json.dumps(config))
    loaded = ELMoConfig.from_pretrained(tmp_path)
    assert (loaded.task_use_elmo, loaded.task_freeze_elmo, loaded.task_input_embeddings) == (True, True, "char_cnn")
    assert loaded.task_mix_positions == ["input"] and loaded.task_mix_dropout == 0.5 and loaded.task_mix_l2 == 0.001
    assert (loaded.task_encoder_layers, loaded.task_encoder_hidden_size, loaded.task_pooling) == (1, 256, "mean")


# Runs where elmo_hf cannot be imported (tests/helpers.run_without_elmo_hf).
REMOTE_CODE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    checkpoint, sentences, output_file = sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    model = AutoModelForTokenClassification.from_pretrained(checkpoint, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(checkpoint, trust_remote_code=True)
    assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
    assert not any(p.requires_grad for n, p in model.named_parameters() if n.startswith("elmo."))
    inputs = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**inputs).logits
    np.save(output_file, logits.numpy())
    print(type(model).__name__, json.dumps(model.mix_layer_weights()))
    """
)


def test_token_classification_checkpoint_loads_as_remote_code_without_elmo_hf(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    model = tiny_head(ELMoForTokenClassification, task_mix_positions=["input", "output"]).eval()
    with torch.no_grad():
        model.task_encoder.scalar_mixes["output"].scalar_weights.copy_(torch.tensor([0.4, 0.0, -0.4]))
    model.save_pretrained(checkpoint)
    ELMoTokenizer().save_pretrained(checkpoint)
    result = run_without_elmo_hf(REMOTE_CODE_SCRIPT, tmp_path, str(checkpoint), json.dumps(SENTENCES), str(tmp_path / "logits.npy"))
    assert result.returncode == 0, result.stderr[-3000:]
    class_name, mix_weights = result.stdout.strip().splitlines()[-1].split(" ", 1)
    assert class_name == "ELMoForTokenClassification"
    assert json.loads(mix_weights) == model.mix_layer_weights()
    with torch.no_grad():
        local = model(**encode(SENTENCES)).logits.numpy()
    np.testing.assert_allclose(np.load(tmp_path / "logits.npy"), local, rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------------------------------------------------
# transformers.Trainer
# ----------------------------------------------------------------------------------------------------------------------

TOY_TREEBANK = [
    ("The cat sat on the mat .", "DET NOUN VERB ADP DET NOUN PUNCT"),
    ("A dog ran to the park .", "DET NOUN VERB ADP DET NOUN PUNCT"),
    ("She saw the bird .", "PRON VERB DET NOUN PUNCT"),
    ("We like green tea .", "PRON VERB ADJ NOUN PUNCT"),
    ("The old man walked home .", "DET ADJ NOUN VERB NOUN PUNCT"),
    ("They ate the red apples .", "PRON VERB DET ADJ NOUN PUNCT"),
]


def write_conllu(path):
    blocks = []
    for index, (text, tags) in enumerate(TOY_TREEBANK):
        rows = [f"# sent_id = toy-{index}", f"# text = {text}"]
        for position, (word, tag) in enumerate(zip(text.split(), tags.split()), start=1):
            rows.append("\t".join([str(position), word, word.lower(), tag, "_", "_", "0", "dep", "_", "_"]))
        blocks.append("\n".join(rows) + "\n")
    path.write_text("\n".join(blocks) + "\n", encoding="utf-8")


def trainer_arguments(tmp_path, **overrides):
    values = dict(learning_rate=5e-2, max_steps=20, per_device_train_batch_size=3, per_device_eval_batch_size=6)
    values.update(overrides)
    return shared_trainer_arguments(tmp_path, **values)


def train_only_the_head(model, dataset, data_collator, arguments, eval_dataset=None) -> None:
    """Trains `model` with Trainer on `dataset` (also the evaluation set unless `eval_dataset` is given) and checks what
    a frozen biLM promises: the held-out loss falls by 30%, the optimizer never sees a biLM parameter, the biLM is
    unchanged, the mixes moved."""
    bilm_before = {name: value.detach().clone() for name, value in bilm_parameters(model).items()}
    mixes_before = model.mix_layer_weights()
    trainer = Trainer(
        model=model, args=arguments, train_dataset=dataset, eval_dataset=dataset if eval_dataset is None else eval_dataset,
        data_collator=data_collator,
    )
    before = trainer.evaluate()["eval_loss"]
    trainer.train()
    after = trainer.evaluate()["eval_loss"]
    assert after < 0.7 * before, (before, after)
    optimized = {id(parameter) for group in trainer.optimizer.param_groups for parameter in group["params"]}
    assert not optimized & {id(parameter) for parameter in bilm_parameters(model).values()}
    assert {id(model.task_encoder.scalar_mixes["input"].scalar_weights)} <= optimized
    for name, value in bilm_parameters(model).items():
        assert torch.equal(value, bilm_before[name]), name
    assert model.mix_layer_weights() != mixes_before


def test_trainer_trains_a_pos_tagger_on_conllu(tmp_path):
    write_conllu(tmp_path / "toy.conllu")
    sentences = load_conllu_sentences(tmp_path / "toy.conllu", cache_dir=tmp_path / "cache")
    tag_names = sorted({tag for tags in sentences["upos"] for tag in tags})
    label2id = {tag: index for index, tag in enumerate(tag_names)}
    tokenizer = ELMoTokenizer()

    def tokenize_and_label(batch):
        encoding = tokenizer(batch["words"], is_split_into_words=True)
        encoding["labels"] = [[label2id[tag] for tag in tags] for tags in batch["upos"]]
        return encoding

    dataset = sentences.map(tokenize_and_label, batched=True)  # keeps sent_id / words / upos: Trainer drops them
    # The shipped (trained) test ELMo: a random biLM barely tells words apart.
    model = ELMoForTokenClassification.from_pretrained(
        DEFAULT_MODEL_DIR,
        num_labels=len(tag_names),
        id2label=dict(enumerate(tag_names)),
        label2id=label2id,
        task_encoder_hidden_size=16,
        task_mix_dropout=0.1,
        task_dropout=0.1,
    )
    train_only_the_head(model, dataset, DataCollatorForTokenClassification(tokenizer), trainer_arguments(tmp_path))
    assert not model.elmo.training  # Trainer's model.train() left the frozen biLM in eval mode


def test_trainer_trains_a_sentence_classifier(tmp_path):
    from datasets import Dataset

    texts = ["the film was great .", "a great and fine film .", "the film was bad .", "a bad and dull film ."] * 2
    tokenizer = ELMoTokenizer(word_splitter="whitespace")
    dataset = Dataset.from_dict({"text": texts, "label": [1, 1, 0, 0] * 2})
    dataset = dataset.map(lambda batch: tokenizer(batch["text"]), batched=True)
    model = ELMoForSequenceClassification.from_pretrained(
        DEFAULT_MODEL_DIR, num_labels=2, task_encoder_hidden_size=16, task_mix_dropout=0.1, task_dropout=0.1
    )
    arguments = trainer_arguments(tmp_path, per_device_train_batch_size=4, max_steps=20)
    train_only_the_head(model, dataset, DataCollatorWithPadding(tokenizer), arguments)


# ----------------------------------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("task_use_elmo", 1, "task_use_elmo must be a bool"),
        ("task_freeze_elmo", "yes", "task_freeze_elmo must be a bool"),
        ("task_input_embeddings", "glove", "task_input_embeddings must be one of"),
        ("task_mix_positions", [], "task_mix_positions must be a non-empty list"),
        ("task_mix_positions", ["input", "input"], "task_mix_positions must be a non-empty list of distinct"),
        ("task_mix_positions", ["middle"], "task_mix_positions"),
        ("task_mix_dropout", 1.0, "task_mix_dropout must be a number in [0, 1)"),
        ("task_dropout", -0.1, "task_dropout must be a number in [0, 1)"),
        ("task_mix_l2", -1.0, "task_mix_l2 must be a number >= 0"),
        ("task_mix_l2", float("nan"), "task_mix_l2 must be a number >= 0"),
        ("task_encoder_layers", -1, "task_encoder_layers must be an int >= 0"),
        ("task_encoder_hidden_size", 0, "task_encoder_hidden_size must be an int >= 1"),
        ("task_pooling", "sum", "task_pooling must be one of"),
        ("task_mix_layer_norm", None, "task_mix_layer_norm must be a bool"),
    ],
)
def test_config_rejects_bad_task_fields(field, value, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace(")", r"\)").replace("(", r"\(")):
        ELMoConfig(**{field: value})


def test_config_rejects_task_models_without_input():
    with pytest.raises(ValueError, match="task_use_elmo=False with task_input_embeddings='none'"):
        ELMoConfig(task_use_elmo=False, task_input_embeddings="none")
    with pytest.raises(ValueError, match="'output'.*needs task_encoder_layers >= 1"):
        ELMoConfig(task_mix_positions=["input", "output"], task_encoder_layers=0)
    with pytest.raises(ValueError, match="no 'input' mix and task_input_embeddings='none'"):
        ELMoConfig(task_mix_positions=["output"], task_input_embeddings="none")
    assert ELMoConfig(task_mix_positions="output").task_mix_positions == ["output"]


@pytest.mark.parametrize(
    "make_labels, error, message",
    [
        (lambda labels: labels[:, :-1], ValueError, r"labels must have shape \(batch, words\)"),
        (lambda labels: labels.float(), ValueError, "labels must hold integer class ids"),
        (lambda labels: labels.masked_fill(labels == 1, NUM_LABELS), ValueError, r"class ids in \[0, num_labels=4\) or -100"),
        (lambda labels: labels.masked_fill(labels == 1, -1), ValueError, r"class ids in \[0, num_labels=4\) or -100"),
        (lambda labels: labels.masked_fill(labels == -100, 0), ValueError, "labels must be -100 at padding positions"),
        (lambda labels: labels.tolist(), TypeError, "labels must be a torch.LongTensor"),
    ],
)
def test_token_classification_label_errors(make_labels, error, message):
    model = tiny_head(ELMoForTokenClassification).eval()
    inputs = encode(SENTENCES)
    labels = token_labels(inputs)
    labels[0, 0] = 1
    with pytest.raises(error, match=message):
        model(**inputs, labels=make_labels(labels))


@pytest.mark.parametrize(
    "num_labels, labels, message",
    [
        (NUM_LABELS, torch.tensor([0, 1, 2]), r"single-label classification must have shape \(batch,\) = \(4,\)"),
        (NUM_LABELS, torch.tensor([0, 1, 2, 4]), r"class ids in \[0, num_labels=4\)"),
        (NUM_LABELS, torch.tensor([[0], [1], [2], [3]]), r"must have shape \(batch,\)"),
        (NUM_LABELS, torch.tensor([0.0, 1.0, 0.0, 1.0]), r"multi-label classification must have shape \(batch, num_labels\)"),
        (NUM_LABELS, torch.full((4, NUM_LABELS), 2.0), r"multi-label classification must be in \[0, 1\]"),
        (1, torch.zeros(4, 2), r"regression \(num_labels=1\) must have shape"),
        (NUM_LABELS, torch.tensor([True, False, True, False]), "integer class ids or float targets"),
    ],
)
def test_sequence_classification_label_errors(num_labels, labels, message):
    model = tiny_head(ELMoForSequenceClassification, num_labels=num_labels).eval()
    with pytest.raises(ValueError, match=message):
        model(**encode(SENTENCES), labels=labels)


def test_problem_type_mismatches_are_errors():
    model = tiny_head(ELMoForSequenceClassification, problem_type="single_label_classification").eval()
    with pytest.raises(ValueError, match="single-label classification must be integer class ids"):
        model(**encode(SENTENCES), labels=torch.zeros(4))
    token_model = tiny_head(ELMoForTokenClassification, problem_type="regression").eval()
    with pytest.raises(ValueError, match="problem_type None or 'single_label_classification'"):
        token_model(**encode(SENTENCES), labels=token_labels(encode(SENTENCES)))


def test_input_errors_name_the_input():
    model = tiny_head(ELMoForTokenClassification).eval()
    inputs = encode(SENTENCES)
    with pytest.raises(ValueError, match=r"input_ids must have shape \(batch, words, 50\)"):
        model(input_ids=inputs["input_ids"][..., :10])
    with pytest.raises(ValueError, match=r"attention_mask must have shape \(batch, words\)"):
        model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"][:, :2])
    baseline = tiny_head(ELMoForTokenClassification, task_use_elmo=False).eval()
    with pytest.raises(ValueError, match="attention_mask and input_ids disagree"):
        baseline(input_ids=inputs["input_ids"], attention_mask=torch.ones_like(inputs["attention_mask"]))
