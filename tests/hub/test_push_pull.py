"""push_to_hub / from_pretrained through the real huggingface_hub client, against tests/hub/hub_server.py.

huggingface_hub reads HF_ENDPOINT, HF_HUB_DISABLE_XET, HF_HOME and HF_HUB_OFFLINE when it is imported, and it is
already imported in this process, so every client action runs in another process (`ClientRunner`) whose environment
points at the in-process server. Such a process costs ~5 s (importing torch, transformers and elmo_hf), so each one
does several related things and reports them as JSON (`attempt` / `finish`), the assertions being made here. The
processes are forks of a helper interpreter that has imported torch but never huggingface_hub (`ZYGOTE`), which saves
~2 s each; where `os.fork` is missing they are plain subprocesses. See docs/design/hub-testing.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import urllib.request
from http.client import HTTPConnection
from pathlib import Path
from urllib.error import HTTPError
from urllib.parse import urlsplit

import pytest
import torch
from safetensors.torch import load_file

from elmo_hf import ELMoTokenizer

from ..conftest import FIXTURES_DIR
from ..helpers import SENTENCES, random_model
from .hub_server import GITATTRIBUTES, HubTestServer, git_blob_id

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
WRITE, READ = "write-token", "read-token"
TOKENS = {WRITE: "write", READ: "read"}
RESULT_MARKER = "@@HUB-CLIENT-RESULT@@"
CLIENT_TIMEOUT_S = 180

# Prepended to every client script. `attempt` runs one action and records its value or its exception (type, the
# names of its classes, message, HTTP status, and the same for its cause: transformers wraps Hub errors in OSError).
CLIENT_PRELUDE = """
import json, os, sys
RESULT = {}

def _describe(error):
    return {
        "type": type(error).__name__,
        "types": [cls.__name__ for cls in type(error).__mro__],
        "message": str(error),
        "status": getattr(getattr(error, "response", None), "status_code", None),
    }

def attempt(name, action):
    try:
        RESULT[name] = {"ok": True, "value": action()}
    except Exception as error:
        cause = error.__cause__ or error.__context__
        RESULT[name] = {"ok": False, **_describe(error), "cause": None if cause is None else _describe(cause)}

def finish():
    print(%r + json.dumps(RESULT), flush=True)
    sys.stderr.flush()
    os._exit(0)  # skip the interpreter's teardown (~1.5 s with torch loaded): everything is written by now

def save_state(model, path):
    from safetensors.torch import save_file
    save_file({name: value.contiguous() for name, value in model.state_dict().items()}, path)
    return path

def save_outputs(model, tokenizer, sentences, path):
    import torch
    from safetensors.torch import save_file
    inputs = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        output = model.eval()(**inputs)
    tensors = {f"state.{name}": value for name, value in model.state_dict().items()}
    tensors.update(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
    tensors.update(last_hidden_state=output.last_hidden_state)
    tensors.update({f"hidden_states.{i}": value for i, value in enumerate(output.hidden_states)})
    tensors.update({f"elmo_representations.{i}": value for i, value in enumerate(output.elmo_representations)})
    save_file({name: value.clone() for name, value in tensors.items()}, path)  # clone: some outputs share memory
    return path
""" % RESULT_MARKER

# The fork server: imports torch once (~2 s), never huggingface_hub or transformers. For each job (a JSON line on
# stdin) it forks; the child takes the job's environment, output files and argv before running the script or
# module, so huggingface_hub is imported there for the first time, with the job's HF_* variables.
ZYGOTE = r"""
import json, os, runpy, sys, traceback
import numpy, safetensors.torch, torch
assert not {"huggingface_hub", "transformers", "elmo_hf"} & set(sys.modules), "the fork server must not import them"
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.environ.clear()
            os.environ.update(job["env"])
            os.chdir(job["cwd"])
            sys.path[:0] = job["env"]["PYTHONPATH"].split(os.pathsep)
            for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
            sys.stdin = open(os.devnull)
            sys.argv = job["argv"]
            if job["module"]:
                runpy.run_module(job["module"], run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(job["argv"][0], run_name="__main__")
            code = 0
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    print(json.dumps({"pid": pid}), flush=True)
    print(json.dumps({"exit": os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}), flush=True)
"""


def client_environment(endpoint: str, hf_home: Path, token: str | None = None, offline: bool = False) -> dict[str, str]:
    """The parent's environment without any Hub setting, token or proxy, plus the given ones."""
    dropped = ("HF_", "HUGGINGFACE_", "HUGGING_FACE_", "TRANSFORMERS_", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
    env = {key: value for key, value in os.environ.items() if not key.upper().startswith(dropped)}
    env.update(
        HF_ENDPOINT=endpoint,
        HF_HUB_DISABLE_XET="1",  # hf_xet is installed: without this, uploads would use the Xet protocol
        HF_HOME=str(hf_home),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        NO_PROXY="127.0.0.1,localhost",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPOSITORY_ROOT), os.environ.get("PYTHONPATH")])),
    )
    if token is not None:
        env["HF_TOKEN"] = token
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return env


