"""Every Python and shell block of README.md and docs/guide/*.md runs as pasted from the clone's root: one test per
Markdown file alone (an import path, a flag or a default that changes breaks the test that names the file), and one
of them all in the README's reading order in one folder, as a reader working through them (an output name that two
sections share, or a file one section overwrites under another's feet, breaks it). How blocks run and the directives
that adapt them (visible above each block in the Markdown): `tests/doc_runner.py`; design notes:
docs/design/testing.md."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .doc_blocks import CodeBlock
from .doc_runner import (
    INTERPRETER_NAMES, REPOSITORY_ROOT, DirectiveError, DocsServer, plan_block, plan_markdown, prepare_workdir,
    write_interpreter_shims,
)

README = REPOSITORY_ROOT / "README.md"
GUIDES = sorted((REPOSITORY_ROOT / "docs" / "guide").glob("*.md"))
MARKDOWN_FILES = [README, *GUIDES]
OUTPUT_TAIL = 3000


def documentation_env(root: Path) -> dict[str, str]:
    """The environment of every block: offline (the Hub, datasets, and any HTTP through an unusable proxy; pip finds
    no index), one thread, caches inside the test's temporary directory."""
    env = {name: value for name, value in os.environ.items() if not name.startswith(("HF_", "PIP_"))}
    unreachable = "http://127.0.0.1:9"
    env.update(
        HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(root / "hf-home"),
        OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", MPLBACKEND="Agg",
        HTTP_PROXY=unreachable, HTTPS_PROXY=unreachable, http_proxy=unreachable, https_proxy=unreachable,
        NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost", PIP_NO_INDEX="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPOSITORY_ROOT), env.get("PYTHONPATH", "")])),
    )
    return env


@pytest.fixture(scope="session")
def docs_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("docs-server")
    server = DocsServer(root, documentation_env(root))
    yield server
    server.close()


def reading_order() -> list[Path]:
    """README.md, then each guide in the order the README first links to it."""
    linked = re.findall(r"\]\((docs/guide/[\w-]+\.md)\)", README.read_text(encoding="utf-8"))
    return [README, *(REPOSITORY_ROOT / name for name in dict.fromkeys(linked))]


def run_markdown(server: DocsServer, markdowns: list[Path], tmp_path: Path):
    """Run the blocks of ``markdowns``, in order, in one new working directory: exit status, report (one entry a
    block), driver output."""
    workdir = prepare_workdir(tmp_path / "work")
    report, output = tmp_path / "report.jsonl", tmp_path / "driver.log"
    status = server.request("markdown", [str(workdir), str(report), *map(str, markdowns)], workdir, output,
                            timeout=900)
    entries = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
    return status, entries, output.read_text(errors="replace") if output.exists() else ""


def failure_message(entries: list[dict], driver_output: str) -> str:
    failed = [entry for entry in entries if entry["status"] == "failed"]
    if not failed:
        return f"the driver stopped before reporting every block; its output:\n{driver_output[-OUTPUT_TAIL:]}"
    entry = failed[0]
    output = Path(entry["log"]).read_text(errors="replace")
    return (f"{entry['where']}: the {entry['language']} block failed after {entry['seconds']} s\n"
            f"--- code (as run) ---\n{entry['code']}--- output (tail) ---\n{output[-OUTPUT_TAIL:]}")


@pytest.mark.parametrize("markdown", MARKDOWN_FILES, ids=lambda path: str(path.relative_to(REPOSITORY_ROOT)))
def test_every_block_runs(markdown, docs_server, tmp_path):
    check_every_block_ran(docs_server, [markdown], tmp_path)


def test_the_readme_and_the_guides_run_in_reading_order_in_one_folder(docs_server, tmp_path):
    order = reading_order()
    assert sorted(order[1:]) == GUIDES, "every guide is linked from the README (its reading order), once"
    check_every_block_ran(docs_server, order, tmp_path)


