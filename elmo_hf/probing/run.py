"""``elmo-hf probe``: the layer probes of a model on a token-labelled corpus, and the pictures of a head's mixes.

``run_probe`` reads the corpora (``tagged_corpus``), loads the model, trains the probes (``layer_probe``) with a
progress bar and, given an output directory, writes ``probe_report.json`` (the report, the model, the corpora, the
options) with ``probe.png`` and ``probe.svg`` into it, all or nothing (``staged_output_directory``: the directory
appears complete or not at all, an existing one is replaced only with ``overwrite``). ``plot_head_mixes`` does the
same for a trained head's learned mixes (``mix_layer_weights.json``, ``mix_layer_weights.png`` and ``.svg``).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from ..storage.output_directory import OutputKind, staged_output_directory
from ..validation_elmo import check_number
from .layer_probe import ProbeInputError, ProbeOptions, ProbeReport, TaggedSentences, probe_layers
from .plots import plot_mix_weights, plot_probe_report
from .tagged_corpus import tagged_sentences

REPORT_NAME = "probe_report.json"
MIXES_NAME = "mix_layer_weights.json"
PROBE_OUTPUT = OutputKind(
    name="probe",
    description="an elmo-hf probe report",
    entries=(REPORT_NAME, "probe.png", "probe.svg", MIXES_NAME, "mix_layer_weights.png", "mix_layer_weights.svg"),
)


def held_out(sentences: TaggedSentences, fraction: float, seed: int) -> tuple[TaggedSentences, TaggedSentences]:
    """A seeded random ``fraction`` of the sentences as the test set, the rest for training (order kept in each)."""
    check_number("test fraction", fraction, 0.0, 1.0, minimum_inclusive=False, maximum_inclusive=False)
    count = len(sentences.words)
    chosen = set(random.Random(seed).sample(range(count), max(1, round(fraction * count)))) if count > 1 else set()
    if not chosen or len(chosen) == count:
        raise ProbeInputError(f"{sentences.name}: {count} sentence(s) cannot be split into training and test sentences")
    part = lambda keep: TaggedSentences(  # noqa: E731
        [words for index, words in enumerate(sentences.words) if (index in chosen) == keep],
        [tags for index, tags in enumerate(sentences.tags) if (index in chosen) == keep],
        f"{sentences.name} ({'held-out' if keep else 'training'} part)",
    )
    return part(False), part(True)


def _progress_bar(total_sentences: int, probes: int, enabled: bool):
    from tqdm.auto import tqdm

    bar = tqdm(total=total_sentences + probes, disable=not enabled, unit="step", desc="probing")

    def progress(stage: str, amount: int) -> None:
        bar.update(amount)
        bar.set_postfix_str("reading sentences" if stage == "read" else "training probes")

    return bar, progress


def run_probe(
    model_name: str, corpus: str | Path, *, test: str | Path | None = None, test_fraction: float = 0.2,
    tag_column: str = "upos", words_column: str = "words", input_format: str | None = None, limit: int | None = None,
    options: ProbeOptions | None = None, output: str | Path | None = None, overwrite: bool = False, progress: bool = True,
) -> ProbeReport:
    """Probe ``model_name`` (a directory or Hub id) on ``corpus`` (scored on ``test``, else on a seeded held-out
    ``test_fraction`` of it); see the module docstring. ``limit``: the first sentences of each corpus only."""
    from .. import ELMoModel, ELMoTokenizer

    options = options or ProbeOptions()
    options.check()
    read = dict(tag_column=tag_column, words_column=words_column, input_format=input_format, limit=limit)
    train = tagged_sentences(corpus, **read)
    if test is None:
        train, test_set = held_out(train, test_fraction, options.seed)
    else:
        test_set = tagged_sentences(test, **read)
    model = ELMoModel.from_pretrained(model_name).eval()
    tokenizer = ELMoTokenizer.from_pretrained(model_name)
    bar, update = _progress_bar(len(train.words) + len(test_set.words), model.config.num_representation_layers + 1, progress)
    with bar:
        report = probe_layers(model, tokenizer, train, test_set, options, progress=update)
    if output is not None:
        record = {"model": str(model_name), "train": train.name, "test": test_set.name, "tag_column": tag_column, **report.to_dict()}
        with staged_output_directory(output, PROBE_OUTPUT, overwrite=overwrite, inputs=[corpus, *([test] if test else [])]) as staging:
            (staging / REPORT_NAME).write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
            for suffix in (".png", ".svg"):
                plot_probe_report(report, staging / f"probe{suffix}", title=f"{Path(str(model_name)).name}: {tag_column} probes")
    return report


def plot_head_mixes(model_name: str, output: str | Path, overwrite: bool = False) -> dict[str, Any]:
    """The learned mixes of a trained head (``mix_layer_weights()``) drawn into ``output``; returns them."""
    from transformers import AutoConfig

    import elmo_hf

    config = AutoConfig.from_pretrained(model_name)
    classes = [getattr(elmo_hf, name, None) for name in config.architectures or []]
    head = next((cls for cls in classes if hasattr(cls, "mix_layer_weights")), None)
    if head is None:
        raise ProbeInputError(
            f"{model_name} is not a trained task head ({', '.join(config.architectures or ['no architectures'])}): "
            "only heads learn their own mixes; probe a biLM with --corpus instead"
        )
    mixes = head.from_pretrained(model_name).mix_layer_weights()
    with staged_output_directory(output, PROBE_OUTPUT, overwrite=overwrite) as staging:
        (staging / MIXES_NAME).write_text(json.dumps({"model": str(model_name), "mixes": mixes}, indent=2) + "\n", encoding="utf-8")
        for suffix in (".png", ".svg"):
            plot_mix_weights(mixes, staging / f"mix_layer_weights{suffix}", title=f"{Path(str(model_name)).name}: learned layer weights")
    return mixes


__all__ = ["PROBE_OUTPUT", "held_out", "plot_head_mixes", "run_probe"]
