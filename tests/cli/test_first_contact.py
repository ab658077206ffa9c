"""First contact: a typo in an argument fails at once (before torch is imported), naming the argument and what is
wrong; a model name that looks like a local path never goes to the Hub; `--version`; `similarity`'s default model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import huggingface_hub
import huggingface_hub.constants  # patched below; no longer imported as a side effect of `import elmo_hf`
import pytest

from elmo_hf import __version__
from elmo_hf.choices_elmo import OUTPUT_POOLINGS
from elmo_hf_cli import build_parser, main
from elmo_hf_cli.arguments import looks_like_local_path

# The libraries that take seconds to import. elmo_hf itself is not one: its __init__ imports none of its modules, and
# the command line reads only its torch-free ones before a command runs (tests/cli/test_startup.py lists them).
HEAVY = {"torch", "transformers", "datasets"}

# Runs main(argv) in a fresh interpreter with every socket connection refused and recorded; prints a JSON line with
# the exit code, whether any connection was tried, and the heavy modules loaded.
SCRIPT = textwrap.dedent(
    """
    import json, socket, sys
    tried = []
    def refuse(self, address):
        tried.append(str(address))
        raise OSError("connection refused by the test")
    socket.socket.connect = refuse
    from elmo_hf_cli import main
    try:
        code = main(json.loads(sys.argv[1]))
    except SystemExit as exit:
        code = exit.code
    loaded = sorted({name.split(".")[0] for name in sys.modules} & {"torch", "transformers", "datasets"})
    print(json.dumps({"code": code, "connections": tried, "heavy": loaded}))
    """
)


def first_contact(tmp_path, *argv, **environment):
    """(exit code, stderr, connections tried, heavy modules loaded) of ``elmo-hf argv`` run in ``tmp_path``."""
    env = {**os.environ, **environment}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(list(argv))], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    return report["code"], result.stderr, report["connections"], report["heavy"]


@pytest.fixture
def corpus(tmp_path):
    (tmp_path / "corpus.txt").write_text("a sentence .\n")
    return "corpus.txt"


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--pooling", "avg"], "argument --pooling: invalid choice: 'avg'"),
        (["--representation", "bogus"], "argument --representation: invalid choice: 'bogus'"),
        (["--dtype", "float64"], "argument --dtype: invalid choice"),
        (["--engine", "spark"], "argument --engine: invalid choice"),
        (["--model", "./models/nope"], "argument --model: no such directory: ./models/nope"),
        (["--model", "/no/such/elmo"], "argument --model: no such directory: /no/such/elmo"),
        (["--model", "a/b/c"], "argument --model: no such directory: a/b/c"),
        (["--engine", "ray", "--shard-size", "10"], "--shard-size: only the datasets engine reads it"),
        (["--engine", "ray", "--workers", "2", "--resume"], "--workers and --resume: only the datasets engine reads them"),
        (["--engine", "ray", "--shard-characters", "0", "--device", "cpu"], "--shard-characters and --device: only"),
    ],
)
def test_argument_errors_come_before_torch_and_without_the_network(tmp_path, corpus, arguments, message):
    code, stderr, connections, heavy = first_contact(tmp_path, "embed", corpus, "--output", "out", *arguments)
    assert code == 2 and message in stderr, stderr
    assert not connections and not heavy
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus.txt"]  # nothing written


def test_a_word_splitter_pretrain_does_not_know_fails_before_torch(tmp_path, corpus):
    code, stderr, connections, heavy = first_contact(
        tmp_path, "pretrain", "--corpus", corpus, "--output", "out", "--word-splitter", "kiwii"
    )
    assert code == 2 and "argument --word-splitter: invalid choice: 'kiwii'" in stderr, stderr
    assert not connections and not heavy


def test_a_missing_input_and_an_output_of_ones_own_files_fail_before_torch(tmp_path, corpus):
    code, stderr, _, heavy = first_contact(tmp_path, "embed", "missing.txt", "--output", "out")
    assert code == 2 and "argument input: no such file or directory: missing.txt" in stderr and not heavy
    code, stderr, _, heavy = first_contact(tmp_path, "embed", corpus, "--output", ".")
    assert code == 2 and not heavy
    assert "argument --output: output . exists and is not empty, and it is no elmo-hf output" in stderr
    assert "corpus.txt" in stderr  # what is there
    code, stderr, _, heavy = first_contact(tmp_path, "pretrain", "--corpus", corpus, "--output", corpus)
    assert code == 2 and "output corpus.txt exists and is not a directory" in stderr and not heavy
    code, stderr, _, heavy = first_contact(
        tmp_path, "pretrain", "--corpus", corpus, "--output", "out", "--init-from", "nowhere/model.ckpt-5"
    )
    assert code == 2 and "argument --init-from: no such directory: nowhere/model.ckpt-5 (nor nowhere)" in stderr
    assert not heavy
    code, stderr, _, heavy = first_contact(tmp_path, "neighbours", "query", "no-index", "--sentence", "a", "--word", "a")
    assert code == 2 and "argument INDEX_DIR: no such directory: no-index" in stderr and not heavy


def test_a_hub_shaped_name_inside_an_existing_folder_is_a_local_path(tmp_path, corpus):
    (tmp_path / "models").mkdir()
    code, stderr, connections, heavy = first_contact(tmp_path, "embed", corpus, "--output", "out", "--model", "models/nope")
    assert code == 2 and "no such directory: models/nope (models/ exists here" in stderr, stderr
    assert not connections and not heavy


def test_hf_hub_offline_is_honoured_no_connection_at_all(tmp_path, corpus):
    code, stderr, connections, heavy = first_contact(
        tmp_path, "embed", corpus, "--output", "out", "--model", "models/nope", HF_HUB_OFFLINE="1",
        HF_HUB_CACHE=str(tmp_path / "hub-cache"),
    )
    assert code == 2 and not connections and not heavy
    assert "no local directory models/nope, and no Hub repo models/nope in the local Hub cache" in stderr, stderr
    assert "HF_HUB_OFFLINE is set, so the Hub was not asked" in stderr


def test_an_unreachable_hub_is_asked_once_and_both_places_are_named(tmp_path, corpus):
    code, stderr, connections, heavy = first_contact(
        tmp_path, "similarity", "--model", "models/nope", "--word", "a", "a b", "a c", HF_HUB_OFFLINE="0"
    )
    assert code == 2 and not heavy
    assert "no local directory models/nope, and the Hub" in stderr and "could not be reached" in stderr, stderr


def test_a_cached_repo_needs_no_hub(monkeypatch, tmp_path):
    """With HF_HUB_OFFLINE, or when the Hub cannot be reached, a repo in the local Hub cache is accepted (transformers
    loads the cached copy)."""
    monkeypatch.chdir(tmp_path)
    snapshot = tmp_path / "hub" / "models--someone--elmo" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "hub" / "models--someone--elmo" / "refs").mkdir()
    (tmp_path / "hub" / "models--someone--elmo" / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))

    def unreachable(repo_id):
        raise OSError("no network")

    monkeypatch.setattr(huggingface_hub, "repo_exists", unreachable)
    for offline in (True, False):
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", offline)
        assert build_parser().parse_args(["similarity", "--model", "someone/elmo", "--word", "a", "a b"]).model == "someone/elmo"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["similarity", "--model", "someone/other", "--word", "a", "a b"])


def test_a_repo_the_hub_does_not_have(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "repo_exists", lambda repo_id: False)
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args(["similarity", "--model", "someone/no-such-elmo", "--word", "a", "a b", "a c"])
    assert exit.value.code == 2
    assert "no local directory someone/no-such-elmo, and the Hub" in capsys.readouterr().err
    monkeypatch.setattr(huggingface_hub, "repo_exists", lambda repo_id: True)
    assert build_parser().parse_args(["similarity", "--model", "someone/elmo", "--word", "a", "a b"]).model == "someone/elmo"


def test_an_input_url_is_left_to_the_reader(tmp_path, monkeypatch):
    """`--engine ray` reads s3://, gs://, hdfs:// through pyarrow: no local existence check."""
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["embed", "s3://bucket/corpus/", "--output", "out", "--engine", "ray"])
    assert args.input == "s3://bucket/corpus/"


