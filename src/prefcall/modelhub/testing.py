"""Stand-ins for the tests and the demo scripts: small GGUF files, fake model stores, a fake Hugging Face hub.

Nothing here touches the network: the fake hub listens on 127.0.0.1 only and serves what it was given.

- `write_gguf` writes a small but well-formed GGUF (metadata + one F32 tensor); llama.cpp cannot run it,
  the header reader and `prefcall model list` read it like any other.
- `build_fake_stores` lays out a Hugging Face cache, an Ollama store and an LM Studio folder in one folder,
  exactly as those tools do, optionally pointing some entries at real GGUF files (symlinks, no copies).
- `FakeHub` implements just enough of the hub's `resolve` route for huggingface_hub: HEAD with
  X-Repo-Commit / ETag / X-Linked-Etag / X-Linked-Size, and GET with Range requests.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


# -- GGUF files ----------------------------------------------------------------------------------------
def _gguf_value(value: Any) -> bytes:
    if isinstance(value, bool):
        return struct.pack("<I?", 7, value)
    if isinstance(value, int):
        return struct.pack("<II", 4, value) if 0 <= value < 2**32 else struct.pack("<Iq", 11, value)
    if isinstance(value, float):
        return struct.pack("<If", 6, value)
    if isinstance(value, str):
        return struct.pack("<I", 8) + _gguf_string(value)
    if isinstance(value, list):
        if all(isinstance(v, str) for v in value):
            return struct.pack("<IIQ", 9, 8, len(value)) + b"".join(_gguf_string(v) for v in value)
        return struct.pack("<IIQ", 9, 5, len(value)) + b"".join(struct.pack("<i", int(v)) for v in value)
    raise TypeError(f"cannot write {type(value).__name__} into GGUF metadata")


def _gguf_string(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def gguf_bytes(*, architecture: str = "llama", name: str = "Fake Model", context_length: int = 2048,
               file_type: int = 15, block_count: int = 2, chat_template: str | None = CHATML_TEMPLATE,
               vocab: int = 32, extra: dict[str, Any] | None = None) -> bytes:
    """A small, well-formed GGUF file: metadata plus one F32 token-embedding tensor of zeros."""
    metadata: dict[str, Any] = {
        "general.architecture": architecture,
        "general.name": name,
        "general.file_type": file_type,
        f"{architecture}.context_length": context_length,
        f"{architecture}.block_count": block_count,
        f"{architecture}.embedding_length": 8,
        f"{architecture}.attention.head_count": 2,
        f"{architecture}.attention.head_count_kv": 1,
        "tokenizer.ggml.tokens": [f"t{i}" for i in range(vocab)],
    }
    if chat_template is not None:
        metadata["tokenizer.chat_template"] = chat_template
    metadata.update(extra or {})
    dims = (8, vocab)
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, 1, len(metadata)))
    for key, value in metadata.items():
        out += _gguf_string(key) + _gguf_value(value)
    out += _gguf_string("token_embd.weight") + struct.pack("<I", len(dims))
    out += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", 0, 0)
    out += b"\0" * ((-len(out)) % 32)
    out += b"\0" * (4 * dims[0] * dims[1])
    return bytes(out)


def write_gguf(path: str | Path, **kwargs: Any) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gguf_bytes(**kwargs))
    return path


def sha256_of(path_or_bytes: str | Path | bytes) -> str:
    if isinstance(path_or_bytes, bytes):
        return hashlib.sha256(path_or_bytes).hexdigest()
    digest = hashlib.sha256()
    with Path(path_or_bytes).open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# -- fake stores ---------------------------------------------------------------------------------------
@dataclass
class FakeStores:
    root: Path
    hf_home: Path
    ollama: Path
    lmstudio: Path

    @property
    def hf_cache(self) -> Path:
        return self.hf_home / "hub"

    @property
    def env(self) -> dict[str, str]:
        return {"HF_HOME": str(self.hf_home), "OLLAMA_MODELS": str(self.ollama),
                "PREFCALL_LMSTUDIO_DIR": str(self.lmstudio)}


def add_hf_file(cache: Path, repo_id: str, filename: str, *, source: Path | None = None, data: bytes | None = None,
                commit: str | None = None, refs: tuple[str, ...] = ("main",), sha256: str | None = None) -> Path:
    """Place a file in a Hugging Face cache the way huggingface_hub does: blob, snapshot symlink, refs."""
    commit = commit or hashlib.sha1(f"{repo_id}/{filename}".encode()).hexdigest()
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    digest = sha256 or (sha256_of(source) if source is not None else sha256_of(data or b""))
    blob = repo / "blobs" / digest
    if not blob.exists():
        if source is not None:
            blob.symlink_to(Path(source).resolve())  # no copy of a real model
        else:
            blob.write_bytes(data or b"")
    pointer = repo / "snapshots" / commit / filename
    pointer.parent.mkdir(parents=True, exist_ok=True)
    if not pointer.exists():
        pointer.symlink_to(os.path.relpath(blob, pointer.parent))
    (repo / "refs").mkdir(exist_ok=True)
    for ref in refs:
        (repo / "refs" / ref).write_text(commit)
    return pointer


def add_ollama_model(store: Path, name: str, tag: str = "latest", *, source: Path | None = None,
                     data: bytes | None = None, namespace: str = "library", host: str = "registry.ollama.ai",
                     sha256: str | None = None, missing_blob: bool = False) -> Path:
    """An Ollama manifest with model/template/params layers and the model blob (a symlink for a real file)."""
    digest = sha256 or (sha256_of(source) if source is not None else sha256_of(data or b""))
    blobs = store / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    blob = blobs / f"sha256-{digest}"
    if not missing_blob and not blob.exists():
        if source is not None:
            blob.symlink_to(Path(source).resolve())
        else:
            blob.write_bytes(data or b"")
    layers = [{"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}",
               "size": (source.stat().st_size if source is not None else len(data or b""))}]
    for media, text in (("template", "{{ .Prompt }}"), ("params", '{"stop": ["<|im_end|>"]}')):
        small = text.encode()
        small_digest = sha256_of(small)
        (blobs / f"sha256-{small_digest}").write_bytes(small)
        layers.append({"mediaType": f"application/vnd.ollama.image.{media}", "digest": f"sha256:{small_digest}",
                       "size": len(small)})
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                           "digest": "sha256:" + "0" * 64, "size": 2},
                "layers": layers}
    path = store / "manifests" / host / namespace / name / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest), encoding="utf-8")
    return path


def build_fake_stores(root: str | Path, *, real_models: dict[str, Path] | None = None) -> FakeStores:
    """A Hugging Face cache, an Ollama store and an LM Studio folder with small GGUFs (and broken entries).

    real_models: {"0.5b": path, "1.5b": path} to also expose real Qwen2.5-Coder GGUFs through the stores
    (symlinks): as the catalogue's qwen2.5-coder-0.5b in the HF cache and as ollama:qwen2.5-coder:1.5b."""
    root = Path(root)
    stores = FakeStores(root=root, hf_home=root / "hf", ollama=root / "ollama" / "models",
                        lmstudio=root / "lmstudio" / "models")
    cache = stores.hf_cache
    add_hf_file(cache, "Qwen/Qwen2.5-0.5B-Instruct-GGUF", "qwen2.5-0.5b-instruct-q4_k_m.gguf",
                data=gguf_bytes(architecture="qwen2", name="Qwen2.5 0.5B Instruct (fake)", context_length=32768))
    add_hf_file(cache, "someone/tiny-GGUF", "tiny-q8_0.gguf", refs=("main", "v1"),
                data=gguf_bytes(name="Tiny (fake, no template)", file_type=7, chat_template=None))
    broken = gguf_bytes(name="Broken (fake, truncated)")
    add_hf_file(cache, "someone/broken-GGUF", "broken-q4_k_m.gguf", data=broken[: len(broken) - 100])
    add_ollama_model(stores.ollama, "smollm-fake", "135m",
                     data=gguf_bytes(name="SmolLM (fake ollama)", file_type=3, context_length=8192))
    add_ollama_model(stores.ollama, "gone", "latest", data=b"never written", missing_blob=True)
    write_gguf(stores.lmstudio / "lmstudio-community" / "Qwen2.5-1.5B-Instruct-GGUF" / "Qwen2.5-1.5B-Instruct-Q4_K_M.gguf",
               architecture="qwen2", name="Qwen2.5 1.5B Instruct (fake lmstudio)", context_length=32768)
    (stores.lmstudio / "lmstudio-community" / "notes").mkdir(parents=True, exist_ok=True)
    (stores.lmstudio / "lmstudio-community" / "notes" / "README.gguf").write_text("not a model")
    for key, path in (real_models or {}).items():
        from prefcall.engine.recommended import find_recommended

        entry = find_recommended(f"qwen2.5-coder-{key}")
        if key == "0.5b" and entry is not None:
            add_hf_file(cache, entry.repo, entry.file, source=Path(path), sha256=entry.sha256)
        elif key == "1.5b" and entry is not None:
            add_ollama_model(stores.ollama, "qwen2.5-coder", "1.5b", source=Path(path), sha256=entry.sha256)
    return stores


