"""`elmo-hf probe`: the layer probes of a model on a tagged corpus, and a trained head's mixes."""

import json

import pytest

from elmo_hf import DEFAULT_MODEL_DIR, ELMoForTokenClassification
from elmo_hf_cli import main

from ..conftest import REPOSITORY_ROOT

EWT_DEV = REPOSITORY_ROOT / "data" / "corpora" / "ud-english-ewt" / "en_ewt-ud-dev.conllu"
EWT_TEST = REPOSITORY_ROOT / "data" / "corpora" / "ud-english-ewt" / "en_ewt-ud-test.conllu"


def test_probe_on_the_repositorys_treebank_writes_a_report_and_pictures(tmp_path, capsys):
    output = tmp_path / "probe"
    code = main(["probe", str(DEFAULT_MODEL_DIR), "--corpus", str(EWT_DEV), "--test", str(EWT_TEST), "--limit", "40",
                 "--epochs", "2", "--output", str(output), "--no-progress"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "layer 0 (token)" in printed and "layer 2 (biLSTM 2)" in printed and "scalar mix (softmax(w) =" in printed
    report = json.loads((output / "probe_report.json").read_text())
    assert report["tag_column"] == "upos" and report["train"] == str(EWT_DEV) and report["test"] == str(EWT_TEST)
    assert len(report["layers"]) == 3 and 0 < report["mix"]["accuracy"] <= 1
    assert "PROPN" in report["tags"] and report["test_words"] > 300
    assert (output / "probe.png").stat().st_size > 1000 and b"<svg" in (output / "probe.svg").read_bytes()[:1000]
    # Again without --overwrite: refused, the report kept; with it: replaced by the held-out split's report.
    assert main(["probe", str(DEFAULT_MODEL_DIR), "--corpus", str(EWT_DEV), "--limit", "40", "--output", str(output), "--no-progress"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["probe", str(DEFAULT_MODEL_DIR), "--corpus", str(EWT_DEV), "--limit", "40", "--epochs", "1", "--column", "deprel",
                 "--output", str(output), "--overwrite", "--no-progress"]) == 0
    report = json.loads((output / "probe_report.json").read_text())
    assert report["tag_column"] == "deprel" and "held-out part" in report["test"] and "nsubj" in report["tags"]


def test_probe_reads_rows_of_words_and_tags(tmp_path, capsys):
    rows = tmp_path / "tagged.jsonl"
    sentences = [("The cat sat .", "DET NOUN VERB PUNCT"), ("A dog ran !", "DET NOUN VERB PUNCT")] * 10
    rows.write_text("".join(json.dumps({"words": words.split(), "tags": tags}) + "\n" for words, tags in sentences))
    code = main(["probe", str(DEFAULT_MODEL_DIR), "--corpus", str(rows), "--column", "tags", "--epochs", "3", "--no-progress"])
    assert code == 0 and "baseline: most frequent tag per word" in capsys.readouterr().out


@pytest.mark.parametrize(
    "arguments, message",
    [
        ([], "give --corpus FILE"),
        (["--mixes"], "--mixes draws a trained head's mixes: give --output DIR and no --corpus"),
        (["--corpus", str(EWT_DEV), "--column", "upostag", "--limit", "5"], "CoNLL-U has no column 'upostag'"),
        (["--corpus", str(EWT_DEV), "--limit", "1"], "1 sentence(s) cannot be split"),
        (["--corpus", str(EWT_DEV), "--epochs", "0", "--limit", "5"], "epochs must be"),
    ],
)
def test_probe_refusals_name_the_problem(arguments, message, capsys):
    assert main(["probe", str(DEFAULT_MODEL_DIR), *arguments, "--no-progress"]) == 2
    assert message in capsys.readouterr().err


def test_a_trained_heads_mixes_are_drawn_and_a_bilm_is_refused(tmp_path, capsys):
    head_dir = tmp_path / "tagger"
    head = ELMoForTokenClassification.from_pretrained(DEFAULT_MODEL_DIR, num_labels=3, task_mix_positions=["input", "output"])
    head.save_pretrained(head_dir)
    assert main(["probe", str(head_dir), "--mixes", "--output", str(tmp_path / "mixes")]) == 0
    printed = capsys.readouterr().out
    assert "input mix: softmax(w) = 0.333, 0.333, 0.333; gamma = 1.000" in printed and "output mix" in printed
    saved = json.loads((tmp_path / "mixes" / "mix_layer_weights.json").read_text())
    assert set(saved["mixes"]) == {"input", "output"}
    assert (tmp_path / "mixes" / "mix_layer_weights.png").is_file() and (tmp_path / "mixes" / "mix_layer_weights.svg").is_file()
    assert main(["probe", str(DEFAULT_MODEL_DIR), "--mixes", "--output", str(tmp_path / "none")]) == 2
    assert "is not a trained task head (ELMoForPreTraining)" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()