@pytest.mark.parametrize(
    "name, local",
    [
        ("./models/nope", True), ("../elmo", True), ("/abs/elmo", True), ("~/elmo", True), ("a/b/c", True),
        ("models\\nope", True), ("allenai/elmo", False), ("elmo", False),
    ],
)
def test_what_looks_like_a_local_path(tmp_path, monkeypatch, name, local):
    monkeypatch.chdir(tmp_path)
    assert looks_like_local_path(name) is local


def test_the_choices_are_the_library_s_own():
    """One home: the CLI's --pooling choices are elmo_hf.choices_elmo's, which the library checks against."""
    from elmo_hf.configuration_elmo import POOLINGS
    from elmo_hf.modeling_elmo import REPRESENTATIONS

    embed = build_parser()._subparsers._group_actions[0].choices["embed"]
    pooling = next(action for action in embed._actions if action.dest == "pooling")
    assert tuple(pooling.choices) == OUTPUT_POOLINGS and OUTPUT_POOLINGS[1:] == POOLINGS
    assert REPRESENTATIONS == ("mix", "top", "average", "all")


def test_the_shard_and_batch_defaults_the_help_names_are_the_library_s():
    """The help spells the defaults out (the library is not imported for --help); they must be embed_corpus's and
    the embedder's."""
    import inspect

    from elmo_hf.embedding.batching import DEFAULT_MIN_BATCH_SIZE, DEFAULT_WORDS_PER_BATCH, MIN_BATCH_SIZE_WORDS_FACTOR
    from elmo_hf.embedding.driver import embed_corpus
    from elmo_hf.embedding.manifest import DEFAULT_SHARD_CHARACTERS

    embed = build_parser()._subparsers._group_actions[0].choices["embed"]
    helps = {action.dest: " ".join(action.help.split()) for action in embed._actions if action.help}
    defaults = inspect.signature(embed_corpus).parameters
    assert defaults["shard_characters"].default == DEFAULT_SHARD_CHARACTERS
    assert f"(default {DEFAULT_SHARD_CHARACTERS}, 0: no limit)" in helps["shard_characters"]
    assert f"(default {defaults['shard_size'].default})" in helps["shard_size"]
    assert f"default without --batch-size: {DEFAULT_WORDS_PER_BATCH['cpu']} on CPU, {DEFAULT_WORDS_PER_BATCH['cuda']} on CUDA" in helps["max_words_per_batch"]
    assert f"grow to {MIN_BATCH_SIZE_WORDS_FACTOR}x --max-words-per-batch" in helps["min_batch_size"]
    assert f"(default: {DEFAULT_MIN_BATCH_SIZE['cpu']} on CPU with the default word budget, else 0: no floor)" in helps["min_batch_size"]