def check_every_block_ran(server: DocsServer, markdowns: list[Path], tmp_path: Path) -> None:
    try:
        plans = [plan for markdown in markdowns for plan in plan_markdown(markdown)]
    except DirectiveError as error:
        pytest.fail(str(error), pytrace=False)
    status, entries, driver_output = run_markdown(server, markdowns, tmp_path)
    if status != 0 or len(entries) != len(plans) or any(entry["status"] == "failed" for entry in entries):
        pytest.fail(failure_message(entries, driver_output), pytrace=False)
    ran = [entry for entry in entries if entry["status"] == "ok"]
    assert len(ran) == sum(plan.run for plan in plans)
    print(f"{len(ran)} blocks ran: " + ", ".join(f"{entry['where']} {entry['seconds']} s" for entry in ran))


# --- the directives and the driver themselves ------------------------------------------------------------------


def block(code: str, language: str = "bash", *markers: str) -> CodeBlock:
    return CodeBlock(Path("doc.md"), 7, language, code, tuple(markers))


def test_replace_directives_apply_in_order_and_must_match():
    plan = plan_block(block("elmo-hf pretrain --epochs 5 --config small\n", "bash",
                            'docs-test: replace "--epochs 5" "--max-steps 4"', "docs-test: replace small tiny"))
    assert plan.run and plan.code == "elmo-hf pretrain --max-steps 4 --config tiny\n"
    with pytest.raises(DirectiveError, match=r"doc.md:7: replace '--epochs 9': the block no longer contains it"):
        plan_block(block("elmo-hf pretrain --epochs 5\n", "bash", 'docs-test: replace "--epochs 9" "--max-steps 4"'))


def test_fixture_directives_and_shown_languages():
    plan = plan_block(block("x = 1\n", "python", "docs-test: fixture-nlpl-zip 223.zip", "some other comment"))
    assert plan.run and plan.fixture_zips == ("223.zip",)
    plan = plan_block(block("elmo-hf pretrain --corpus data/a.txt\n", "bash", "docs-test: excerpt data/a.txt 500"))
    assert plan.code == "elmo-hf pretrain --corpus a.first-500-lines.txt\n"
    assert plan.excerpts == (("data/a.txt", "a.first-500-lines.txt", 500),)
    plan = plan_block(block("pretrain(corpus=['corpus.txt'])\n", "python", "docs-test: excerpt data/a.txt 5 corpus.txt"))
    assert plan.code == "pretrain(corpus=['corpus.txt'])\n" and plan.excerpts == (("data/a.txt", "corpus.txt", 5),)
    for language in ("text", "json", "console", "toml"):
        assert not plan_block(block("anything\n", language)).run
    with pytest.raises(DirectiveError, match="not run"):
        plan_block(block("{}\n", "json", "docs-test: fixture-nlpl-zip m.zip"))


@pytest.mark.parametrize("markers, message", [
    (("docs-test: fixture-modle m",), "unknown directive"),
    (("docs-test: fixture-model models/elmo-original",), "unknown directive"),  # blocks make their own models
    (("docs-test: replace only-one",), "unknown directive"),
    (("docs-test: excerpt corpus.txt many",), "unknown directive"),
    (("docs-test: excerpt other.txt 5",), "no longer contains"),
    (("docs-test:",), "cannot read|unknown directive"),
    (('docs-test: replace "unbalanced x',), "cannot read"),
    (("docs_test: skip",), "malformed directive"),
    (("docs-test: skip",), "skip is allowed only"),
])
def test_wrong_directives_fail(markers, message):
    with pytest.raises(DirectiveError, match=message):
        plan_block(block("elmo-hf embed corpus.txt --output vectors\npip install x\n", "bash", *markers))


def test_skip_only_for_the_quick_start_and_pip_install_blocks():
    assert plan_block(block("pip install x\n", "bash", "quickstart-test", "docs-test: skip")).skipped
    assert plan_block(block('pip install "a[b]"   # comment\n\npip install c\n', "bash", "docs-test: skip")).skipped
    with pytest.raises(DirectiveError, match="skip is allowed only"):
        plan_block(block("pip install x && rm -rf models\n", "bash", "docs-test: skip"))
    with pytest.raises(DirectiveError, match="`pip install` in a block that runs"):
        plan_block(block("elmo-hf --help\npip install x\n", "bash"))
    with pytest.raises(DirectiveError, match="without a language"):
        plan_block(block("elmo-hf embed x\n", ""))


