"""Pulling from a Hub-compatible server nobody in this project wrote: olah, serving a local git repository offline.

The fixture commits a tiny ELMo (model + tokenizer) into a git repository laid out the way olah's local mirrors
want it (``<mirrors-path>/models/<org>/<name>``, plain git blobs, no git-lfs), starts ``python -m olah.server`` on
127.0.0.1 with ``offline = true``, and every download goes through the real ``huggingface_hub`` client inside
``from_pretrained``, in a subprocess (``HF_ENDPOINT`` is read when huggingface_hub is imported). See docs/design/olah.md.

Repository history:

- commit 1: weights of ``random_model(seed=1)``, tokenizer with ``word_splitter="ptb"``; tag ``v1`` (annotated)
  and branch ``release-1`` point at it;
- commit 2 (``main``): weights of ``random_model(seed=2)``, tokenizer with the default ``word_splitter="moses"``.

When olah (or git) is missing or olah does not start, the tests fail under CI (``CI=true``) and are skipped elsewhere.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

from elmo_hf import ELMoTokenizer

from ..helpers import SENTENCES, random_model

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
ORG, NAME = "elmo-hf", "elmo-tiny"
REPO_ID = f"{ORG}/{NAME}"
MISSING_REPO_ID = f"{ORG}/no-such-model"
MISSING_REVISION = "no-such-revision"
START_TIMEOUT_S = 30.0
CLIENT_TIMEOUT_S = 180.0

CLIENT_SCRIPT = textwrap.dedent(
    """
    # Runs with HF_ENDPOINT pointing at olah; one job per requested load, results in a JSON file.
    import json, sys, traceback
    import torch
    from elmo_hf import ELMoModel, ELMoTokenizer

    spec = json.loads(open(sys.argv[1]).read())
    results = {}
    for job in spec["jobs"]:
        kwargs = {"revision": job["revision"], "cache_dir": job["cache_dir"]}
        try:
            model = ELMoModel.from_pretrained(job["repo_id"], **kwargs).eval()
            tokenizer = ELMoTokenizer.from_pretrained(job["repo_id"], **kwargs)
            inputs = tokenizer(spec["sentences"], is_split_into_words=True, padding=True, return_tensors="pt")
            raw = tokenizer(spec["raw_text"], padding=True, return_tensors="pt")
            with torch.no_grad():
                output = model(**inputs)
            torch.save(
                {
                    "state_dict": {key: value.detach().clone() for key, value in model.state_dict().items()},
                    "input_ids": inputs["input_ids"],
                    "raw_input_ids": raw["input_ids"],
                    "word_splitter": tokenizer.word_splitter,
                    "tokenizer_class": type(tokenizer).__name__,
                    "last_hidden_state": output.last_hidden_state,
                    "hidden_states": output.hidden_states,
                    "elmo_representations": output.elmo_representations,
                    "mask": output.mask,
                },
                job["output"],
            )
            results[job["name"]] = {"ok": True}
        except Exception as error:
            chain, cause = [], error
            while cause is not None and len(chain) < 10:
                chain.append({"type": type(cause).__name__, "message": str(cause)})
                cause = cause.__cause__ or cause.__context__
            results[job["name"]] = {"ok": False, "chain": chain, "traceback": traceback.format_exc()}
    open(spec["results"], "w").write(json.dumps(results))
    """
)


def _unavailable(message: str) -> None:
    """Fail under CI, skip elsewhere: a missing server must not turn into a silently green run."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _git(repo: Path, *args: str, date: str | None = None) -> str:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")} | {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "elmo-hf tests",
        "GIT_AUTHOR_EMAIL": "tests@elmo-hf.invalid",
        "GIT_COMMITTER_NAME": "elmo-hf tests",
        "GIT_COMMITTER_EMAIL": "tests@elmo-hf.invalid",
    }
    if date is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    result = subprocess.run(
        ["git", "-C", str(repo), "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false", *args],
        env=env, capture_output=True, text=True, timeout=60,
    )
    if result.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result.stdout.strip()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy: loopback only
    try:
        with opener.open(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _clean_env() -> dict[str, str]:
    """The environment without any Hub, transformers or proxy settings of the machine running the tests."""
    dropped = ("HF_", "HUGGINGFACE_", "TRANSFORMERS_")
    env = {key: value for key, value in os.environ.items() if not key.upper().startswith(dropped)}
    for key in list(env):
        if key.lower() in ("http_proxy", "https_proxy", "all_proxy"):
            del env[key]
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


class OlahServer:
    def __init__(self, root: Path, mirrors: Path, commits: dict[str, str], models: dict, tokenizers: dict):
        self.root, self.mirrors, self.commits, self.models, self.tokenizers = root, mirrors, commits, models, tokenizers
        self.version = importlib.metadata.version("olah")
        self.process: subprocess.Popen | None = None
        self.log_path = root / "olah.log"
        self.endpoint = ""
        self.client_stderr = ""

    def log(self, tail: int = 6000) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else "(no olah log)"
        return f"--- olah {self.version} log ({self.log_path}) ---\n{text[-tail:]}"

    def start(self) -> None:
        errors = []
        for _ in range(3):  # a free port can be taken between probing and binding: retry on a fresh one
            port = _free_port()
            config = self.root / "olah.toml"
            config.write_text(
                textwrap.dedent(
                    f"""
                    [basic]
                    host = "127.0.0.1"
                    port = {port}
                    repos-path = "{(self.root / "olah-cache").as_posix()}"
                    mirrors-path = ["{self.mirrors.as_posix()}"]

                    [accessibility]
                    offline = true
                    """
                )
            )
            env = _clean_env() | {"PYTHONUNBUFFERED": "1"}
            with open(self.log_path, "ab") as log:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "olah.server", "--config", str(config), "--log-path", str(self.root / "olah-logs")],
                    cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                )
            self.endpoint = f"http://127.0.0.1:{port}"
            error = self._wait_until_ready() or self._record_default_branch()
            if error is None:
                return
            errors.append(error)
            self.stop()
        _unavailable(f"olah {self.version} did not start: {'; '.join(errors)}\n{self.log()}")

    def _wait_until_ready(self) -> str | None:
        deadline = time.monotonic() + START_TIMEOUT_S
        url = f"{self.endpoint}/api/models/{REPO_ID}/revision/main"
        last = "no answer"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return f"olah exited with code {self.process.returncode}"
            try:
                status, body = _http_get(url, timeout=2.0)
                if status == 200 and json.loads(body).get("sha") == self.commits["main"]:
                    return None
                last = f"HTTP {status}: {body[:200]!r}"
            except (OSError, ValueError) as error:
                last = repr(error)
            time.sleep(0.2)
        return f"no answer from {url} within {START_TIMEOUT_S:.0f} s (last: {last})"

    def _record_default_branch(self) -> str | None:
        """Let olah answer `GET /api/models/<repo>` (repo info at the default branch) offline.

        Offline, olah takes a repository's newest commit from the `meta_head.json` files of its cache
        (`<repos-path>/api/models/<org>/<repo>/revision/<rev>/meta_head.json`, normally written while proxying the
        Hub), never from a local mirror, and answers 401 RepoNotFound without one. transformers asks for it to pin
        `revision=None` to a commit; unpinned, it HEADs optional files (added_tokens.json, ...) that olah's mirror
        then reports as a missing REPOSITORY (401), not a missing file (404), and the load fails. The record is
        olah's own answer for `main`, from its local mirror.
        """
        status, body = _http_get(f"{self.endpoint}/api/models/{REPO_ID}/revision/main")
        if status != 200:
            return f"/api/models/{REPO_ID}/revision/main answered HTTP {status}"
        record = self.root / "olah-cache" / "api" / "models" / ORG / NAME / "revision" / "main" / "meta_head.json"
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_bytes(body)
        status, body = _http_get(f"{self.endpoint}/api/models/{REPO_ID}")
        if status != 200 or json.loads(body).get("sha") != self.commits["main"]:
            return f"/api/models/{REPO_ID} answered HTTP {status} {body[:200]!r} after recording main"
        return None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None

    def pull(self, tmp_path: Path, jobs: list[dict]) -> dict:
        """Run the client in a fresh interpreter (fresh HF_HOME) against olah; one result per job."""
        hf_home = tmp_path / "hf-home"
        for job in jobs:
            job["cache_dir"] = str(tmp_path / f"cache-{job['name']}")
            job["output"] = str(tmp_path / f"{job['name']}.pt")
        spec = tmp_path / "spec.json"
        results_path = tmp_path / "results.json"
        spec.write_text(json.dumps({"jobs": jobs, "sentences": SENTENCES, "raw_text": RAW_TEXT, "results": str(results_path)}))
        script = tmp_path / "client.py"
        script.write_text(CLIENT_SCRIPT)
        workdir = tmp_path / "client-cwd"  # empty: the repo id can never be read as a local folder
        workdir.mkdir()
        env = _clean_env() | {
            "HF_ENDPOINT": self.endpoint,
            "HF_HUB_DISABLE_XET": "1",
            "HF_HOME": str(hf_home),
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY_ROOT), os.environ.get("PYTHONPATH")])),
        }
        result = subprocess.run(
            [sys.executable, str(script), str(spec)],
            cwd=workdir, env=env, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S,
        )
        if result.returncode != 0 or not results_path.exists():
            pytest.fail(f"client exited with {result.returncode}:\n{result.stderr[-6000:]}\n{self.log()}", pytrace=False)
        self.client_stderr = result.stderr
        return json.loads(results_path.read_text())

    def context(self) -> str:
        return f"--- client stderr ---\n{self.client_stderr[-3000:]}\n{self.log()}"