def test_version_answers_without_torch(tmp_path):
    result = subprocess.run([sys.executable, "-m", "elmo_hf_cli", "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == f"elmo-hf {__version__}"
    code, _, _, heavy = first_contact(tmp_path, "--version")
    assert code == 0 and not heavy


def test_similarity_defaults_to_the_shipped_model_as_embed(capsys):
    assert main(["similarity", "--word", "play", "We saw the play .", "The children play outside ."]) == 0
    captured = capsys.readouterr()
    assert "no --model given, using elmo-hf's default model" in captured.err
    assert "cosine similarity of 'play' between sentences" in captured.out


@pytest.mark.parametrize(
    "arguments, usage, message",
    [
        (["embed", "corpus.txt", "--modle", "x"], "usage: elmo-hf embed ", "unrecognized arguments: --modle x; did you mean --model?"),
        (["embed", "corpus.txt", "--outptu=out"], "usage: elmo-hf embed ", "unrecognized arguments: --outptu=out; did you mean --output?"),
        (
            ["embed", "corpus.txt", "--modle", "x", "--outptu", "o"], "usage: elmo-hf embed ",
            "unrecognized arguments: --modle x --outptu o; did you mean --model for --modle, --output for --outptu?",
        ),
        (
            ["neighbours", "query", "index", "--sentence", "We saw the play .", "--wrod", "play"],
            "usage: elmo-hf neighbours query ", "unrecognized arguments: --wrod play; did you mean --word?",
        ),
        (["pretrain", "--corpus", "corpus.txt", "--output", "out", "--epocs", "2"], "usage: elmo-hf pretrain ", "did you mean --epochs?"),
        (["embed", "corpus.txt", "--zzz"], "usage: elmo-hf embed ", "unrecognized arguments: --zzz\n"),  # nothing close: no guess
    ],
)
def test_an_unknown_option_gets_its_command_s_usage_and_the_closest_option(tmp_path, corpus, arguments, usage, message):
    (tmp_path / "index").mkdir()
    code, stderr, _, heavy = first_contact(tmp_path, *arguments)
    assert code == 2 and not heavy
    assert stderr.startswith(usage) and message in stderr, stderr


@pytest.mark.parametrize(
    "arguments, message, suggestion",
    [
        (["embedd", "corpus.txt"], "argument command: invalid choice: 'embedd' (choose from 'embed', ", "embed"),
        (["neighbours", "qeury", "index"], "argument action: invalid choice: 'qeury' (choose from 'build', 'query')", "query"),
        (["embed", "corpus.txt", "--output", "out", "--pooling", "maen"], "argument --pooling: invalid choice: 'maen' (choose from ", "mean"),
        (["embed", "corpus.txt", "--output", "out", "--representation", "avreage"], "invalid choice: 'avreage' (choose from mix, ", "average"),
    ],
)
def test_an_unknown_command_or_choice_gets_the_closest_one(tmp_path, corpus, arguments, message, suggestion):
    code, stderr, _, heavy = first_contact(tmp_path, *arguments)
    assert code == 2 and not heavy
    assert message in stderr and stderr.rstrip().endswith(f"; did you mean {suggestion!r}?"), stderr


# ----------------------------------------------------------------------------------------------------------------------
# What `elmo-hf embed` refuses or answers without its model: before torch is imported (issue 50)
# ----------------------------------------------------------------------------------------------------------------------


def embed_here(*arguments: str) -> None:
    """A finished `elmo-hf embed` of corpus.txt by the shipped model, run in this process (the test's directory)."""
    assert main(["embed", "corpus.txt", "--output", "out", "--no-progress", *arguments]) == 0


def write_inputs(directory) -> None:
    """Inputs without the default `text` column (their sentences in `sentence`), one of each structured format."""
    from datasets import Dataset

    rows = Dataset.from_dict({"id": [1, 2], "sentence": ["a sentence .", "another ."]})
    rows.to_json(str(directory / "rows.jsonl"))
    rows.to_csv(str(directory / "rows.csv"), index=False)
    rows.to_parquet(str(directory / "rows.parquet"))
    rows.save_to_disk(str(directory / "saved"))
    (directory / "tree.conllu").write_text("# sent_id = 1\n1\tHi\thi\tINTJ\t_\t_\t0\troot\t_\t_\n\n")
    (directory / "corpus.bin").write_bytes(b"a sentence .\n")


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["corpus.bin"], "error: cannot tell the format of corpus.bin from its extension '.bin': expected one of "),
        (
            ["rows.jsonl"],
            "error: input rows.jsonl has no column 'text'; its columns are ['id', 'sentence'] (choose one with "
            "--text-column or --words-column)",
        ),
        (["rows.jsonl", "--words-column", "tokens"], "error: input rows.jsonl has no column 'tokens'; its columns are ['id', 'sentence']"),
        (["rows.csv"], "error: input rows.csv has no column 'text'; its columns are ['id', 'sentence']"),
        (["rows.parquet"], "error: input rows.parquet has no column 'text'; its columns are ['id', 'sentence']"),
        (["saved"], "error: input saved has no column 'text'; its columns are ['id', 'sentence']"),
        (["tree.conllu", "--text-column", "text"], "error: input tree.conllu has no column 'text'; its columns are ['sent_id', 'words', 'upos']"),
        (["rows.csv", "--input-format", "dataset"], "error: input rows.csv given as 'dataset' must be a directory written by Dataset.save_to_disk"),
        (["corpus.txt", "--shard-characters", "-1"], "error: shard_characters must be an int >= 0 (0: no limit), got -1"),
    ],
)
def test_an_input_refused_without_the_model_is_refused_before_torch(tmp_path, corpus, arguments, message):
    write_inputs(tmp_path)
    code, stderr, connections, heavy = first_contact(tmp_path, "embed", *arguments, "--output", "out")
    assert code == 2 and message in stderr, stderr
    assert not heavy and not connections
    assert not (tmp_path / "out").exists()