def test_blocks_run_in_order_and_a_broken_block_fails_naming_its_line(docs_server, tmp_path):
    markdown = tmp_path / "doc.md"
    markdown.write_text(
        "```python\nnumber = 41\n```\n\n"
        "```bash\necho $((41 + 1)) > answer.txt && test -L data && elmo-hf --help > /dev/null\n```\n\n"
        "```python\nassert open('answer.txt').read() == f'{number + 1}\\n'\n```\n\n"
        "```text\nnot run\n```\n\n"
        "```python\nprint('before')\nraise ValueError('documented behaviour is wrong')\n```\n\n"
        "```bash\necho never\n```\n"
    )
    status, entries, _ = run_markdown(docs_server, [markdown], tmp_path / "python")
    assert status == 1 and [entry["status"] for entry in entries] == ["ok", "ok", "ok", "shown", "failed"]
    message = failure_message(entries, "")
    assert message.startswith(f"{markdown}:17: the python block failed")
    assert "before" in message and f'File "{markdown}", line 19' in message and "ValueError: documented" in message

    markdown.write_text("```sh\necho one\nelmo-hf embed --pooling avg\necho two\n```\n")
    status, entries, _ = run_markdown(docs_server, [markdown], tmp_path / "shell")
    assert status == 1 and [entry["status"] for entry in entries] == ["failed"]
    message = failure_message(entries, "")
    assert "one\n" in message and "two" not in message.split("--- output")[1] and "exit status 2" in message


@pytest.mark.parametrize("kind", ["python -m venv", "python -m venv --copies", "no venv"])
def test_the_blocks_python_is_the_interpreter_running_the_tests(kind, tmp_path):
    """The blocks' ``python`` and ``python3`` are the interpreter the tests run under, with its packages, whatever made
    it. A link to a ``python -m venv`` interpreter (itself a link) found no ``pyvenv.cfg`` beside it and ran without
    the environment's packages: the README's Korean block failed in the venv the README recommends."""
    variables = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    if kind == "no venv":
        interpreter, prefix, module = sys.executable, sys.prefix, "pytest"  # a package of this interpreter's own
    else:
        prefix = str(tmp_path / "venv")
        subprocess.run([sys.executable, "-m", "venv", *kind.split()[3:], "--without-pip", prefix], check=True)
        interpreter, module = os.path.join(prefix, "bin", "python"), "only_in_this_environment"
        assert os.path.islink(interpreter) == (kind == "python -m venv")
        packages = subprocess.run([interpreter, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                  env=variables, capture_output=True, text=True, check=True).stdout.strip()
        Path(packages, f"{module}.py").write_text("")
    shims = tmp_path / "bin"
    shims.mkdir()
    write_interpreter_shims(shims, interpreter)
    for name in INTERPRETER_NAMES:
        done = subprocess.run([name, "-c", f"import sys, {module}; print(sys.prefix)"], capture_output=True, text=True,
                              env={**variables, "PATH": f"{shims}{os.pathsep}{variables['PATH']}"}, cwd=tmp_path)
        assert done.returncode == 0, f"{name}: {done.stderr}"
        assert done.stdout.strip() == prefix


def test_files_run_together_share_the_folder_not_the_python_session(docs_server, tmp_path):
    first, second = tmp_path / "first.md", tmp_path / "second.md"
    first.write_text("```python\nnumber = 41\nopen('made-by-first.txt', 'w').write('x')\n```\n")
    second.write_text("```bash\ntest -f made-by-first.txt\n```\n\n```python\nprint(number)\n```\n")
    status, entries, _ = run_markdown(docs_server, [first, second], tmp_path / "run")
    assert status == 1 and [entry["status"] for entry in entries] == ["ok", "ok", "failed"]
    assert "NameError: name 'number' is not defined" in failure_message(entries, "")