RAW_TEXT = ["I don't know.", "They can't stay ."]


@pytest.fixture(scope="module")
def olah(tmp_path_factory) -> OlahServer:
    if importlib.util.find_spec("olah") is None:
        _unavailable("olah is not installed (pip install olah, or pip install -e '.[test]')")
    if shutil.which("git") is None:
        _unavailable("git is not installed: olah serves local mirrors from git repositories")

    root = tmp_path_factory.mktemp("olah")
    mirrors = root / "mirrors"
    repo = mirrors / "models" / ORG / NAME  # olah: <mirrors-path>/<repo_type>/<org>/<repo>
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")

    models = {1: random_model(seed=1), 2: random_model(seed=2)}
    tokenizers = {1: ELMoTokenizer(word_splitter="ptb"), 2: ELMoTokenizer()}

    models[1].save_pretrained(repo)
    tokenizers[1].save_pretrained(repo)
    # olah answers a tree listing of a missing folder with 401 RepoNotFound (the Hub: 404 EntryNotFound), and
    # transformers lists additional_chat_templates/ when loading a tokenizer: give that folder a non-template file.
    (repo / "additional_chat_templates").mkdir()
    (repo / "additional_chat_templates" / "README.md").write_text("No chat templates: ELMo has none.\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "seed 1, ptb splitter", date="2024-01-01T00:00:00Z")
    _git(repo, "tag", "-a", "v1", "-m", "first release")
    _git(repo, "branch", "release-1")

    models[2].save_pretrained(repo)
    tokenizers[2].save_pretrained(repo)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "seed 2, moses splitter", date="2024-02-01T00:00:00Z")
    if _git(repo, "status", "--porcelain"):
        raise RuntimeError("save_pretrained left files uncommitted")

    commits = {"main": _git(repo, "rev-parse", "main"), "v1": _git(repo, "rev-parse", "v1^{commit}")}
    assert commits["main"] != commits["v1"]
    with open(repo / "model.safetensors", "rb") as handle:
        assert not handle.read(200).startswith(b"version https://git-lfs"), "weights must be plain git blobs"

    server = OlahServer(root, mirrors, commits, models, tokenizers)
    server.start()
    yield server
    server.stop()