def test_an_output_refused_without_the_model_is_refused_before_torch(tmp_path, corpus, monkeypatch):
    monkeypatch.chdir(tmp_path)
    embed_here()
    manifest = (tmp_path / "out" / "manifest.json").read_bytes()
    code, stderr, _, heavy = first_contact(tmp_path, "embed", "corpus.txt", "--output", "out")
    assert code == 2 and not heavy
    assert "error: output out already holds an embedding run (complete); pass --resume to continue it or --overwrite" in stderr
    (tmp_path / "out" / "notes.txt").write_text("mine")
    code, stderr, _, heavy = first_contact(tmp_path, "embed", "corpus.txt", "--output", "out", "--overwrite")
    assert code == 2 and not heavy
    assert (
        "error: output out is an elmo-hf embedding output but also holds files no elmo-hf run recorded writing (or "
        "changed since): notes.txt; --overwrite deletes only what a run's record lists, so nothing was deleted"
    ) in stderr, stderr
    code, stderr, _, heavy = first_contact(tmp_path, "embed", "corpus.txt", "--output", "out", "--resume")
    assert code == 2 and not heavy
    assert "error: cannot resume out: it also holds what elmo-hf does not write (notes.txt); move those away first" in stderr
    (tmp_path / "out" / "notes.txt").unlink()
    (tmp_path / "corpus.txt").write_text("a sentence .\nand one more .\n")
    code, stderr, _, heavy = first_contact(tmp_path, "embed", "corpus.txt", "--output", "out", "--resume")
    assert code == 2 and not heavy
    assert "error: cannot resume out: it was started with different input (size: was 13, now 28; mtime_ns: was " in stderr
    assert (tmp_path / "out" / "manifest.json").read_bytes() == manifest  # nothing touched


