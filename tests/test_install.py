"""A non-editable install works from anywhere: a fresh virtual environment, `pip install <checkout>`, and then, from
an unrelated directory, `elmo-hf convert --verify` on the original fixture, the export back (bit-exact) and
`elmo-hf embed` with the model shipped in the package. The install holds exactly two top-level packages, `elmo_hf`
and `elmo_hf_cli` (the repository's `conversion/` scripts, `tests/`, `benchmarks/` and `scripts/` are not shipped).

The environment sees the packages of the interpreter that runs the tests (a ``.pth`` file lists its site-packages:
torch and transformers are not installed again, nothing is downloaded), whether that is the system Python, as CI
uses, or a virtual environment, as a user's is (``--system-site-packages`` would show the *base* interpreter's
packages instead, which a venv's tests do not run with). Its own elmo-hf is built from a copy of the working tree;
the test checks that the installed copy, not the checkout, is what runs.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sysconfig
import venv
from pathlib import Path

import pytest

from .conftest import REPOSITORY_ROOT
from .fresh_clone import working_tree_files
from .helpers import assert_hdf5_files_identical


def see_the_running_interpreters_packages(environment: Path) -> None:
    """Append this interpreter's site-packages folders to the environment's path (after its own site-packages) with a
    ``.pth`` file of plain paths: their own ``.pth`` files (an editable elmo-hf's finder) are not run there."""
    folders = dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    own = subprocess.run(
        [environment / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    (Path(own) / "running-interpreter.pth").write_text("".join(f"{folder}\n" for folder in folders if Path(folder).is_dir()))


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The bin/ directory of a virtual environment with elmo-hf installed (not editable) from a copy of the tree."""
    root = tmp_path_factory.mktemp("install")
    source = root / "source"
    for name in working_tree_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPOSITORY_ROOT / name, source / name)
    environment = root / "venv"
    venv.EnvBuilder(with_pip=True).create(environment)  # pip from the bundled wheel
    see_the_running_interpreters_packages(environment)
    # The bundled setuptools may predate the project's build requirement; the running interpreter's (>= 68) is used.
    subprocess.run([environment / "bin" / "python", "-m", "pip", "uninstall", "--quiet", "--yes", "setuptools"], check=True)
    result = subprocess.run(
        # No index and no build isolation: nothing is downloaded (setuptools comes from the running interpreter).
        [environment / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--no-build-isolation", source],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return environment / "bin"


def run(command: list, cwd: Path) -> subprocess.CompletedProcess:
    """``command`` in ``cwd`` without ``PYTHONPATH`` (which may name the checkout: the installed copy must run)."""
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    result = subprocess.run([str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=600, env=environment)
    assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


def test_the_installed_package_converts_verifies_exports_and_embeds_from_anywhere(installed, allennlp_fixture_dir, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    located = run([installed / "python", "-c", "import elmo_hf, elmo_hf_cli; print(elmo_hf.__file__, elmo_hf_cli.__file__)"], elsewhere)
    assert str(REPOSITORY_ROOT) not in located.stdout and located.stdout.count(str(installed.parent)) == 2, located.stdout

    converted = run(
        [installed / "elmo-hf", "convert", "--options", allennlp_fixture_dir / "options.json",
         "--weights", allennlp_fixture_dir / "lm_weights.hdf5", "--output", "elmo-fixture", "--verify", allennlp_fixture_dir],
        elsewhere,
    )
    assert converted.stdout.count(" ok\n") == 11 and "FAIL" not in converted.stdout  # 10 batches + the token layer
    assert (elsewhere / "elmo-fixture" / "README.md").is_file()  # the card's template is installed with the converter

    # The export and the embed in one interpreter of the environment (each start costs seconds): the same `main` the
    # console script, run above, calls.
    (elsewhere / "corpus.txt").write_text("The installed package embeds .\n")
    commands = [
        ["export", "--model", "elmo-fixture", "--output", "exported"],
        ["embed", "corpus.txt", "--output", "vectors", "--no-progress"],
    ]
    script = f"from elmo_hf_cli import main\nfor command in {commands!r}:\n    assert main(command) == 0, command"
    exported_and_embedded = run([installed / "python", "-c", script], elsewhere)
    assert_hdf5_files_identical(allennlp_fixture_dir / "lm_weights.hdf5", elsewhere / "exported" / "weights.hdf5")
    assert "embedded 1 sentence (5 words)" in exported_and_embedded.stdout  # with the default model shipped as package data


def installed_top_level_names(installed: Path) -> set[str]:
    """The first path component of every file the installed distribution's RECORD lists (``files``), less its own
    metadata directory and the console script (which lives outside site-packages, ``../../../bin/elmo-hf``)."""
    script = "import importlib.metadata as m; print('\\n'.join(file.parts[0] for file in m.distribution('elmo-hf').files))"
    listed = run([installed / "python", "-c", script], installed).stdout.split()
    return {name for name in listed if not name.endswith(".dist-info") and name != ".."}


def test_the_install_ships_exactly_the_packages_elmo_hf_and_elmo_hf_cli(installed):
    assert installed_top_level_names(installed) == {"elmo_hf", "elmo_hf_cli"}
    script = (
        "import importlib.metadata as m, elmo_hf, elmo_hf.conversion.model_cards as cards\n"
        "print(m.version('elmo-hf'), elmo_hf.__version__, cards.TEMPLATE_FILE.is_file())"
    )
    installed_version, package_version, template_installed = run([installed / "python", "-c", script], installed).stdout.split()
    assert installed_version == package_version  # pyproject.toml takes the version from elmo_hf.__version__
    assert template_installed == "True"