def _assert_same_as_local(server: OlahServer, pulled: dict, index: int, what: str) -> None:
    model, tokenizer = server.models[index], server.tokenizers[index]
    context = server.context()
    local_state = model.state_dict()
    assert sorted(pulled["state_dict"]) == sorted(local_state), f"{what}: other parameter names\n{context}"
    for key, value in local_state.items():
        remote = pulled["state_dict"][key]
        assert remote.dtype == value.dtype and remote.shape == value.shape, f"{what}: {key} dtype/shape\n{context}"
        assert remote.contiguous().numpy().tobytes() == value.contiguous().numpy().tobytes(), (
            f"{what}: {key} differs from the committed weights (seed {index})\n{context}"
        )
    assert pulled["tokenizer_class"] == "ELMoTokenizer"
    assert pulled["word_splitter"] == tokenizer.word_splitter, f"{what}: tokenizer from the wrong commit\n{context}"
    inputs = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    assert torch.equal(pulled["input_ids"], inputs["input_ids"])
    assert torch.equal(pulled["raw_input_ids"], tokenizer(RAW_TEXT, padding=True, return_tensors="pt")["input_ids"])
    with torch.no_grad():
        output = model(**inputs)
    assert torch.equal(pulled["mask"], output.mask)
    pairs = [("last_hidden_state", pulled["last_hidden_state"], output.last_hidden_state)]
    pairs += [(f"hidden_states[{i}]", a, b) for i, (a, b) in enumerate(zip(pulled["hidden_states"], output.hidden_states, strict=True))]
    pairs += [
        (f"elmo_representations[{i}]", a, b)
        for i, (a, b) in enumerate(zip(pulled["elmo_representations"], output.elmo_representations, strict=True))
    ]
    for name, remote, local in pairs:
        torch.testing.assert_close(remote, local, rtol=0, atol=1e-6, msg=lambda m: f"{what}: {name}: {m}")


