"""POS tagging on UD English-EWT with a frozen ELMo: train on the dev split, report on the test split (the train
split is not available offline). Compares the task model with the character CNN alone (the biLM's context-independent
token layer, ``task_use_elmo=False``) against the same model with the learned ELMo mix added (``[x; ELMo]``), and
plots the mix's learned layer weights softmax(w).

    python scripts/demo_pos_tagging.py --model elmo_hf/default_model --output docs/results/demo [--epochs 8]

Writes OUTPUT/pos_tagging.json and OUTPUT/pos_layer_weights.png; prints the figures.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from transformers import DataCollatorForTokenClassification, Trainer, TrainingArguments

from elmo_hf import ELMoForTokenClassification, ELMoTokenizer
from elmo_hf.corpus.sentences import load_conllu_sentences
from elmo_hf.probing import plot_mix_weights

VARIANTS = {
    "char_cnn_only": {"task_use_elmo": False},
    "char_cnn_plus_elmo": {"task_use_elmo": True},
}


def encoded_split(path: Path, tokenizer: ELMoTokenizer, label2id: dict[str, int]):
    def encode(batch):
        encoding = tokenizer(batch["words"], is_split_into_words=True)
        encoding["labels"] = [[label2id[tag] for tag in tags] for tags in batch["upos"]]
        return encoding

    dataset = load_conllu_sentences([path])
    return dataset.map(encode, batched=True, remove_columns=dataset.column_names)


def token_accuracy(trainer: Trainer, dataset) -> float:
    prediction = trainer.predict(dataset)
    predicted = prediction.predictions.argmax(-1)
    labels = prediction.label_ids
    real = labels != -100
    return float((predicted[real] == labels[real]).mean())


def train_variant(name: str, model_dir: str, train_set, test_set, tokenizer, tags: list[str], args, output: Path) -> dict:
    torch.manual_seed(args.seed)
    model = ELMoForTokenClassification.from_pretrained(
        model_dir,
        num_labels=len(tags),
        id2label=dict(enumerate(tags)),
        label2id={tag: index for index, tag in enumerate(tags)},
        task_encoder_hidden_size=args.hidden_size,
        **VARIANTS[name],
    )
    arguments = TrainingArguments(
        output_dir=str(Path(tempfile.gettempdir()) / "elmo-hf-pos-demo" / name),  # nothing is saved there
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=64,
        num_train_epochs=args.epochs,
        learning_rate=args.learning_rate,
        lr_scheduler_type="linear",
        warmup_steps=30,
        logging_steps=50,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=args.seed,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model, args=arguments, train_dataset=train_set, data_collator=DataCollatorForTokenClassification(tokenizer)
    )
    started = time.perf_counter()
    trainer.train()
    result = {
        "test_accuracy": token_accuracy(trainer, test_set),
        "train_accuracy": token_accuracy(trainer, train_set),
        "train_seconds": round(time.perf_counter() - started, 1),
        "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }
    if model.config.task_use_elmo:
        result["mix_layer_weights"] = model.mix_layer_weights()
    print(f"{name}: test accuracy {result['test_accuracy']:.4f} (train {result['train_accuracy']:.4f}, {result['train_seconds']} s)")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(Path(__file__).resolve().parents[1] / "elmo_hf" / "default_model"))
    parser.add_argument("--ewt", type=Path, default=Path(__file__).resolve().parents[1] / "data" / "corpora" / "ud-english-ewt",
                        help="the folder of en_ewt-ud-dev.conllu (training) and en_ewt-ud-test.conllu (test)")
    parser.add_argument("--output", type=Path, default=Path("docs/results/demo"))
    parser.add_argument("--epochs", type=float, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, help="use only this many training sentences (smoke runs)")
    args = parser.parse_args(argv)

    corpus = args.ewt
    tokenizer = ELMoTokenizer.from_pretrained(args.model)
    tags = sorted({tag for tags in load_conllu_sentences([corpus / "en_ewt-ud-dev.conllu"])["upos"] for tag in tags})
    label2id = {tag: index for index, tag in enumerate(tags)}
    train_set = encoded_split(corpus / "en_ewt-ud-dev.conllu", tokenizer, label2id)
    test_set = encoded_split(corpus / "en_ewt-ud-test.conllu", tokenizer, label2id)
    if args.limit:
        train_set = train_set.select(range(min(args.limit, len(train_set))))
    args.output.mkdir(parents=True, exist_ok=True)

    results = {name: train_variant(name, args.model, train_set, test_set, tokenizer, tags, args, args.output) for name in VARIANTS}
    report = {
        "model": str(args.model),
        "train": "UD English-EWT dev", "test": "UD English-EWT test",
        "train_sentences": len(train_set), "test_sentences": len(test_set),
        "test_words": int(sum(len(labels) for labels in test_set["labels"])),
        "settings": {key: value for key, value in vars(args).items() if key not in ("ewt", "output", "model")},
        "results": results,
    }
    (args.output / "pos_tagging.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    plot_mix_weights(
        results["char_cnn_plus_elmo"]["mix_layer_weights"], args.output / "pos_layer_weights.png",
        title="POS tagging (UD EWT): learned ELMo layer weights",
    )
    print(f"wrote {args.output / 'pos_tagging.json'} and {args.output / 'pos_layer_weights.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
