"""Shared test fixtures.

Data from ``../shared`` (read-only, never copied into the repo) is found at ``$ELMO_HF_SHARED_DIR`` or at
``../shared`` beside the repository. When it is missing, tests that need it fail under CI (``CI=true``) and are
skipped elsewhere.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch
from elmo_hf import ELMoModel, ELMoTokenizer

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = Path(os.environ.get("ELMO_HF_SHARED_DIR", REPOSITORY_ROOT.parent / "shared"))


def shared_path(*parts: str) -> Path:
    """A path under the shared directory; fails under CI and skips elsewhere when it is missing."""
    path = SHARED_DIR.joinpath(*parts)
    if not path.exists():
        message = f"shared test data missing: {path} (set ELMO_HF_SHARED_DIR to the shared/ directory)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def installed_package(module: str) -> Path:
    """The folder of an installed package of the `test` extra (kiwipiepy, konlpy's data, ...), found without importing
    it; fails under CI and skips elsewhere when it is missing."""
    spec = importlib.util.find_spec(module)
    if spec is None:
        message = f"{module} is not installed (it is in the test extra: pip install -e '.[test]')"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(spec.origin).parent


@pytest.fixture(autouse=True)
def _torch_threads_as_the_run_started():
    """Every test starts with the run's torch thread count (2 on the CI machine, 1 under ``OMP_NUM_THREADS=1``): a
    script a test drives with ``--threads`` sets torch's count for the whole process."""
    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def allennlp_fixture_dir() -> Path:
    return shared_path("fixtures", "allennlp-elmo")


@pytest.fixture(scope="session")
def pretrained_options_dir() -> Path:
    return shared_path("fixtures", "pretrained-options")


@pytest.fixture(scope="session")
def converted_fixture_dir(allennlp_fixture_dir, tmp_path_factory) -> Path:
    """The AllenNLP fixture converted to a Hugging Face directory, once per session."""
    from elmo_hf.conversion.convert_allennlp_to_hf import convert_allennlp_to_hf

    output_dir = tmp_path_factory.mktemp("converted") / "elmo-fixture"
    convert_allennlp_to_hf(allennlp_fixture_dir / "options.json", allennlp_fixture_dir / "lm_weights.hdf5", output_dir)
    return output_dir


@pytest.fixture(scope="session")
def fixture_model(converted_fixture_dir) -> ELMoModel:
    return ELMoModel.from_pretrained(converted_fixture_dir).eval()


@pytest.fixture(scope="session")
def tokenizer() -> ELMoTokenizer:
    return ELMoTokenizer(word_splitter="whitespace")