def _snapshots(tmp_path: Path, job_name: str) -> list[str]:
    snapshots = tmp_path / f"cache-{job_name}" / f"models--{ORG}--{NAME}" / "snapshots"
    return sorted(path.name for path in snapshots.iterdir()) if snapshots.is_dir() else []


def test_pull_default_revision_gives_the_committed_model(olah, tmp_path):
    results = olah.pull(tmp_path, [{"name": "default", "repo_id": REPO_ID, "revision": None}])
    assert results["default"]["ok"], f"{results['default']}\n{olah.context()}"
    _assert_same_as_local(olah, torch.load(tmp_path / "default.pt", weights_only=True), 2, "default revision")
    # downloaded from olah, into the snapshot of main's commit
    assert _snapshots(tmp_path, "default") == [olah.commits["main"]], olah.context()
    deadline = time.monotonic() + 5
    pattern = re.compile(rf'"GET /{REPO_ID}/resolve/[^/ ]+/model\.safetensors HTTP/1\.1" 200')
    while not pattern.search(olah.log(tail=10**7)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pattern.search(olah.log(tail=10**7)), f"the weights were not fetched from olah\n{olah.log()}"


@pytest.mark.slow  # the Hub test server covers revisions and errors in the default run
def test_pull_by_revision_gives_the_other_commit(olah, tmp_path):
    revisions = {"main": "main", "tag": "v1", "branch": "release-1", "sha": olah.commits["v1"]}
    jobs = [{"name": name, "repo_id": REPO_ID, "revision": revision} for name, revision in revisions.items()]
    results = olah.pull(tmp_path, jobs)
    for name, revision in revisions.items():
        assert results[name]["ok"], f"revision={revision!r}: {results[name]}\n{olah.context()}"
        index = 2 if name == "main" else 1
        _assert_same_as_local(olah, torch.load(tmp_path / f"{name}.pt", weights_only=True), index, f"revision={revision!r}")
        expected_commit = olah.commits["main" if index == 2 else "v1"]
        assert _snapshots(tmp_path, name) == [expected_commit], f"revision={revision!r}\n{olah.context()}"
    # the two commits really hold different weights, so the checks above tell them apart
    first, second = olah.models[1].state_dict(), olah.models[2].state_dict()
    assert not torch.equal(first["char_embeddings.embedding.weight"], second["char_embeddings.embedding.weight"])


@pytest.mark.slow  # the Hub test server covers revisions and errors in the default run
def test_unknown_repo_or_revision_raises_a_hub_error(olah, tmp_path):
    jobs = [
        {"name": "missing_repo", "repo_id": MISSING_REPO_ID, "revision": None},
        {"name": "missing_revision", "repo_id": REPO_ID, "revision": MISSING_REVISION},
    ]
    results = olah.pull(tmp_path, jobs)
    hub_errors = {"RepositoryNotFoundError", "RevisionNotFoundError", "GatedRepoError"}
    for job in jobs:
        result = results[job["name"]]
        assert not result["ok"], f"{job['name']}: loading succeeded\n{olah.context()}"
        top, types = result["chain"][0], [link["type"] for link in result["chain"]]
        # transformers' error names the repository; underneath is the Hub client's answer to what olah said,
        # not a connection error or a timeout
        assert top["type"] == "OSError" and job["repo_id"] in top["message"], f"{result['traceback']}\n{olah.context()}"
        assert hub_errors & set(types), f"{job['name']}: no Hub error in {types}\n{result['traceback']}\n{olah.context()}"
        assert not any("Connect" in name or "Timeout" in name for name in types), result["traceback"]
        assert not (tmp_path / f"{job['name']}.pt").exists()
        assert _snapshots(tmp_path, job["name"]) == []
