"""Model cards: Hub metadata parses, key lines are there, committed cards are up to date with the template."""

import json

import pytest
from huggingface_hub import ModelCard

from elmo_hf.conversion import ConversionError
from elmo_hf.conversion.convert_allennlp_to_hf import convert_allennlp_to_hf
from elmo_hf.conversion.model_cards import RELEASED_MODELS, check_known_hash, write_released_model_cards
from elmo_hf.storage.files import sha256_of_file as sha256_of

from ..conftest import REPOSITORY_ROOT
from ..helpers import tiny_options, write_random_original_model

CARDS_DIR = REPOSITORY_ROOT / "model_cards"
SMALL_SHA256 = "747ba97abce8a5f446558369e10bb0f7931437a46867476fdd156f5d7f576229"


def assert_card_metadata(card: ModelCard) -> None:
    data = card.data
    assert data.license == "apache-2.0" and data.library_name == "transformers"
    assert data.pipeline_tag == "feature-extraction" and data.language == "en"
    assert "elmo" in data.tags
    for line in (
        "## Provenance",
        "elmo-hf convert --options",
        "## Parity with the original",
        'AutoModel.from_pretrained("',
        "trust_remote_code=True",
        "## State: deterministic by default",
        "lstm_state=",
        "@inproceedings{peters-etal-2018-deep",
    ):
        assert line in card.text, line


@pytest.mark.parametrize("release", RELEASED_MODELS, ids=lambda release: release.key)
def test_released_model_cards(release):
    card = ModelCard.load(CARDS_DIR / f"elmo-{release.key}.md")
    assert_card_metadata(card)
    assert release.weights_file_name in card.text and release.options_file_name in card.text
    assert f"https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/{release.name}/{release.weights_file_name}" in card.text
    assert "1.2e-6" in card.text  # the parity figure measured on the fixture
    assert card.data.datasets == list(release.datasets)
    if release.key == "small":
        assert SMALL_SHA256 in card.text and "54,402,456 bytes" in card.text and "13.6M parameters" in card.text
    if release.key.startswith("original"):
        assert "93.6M parameters" in card.text


def test_committed_cards_match_the_template(pretrained_options_dir, tmp_path):
    for path in write_released_model_cards(pretrained_options_dir, tmp_path):
        assert path.read_text() == (CARDS_DIR / path.name).read_text(), f"{path.name} is stale: run python -m conversion.model_cards"


def test_converted_directory_has_a_card_and_the_original_options(converted_fixture_dir, allennlp_fixture_dir):
    card = ModelCard.load(converted_fixture_dir / "README.md")
    assert_card_metadata(card)
    assert sha256_of(allennlp_fixture_dir / "lm_weights.hdf5") in card.text
    original = json.loads((allennlp_fixture_dir / "options.json").read_text())
    assert json.loads((converted_fixture_dir / "original_options.json").read_text()) == original
    # The card is published: it names the input files, never the local paths they were read from.
    assert str(allennlp_fixture_dir) not in card.text and str(converted_fixture_dir.parent) not in card.text
    assert "elmo-hf convert --options options.json --weights lm_weights.hdf5 --output elmo-fixture" in card.text


def test_card_reports_the_parity_measured_by_verify(allennlp_fixture_dir, tmp_path):
    report = convert_allennlp_to_hf(
        allennlp_fixture_dir / "options.json", allennlp_fixture_dir / "lm_weights.hdf5", tmp_path / "out", verify_dir=allennlp_fixture_dir
    )
    text = (tmp_path / "out" / "README.md").read_text()
    assert "Measured by this conversion against the reference outputs in `allennlp-elmo`" in text
    assert text.count("- top layer, batch") == 10 and "- token layer: max abs difference" in text
    assert all(f"{comparison.max_abs_difference:.2g}" in text for comparison in report.comparisons)


def test_known_hashes_are_checked(tmp_path):
    options_file, weight_file = write_random_original_model(tiny_options(), tmp_path / "original")
    assert check_known_hash(weight_file, SMALL_SHA256).endswith("matches the released elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5")
    assert "no known hash" in check_known_hash(weight_file, sha256_of(weight_file))
    # a file named like the released small model whose content differs: refused before anything is written
    misnamed = weight_file.rename(tmp_path / "original" / "elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5")
    with pytest.raises(ConversionError, match=rf"named like the released ELMo small weights but its sha256 is [0-9a-f]{{64}}, expected {SMALL_SHA256} \(54,402,456 bytes"):
        convert_allennlp_to_hf(options_file, misnamed, tmp_path / "out")
    assert not (tmp_path / "out").exists()
