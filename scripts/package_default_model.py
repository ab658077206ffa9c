"""Package a pre-training run (`elmo-hf pretrain` output) as the default model shipped inside the package,
`elmo_hf/default_model/`: the biLM and its LM softmax with weights stored as float16 (half the size; `config.json`
says float32, so `from_pretrained` loads float32), the tokenizer, the word vocabulary, the run's report, and a model
card stating the corpus, its licenses and the perplexities measured on the shipped (float16-rounded) weights.

    python scripts/package_default_model.py --run models/elmo-small-demo [--output elmo_hf/default_model]

How the shipped model was made is in README.md ("The shipped default model") and the card.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch

from elmo_hf import ELMoForPreTraining
from elmo_hf.corpus.sentences import load_conllu_sentences
from elmo_hf.scoring.lm_scoring import ELMoLanguageModelScorer

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPOSITORY_ROOT / "elmo_hf" / "default_model"
COPIED_FILES = ("tokenizer_config.json", "vocab.txt", "vocab_counts.tsv", "pretraining_report.json", "pretraining_options.json")


def held_out_perplexities(model_dir: Path, sentences: list[list[str]]) -> dict:
    """Per-sentence exact perplexities (n + 1 predictions per direction, each sentence from the initial state) of
    ``sentences`` (the UD English-EWT test sentences, which the demo model never saw)."""
    scorer = ELMoLanguageModelScorer.from_pretrained(model_dir)
    corpus = scorer.score(sentences, batch_size=64)
    return {
        "sentences": len(sentences),
        "forward_perplexity": round(corpus.forward_perplexity, 2),
        "backward_perplexity": round(corpus.backward_perplexity, 2),
        "perplexity": round(corpus.perplexity, 2),
        "unknown_word_rate": round(corpus.num_unknown_words / sum(len(score.words) for score in corpus.sentences), 4),
    }


def write_json(path: Path, value: dict) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def package(run_dir: Path, output_dir: Path, test_file: Path, learning_rate: float | None = None) -> dict:
    model = ELMoForPreTraining.from_pretrained(run_dir).eval()
    if output_dir.exists():
        shutil.rmtree(output_dir)
    output_dir.mkdir(parents=True)
    model.to(torch.float16).save_pretrained(output_dir)
    # Inside the package the installed classes are used: no copies of the module files, no remote-code entries.
    for module_file in output_dir.glob("*.py"):
        module_file.unlink()
    config = json.loads((output_dir / "config.json").read_text(encoding="utf-8"))
    config["dtype"] = "float32"  # stored as float16, computed in float32
    config.pop("auto_map", None)
    write_json(output_dir / "config.json", config)
    for name in COPIED_FILES:
        if (run_dir / name).exists():
            shutil.copy2(run_dir / name, output_dir / name)
    tokenizer_config = json.loads((output_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    tokenizer_config.pop("auto_map", None)
    write_json(output_dir / "tokenizer_config.json", tokenizer_config)
    report = json.loads((run_dir / "pretraining_report.json").read_text(encoding="utf-8"))
    if report.get("learning_rate") is None:
        if learning_rate is None:
            raise SystemExit("error: the run's report does not record its learning rate (older elmo-hf): pass --learning-rate")
        report["learning_rate"] = learning_rate
    write_json(output_dir / "pretraining_report.json", report)
    test_sentences = [list(words) for words in load_conllu_sentences([test_file])["words"]]
    measured = {
        "trained_float32": held_out_perplexities(run_dir, test_sentences),
        "shipped_float16": held_out_perplexities(output_dir, test_sentences),
    }
    write_json(output_dir / "ewt_test_perplexity.json", measured)
    (output_dir / "README.md").write_text(model_card(report, measured, model), encoding="utf-8")
    return measured


def model_card(report: dict, measured: dict, model: ELMoForPreTraining) -> str:
    config = model.config
    held_out = report.get("held_out", {})
    unigram = report.get("held_out_unigram", {})
    shipped = measured["shipped_float16"]
    num_bilm = sum(p.numel() for p in model.elmo.parameters())
    num_softmax = sum(p.numel() for p in model.softmax.parameters())
    return f"""---
language: en
library_name: transformers
license: cc-by-sa-4.0
pipeline_tag: feature-extraction
tags:
- elmo
- elmo-hf
- bilm
- demo-model
datasets:
- universal_dependencies
---

# elmo-hf small demo ELMo (shipped default)

**This is a small demonstration model, not a quality model.** It was pre-trained by `elmo-hf pretrain` on a CPU in
about {round(report.get("train_runtime_seconds", 0) / 60)} minutes, on about a quarter of a million words. It exists so that
`elmo-hf embed`, the LM-scoring API and the task heads work offline out of the box. For real work use the converted
original ELMo weights (`python -m conversion.convert_allennlp_to_hf`, see the elmo-hf README): they were trained on
the 1B Word Benchmark (800M words) and are far better.