# -- fake hub ------------------------------------------------------------------------------------------
@dataclass
class HubFile:
    content: bytes
    commit: str
    advertised_sha256: str | None  # what the hub claims (X-Linked-Etag); None: a non-LFS file (git sha1 ETag)


@dataclass
class FakeHub:
    """A local stand-in for https://huggingface.co's resolve route (HEAD + GET with Range), on 127.0.0.1."""

    files: dict[tuple[str, str, str], HubFile] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    required_token: str | None = None

    def add(self, repo_id: str, filename: str, content: bytes, *, revisions: tuple[str, ...] = ("main",),
            commit: str | None = None, advertise_sha256: str | None = None, lfs: bool = True) -> HubFile:
        commit = commit or hashlib.sha1(f"{repo_id}@{revisions[0]}".encode()).hexdigest()
        item = HubFile(content, commit, (advertise_sha256 or sha256_of(content)) if lfs else None)
        for revision in (*revisions, commit):
            self.files[(repo_id, revision, filename)] = item
        return item

    def start(self) -> str:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def do_GET(self) -> None:
                self._serve(body=True)

            def _serve(self, body: bool) -> None:
                hub.requests.append({"method": self.command, "path": self.path, "range": self.headers.get("Range"),
                                     "authorization": self.headers.get("Authorization")})
                if hub.required_token and self.headers.get("Authorization") != f"Bearer {hub.required_token}":
                    return self._error(401, "GatedRepo", "Access to this repo is restricted")
                match = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", self.path.split("?")[0])
                if not match:
                    return self._error(404, "RepoNotFound", "Repository not found")
                repo_id, revision, filename = match[1], unquote(match[2]), unquote(match[3])
                if not any(key[0] == repo_id for key in hub.files):
                    return self._error(404, "RepoNotFound", "Repository not found")
                item = hub.files.get((repo_id, revision, filename))
                if item is None:
                    if not any(key[:2] == (repo_id, revision) for key in hub.files):
                        return self._error(404, "RevisionNotFound", "Invalid rev id")
                    return self._error(404, "EntryNotFound", "Entry not found", commit=next(
                        f.commit for k, f in hub.files.items() if k[:2] == (repo_id, revision)))
                size = len(item.content)
                start, status = 0, 200
                wanted = self.headers.get("Range") if body else None
                if wanted:
                    range_match = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted.strip())
                    if range_match:
                        start, status = int(range_match[1]), 206
                payload = item.content[start:]
                self.send_response(status)
                self.send_header("X-Repo-Commit", item.commit)
                git_sha = hashlib.sha1(b"blob %d\0" % size + item.content).hexdigest()
                self.send_header("ETag", f'"{item.advertised_sha256 or git_sha}"')
                if item.advertised_sha256:
                    self.send_header("X-Linked-Etag", f'"{item.advertised_sha256}"')
                    self.send_header("X-Linked-Size", str(size))
                self.send_header("Accept-Ranges", "bytes")
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
                self.send_header("Content-Length", str(len(payload) if body else size))
                self.end_headers()
                if body:
                    self.wfile.write(payload)

            def _error(self, code: int, error_code: str, message: str, commit: str | None = None) -> None:
                data = json.dumps({"error": message}).encode()
                self.send_response(code)
                self.send_header("X-Error-Code", error_code)
                self.send_header("X-Error-Message", message)
                if commit:
                    self.send_header("X-Repo-Commit", commit)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self.url

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeHub:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def gets(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["method"] == "GET"]