def test_a_resume_of_a_complete_output_answers_before_torch(tmp_path, corpus, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    embed_here("--pooling", "mean")
    code, stderr, _, heavy = first_contact(tmp_path, "embed", "corpus.txt", "--output", "out", "--resume", "--pooling", "mean")
    assert (code, heavy) == (0, []), stderr
    capsys.readouterr()
    assert main(["embed", "corpus.txt", "--output", "out", "--resume", "--pooling", "mean"]) == 0
    assert capsys.readouterr().out == "out is already complete: 1 sentence, 3 words\n"


@pytest.fixture
def models_loaded(monkeypatch) -> list[str]:
    """The models `ELMoEmbedder.from_pretrained` loads in this process."""
    from elmo_hf.embedding.embedder import ELMoEmbedder

    loaded, original = [], ELMoEmbedder.from_pretrained.__func__

    def recorded(cls, name_or_path, **options):
        loaded.append(str(name_or_path))
        return original(cls, name_or_path, **options)

    monkeypatch.setattr(ELMoEmbedder, "from_pretrained", classmethod(recorded))
    return loaded


@pytest.mark.parametrize(
    "change, arguments, message",
    [
        (None, ["--pooling", "mean"], "out is already complete: 1 sentence, 3 words\n"),  # settled by the manifest
        (None, ["--pooling", "max"], "cannot resume out: it was started with different options (pooling: was 'mean', now 'max')"),
        (None, [], "cannot resume out: it was started with different options (pooling: was 'mean', now 'none')"),
        (None, ["--pooling", "mean", "--shard-size", "5"], "different options (shard_size: was 1000, now 5)"),
        ("damaged shard", ["--pooling", "mean"], "out is already complete: 1 sentence, 3 words, 1 damaged shard redone"),
        ("model file", ["--pooling", "mean"], "out is already complete: 1 sentence, 3 words\n"),
    ],
)
def test_a_resume_the_manifest_alone_cannot_settle_is_left_to_the_model(
    tmp_path, corpus, monkeypatch, capsys, models_loaded, change, arguments, message
):
    """The same command again is answered from the manifest; with other options than the first run's, a shard to
    redo or a model file changed since, the run loads its model, then says what differs (or redoes the shard, or
    compares the weights)."""
    from elmo_hf import DEFAULT_MODEL_DIR

    monkeypatch.chdir(tmp_path)
    shutil.copytree(DEFAULT_MODEL_DIR, tmp_path / "model")
    embed_here("--model", "model", "--pooling", "mean")
    if change == "damaged shard":
        (tmp_path / "out" / "shard-00000.parquet").write_bytes(b"damaged")
    if change == "model file":
        os.utime(tmp_path / "model" / "config.json")
    capsys.readouterr()
    models_loaded.clear()
    main(["embed", "corpus.txt", "--output", "out", "--model", "model", "--resume", "--no-progress", *arguments])
    captured = capsys.readouterr()
    assert message in captured.out + captured.err, captured.err
    assert models_loaded == ([] if change is None and arguments == ["--pooling", "mean"] else ["model"])
