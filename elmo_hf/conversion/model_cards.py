"""Model cards from one template (``model_card_template.md``, beside this file), and what is known about the released
ELMo files.

    python -m conversion.model_cards --options-dir tests/fixtures/pretrained-options --output model_cards

regenerates the cards of the four released models. The converter writes a card (``README.md``) into every directory
it produces, with the sha256 of its inputs, the exact command and the parity it measured.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from huggingface_hub import ModelCard, ModelCardData

from ..configuration_elmo import ELMoConfig
from ..modeling_elmo import ELMoModel
from ..storage.files import sha256_of_file
from .reference_outputs import ReferenceComparison
from .shared import ORIGINAL_OPTIONS_FILE_NAME, ConversionError

TEMPLATE_FILE = Path(__file__).resolve().parent / "model_card_template.md"  # packaged with the converter
RELEASE_URL = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/{name}/elmo_{name}_{kind}"
HUB_NAMESPACE = "elmo-hf"
FIXTURE_PARITY = (
    "On AllenNLP's test ELMo, whose outputs were computed by the original TensorFlow code, this converter's model "
    "matches the top layer to a max abs difference of 1.2e-6 (10 batches, LSTM state threaded as the original did) "
    "and the token layer to 9.5e-7."
)


@dataclass(frozen=True)
class ReleasedModel:
    key: str
    name: str  # as in the released file names: elmo_{name}_options.json / elmo_{name}_weights.hdf5
    title: str
    training_data: str
    datasets: tuple[str, ...]
    weights_sha256: str | None = None
    weights_size: int | None = None

    @property
    def options_file_name(self) -> str:
        return f"elmo_{self.name}_options.json"

    @property
    def weights_file_name(self) -> str:
        return f"elmo_{self.name}_weights.hdf5"

    @property
    def repo_id(self) -> str:
        return f"{HUB_NAMESPACE}/elmo-{self.key}"


LM1B = "the 1 Billion Word Benchmark (about 800M tokens of news text)"
RELEASED_MODELS = (
    ReleasedModel(
        "small",
        "2x1024_128_2048cnn_1xhighway",
        "ELMo small",
        LM1B,
        ("lm1b",),
        weights_sha256="747ba97abce8a5f446558369e10bb0f7931437a46867476fdd156f5d7f576229",
        weights_size=54_402_456,
    ),
    ReleasedModel("medium", "2x2048_256_2048cnn_1xhighway", "ELMo medium", LM1B, ("lm1b",)),
    ReleasedModel("original", "2x4096_512_2048cnn_2xhighway", "ELMo original", LM1B, ("lm1b",)),
    ReleasedModel(
        "original-5.5b",
        "2x4096_512_2048cnn_2xhighway_5.5B",
        "ELMo original (5.5B)",
        "5.5B tokens: Wikipedia (1.9B) and the WMT 2008-2012 monolingual news crawl (3.6B)",
        ("wikimedia/wikipedia",),
    ),
)


def released_model_for_file(weight_file: Path) -> ReleasedModel | None:
    return next((model for model in RELEASED_MODELS if model.weights_file_name == weight_file.name), None)


def check_known_hash(weight_file: Path, sha256: str) -> str:
    """A sentence on the input's sha256; raises ``ConversionError`` when a released file's known hash disagrees."""
    by_hash = next((model for model in RELEASED_MODELS if model.weights_sha256 == sha256), None)
    if by_hash is not None:
        return f"sha256 {sha256} matches the released {by_hash.weights_file_name}"
    release = released_model_for_file(weight_file)
    if release is not None and release.weights_sha256 is not None:
        raise ConversionError(
            f"{weight_file} is named like the released {release.title} weights but its sha256 is {sha256}, expected "
            f"{release.weights_sha256} ({release.weights_size:,} bytes; this file has {weight_file.stat().st_size:,}): "
            "a corrupt or partial download?"
        )
    return f"sha256 {sha256} (no known hash for this file to compare with)"


def count_parameters(config: ELMoConfig) -> int:
    with torch.device("meta"):
        return ELMoModel(config).num_parameters()


def render_model_card(
    config: ELMoConfig,
    num_parameters: int,
    repo_id: str,
    title: str,
    description: str,
    provenance: str,
    conversion_command: str,
    parity: str,
    datasets: tuple[str, ...] = (),
    language: str | None = "en",
    license: str = "apache-2.0",
    mix_description: str = "average of the layers (scalar mix, w = 0, gamma = 1)",
) -> str:
    """The card from the template; ``language=None`` leaves the language out (a converted model of unknown language),
    ``license`` is the Hub's licence identifier (``"other"`` when the card's text explains it), ``mix_description``
    says what scalar mix 0 is (a trained one, for a TF-Hub module). A converted model starts from the zero state."""
    card_data = ModelCardData(
        language=language, license=license, library_name="transformers", pipeline_tag="feature-extraction",
        tags=["elmo", "elmo-hf", "contextual-embeddings", "character-level", "bilm", "feature-extraction"],
        datasets=list(datasets) or None,
    )
    card = ModelCard.from_template(
        card_data, template_path=str(TEMPLATE_FILE), title=title, description=description, repo_id=repo_id,
        num_lstm_layers=config.num_lstm_layers, lstm_cell_size=config.lstm_cell_size, projection_dim=config.projection_dim,
        parameters=f"{num_parameters / 1e6:.1f}M", num_layers=config.num_representation_layers,
        output_dim=config.output_dim, provenance=provenance, conversion_command=conversion_command, parity=parity,
        initial_state="zeros, the original's cold start", mix_description=mix_description,
    )
    return str(card)


def released_model_card(release: ReleasedModel, options_file: Path) -> str:
    """The card of a released model, from its options file (``*.DERIVED.json``: rebuilt from the published table)."""
    config = ELMoConfig.from_options_dict(json.loads(options_file.read_text(encoding="utf-8")))
    hash_line = (
        f"sha256 `{release.weights_sha256}`, {release.weights_size:,} bytes" if release.weights_sha256
        else "sha256 not recorded here; the converter prints it"
    )
    provenance = "\n".join(
        [
            f"Trained by AllenNLP (Peters et al. 2018) on {release.training_data}; converted from the original files:",
            "",
            f"- options: [`{release.options_file_name}`]({RELEASE_URL.format(name=release.name, kind='options.json')})",
            f"- weights: [`{release.weights_file_name}`]({RELEASE_URL.format(name=release.name, kind='weights.hdf5')}) "
            f"({hash_line})",
            "",
            f"The original `options.json` is uploaded next to the weights as `{ORIGINAL_OPTIONS_FILE_NAME}`.",
        ]
        + ([
            "",
            "The architecture on this card was rebuilt from the published table of ELMo models (its parameter count "
            "matches); the released options file was not available when the card was generated.",
        ] if options_file.name.endswith(".DERIVED.json") else [])
    )
    sources = ["--options", release.options_file_name, "--weights", release.weights_file_name]
    command = conversion_command(sources, Path(f"elmo-{release.key}"), release.repo_id)
    return render_model_card(
        config, count_parameters(config), release.repo_id, release.title,
        f"The `{release.name}` ELMo released by AllenNLP, converted to Hugging Face format.", provenance, command,
        FIXTURE_PARITY + " Run the conversion with `--verify` on reference outputs of these weights to measure them.",
        release.datasets,
    )


def conversion_card(
    config: ELMoConfig,
    num_parameters: int,
    options_file: Path,
    weight_file: Path,
    repo_id: str,
    weights_hash_message: str,
    comparisons: Sequence[ReferenceComparison],
    verify_dir: Path | None,
    command: str,
    archive: Path | None = None,
) -> str:
    """The card of one conversion: its inputs and their sha256 (and the archive they came from), the command, and
    the parity measured (if any)."""
    release = released_model_for_file(weight_file)
    source = f" in `{archive.name}` (sha256 `{sha256_of_file(archive)}`)" if archive is not None else ""
    provenance = "\n".join(
        [
            f"Converted from the original ELMo files{f' released by AllenNLP ({release.title})' if release else ''}{source}:",
            "",
            f"- options: `{options_file.name}` (sha256 `{sha256_of_file(options_file)}`)",
            f"- weights: `{weight_file.name}`: {weights_hash_message}",
            "",
            f"The original options are kept next to the weights as `{ORIGINAL_OPTIONS_FILE_NAME}`.",
        ]
    )
    if comparisons:
        parity = f"Measured by this conversion against the reference outputs in `{verify_dir.name}`:\n\n" + "\n".join(
            f"- {comparison.name}: max abs difference {comparison.max_abs_difference:.2g}" for comparison in comparisons
        )
    else:
        parity = FIXTURE_PARITY + " This conversion was not run with `--verify`."
    return render_model_card(
        config, num_parameters, repo_id, release.title if release else f"ELMo ({repo_id})",
        f"An ELMo converted from the original `{weight_file.name}` to Hugging Face format.", provenance, command, parity,
        release.datasets if release else (),
    )


def conversion_command(
    sources: list[str], output_dir: Path, repo_id: str | None = None, verify_dir: Path | None = None
) -> str:
    """The command that made a conversion, for its card: ``sources`` are the arguments naming its inputs
    (``["--zip", NAME]``). File names only: the card is published, and local paths do not belong in it."""
    arguments = ["elmo-hf", "convert", *sources, "--output", output_dir.name]
    if verify_dir is not None:
        arguments += ["--verify", verify_dir.name]
    if repo_id:
        arguments += ["--push-to-hub", repo_id]
    return shlex.join(arguments)


def write_released_model_cards(options_dir: Path, output_dir: Path) -> list[Path]:
    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for release in RELEASED_MODELS:
        candidates = [options_dir / release.options_file_name, options_dir / release.options_file_name.replace(".json", ".DERIVED.json")]
        options_file = next((path for path in candidates if path.is_file()), None)
        if options_file is None:
            raise ConversionError(f"no options file for {release.title} in {options_dir} (looked for {[p.name for p in candidates]}).")
        path = output_dir / f"elmo-{release.key}.md"
        path.write_text(released_model_card(release, options_file), encoding="utf-8")
        written.append(path)
    return written


__all__ = [
    "RELEASED_MODELS", "check_known_hash", "conversion_card", "conversion_command", "render_model_card",
    "write_released_model_cards",
]
