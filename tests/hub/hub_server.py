"""A small Hugging Face Hub-compatible HTTP server, used only by the tests.

It implements the endpoints that the installed ``huggingface_hub`` client (2.x, with ``HF_HUB_DISABLE_XET=1``) calls
for ``push_to_hub`` / ``from_pretrained`` on model repositories, so pushing and pulling can be tested offline with
the real client: point ``HF_ENDPOINT`` at :attr:`HubTestServer.url` *before* ``huggingface_hub`` is imported (it reads
``HF_ENDPOINT``, ``HF_HUB_DISABLE_XET``, ``HF_HOME`` and ``HF_HUB_OFFLINE`` at import time), e.g. in a subprocess.

Endpoints (``{repo}`` is ``namespace/name``; ``{rev}`` a branch name or a 40-hex commit id, URL-quoted)::

    GET      /api/whoami-v2
    GET      /api/agent-harnesses                          (fetched by the client for its user agent: empty)
    POST     /api/repos/create                             {"name", "organization", "visibility"|"private", "type"}
    POST     /api/validate-yaml                            (README.md front matter: always valid here)
    GET      /api/models/{repo}[/revision/{rev}]           repo info: sha, siblings, private, ...
    GET      /api/models/{repo}/refs                       branches
    GET      /api/models/{repo}/tree/{rev}[/{path}]        ?recursive=
    POST     /api/models/{repo}/paths-info/{rev}           form: paths=...
    POST     /api/models/{repo}/branch/{branch}            {"startingPoint": rev}
    POST     /api/models/{repo}/preupload/{rev}            which files go through LFS ("lfs") or inline ("regular")
    POST     /api/models/{repo}/commit/{rev}               NDJSON: header, file (base64), lfsFile, deletedFile, ...
    POST     /{repo}.git/info/lfs/objects/batch            LFS batch API (upload): actions point back here
    PUT      /lfs-upload/{sha256}?size=&sig=               the upload action (signed URL; no Authorization header)
    POST     /{repo}.git/info/lfs/objects/verify           the verify action
    GET/HEAD /{repo}/resolve/{rev}/{path}                  file download + the headers hf_hub_download needs

Anything else is answered ``501`` with the method and path in the JSON ``error`` (and printed to stderr), so that a
test fails clearly when a new client version calls something new. Datasets, Spaces and kernels are answered ``404``
(``RepoNotFound``): only model repositories are hosted.

Auth is ``Authorization: Bearer TOKEN`` with tokens given at start (``{"write-token": "write", "read-token":
"read"}``): an unknown token gets 401, writing with a read token 403, and a private repository is answered 404
``RepoNotFound`` (like the Hub) to a request without a token. Errors carry ``X-Error-Code`` / ``X-Error-Message``
headers and an ``{"error": ...}`` body, which the client turns into ``RepositoryNotFoundError``,
``RevisionNotFoundError``, ``RemoteEntryNotFoundError`` or ``HfHubHTTPError``.

Repositories, branches and the whole commit history live in memory; file contents are stored on disk, by sha256,
under ``storage_dir/blobs``. Standard library only.

By hand::

    python -m tests.hub.hub_server --storage /tmp/hub --port 0
    HF_ENDPOINT=<printed url> HF_HUB_DISABLE_XET=1 HF_TOKEN=write-token python ...
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

DEFAULT_TOKENS = {"write-token": "write", "read-token": "read"}
DEFAULT_USER = "alice"
# Files that go through LFS whatever their size (a subset of the Hub's default .gitattributes), and the size above
# which any file does. The Hub uses 10 MB; a small value here makes the LFS path easy to exercise.
LFS_SUFFIXES = (
    ".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".hdf5", ".npy", ".npz", ".msgpack", ".onnx", ".pkl",
    ".gz", ".zip", ".tar", ".arrow", ".parquet",
)  # fmt: skip
DEFAULT_LFS_THRESHOLD = 1024 * 1024
MAX_BODY_SIZE = 1 << 30  # no request body larger than 1 GiB
CHUNK_SIZE = 1 << 20
GITATTRIBUTES = "".join(f"*{suffix} filter=lfs diff=lfs merge=lfs -text\n" for suffix in LFS_SUFFIXES).encode()
COMMIT_ID = re.compile(r"[0-9a-f]{40}")
SHA256 = re.compile(r"[0-9a-f]{64}")
OTHER_REPO_TYPES = ("datasets", "spaces", "kernels")


def git_blob_id(content: bytes) -> str:
    """The git object id of a blob (what the Hub reports as a regular file's ``oid`` and ``ETag``)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())


@dataclass(frozen=True)
class FileEntry:
    size: int
    sha256: str  # of the content; the name of the blob on disk
    git_oid: str  # git blob id of the content (regular file) or of the LFS pointer (LFS file)
    lfs: bool

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.git_oid

    def tree_entry(self, path: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"type": "file", "oid": self.git_oid, "size": self.size, "path": path}
        if self.lfs:
            pointer_size = len(lfs_pointer(self.sha256, self.size))
            entry["lfs"] = {"oid": self.sha256, "size": self.size, "pointerSize": pointer_size}
        return entry


@dataclass(frozen=True)
class Commit:
    oid: str
    parent: str | None
    title: str
    description: str
    date: str
    files: dict[str, FileEntry]


@dataclass
class Repo:
    repo_id: str
    private: bool
    created_at: str
    branches: dict[str, str]  # branch name -> commit id
    commits: dict[str, Commit]  # commit id -> commit (the whole history)


class HubError(Exception):
    """An error answer: HTTP status, message (JSON ``error`` + ``X-Error-Message``), optional ``X-Error-Code``."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        body: dict[str, Any] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.code, self.headers, self.body = status, message, code, headers or {}, body or {}


def repo_not_found(repo_id: str) -> HubError:
    return HubError(404, f"Repository not found: {repo_id}", "RepoNotFound")


def revision_not_found(repo_id: str, revision: str) -> HubError:
    return HubError(404, f"Invalid rev id: {revision} (no such branch or commit in {repo_id})", "RevisionNotFound")


class HubState:
    """Repositories, commits and blobs, behind one lock. Knows nothing about HTTP."""

    def __init__(self, storage_dir: Path, tokens: dict[str, str], user: str, lfs_threshold: int):
        for role in tokens.values():
            if role not in ("read", "write"):
                raise ValueError(f"token roles are 'read' or 'write', not {role!r}")
        self.blob_dir = Path(storage_dir) / "blobs"
        self.blob_dir.mkdir(parents=True, exist_ok=True)
        self.tokens, self.user, self.lfs_threshold = dict(tokens), user, lfs_threshold
        self.repos: dict[str, Repo] = {}
        self.lfs_uploads: dict[str, int] = {}  # sha256 -> size of every blob received through an LFS PUT
        self.signing_key = secrets.token_bytes(32)
        self.lock = threading.RLock()
        self._commit_counter = 0

    # -- auth -----------------------------------------------------------------------------------------------------
    def role(self, token: str | None) -> str | None:
        """None for an anonymous request; 401 for a token the server does not know."""
        if token is None:
            return None
        if token not in self.tokens:
            raise HubError(401, "Invalid credentials in Authorization header")
        return self.tokens[token]

    @staticmethod
    def require_write(role: str | None, what: str) -> None:
        if role is None:
            raise HubError(401, f"You must be authenticated with a write token to {what}")
        if role != "write":
            raise HubError(403, f"You don't have the rights to {what}: your token is read-only (role 'read')")

    def readable_repo(self, repo_id: str, role: str | None) -> Repo:
        repo = self.repos.get(repo_id)
        if repo is None or (repo.private and role is None):
            raise repo_not_found(repo_id)
        return repo

    def writable_repo(self, repo_id: str, role: str | None, what: str) -> Repo:
        repo = self.readable_repo(repo_id, role)
        self.require_write(role, f"{what} {repo_id}")
        return repo

    # -- blobs ----------------------------------------------------------------------------------------------------
    def blob_path(self, sha256: str) -> Path:
        return self.blob_dir / sha256

    def has_blob(self, sha256: str, size: int) -> bool:
        path = self.blob_path(sha256)
        return path.is_file() and path.stat().st_size == size

    def store_bytes(self, content: bytes) -> str:
        sha256 = hashlib.sha256(content).hexdigest()
        if not self.has_blob(sha256, len(content)):
            with tempfile.NamedTemporaryFile(dir=self.blob_dir, delete=False) as tmp:
                tmp.write(content)
            os.replace(tmp.name, self.blob_path(sha256))
        return sha256

    def upload_signature(self, sha256: str, size: int) -> str:
        return hmac.new(self.signing_key, f"{sha256}:{size}".encode(), hashlib.sha256).hexdigest()

    # -- repos, revisions -----------------------------------------------------------------------------------------
    def new_commit(
        self, repo: Repo, parent: str | None, title: str, description: str, files: dict[str, FileEntry]
    ) -> Commit:
        self._commit_counter += 1
        tree = sorted((path, entry.git_oid) for path, entry in files.items())
        seed = json.dumps([repo.repo_id, parent, title, tree, self._commit_counter, time.time_ns()])
        commit = Commit(hashlib.sha1(seed.encode()).hexdigest(), parent, title, description, now_iso(), files)
        repo.commits[commit.oid] = commit
        return commit

    def create_repo(self, repo_id: str, private: bool) -> Repo:
        repo = Repo(repo_id, private, now_iso(), {}, {})
        sha256 = self.store_bytes(GITATTRIBUTES)
        files = {".gitattributes": FileEntry(len(GITATTRIBUTES), sha256, git_blob_id(GITATTRIBUTES), False)}
        repo.branches["main"] = self.new_commit(repo, None, "initial commit", "", files).oid
        self.repos[repo_id] = repo
        return repo

    @staticmethod
    def resolve(repo: Repo, revision: str) -> Commit:
        branch = revision.removeprefix("refs/heads/")
        if branch in repo.branches:
            return repo.commits[repo.branches[branch]]
        if COMMIT_ID.fullmatch(revision) and revision in repo.commits:
            return repo.commits[revision]
        raise revision_not_found(repo.repo_id, revision)

    def upload_mode(self, path: str, size: int, sample: bytes) -> str:
        binary = b"\0" in sample
        return "lfs" if path.lower().endswith(LFS_SUFFIXES) or size > self.lfs_threshold or binary else "regular"


def folder_entry(path: str) -> dict[str, Any]:
    return {"type": "directory", "oid": hashlib.sha1(path.encode()).hexdigest(), "size": 0, "path": path}


def tree_listing(files: dict[str, FileEntry], path: str, recursive: bool) -> list[dict[str, Any]] | None:
    """Entries under ``path`` (files and directories, like the Hub's tree API), or None if ``path`` is no folder."""
    prefix = f"{path.strip('/')}/" if path.strip("/") else ""
    entries: dict[str, dict[str, Any]] = {}
    for file_path, entry in sorted(files.items()):
        if not file_path.startswith(prefix):
            continue
        parts = file_path[len(prefix) :].split("/")
        depth = len(parts) if recursive else 1
        for i in range(1, min(depth, len(parts) - 1) + 1):  # the folders on the way
            folder = prefix + "/".join(parts[:i])
            entries.setdefault(folder, folder_entry(folder))
        if recursive or len(parts) == 1:
            entries[file_path] = entry.tree_entry(file_path)
    if prefix and not entries:
        return None
    return list(entries.values())


class HubRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like the Hub; every answer has a Content-Length
    server_version = "HubTestServer/1.0"
    timeout = 60  # an idle keep-alive connection is dropped after this many seconds
    disable_nagle_algorithm = True  # headers and body are two writes: without TCP_NODELAY each answer waits ~40 ms
    server: "_Server"

    # -- plumbing -------------------------------------------------------------------------------------------------
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - BaseHTTPRequestHandler's signature
        if self.server.hub.verbose:
            super().log_message(format, *args)

    def _dispatch(self) -> None:
        self._body_read = False
        split = urlsplit(self.path)
        self.query = {key: values[-1] for key, values in parse_qs(split.query).items()}
        self.segments = [unquote(segment) for segment in split.path.split("/")[1:]]  # split first: %2F stays inside
        hub = self.server.hub
        status = 500
        try:
            authorization = self.headers.get("Authorization", "")
            token = authorization[len("Bearer ") :].strip() if authorization.startswith("Bearer ") else None
            with hub.state.lock:
                self.role = hub.state.role(token)
            route = self._route()
            if route is None:
                hub.unexpected.append(f"{self.command} {self.path}")
                print(f"hub_server: UNEXPECTED REQUEST {self.command} {self.path}", file=sys.stderr, flush=True)
                raise HubError(501, f"hub test server: {self.command} {split.path} is not implemented")
            status = route() or 200
        except HubError as error:
            status = error.status
            self._send_error(error)
        except Exception as error:  # a bug in this server: answer 500 and remember it, for the tests to report
            hub.errors.append(f"{self.command} {self.path}: {error!r}")
            print(f"hub_server: ERROR on {self.command} {self.path}: {error!r}", file=sys.stderr, flush=True)
            self._send_error(HubError(500, f"hub test server error: {error!r}"))
        finally:
            hub.requests.append((self.command, self.path, status))

    # BaseHTTPRequestHandler calls do_<METHOD>; every method goes through the same router.
    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = _dispatch

    def _route(self):  # -> a bound method answering the request, or None
        s, method = self.segments, self.command
        if s[:1] == ["api"] and len(s) >= 2:
            if s[1] in OTHER_REPO_TYPES:
                raise HubError(404, f"hub test server: only model repositories are hosted, not {s[1]}", "RepoNotFound")
            if s[1:] == ["agent-harnesses"] and method == "GET":
                return self.agent_harnesses
            if s[1:] == ["whoami-v2"] and method == "GET":
                return self.whoami
            if s[1:] == ["repos", "create"] and method == "POST":
                return self.create_repo
            if s[1:] == ["validate-yaml"] and method == "POST":
                return self.validate_yaml
            if s[1] == "models" and len(s) == 3:
                raise HubError(404, f"hub test server: repository ids are namespace/name, not {s[2]}", "RepoNotFound")
            if s[1] == "models" and len(s) >= 4:
                self.repo_id, action, rest = f"{s[2]}/{s[3]}", s[4] if len(s) > 4 else None, s[5:]
                routes = {
                    ("GET", None): self.repo_info,
                    ("GET", "revision"): self.repo_info,
                    ("GET", "refs"): self.refs,
                    ("GET", "tree"): self.tree,
                    ("POST", "paths-info"): self.paths_info,
                    ("POST", "branch"): self.create_branch,
                    ("POST", "preupload"): self.preupload,
                    ("POST", "commit"): self.commit,
                }
                # how many path segments may follow the action: none, one revision, or a revision/branch and a path
                allowed = {None: (0, 0), "refs": (0, 0), "tree": (1, 999), "branch": (1, 999)}.get(action, (1, 1))
                if (method, action) in routes and allowed[0] <= len(rest) <= allowed[1]:
                    self.rest = rest
                    return routes[(method, action)]
            return None
        if s[:1] == ["lfs-upload"] and len(s) == 2 and method == "PUT":
            return self.lfs_upload
        if len(s) >= 1 and s[0] in OTHER_REPO_TYPES and "resolve" in s:
            raise HubError(404, f"hub test server: only model repositories are hosted, not {s[0]}", "RepoNotFound")
        if len(s) >= 4 and s[1] == "resolve":
            raise HubError(404, f"hub test server: repository ids are namespace/name, not {s[0]}", "RepoNotFound")
        if len(s) >= 5 and s[2] == "resolve" and method in ("GET", "HEAD"):
            self.repo_id, self.rest = f"{s[0]}/{s[1]}", s[3:]
            return self.resolve
        if len(s) == 6 and s[1].endswith(".git") and s[2:5] == ["info", "lfs", "objects"] and method == "POST":
            self.repo_id = f"{s[0]}/{s[1].removesuffix('.git')}"
            return {"batch": self.lfs_batch, "verify": self.lfs_verify}.get(s[5])
        return None

    def _read_body(self) -> bytes:
        return b"".join(self._iter_body())

    def _iter_body(self):
        """The request body, as chunks (Content-Length or chunked transfer encoding), at most MAX_BODY_SIZE bytes."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            total = 0
            while True:
                try:
                    size = int(self.rfile.readline(1024).split(b";")[0].strip(), 16)
                except ValueError:
                    raise HubError(400, "malformed chunked request body") from None
                if size == 0:
                    while self.rfile.readline(1024).strip():  # trailers, then the empty line
                        pass
                    self._body_read = True
                    return
                total += size
                if total > MAX_BODY_SIZE:
                    raise HubError(413, "request body too large")
                yield self.rfile.read(size)
                self.rfile.readline(1024)  # CRLF after each chunk
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_SIZE:
            raise HubError(413, "request body too large")
        while length > 0:
            chunk = self.rfile.read(min(CHUNK_SIZE, length))
            if not chunk:
                raise HubError(400, "request body shorter than its Content-Length")
            length -= len(chunk)
            yield chunk
        self._body_read = True

    def _json_body(self) -> Any:
        try:
            return json.loads(self._read_body() or b"{}")
        except json.JSONDecodeError as error:
            raise HubError(400, f"invalid JSON body: {error}") from None

    def _send(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> int:
        self.send_response(status)
        has_body = self.headers.get("Transfer-Encoding") or int(self.headers.get("Content-Length") or 0) > 0
        if has_body and not self._body_read:  # answering early: don't let the unread body poison keep-alive
            self.close_connection = True
            self.send_header("Connection", "close")
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        return status

    def _send_json(
        self,
        payload: Any,
        status: int = 200,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> int:
        return self._send(status, json.dumps(payload).encode(), content_type, headers)

    def _send_error(self, error: HubError) -> None:
        headers = {"X-Error-Message": error.message.encode("ascii", "replace").decode(), **error.headers}
        if error.code:
            headers["X-Error-Code"] = error.code
        self._send_json({"error": error.message, **error.body}, error.status, headers)

    # -- endpoints ------------------------------------------------------------------------------------------------
    def whoami(self) -> int:
        if self.role is None:
            raise HubError(401, "Invalid credentials in Authorization header")
        user = self.server.hub.state.user
        return self._send_json({
            "type": "user", "id": hashlib.sha1(user.encode()).hexdigest()[:24], "name": user, "fullname": user,
            "email": None, "emailVerified": False, "isPro": False, "orgs": [],
            "auth": {"type": "access_token", "accessToken": {"displayName": f"{self.role} token", "role": self.role}},
        })  # fmt: skip

    def agent_harnesses(self) -> int:
        # huggingface_hub fetches this registry (for its user agent) once a day; an empty one disables detection
        return self._send_json({"standardEnvVars": [], "harnesses": {}})

    def validate_yaml(self) -> int:
        self._read_body()
        return self._send_json({"errors": [], "warnings": []})

    def create_repo(self) -> int:
        state, payload = self.server.hub.state, self._json_body()
        if payload.get("type") not in (None, "model"):
            raise HubError(400, f"hub test server: only model repositories can be created, not {payload.get('type')!r}")
        name, namespace = payload.get("name"), payload.get("organization") or state.user
        if not isinstance(name, str) or not re.fullmatch(r"[\w.-]+", name) or not re.fullmatch(r"[\w.-]+", namespace):
            raise HubError(400, f"invalid repository name: {namespace}/{name}")
        repo_id = f"{namespace}/{name}"
        private = payload.get("visibility") == "private" or payload.get("private") is True
        with state.lock:
            state.require_write(self.role, f"create the repository {repo_id}")
            if repo_id in state.repos:
                # the client reads "url" from this 409 answer when create_repo(exist_ok=True)
                url = f"{self.server.hub.url}/{repo_id}"
                raise HubError(409, "You already created this model repo", body={"url": url})
            state.create_repo(repo_id, private)
        return self._send_json({"url": f"{self.server.hub.url}/{repo_id}", "name": repo_id, "id": repo_id})

    def repo_info(self) -> int:
        state = self.server.hub.state
        with state.lock:
            repo = state.readable_repo(self.repo_id, self.role)
            commit = state.resolve(repo, self.rest[0] if self.rest else "main")
            blobs = self.query.get("blobs", "").lower() in ("1", "true")
            siblings = []
            for path, entry in sorted(commit.files.items()):
                sibling: dict[str, Any] = {"rfilename": path}
                if blobs:
                    sibling.update(size=entry.size, blobId=entry.git_oid)
                    if entry.lfs:
                        sibling["lfs"] = entry.tree_entry(path)["lfs"] | {"sha256": entry.sha256}
                siblings.append(sibling)
            info = {
                "_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24], "id": repo.repo_id,
                "modelId": repo.repo_id,
                "author": repo.repo_id.split("/")[0], "sha": commit.oid, "lastModified": commit.date,
                "createdAt": repo.created_at, "private": repo.private, "gated": False, "disabled": False,
                "downloads": 0, "likes": 0, "tags": [], "siblings": siblings,
            }  # fmt: skip
        return self._send_json(info)

    def refs(self) -> int:
        state = self.server.hub.state
        with state.lock:
            repo = state.readable_repo(self.repo_id, self.role)
            branches = [
                {"name": name, "ref": f"refs/heads/{name}", "targetCommit": oid} for name, oid in repo.branches.items()
            ]
        return self._send_json({"branches": branches, "converts": [], "tags": [], "pullRequests": []})

    def tree(self) -> int:
        state = self.server.hub.state
        recursive = self.query.get("recursive", "").lower() in ("1", "true")
        with state.lock:
            repo = state.readable_repo(self.repo_id, self.role)
            commit = state.resolve(repo, self.rest[0])
            path = "/".join(self.rest[1:])
            entries = tree_listing(commit.files, path, recursive)
        if entries is None:
            raise HubError(404, f"Entry not found: {path} at {commit.oid}", "EntryNotFound")
        return self._send_json(entries)

    def paths_info(self) -> int:
        state = self.server.hub.state
        form = parse_qs(self._read_body().decode())
        with state.lock:
            repo = state.readable_repo(self.repo_id, self.role)
            commit = state.resolve(repo, self.rest[0])
            entries = []
            for path in form.get("paths", []):
                path = path.strip("/")
                if path in commit.files:
                    entries.append(commit.files[path].tree_entry(path))
                elif any(file_path.startswith(f"{path}/") for file_path in commit.files):
                    entries.append(folder_entry(path))
        return self._send_json(entries)

    def create_branch(self) -> int:
        state, payload = self.server.hub.state, self._json_body()
        branch = "/".join(self.rest)
        if not re.fullmatch(r"[\w.-]+(/[\w.-]+)*", branch) or COMMIT_ID.fullmatch(branch):
            raise HubError(400, f"invalid branch name: {branch}")
        with state.lock:
            repo = state.writable_repo(self.repo_id, self.role, "create a branch in")
            if branch in repo.branches:
                raise HubError(409, f"Reference already exists: refs/heads/{branch}")
            start = state.resolve(repo, payload.get("startingPoint") or "main")
            repo.branches[branch] = start.oid
        return self._send_json({})

    def preupload(self) -> int:
        state, payload = self.server.hub.state, self._json_body()
        if not isinstance(payload.get("files"), list):
            raise HubError(400, "preupload: expected a 'files' list")
        with state.lock:
            repo = state.writable_repo(self.repo_id, self.role, "upload files to")
            commit = state.resolve(repo, self.rest[0])
            answers = []
            for item in payload["files"]:
                path, size = item.get("path"), item.get("size")
                if not isinstance(path, str) or not isinstance(size, int):
                    raise HubError(400, f"preupload: malformed file entry {item!r}")
                mode = state.upload_mode(path, size, base64.b64decode(item.get("sample") or ""))
                existing = commit.files.get(path)
                oid = None if existing is None else (existing.sha256 if mode == "lfs" else existing.git_oid)
                answers.append({"path": path, "uploadMode": mode, "shouldIgnore": False, "oid": oid})
        return self._send_json({"files": answers, "commitOid": commit.oid})

    def commit(self) -> int:
        state, hub = self.server.hub.state, self.server.hub
        if self.query.get("create_pr") in ("1", "true", "True"):
            raise HubError(400, "hub test server: pull requests (create_pr) are not supported")
        lines = [line for line in self._read_body().splitlines() if line.strip()]
        try:
            items = [json.loads(line) for line in lines]
        except json.JSONDecodeError as error:
            raise HubError(400, f"commit: invalid NDJSON: {error}") from None
        if not items or items[0].get("key") != "header":
            raise HubError(400, "commit: the first NDJSON line must be the header")
        header = items[0].get("value") or {}
        branch = self.rest[0].removeprefix("refs/heads/")
        with state.lock:
            repo = state.writable_repo(self.repo_id, self.role, "commit to")
            if branch not in repo.branches:
                if branch in repo.commits:
                    raise HubError(400, f"commits can only be made on a branch, not on the commit {branch}")
                raise revision_not_found(repo.repo_id, branch)
            head = repo.branches[branch]
            if header.get("parentCommit") not in (None, head):
                raise HubError(412, "A commit has happened since. Please refresh and try again.")
            files = dict(repo.commits[head].files)
            for item in items[1:]:
                self._apply_operation(state, files, item.get("key"), item.get("value") or {})
            commit = state.new_commit(repo, head, header.get("summary") or "", header.get("description") or "", files)
            repo.branches[branch] = commit.oid
        return self._send_json({
            "success": True, "commitOid": commit.oid, "commitUrl": f"{hub.url}/{repo.repo_id}/commit/{commit.oid}",
            "hookOutput": "", "pullRequestUrl": None,
        })  # fmt: skip

    @staticmethod
    def _apply_operation(state: HubState, files: dict[str, FileEntry], key: str | None, value: dict[str, Any]) -> None:
        path = value.get("path")
        if not isinstance(path, str) or not path or path.startswith("/") or ".." in path.split("/"):
            raise HubError(400, f"commit: invalid path {path!r}")
        if key == "file":
            if value.get("encoding") != "base64":
                raise HubError(400, f"commit: unsupported encoding {value.get('encoding')!r} for {path}")
            content = base64.b64decode(value.get("content") or "")
            files[path] = FileEntry(len(content), state.store_bytes(content), git_blob_id(content), False)
        elif key == "lfsFile":
            oid, size = value.get("oid"), value.get("size")
            if value.get("algo", "sha256") != "sha256" or not isinstance(oid, str) or not SHA256.fullmatch(oid):
                raise HubError(400, f"commit: invalid LFS oid for {path}: {oid!r}")
            blob = state.blob_path(oid)
            if not blob.is_file() or (size is not None and blob.stat().st_size != size):
                raise HubError(422, f"commit: LFS object {oid} of {path} was not uploaded (or has another size)")
            size = blob.stat().st_size
            files[path] = FileEntry(size, oid, git_blob_id(lfs_pointer(oid, size)), True)
        elif key == "deletedFile":
            if files.pop(path, None) is None:
                raise HubError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
        elif key == "deletedFolder":
            folder = [file_path for file_path in files if file_path.startswith(path.rstrip("/") + "/")]
            if not folder:
                raise HubError(404, f"A folder with this name doesn't exist: {path}", "EntryNotFound")
            for file_path in folder:
                del files[file_path]
        else:
            raise HubError(400, f"hub test server: commit operation {key!r} is not supported")

    def lfs_batch(self) -> int:
        state, hub, payload = self.server.hub.state, self.server.hub, self._json_body()
        if payload.get("operation") != "upload":
            operation = payload.get("operation")
            raise HubError(400, f"hub test server: LFS batch operation {operation!r} is not supported (only upload)")
        if "basic" not in (payload.get("transfers") or ["basic"]):
            raise HubError(400, "hub test server: only the 'basic' LFS transfer is supported")
        with state.lock:
            state.writable_repo(self.repo_id, self.role, "upload LFS files to")
            objects = []
            for item in payload.get("objects") or []:
                oid, size = item.get("oid"), item.get("size")
                if not isinstance(oid, str) or not SHA256.fullmatch(oid) or not isinstance(size, int) or size < 0:
                    error = {"code": 422, "message": "invalid oid or size"}
                    objects.append({"oid": str(oid), "size": size if isinstance(size, int) else 0, "error": error})
                elif state.has_blob(oid, size):
                    objects.append({"oid": oid, "size": size})  # already there: no actions, nothing to upload
                else:
                    upload = f"{hub.url}/lfs-upload/{oid}?size={size}&sig={state.upload_signature(oid, size)}"
                    verify = f"{hub.url}/{quote(self.repo_id)}.git/info/lfs/objects/verify"
                    actions = {
                        "upload": {"href": upload, "expires_in": 3600},
                        "verify": {"href": verify, "expires_in": 3600},
                    }
                    objects.append({"oid": oid, "size": size, "authenticated": True, "actions": actions})
        answer = {"transfer": "basic", "objects": objects, "hash_algo": "sha256"}
        return self._send_json(answer, content_type="application/vnd.git-lfs+json")

    def lfs_upload(self) -> int:
        state, oid = self.server.hub.state, self.segments[1]
        try:
            size = int(self.query.get("size", ""))
        except ValueError:
            raise HubError(400, "lfs upload: missing size") from None
        signature = self.query.get("sig", "")
        if not SHA256.fullmatch(oid) or not hmac.compare_digest(signature, state.upload_signature(oid, size)):
            raise HubError(403, "lfs upload: invalid or missing signature")
        digest, received = hashlib.sha256(), 0
        with tempfile.NamedTemporaryFile(dir=state.blob_dir, delete=False) as tmp:
            try:
                for chunk in self._iter_body():
                    digest.update(chunk)
                    received += len(chunk)
                    tmp.write(chunk)
            except BaseException:
                tmp.close()
                os.unlink(tmp.name)
                raise
        if received != size or digest.hexdigest() != oid:
            os.unlink(tmp.name)
            raise HubError(
                400,
                f"lfs upload: content does not match (expected sha256 {oid} and {size} bytes, "
                f"got {digest.hexdigest()} and {received} bytes)",
            )
        os.replace(tmp.name, state.blob_path(oid))
        with state.lock:
            state.lfs_uploads[oid] = size
        return self._send(200, b"", "text/plain", {"ETag": f'"{oid}"'})

    def lfs_verify(self) -> int:
        state, payload = self.server.hub.state, self._json_body()
        with state.lock:
            state.writable_repo(self.repo_id, self.role, "upload LFS files to")
            oid, size = payload.get("oid"), payload.get("size")
            if not isinstance(oid, str) or not SHA256.fullmatch(oid) or not state.has_blob(oid, size):
                raise HubError(404, f"LFS object {oid} ({size} bytes) not found")
        return self._send_json({"success": True}, content_type="application/vnd.git-lfs+json")

    def resolve(self) -> int:
        state = self.server.hub.state
        with state.lock:
            repo = state.readable_repo(self.repo_id, self.role)
            commit = state.resolve(repo, self.rest[0])
            path = "/".join(self.rest[1:])
            entry = commit.files.get(path)
        headers = {"X-Repo-Commit": commit.oid}
        if entry is None:
            raise HubError(404, f"Entry not found: {path} at {commit.oid}", "EntryNotFound", headers)
        headers.update({"ETag": f'"{entry.etag}"', "Accept-Ranges": "bytes"})
        if entry.lfs:
            headers.update({"X-Linked-Etag": f'"{entry.sha256}"', "X-Linked-Size": str(entry.size)})
        start, end, status = 0, entry.size, 200
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if match and int(match[1]) < entry.size:
            start, end, status = int(match[1]), min(entry.size, int(match[2] or entry.size - 1) + 1), 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{entry.size}"
        self.send_response(status)
        headers.update({"Content-Type": "application/octet-stream", "Content-Length": str(end - start)})
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command == "GET":
            with open(state.blob_path(entry.sha256), "rb") as blob:
                blob.seek(start)
                remaining = end - start
                while remaining > 0:
                    chunk = blob.read(min(CHUNK_SIZE, remaining))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    remaining -= len(chunk)
        return status


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    hub: "HubTestServer"


class HubTestServer:
    """The server, in process: ``with HubTestServer(tmp_path) as hub: ... hub.url ...``.

    Attributes for tests: ``requests`` (method, path, status) of every request, ``unexpected`` (requests answered
    501), ``errors`` (requests that hit a bug here, answered 500), ``state`` (repositories, ``lfs_uploads``).
    """

    def __init__(
        self,
        storage_dir: str | os.PathLike,
        tokens: dict[str, str] | None = None,
        user: str = DEFAULT_USER,
        host: str = "127.0.0.1",
        port: int = 0,
        lfs_threshold: int = DEFAULT_LFS_THRESHOLD,
        verbose: bool = False,
    ):
        self.state = HubState(Path(storage_dir), DEFAULT_TOKENS if tokens is None else tokens, user, lfs_threshold)
        self.host, self.port, self.verbose = host, port, verbose
        self.requests: list[tuple[str, str, int]] = []
        self.unexpected: list[str] = []
        self.errors: list[str] = []
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the hub test server is not running")
        return f"http://{self.host}:{self._httpd.server_address[1]}"

    def start(self) -> "HubTestServer":
        if self._httpd is not None:
            raise RuntimeError("the hub test server is already running")
        self._httpd = _Server((self.host, self.port), HubRequestHandler)
        self._httpd.hub = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="hub-test-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        assert self._thread is not None
        self._thread.join(timeout=10)
        self._httpd = self._thread = None

    def __enter__(self) -> "HubTestServer":
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    # -- inspection, for tests -------------------------------------------------------------------------------------
    def files(self, repo_id: str, revision: str = "main") -> dict[str, FileEntry]:
        with self.state.lock:
            repo = self.state.repos[repo_id]
            return dict(self.state.resolve(repo, revision).files)

    def branches(self, repo_id: str) -> dict[str, str]:
        with self.state.lock:
            return dict(self.state.repos[repo_id].branches)

    def blob_path(self, sha256: str) -> Path:
        return self.state.blob_path(sha256)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A small Hub-compatible server for tests (model repositories only).")
    parser.add_argument("--storage", required=True, help="directory for the file contents (blobs)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument(
        "--token",
        action="append",
        metavar="TOKEN=ROLE",
        help="a token and its role, read or write (repeatable; default: write-token=write read-token=read)",
    )
    parser.add_argument("--user", default=DEFAULT_USER, help="the user every token belongs to")
    parser.add_argument(
        "--lfs-threshold", type=int, default=DEFAULT_LFS_THRESHOLD, help="files larger than this go through LFS"
    )
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    tokens = dict(item.split("=", 1) for item in args.token) if args.token else None
    server = HubTestServer(args.storage, tokens, args.user, args.host, args.port, args.lfs_threshold, args.verbose)
    server.start()
    print(server.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