## What it is

ELMo (Peters et al. 2018): character CNN ({len(config.char_cnn_filters)} filter widths, {config.char_cnn_output_dim}
filters) -> {config.num_highway_layers} highway layer -> projection to {config.projection_dim}, then a
{config.num_lstm_layers}-layer bidirectional LSTM language model ({config.lstm_cell_size}-dim cells projected to
{config.projection_dim}, clipping {config.cell_clip}, skip connections). {num_bilm / 1e6:.2f}M biLM parameters plus
the {config.word_vocab_size}-word LM softmax ({num_softmax / 1e6:.2f}M), stored as float16 (loaded as float32).
Every word gets {config.num_representation_layers} representations of {config.output_dim} dimensions.

```python
from transformers import AutoModel, AutoModelForPreTraining
from elmo_hf import ELMoTokenizer
from elmo_hf import DEFAULT_MODEL_DIR
biLM = AutoModel.from_pretrained(DEFAULT_MODEL_DIR)                  # ELMoModel (the softmax is dropped)
lm = AutoModelForPreTraining.from_pretrained(DEFAULT_MODEL_DIR)      # ELMoForPreTraining (with the softmax)
```

## Training data and licenses

- `tinyshakespeare.txt` (karpathy/char-rnn; Shakespeare's plays, public domain), one sentence per line;
- the **dev** split of Universal Dependencies English Web Treebank (CC BY-SA 4.0), its sentences only.

Because of the EWT text, this model is distributed under **CC BY-SA 4.0**. The EWT **test** split was never used for
pre-training: it is the held-out set below and the test set of the POS-tagging demonstration.

Vocabulary: {config.word_vocab_size} words (`vocab.txt`, with counts in `vocab_counts.tsv`), min count
{report.get("options", {}).get("min_count", "?")}, from the training sentences.

## Training

`elmo-hf pretrain` with the `small` preset: bilm-tf's regime (windows of {report.get("options", {}).get("window_size", "?")}
tokens, {report.get("options", {}).get("batch_size", "?")} rows, LSTM state carried across batches), full softmax,
optimizer {report.get("options", {}).get("optimizer", "?")} (peak learning rate {report["learning_rate"]}, {report.get("options", {}).get("lr_scheduler", "?")} decay),
{report.get("steps", "?")} steps, {report.get("tokens_seen", "?")} training tokens. The full options and curves are
in `pretraining_report.json` and `pretraining_options.json`.

## Perplexity

| data | forward | backward | unigram baseline (forward / backward) |
|---|---|---|---|
| held-out {report.get("options", {}).get("held_out_fraction", "")} of the training text, windowed stream (float32) | {held_out.get("forward_perplexity", float("nan")):.1f} | {held_out.get("backward_perplexity", float("nan")):.1f} | {unigram.get("forward_perplexity", float("nan")):.1f} / {unigram.get("backward_perplexity", float("nan")):.1f} |
| UD EWT test, {shipped["sentences"]} sentences, each from the initial state (shipped float16 weights) | {shipped["forward_perplexity"]:.1f} | {shipped["backward_perplexity"]:.1f} | |

EWT test: {100 * shipped["unknown_word_rate"]:.1f}% of its words are `<UNK>` for this vocabulary, which makes these
perplexities optimistic. The float32 weights gave {measured["trained_float32"]["forward_perplexity"]:.2f} /
{measured["trained_float32"]["backward_perplexity"]:.2f} there (`ewt_test_perplexity.json`).

## Rebuild

```bash
elmo-hf pretrain --corpus data/corpora/tinyshakespeare.txt data/corpora/ud-english-ewt/en_ewt-ud-dev.conllu \\
    --output models/elmo-small-demo --config small --max-steps {report.get("options", {}).get("max_steps", "N")} \\
    --learning-rate {report["learning_rate"]} --threads 1 --seed 0
python scripts/package_default_model.py --run models/elmo-small-demo
```
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="an elmo-hf pretrain output directory")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--test-file", type=Path, default=REPOSITORY_ROOT / "data" / "corpora" / "ud-english-ewt" / "en_ewt-ud-test.conllu",
                        help="held-out CoNLL-U text for the perplexity in the card")
    parser.add_argument("--learning-rate", type=float, help="the run's peak learning rate, if its report lacks it")
    args = parser.parse_args(argv)
    measured = package(args.run, args.output, args.test_file, args.learning_rate)
    print(json.dumps(measured, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