class ClientRunner:
    """Runs client scripts (or `python -m module`) in fresh processes: forks of ZYGOTE, or plain subprocesses."""

    def __init__(self):
        self.zygote: subprocess.Popen | None = None
        if hasattr(os, "fork"):
            self.zygote = subprocess.Popen(
                [sys.executable, "-c", ZYGOTE],
                cwd=REPOSITORY_ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            self.lines: queue.Queue[str | None] = queue.Queue()
            threading.Thread(target=self._read_lines, daemon=True).start()
            assert "ready" in self._next(CLIENT_TIMEOUT_S), "the fork server did not start"

    def _read_lines(self) -> None:
        for line in self.zygote.stdout:
            self.lines.put(line)
        self.lines.put(None)  # the fork server is gone

    def _next(self, timeout: float) -> dict:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError from None
        if line is None:
            pytest.fail("the fork server exited")
        return json.loads(line)

    def run(self, argv: list[str], env: dict[str, str], stdout: Path, stderr: Path, module: str | None = None) -> int:
        """Exit code of `python argv...` (or `python -m module argv[1:]...`), its output in stdout and stderr."""
        if self.zygote is None:
            command = [sys.executable, *(["-m", module, *argv[1:]] if module else argv)]
            with stdout.open("w") as out, stderr.open("w") as err:
                process = subprocess.run(
                    command, cwd=REPOSITORY_ROOT, env=env, stdout=out, stderr=err, timeout=CLIENT_TIMEOUT_S
                )
            return process.returncode
        job = {"argv": argv, "module": module, "env": env, "cwd": str(REPOSITORY_ROOT)}
        self.zygote.stdin.write(json.dumps(job | {"stdout": str(stdout), "stderr": str(stderr)}) + "\n")
        self.zygote.stdin.flush()
        pid = self._next(10)["pid"]
        try:
            return self._next(CLIENT_TIMEOUT_S)["exit"]
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            self._next(10)
            pytest.fail(f"{argv} ran for more than {CLIENT_TIMEOUT_S} s (killed)")

    def script(self, script: str, tmp_path: Path, name: str, endpoint: str, hf_home: Path, **env_options) -> dict:
        """Run `script` (after CLIENT_PRELUDE; it must end with `finish()`) against `endpoint`; its RESULT."""
        path = tmp_path / f"{name}.py"
        path.write_text(CLIENT_PRELUDE + textwrap.dedent(script))
        stdout, stderr = tmp_path / f"{name}.stdout", tmp_path / f"{name}.stderr"
        code = self.run([str(path)], client_environment(endpoint, hf_home, **env_options), stdout, stderr)
        output = stdout.read_text()
        lines = [line for line in output.splitlines() if line.startswith(RESULT_MARKER)]
        if code != 0 or not lines:
            pytest.fail(f"client script {name} failed (exit {code}):\n{output[-3000:]}\n{stderr.read_text()[-6000:]}")
        return json.loads(lines[-1][len(RESULT_MARKER) :])

    def close(self) -> None:
        if self.zygote is not None:
            self.zygote.stdin.close()
            self.zygote.wait(timeout=10)


def expect_ok(result: dict, name: str):
    outcome = result[name]
    assert outcome["ok"], f"{name} failed: {outcome['type']}: {outcome['message']}\ncaused by: {outcome['cause']}"
    return outcome["value"]


def expect_error(
    result: dict, name: str, error_type: str, *fragments: str, status: int | None = None, cause: str | None = None
) -> dict:
    """`name` raised an `error_type` (a class in its MRO) whose message contains every fragment."""
    outcome = result[name]
    assert not outcome["ok"], f"{name} should have failed but returned {outcome['value']!r}"
    assert error_type in outcome["types"], f"{name}: expected {error_type}, got {outcome['type']}: {outcome['message']}"
    for fragment in fragments:
        assert fragment in outcome["message"], f"{name}: {fragment!r} not in the message:\n{outcome['message']}"
    if status is not None:
        assert outcome["status"] == status, f"{name}: HTTP status {outcome['status']}, expected {status}"
    if cause is not None:
        assert outcome["cause"] is not None and cause in outcome["cause"]["types"], f"{name}: cause {outcome['cause']}"
    return outcome


def assert_same_state(loaded: dict[str, torch.Tensor], model: torch.nn.Module) -> None:
    """Same parameter names, dtypes and bits."""
    expected = model.state_dict()
    assert sorted(loaded) == sorted(expected)
    for name, value in expected.items():
        assert loaded[name].dtype == value.dtype and torch.equal(loaded[name], value), name


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def free_closed_port() -> int:
    """A port nothing listens on (bound, then closed): connecting to it is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# ----------------------------------------------------------------------------------------------------------------
# Fixtures: one server for the module, local checkpoints, the tiny model pushed once and pulled once
# ----------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with HubTestServer(tmp_path_factory.mktemp("hub-storage"), tokens=TOKENS) as server:
        yield server


@pytest.fixture(scope="module")
def clients():
    runner = ClientRunner()
    yield runner
    runner.close()


@pytest.fixture(autouse=True)
def no_unexpected_requests(hub):
    """Fail the test that made the client call an endpoint the server does not implement, or hit a server bug."""
    unexpected, errors = len(hub.unexpected), len(hub.errors)
    yield
    assert hub.unexpected[unexpected:] == [], "requests the hub test server does not implement (answered 501)"
    assert hub.errors[errors:] == [], "the hub test server failed (answered 500)"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, tuple[Path, torch.nn.Module]]:
    """Three tiny random models with different weights, each saved with a tokenizer: name -> (directory, model)."""
    root = tmp_path_factory.mktemp("checkpoints")
    saved = {}
    for seed, name in enumerate(("v1", "v2", "v3")):
        model = random_model(seed=seed)
        model.save_pretrained(root / name)
        ELMoTokenizer().save_pretrained(root / name)
        saved[name] = (root / name, model)
    return saved


@pytest.fixture(scope="module")
def published(hub, checkpoints, clients, tmp_path_factory) -> dict:
    """v1 pushed to alice/elmo-tiny (model, then tokenizer; token=...), then pulled by a fresh process, empty cache."""
    tmp = tmp_path_factory.mktemp("published")
    directory = str(checkpoints["v1"][0])
    pushed = clients.script(
        f"""
        from elmo_hf import ELMoModel, ELMoTokenizer
        model, tokenizer = ELMoModel.from_pretrained({directory!r}), ELMoTokenizer.from_pretrained({directory!r})
        attempt("push model", lambda: model.push_to_hub("alice/elmo-tiny", token={WRITE!r}).oid)
        attempt("push tokenizer", lambda: tokenizer.push_to_hub("alice/elmo-tiny", token={WRITE!r}).oid)
        finish()
        """,
        tmp, "push", hub.url, tmp / "home-push",
    )  # fmt: skip
    warm_home = tmp / "home-pull"
    assert not warm_home.exists()  # an empty cache
    pulled = clients.script(
        f"""
        from elmo_hf import ELMoModel, ELMoTokenizer
        def pull():
            model = ELMoModel.from_pretrained("alice/elmo-tiny")
            tokenizer = ELMoTokenizer.from_pretrained("alice/elmo-tiny")
            return save_outputs(model, tokenizer, {SENTENCES!r}, {str(tmp / "pulled.safetensors")!r})
        attempt("pull", pull)
        finish()
        """,
        tmp, "pull", hub.url, warm_home,
    )  # fmt: skip
    return {"pushed": pushed, "pulled": pulled, "warm_home": warm_home}


# ----------------------------------------------------------------------------------------------------------------
# 1. Round trip
# ----------------------------------------------------------------------------------------------------------------
def test_push_then_pull_in_a_fresh_process_gives_the_same_model(hub, checkpoints, published):
    model_commit = expect_ok(published["pushed"], "push model")
    tokenizer_commit = expect_ok(published["pushed"], "push tokenizer")
    assert hub.branches("alice/elmo-tiny")["main"] == tokenizer_commit != model_commit
    expected_files = {"config.json", "model.safetensors", "tokenizer_config.json", "README.md"}
    assert expected_files <= set(hub.files("alice/elmo-tiny"))

    pulled = load_file(expect_ok(published["pulled"], "pull"))
    model = checkpoints["v1"][1]
    assert_same_state({name[6:]: value for name, value in pulled.items() if name.startswith("state.")}, model)

    inputs = ELMoTokenizer()(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    assert torch.equal(pulled["input_ids"], inputs["input_ids"])  # the pulled tokenizer encodes the same way
    assert torch.equal(pulled["attention_mask"], inputs["attention_mask"])
    with torch.no_grad():
        expected = model(**inputs)
    # Reloaded safetensors tensors are not 64-byte aligned: MKL may differ in the last bits (docs/numerics.md).
    torch.testing.assert_close(pulled["last_hidden_state"], expected.last_hidden_state, rtol=0, atol=1e-6)
    for i, layer in enumerate(expected.hidden_states):
        torch.testing.assert_close(pulled[f"hidden_states.{i}"], layer, rtol=0, atol=1e-6)
    for i, mix in enumerate(expected.elmo_representations):
        torch.testing.assert_close(pulled[f"elmo_representations.{i}"], mix, rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------------------------------------------
# 5. LFS: the weights go through the LFS batch API and a PUT, small text files inline in the commit
# ----------------------------------------------------------------------------------------------------------------
def test_weights_go_through_lfs_and_config_is_inline(hub, checkpoints, published):
    expect_ok(published["pushed"], "push model")
    directory, model = checkpoints["v1"]
    files = hub.files("alice/elmo-tiny")
    weights, config = files["model.safetensors"], files["config.json"]

    assert weights.lfs and not config.lfs
    assert weights.sha256 == sha256_of(directory / "model.safetensors")  # what save_pretrained writes locally
    assert sha256_of(hub.blob_path(weights.sha256)) == weights.sha256  # the stored blob is what it claims to be
    assert hub.state.lfs_uploads.get(weights.sha256) == weights.size  # ... and it came through the LFS PUT
    puts = [path for method, path, status in hub.requests if method == "PUT" and status == 200]
    assert any(path.startswith(f"/lfs-upload/{weights.sha256}?") for path in puts)
    assert_same_state(load_file(hub.blob_path(weights.sha256)), model)

    config_bytes = (directory / "config.json").read_bytes()
    assert config.sha256 not in hub.state.lfs_uploads  # config.json came base64 inside the commit
    assert hub.blob_path(config.sha256).read_bytes() == config_bytes
    assert config.git_oid == git_blob_id(config_bytes)


# ----------------------------------------------------------------------------------------------------------------
# 2. Revisions: main, a branch, a commit id; an unknown revision
# ----------------------------------------------------------------------------------------------------------------
def test_revisions_branch_and_commit_each_load_their_own_weights(hub, checkpoints, clients, tmp_path):
    paths = {name: str(directory) for name, (directory, _) in checkpoints.items()}
    result = clients.script(
        f"""
        from elmo_hf import ELMoModel
        from huggingface_hub import hf_hub_download
        repo, paths = "alice/elmo-revisions", {paths!r}
        def push(name, revision=None):  # the token comes from HF_TOKEN this time
            return ELMoModel.from_pretrained(paths[name]).push_to_hub(repo, revision=revision).oid
        def load(revision, name):
            return save_state(ELMoModel.from_pretrained(repo, revision=revision), os.path.join({str(tmp_path)!r}, name))
        attempt("push v1", lambda: push("v1"))
        attempt("push v2 to a branch", lambda: push("v2", revision="v2"))
        attempt("push v3", lambda: push("v3"))
        attempt("load main", lambda: load(None, "main.safetensors"))
        attempt("load branch v2", lambda: load("v2", "v2.safetensors"))
        attempt("load the v1 commit", lambda: load(RESULT["push v1"]["value"], "v1.safetensors"))
        attempt("load an unknown revision", lambda: load("no-such-rev", "never.safetensors"))
        attempt("download an unknown revision", lambda: hf_hub_download(repo, "config.json", revision="no-such-rev"))
        finish()
        """,
        tmp_path, "revisions", hub.url, tmp_path / "home", token=WRITE,
    )  # fmt: skip
    v1, v2, v3 = (expect_ok(result, name) for name in ("push v1", "push v2 to a branch", "push v3"))
    assert hub.branches("alice/elmo-revisions") == {"main": v3, "v2": v2} and len({v1, v2, v3}) == 3
    for name, checkpoint in (("load main", "v3"), ("load branch v2", "v2"), ("load the v1 commit", "v1")):
        assert_same_state(load_file(expect_ok(result, name)), checkpoints[checkpoint][1])

    fragments = ("no-such-rev", "is not a valid git identifier")
    expect_error(result, "load an unknown revision", "OSError", *fragments, cause="RevisionNotFoundError")
    expect_error(result, "download an unknown revision", "RevisionNotFoundError", "no-such-rev", status=404)


# ----------------------------------------------------------------------------------------------------------------
# 3. Errors users hit
# ----------------------------------------------------------------------------------------------------------------
def test_token_and_repository_errors_are_clear(hub, checkpoints, published, clients, tmp_path):
    expect_ok(published["pushed"], "push model")  # alice/elmo-tiny exists
    result = clients.script(
        f"""
        from elmo_hf import ELMoModel
        from huggingface_hub import HfApi
        model = ELMoModel.from_pretrained({str(checkpoints["v1"][0])!r})
        attempt("push, wrong token", lambda: model.push_to_hub("alice/wrong-token", token="not-a-token"))
        attempt("push, read token", lambda: model.push_to_hub("alice/read-token", token={READ!r}))
        attempt("push, read token, existing repo", lambda: model.push_to_hub("alice/elmo-tiny", token={READ!r}))
        attempt("push, no token", lambda: model.push_to_hub("alice/no-token"))
        attempt("load, wrong token", lambda: ELMoModel.from_pretrained("alice/elmo-tiny", token="not-a-token"))
        attempt("load, unknown repo", lambda: ELMoModel.from_pretrained("alice/does-not-exist"))
        attempt("info, unknown repo", lambda: HfApi().model_info("alice/does-not-exist"))
        attempt("whoami", lambda: HfApi().whoami(token={READ!r})["name"])
        finish()
        """,
        tmp_path, "errors", hub.url, tmp_path / "home",
    )  # fmt: skip
    invalid = "Invalid credentials in Authorization header"
    expect_error(result, "push, wrong token", "HfHubHTTPError", invalid, status=401)
    expect_error(result, "push, read token", "HfHubHTTPError", "403 Forbidden", "read-only", status=403)
    fragments = ("403 Forbidden", "read-only", "alice/elmo-tiny")
    expect_error(result, "push, read token, existing repo", "HfHubHTTPError", *fragments, status=403)
    expect_error(result, "push, no token", "HfHubHTTPError", "must be authenticated", status=401)
    expect_error(result, "load, wrong token", "OSError", invalid, cause="HfHubHTTPError")
    not_found = "alice/does-not-exist is not a local folder and is not a valid model identifier"
    expect_error(result, "load, unknown repo", "OSError", not_found, cause="RepositoryNotFoundError")
    expect_error(result, "info, unknown repo", "RepositoryNotFoundError", "alice/does-not-exist", status=404)
    assert expect_ok(result, "whoami") == "alice"
    assert not {"alice/wrong-token", "alice/read-token", "alice/no-token"} & set(hub.state.repos)  # none was created


# ----------------------------------------------------------------------------------------------------------------
# 4. Private repositories (and 3: the error for a missing token)
# ----------------------------------------------------------------------------------------------------------------
def test_private_repo_is_visible_with_a_token_only(hub, checkpoints, clients, tmp_path):
    result = clients.script(
        f"""
        from elmo_hf import ELMoModel
        from huggingface_hub import HfApi
        repo = "alice/elmo-private"
        model = ELMoModel.from_pretrained({str(checkpoints["v2"][0])!r})
        attempt("push private", lambda: model.push_to_hub(repo, private=True, token={WRITE!r}).oid)
        attempt("info, write token", lambda: HfApi().model_info(repo, token={WRITE!r}).private)
        attempt("info, read token", lambda: HfApi().model_info(repo, token={READ!r}).private)
        attempt("info, no token", lambda: HfApi().model_info(repo))
        attempt("load, no token", lambda: ELMoModel.from_pretrained(repo))
        path = {str(tmp_path / "private.safetensors")!r}
        attempt("load, write token", lambda: save_state(ELMoModel.from_pretrained(repo, token={WRITE!r}), path))
        finish()
        """,
        tmp_path, "private", hub.url, tmp_path / "home",
    )  # fmt: skip
    expect_ok(result, "push private")
    assert hub.state.repos["alice/elmo-private"].private
    assert expect_ok(result, "info, write token") is True and expect_ok(result, "info, read token") is True
    expect_error(result, "info, no token", "RepositoryNotFoundError", "alice/elmo-private", status=404)
    fragments = ("alice/elmo-private is not a local folder", "private repository, make sure to pass a token")
    expect_error(result, "load, no token", "OSError", *fragments, cause="RepositoryNotFoundError")
    assert_same_state(load_file(expect_ok(result, "load, write token")), checkpoints["v2"][1])


# ----------------------------------------------------------------------------------------------------------------
# 3 (cont.). Offline mode, and a server that is down
# ----------------------------------------------------------------------------------------------------------------
LOAD_FROM_CACHE = """
from elmo_hf import ELMoModel, ELMoTokenizer
def load_warm():
    ELMoTokenizer.from_pretrained("alice/elmo-tiny")
    return save_state(ELMoModel.from_pretrained("alice/elmo-tiny"), {loaded!r})
attempt("load from the warm cache", load_warm)
attempt("load with an empty cache", lambda: ELMoModel.from_pretrained("alice/elmo-tiny", cache_dir={empty!r}))
"""


def test_offline_mode_loads_from_a_warm_cache_only(hub, checkpoints, published, clients, tmp_path):
    expect_ok(published["pulled"], "pull")
    script = LOAD_FROM_CACHE.format(loaded=str(tmp_path / "offline.safetensors"), empty=str(tmp_path / "empty"))
    requests_before = len(hub.requests)
    result = clients.script(script + "finish()\n", tmp_path, "offline", hub.url, published["warm_home"], offline=True)
    assert_same_state(load_file(expect_ok(result, "load from the warm cache")), checkpoints["v1"][1])
    fragments = ("couldn't find them in the cached files",)
    outcome = expect_error(result, "load with an empty cache", "OSError", *fragments, cause="LocalEntryNotFoundError")
    assert "outgoing traffic has been disabled" in outcome["cause"]["message"]
    assert len(hub.requests) == requests_before  # HF_HUB_OFFLINE=1: not a single request


# The client retries refused connections 5 times with 1, 2, 4, 8, 8 s of back-off (~23 s per call; loading a
# tokenizer from the cache makes two such calls): skip the sleeps, not the retries.
NO_BACKOFF_SLEEPS = """
import time as _time, huggingface_hub.utils._http as _http
class _NoSleep:
    def __getattr__(self, name):
        return getattr(_time, name)
    @staticmethod
    def sleep(seconds):
        pass
_http.time = _NoSleep()
"""


def test_server_down_gives_a_connection_error_and_the_cache_still_works(hub, checkpoints, published, clients, tmp_path):
    expect_ok(published["pulled"], "pull")
    down = f"http://127.0.0.1:{free_closed_port()}"
    script = LOAD_FROM_CACHE.format(loaded=str(tmp_path / "down.safetensors"), empty=str(tmp_path / "empty"))
    script = NO_BACKOFF_SLEEPS + script
    script += f"""
model = ELMoModel.from_pretrained({str(checkpoints["v1"][0])!r})
attempt("push", lambda: model.push_to_hub("alice/elmo-tiny", token={WRITE!r}))
finish()
"""
    result = clients.script(script, tmp_path, "down", down, published["warm_home"])
    assert_same_state(load_file(expect_ok(result, "load from the warm cache")), checkpoints["v1"][1])
    fragments = (f"We couldn't connect to '{down}' to load the files",)
    expect_error(result, "load with an empty cache", "OSError", *fragments, cause="LocalEntryNotFoundError")
    expect_error(result, "push", "ConnectError", "Connection refused")


# ----------------------------------------------------------------------------------------------------------------
# 5 (cont.). The server alone, over HTTP: the LFS protocol, the headers hf_hub_download relies on, error answers
# ----------------------------------------------------------------------------------------------------------------
class Http:
    """A minimal HTTP client for the server unit checks (no proxy): (status, headers, body)."""

    def __init__(self, url: str):
        self.url = url
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def __call__(self, method: str, path: str, body: bytes | dict | None = None, token: str | None = WRITE, **headers):
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        request = urllib.request.Request(path if "://" in path else self.url + path, data, headers, method=method)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with self.opener.open(request, timeout=10) as response:
                return response.status, response.headers, response.read()
        except HTTPError as error:
            return error.code, error.headers, error.read()


def ndjson(*items: dict) -> bytes:
    """A commit body: the header line, then the operations."""
    header = {"key": "header", "value": {"summary": "add"}}
    return b"".join(json.dumps(item).encode() + b"\n" for item in (header, *items))


@pytest.fixture()
def own_hub(tmp_path):
    with HubTestServer(tmp_path / "storage", tokens=TOKENS, lfs_threshold=1000) as server:
        yield server


def test_server_lfs_upload_protocol(own_hub):
    http = Http(own_hub.url)
    assert http("POST", "/api/repos/create", {"name": "lfs", "organization": "alice"})[0] == 200
    weights, config, notes = b"\x00weights" * 100, b'{"a": 1}\n', b"x" * 2000  # notes: over lfs_threshold
    files = [{"path": path, "size": len(content), "sample": ""} for path, content in
             (("model.safetensors", weights), ("config.json", config), ("notes.txt", notes))]  # fmt: skip
    status, _, body = http("POST", "/api/models/alice/lfs/preupload/main", {"files": files})
    modes = {item["path"]: item["uploadMode"] for item in json.loads(body)["files"]}
    assert status == 200 and modes == {"model.safetensors": "lfs", "config.json": "regular", "notes.txt": "lfs"}

    oid, size = hashlib.sha256(weights).hexdigest(), len(weights)
    batch = {"operation": "upload", "transfers": ["basic", "multipart"], "objects": [{"oid": oid, "size": size}]}
    assert http("POST", "/alice/lfs.git/info/lfs/objects/batch", batch, token=READ)[0] == 403
    actions = json.loads(http("POST", "/alice/lfs.git/info/lfs/objects/batch", batch)[2])["objects"][0]["actions"]
    upload, verify = actions["upload"]["href"], actions["verify"]["href"]
    assert urlsplit(upload).netloc == urlsplit(own_hub.url).netloc  # back to this server, single part
    assert "chunk_size" not in actions["upload"].get("header", {})

    # committing before the upload fails; uploads are checked against sha256 and size, and must be signed
    lfs_file = {"key": "lfsFile", "value": {"path": "model.safetensors", "algo": "sha256", "oid": oid, "size": size}}
    commit_url, commit_type = "/api/models/alice/lfs/commit/main", {"Content-Type": "application/x-ndjson"}
    assert http("POST", commit_url, ndjson(lfs_file), **commit_type)[0] == 422
    assert http("PUT", upload, weights[:-1] + b"!", token=None)[0] == 400
    assert http("PUT", upload.replace("sig=", "sig=0"), weights, token=None)[0] == 403
    assert not own_hub.blob_path(oid).exists()
    # a chunked upload, as a client streaming a file object of unknown length sends it
    split = urlsplit(upload)
    connection = HTTPConnection(split.hostname, split.port, timeout=10)
    chunks = iter([weights[:300], weights[300:]])
    connection.request("PUT", f"{split.path}?{split.query}", body=chunks, encode_chunked=True)
    assert connection.getresponse().status == 200
    connection.close()
    assert sha256_of(own_hub.blob_path(oid)) == oid and own_hub.state.lfs_uploads == {oid: size}
    assert http("POST", verify, {"oid": oid, "size": size})[0] == 200
    objects = json.loads(http("POST", "/alice/lfs.git/info/lfs/objects/batch", batch)[2])["objects"]
    assert "actions" not in objects[0]  # already uploaded: nothing to do

    inline = {"key": "file", "value": {"path": "config.json", "encoding": "base64", "content": "eyJhIjogMX0K"}}
    status, _, body = http("POST", commit_url, ndjson(lfs_file, inline), **commit_type)
    assert status == 200
    commit = json.loads(body)["commitOid"]

    status, headers, _ = http("HEAD", "/alice/lfs/resolve/main/model.safetensors", token=None)
    assert status == 200 and headers["X-Repo-Commit"] == commit and headers["Content-Length"] == str(size)
    assert headers["X-Linked-Etag"] == f'"{oid}"' and headers["X-Linked-Size"] == str(size)
    status, headers, body = http("GET", f"/alice/lfs/resolve/{commit}/config.json", token=None)
    assert body == config and headers["ETag"] == f'"{git_blob_id(config)}"' and "X-Linked-Etag" not in headers
    assert http("GET", "/alice/lfs/resolve/main/model.safetensors", token=None, Range="bytes=10-")[2] == weights[10:]

    tree = json.loads(http("GET", "/api/models/alice/lfs/tree/main?recursive=true")[2])
    lfs_oids = {entry["path"]: entry.get("lfs", {}).get("oid") for entry in tree}
    assert lfs_oids == {".gitattributes": None, "config.json": None, "model.safetensors": oid}
    info = json.loads(http("GET", f"/api/models/alice/lfs/revision/{commit}?blobs=true")[2])
    assert info["sha"] == commit and [sibling["rfilename"] for sibling in info["siblings"]] == sorted(lfs_oids)
    assert own_hub.blob_path(own_hub.files("alice/lfs")[".gitattributes"].sha256).read_bytes() == GITATTRIBUTES


def test_server_error_answers(own_hub):
    http = Http(own_hub.url)
    private = {"name": "repo", "organization": "alice", "visibility": "private"}
    assert http("POST", "/api/repos/create", private)[0] == 200
    status, _, body = http("POST", "/api/repos/create", private)
    assert status == 409 and json.loads(body)["url"] == f"{own_hub.url}/alice/repo"  # create_repo(exist_ok) reads it

    def error(method: str, path: str, **kwargs) -> tuple[int, str | None, str | None]:
        status, headers, _ = http(method, path, **kwargs)
        return status, headers.get("X-Error-Code"), headers.get("X-Error-Message")

    assert error("GET", "/api/whoami-v2", token="bad") == (401, None, "Invalid credentials in Authorization header")
    assert error("GET", "/api/models/alice/repo", token=None)[:2] == (404, "RepoNotFound")  # private: invisible
    assert error("GET", "/api/models/alice/repo", token=READ)[0] == 200
    assert error("HEAD", "/alice/repo/resolve/main/config.json", token=None)[:2] == (404, "RepoNotFound")
    status, code, message = error("HEAD", "/alice/repo/resolve/nope/config.json")
    assert (status, code) == (404, "RevisionNotFound") and "nope" in message
    status, headers, _ = http("HEAD", "/alice/repo/resolve/main/config.json")
    assert (status, headers["X-Error-Code"]) == (404, "EntryNotFound") and len(headers["X-Repo-Commit"]) == 40
    assert error("POST", "/api/models/alice/repo/branch/dev", body={}, token=READ)[0] == 403
    assert error("POST", "/api/models/alice/repo/branch/dev", body={})[0] == 200
    assert error("POST", "/api/models/alice/repo/branch/dev", body={})[0] == 409
    assert error("GET", "/api/datasets/alice/data")[:2] == (404, "RepoNotFound")
    assert error("GET", "/api/models/gpt2")[:2] == (404, "RepoNotFound")  # ids without a namespace are not hosted
    assert error("POST", "/api/repos/create", body={"name": "d", "type": "dataset"})[0] == 400

    status, code, message = error("GET", "/api/models/alice/repo/discussions")
    assert status == 501 and "/api/models/alice/repo/discussions" in message
    assert own_hub.unexpected == ["GET /api/models/alice/repo/discussions"] and own_hub.errors == []


def test_server_runs_as_a_module_and_prints_its_url(tmp_path):
    command = [sys.executable, "-m", "tests.hub.hub_server", "--storage", str(tmp_path), "--port", "0"]
    process = subprocess.Popen(command, cwd=REPOSITORY_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        status, _, body = Http(url)("GET", "/api/whoami-v2")
        assert status == 200 and json.loads(body)["auth"]["accessToken"]["role"] == "write"
    finally:
        process.terminate()
        process.wait(timeout=10)


# ----------------------------------------------------------------------------------------------------------------
# 6. The conversion CLI pushing a converted checkpoint
# ----------------------------------------------------------------------------------------------------------------
def test_convert_allennlp_fixture_and_push_to_hub(hub, clients, tmp_path):
    fixture, output = FIXTURES_DIR / "allennlp-elmo", tmp_path / "converted"
    arguments = ["convert_allennlp_to_hf", "--options", str(fixture / "options.json")]
    arguments += ["--weights", str(fixture / "lm_weights.hdf5"), "--output", str(output)]
    arguments += ["--push-to-hub", "alice/elmo-fixture"]  # the token comes from HF_TOKEN
    env = client_environment(hub.url, tmp_path / "home-convert", token=WRITE)
    stdout, stderr = tmp_path / "convert.stdout", tmp_path / "convert.stderr"
    code = clients.run(arguments, env, stdout, stderr, module="conversion.convert_allennlp_to_hf")
    assert code == 0, f"{stdout.read_text()[-2000:]}\n{stderr.read_text()[-5000:]}"
    weights = hub.files("alice/elmo-fixture")["model.safetensors"]
    assert weights.lfs and weights.sha256 == sha256_of(output / "model.safetensors")

    path = str(tmp_path / "pulled.safetensors")
    result = clients.script(
        f"""
        from elmo_hf import ELMoModel
        attempt("pull", lambda: save_state(ELMoModel.from_pretrained("alice/elmo-fixture"), {path!r}))
        finish()
        """,
        tmp_path, "pull-converted", hub.url, tmp_path / "home-pull",
    )  # fmt: skip
    pulled, local = load_file(expect_ok(result, "pull")), load_file(output / "model.safetensors")
    assert sorted(pulled) == sorted(local) and all(torch.equal(pulled[name], local[name]) for name in local)


def test_convert_and_push_to_a_private_branch(hub, clients, tmp_path):
    fixture, output = FIXTURES_DIR / "allennlp-elmo", tmp_path / "converted"
    arguments = ["convert_allennlp_to_hf", "--options", str(fixture / "options.json")]
    arguments += ["--weights", str(fixture / "lm_weights.hdf5"), "--output", str(output)]
    arguments += ["--push-to-hub", "alice/elmo-fixture-private", "--private", "--revision", "converted"]
    env = client_environment(hub.url, tmp_path / "home-convert", token=WRITE)
    stdout, stderr = tmp_path / "convert.stdout", tmp_path / "convert.stderr"
    code = clients.run(arguments, env, stdout, stderr, module="conversion.convert_allennlp_to_hf")
    assert code == 0, f"{stdout.read_text()[-2000:]}\n{stderr.read_text()[-5000:]}"
    assert hub.state.repos["alice/elmo-fixture-private"].private
    assert set(hub.branches("alice/elmo-fixture-private")) == {"main", "converted"}
    uploaded = hub.files("alice/elmo-fixture-private", revision="converted")
    assert {"model.safetensors", "config.json", "tokenizer_config.json", "README.md", "original_options.json"} <= set(uploaded)
    assert "model.safetensors" not in hub.files("alice/elmo-fixture-private")  # main is untouched
