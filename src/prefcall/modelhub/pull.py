"""`prefcall model pull`: download a GGUF from the Hugging Face hub into the standard HF cache, verified.

The only code in prefcall that uses the network, and only when the user runs `prefcall model pull`.

How (huggingface_hub does the HTTP; prefcall adds resumption and verification):
1. HEAD the file's resolve URL (`get_hf_file_metadata`: honours HF_ENDPOINT, HF_TOKEN / the saved token,
   redirects): commit hash, size, and the LFS SHA-256 (X-Linked-Etag).
2. Refuse early when a catalogue pin and the hub's hash disagree.
3. Download with huggingface_hub's `http_get` (progress bar on stderr, retries, Range requests) into
   `blobs/<sha256>.incomplete` in the cache. The name is stable, so an interrupted pull resumes where it
   stopped (huggingface_hub 2.x's `hf_hub_download` writes a per-process temporary file and deletes it on
   failure, so it restarts a multi-GB download from zero).
4. Hash the complete file. Only a file whose SHA-256 equals the hub's LFS hash (and the pin, where the
   catalogue has one) is moved into the cache (blob + snapshot symlink + refs, huggingface_hub's layout,
   so `hf:` references and every HF tool find it). A mismatch deletes the file and fails with one line.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from prefcall.engine.recommended import RecommendedModel, find_recommended, recommended_for_file
from prefcall.engine.references import SPLIT_RE, hf_hub_cache, hf_repo_folder, parse_reference
from prefcall.errors import ConfigError, DownloadError, IntegrityError

_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_TRUE = {"1", "on", "yes", "true"}


@dataclass
class PullResult:
    reference: str  # what to pass as --model / PREFCALL_MODEL
    repo_id: str
    filename: str
    commit: str
    path: Path
    size: int
    sha256: str
    hub_sha256: str | None
    pinned_sha256: str | None
    downloaded: int = 0  # bytes fetched by this run
    resumed_from: int = 0  # bytes already there from an interrupted pull
    already_present: bool = False
    seconds: float = 0.0
    parts: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"reference": self.reference, "repo": self.repo_id, "file": self.filename, "commit": self.commit,
                "path": str(self.path), "size": self.size, "sha256": self.sha256,
                "verified_against": [n for n, v in (("hub", self.hub_sha256), ("pin", self.pinned_sha256)) if v],
                "downloaded": self.downloaded, "resumed_from": self.resumed_from,
                "already_present": self.already_present, "seconds": round(self.seconds, 2)}


@dataclass(frozen=True)
class PullTarget:
    repo_id: str
    filename: str
    revision: str
    entry: RecommendedModel | None
    reference: str


def pull_target(name: str, revision: str | None = None) -> PullTarget:
    """What to download for `pull NAME|hf:...`; ConfigError for what prefcall cannot pull."""
    ref = parse_reference(name) if ":" in name or find_recommended(name) is None else None
    entry = find_recommended(name) if ref is None else None
    if entry is not None:
        if entry.source != "hf":
            raise ConfigError(f"{entry.name} is packaged with prefcall (embedded): nothing to download")
        rev = revision or entry.revision or "main"
        return PullTarget(entry.repo, entry.file, rev, entry, entry.name if rev == (entry.revision or "main")
                          else f"hf:{entry.repo}/{entry.file}@{rev}")
    if ref is None or ref.kind != "hf":
        kind = ref.kind if ref is not None else "name"
        hint = {"ollama": "use `ollama pull` for Ollama's store", "lmstudio": "download it in LM Studio",
                "path": "a file path needs no download"}.get(kind, "")
        raise ConfigError(f"prefcall pulls from the Hugging Face hub only: give a catalogue name (prefcall model list) "
                          f"or hf:ORG/REPO/FILE.gguf[@REVISION]{'; ' + hint if hint else ''}")
    assert ref.repo_id and ref.filename
    rev = revision or ref.revision or "main"
    reference = f"hf:{ref.repo_id}/{ref.filename}" + (f"@{rev}" if rev != "main" else "")
    return PullTarget(ref.repo_id, ref.filename, rev, recommended_for_file(ref.repo_id, ref.filename), reference)


def split_parts(filename: str) -> list[str]:
    """All parts of a split GGUF (NAME-00001-of-00003.gguf), or just the file."""
    match = SPLIT_RE.match(filename)
    if not match:
        return [filename]
    width, total = len(match["part"]), int(match["parts"])
    return [f"{match['stem']}-{i:0{width}d}-of-{match['parts']}.gguf" for i in range(1, total + 1)]


def pull(name: str, *, revision: str | None = None, force: bool = False, progress: bool | None = None,
         cache_dir: str | Path | None = None, endpoint: str | None = None, token: str | None = None,
         log: Any = None) -> PullResult:
    """Download (or find already downloaded) and verify; the result's `reference` resolves offline."""
    log = log or sys.stderr
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in _TRUE or os.environ.get("TRANSFORMERS_OFFLINE", "").lower() in _TRUE:
        raise DownloadError("HF_HUB_OFFLINE is set: unset it to download, or use a model already on disk "
                            "(prefcall model list)")
    target = pull_target(name, revision)
    cache = Path(cache_dir) if cache_dir else hf_hub_cache()
    endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
    parts = split_parts(target.filename)
    pin = target.entry.sha256 if target.entry is not None and len(parts) == 1 else None
    started = time.perf_counter()
    results = [
        _pull_file(target.repo_id, part, target.revision, pin if part == target.filename else None, cache=cache,
                   endpoint=endpoint, token=token, force=force, progress=progress, log=log)
        for part in parts
    ]
    first = results[0]
    first.reference = target.reference
    first.parts = [r.filename for r in results]
    first.size = sum(r.size for r in results)
    first.downloaded = sum(r.downloaded for r in results)
    first.already_present = all(r.already_present for r in results)
    first.seconds = time.perf_counter() - started
    return first


def _metadata(repo_id: str, filename: str, revision: str, endpoint: str, token: str | None) -> Any:
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub import errors as hf_errors

    url = hf_hub_url(repo_id, filename, revision=revision, endpoint=endpoint)
    where = f"hf:{repo_id}/{filename}@{revision}"
    try:
        return url, get_hf_file_metadata(url, token=token, endpoint=endpoint)
    except hf_errors.GatedRepoError:
        raise DownloadError(f"{repo_id} is gated: accept its licence on the hub, then log in (HF_TOKEN or "
                            "`hf auth login`) and pull again") from None
    except hf_errors.RepositoryNotFoundError:
        raise DownloadError(f"repository {repo_id} not found on {endpoint} (or private: set HF_TOKEN): "
                            "check the name (prefcall model list shows the catalogue)") from None
    except hf_errors.RevisionNotFoundError:
        raise DownloadError(f"revision {revision!r} not found in {repo_id}: give a branch, tag or commit that "
                            "exists") from None
    except hf_errors.EntryNotFoundError:
        raise DownloadError(f"{where}: no such file in the repository: check the file name on the hub") from None
    except hf_errors.OfflineModeIsEnabled:
        raise DownloadError("HF_HUB_OFFLINE is set: unset it to download") from None
    except hf_errors.HfHubHTTPError as exc:
        raise DownloadError(f"the hub at {endpoint} refused {where}: {exc}: retry later") from None
    except Exception as exc:  # httpx2 connection errors and the like
        raise DownloadError(f"cannot reach {endpoint} for {where} ({type(exc).__name__}: {exc}): check the network, "
                            "HF_ENDPOINT and proxy settings") from None


def _pull_file(repo_id: str, filename: str, revision: str, pin: str | None, *, cache: Path, endpoint: str,
               token: str | None, force: bool, progress: bool | None, log: Any) -> PullResult:
    url, meta = _metadata(repo_id, filename, revision, endpoint, token)
    commit = meta.commit_hash
    etag = (meta.etag or "").strip('"').lower()
    hub_sha = etag if _SHA256_RE.fullmatch(etag) else None
    label = f"hf:{repo_id}/{filename}"
    if pin and hub_sha and pin != hub_sha:
        raise IntegrityError(f"{label}@{revision} on the hub has SHA-256 {hub_sha} but prefcall pins {pin}: refusing "
                             "(the file changed upstream); pull an explicit hf:...@REVISION if you trust the new file")
    expected = pin or hub_sha
    if expected is None:
        raise IntegrityError(f"{label}: the hub gave no LFS SHA-256 for it (ETag {etag or 'none'}), so it cannot be "
                             "verified: refusing; GGUF files on the hub are LFS files, check the name")
    storage = cache / hf_repo_folder(repo_id)
    pointer = storage / "snapshots" / commit / filename
    blob = storage / "blobs" / expected
    result = PullResult(f"hf:{repo_id}/{filename}", repo_id, filename, commit, pointer, meta.size or 0, expected,
                        hub_sha, pin)
    started = time.perf_counter()

    # Already there (this revision, or the same blob from another one): verify it, then link it.
    existing = pointer if pointer.is_file() else blob if blob.is_file() else None
    if existing is not None and not force:
        digest = file_sha256(existing, f"verifying {filename}", progress)
        if digest == expected:
            _install(storage, blob, pointer, revision, commit, from_path=None)
            result.already_present, result.size = True, existing.stat().st_size
            result.seconds = time.perf_counter() - started
            return result
        print(f"prefcall: cached {existing} does not match its SHA-256; downloading it again", file=log)
        _remove(pointer, blob)

    partial = blob.with_name(blob.name + ".incomplete")
    partial.parent.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    lock = cache / ".locks" / hf_repo_folder(repo_id) / f"{expected}.lock"  # where huggingface_hub keeps its locks
    lock.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock)):
        if not force and blob.is_file() and file_sha256(blob, f"verifying {filename}", progress) == expected:
            _install(storage, blob, pointer, revision, commit, from_path=None)  # another pull finished it meanwhile
            result.already_present, result.size = True, blob.stat().st_size
            result.seconds = time.perf_counter() - started
            return result
        if force:
            partial.unlink(missing_ok=True)
        resume = partial.stat().st_size if partial.exists() else 0
        if meta.size is not None and resume > meta.size:
            partial.unlink()
            resume = 0
        if resume:
            print(f"prefcall: resuming {filename} at {resume} of {meta.size or '?'} bytes", file=log)
        _download(url, meta, partial, resume, token, filename, progress)
        digest = file_sha256(partial, f"verifying {filename}", progress)
        if digest != expected:
            partial.unlink(missing_ok=True)
            against = "prefcall's pin" if pin else "the hub's LFS hash"
            raise IntegrityError(f"{label}: downloaded file has SHA-256 {digest} but {against} is {expected}: refused "
                                 "and deleted, nothing installed; run the pull again (a persistent mismatch means the "
                                 "file or a proxy is corrupting it)")
        result.resumed_from = resume
        result.downloaded = partial.stat().st_size - resume
        result.size = partial.stat().st_size
        _install(storage, blob, pointer, revision, commit, from_path=partial)
    result.seconds = time.perf_counter() - started
    return result


def _download(url: str, meta: Any, partial: Path, resume: int, token: str | None, filename: str,
              progress: bool | None) -> None:
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    location = meta.location or url
    headers = build_hf_headers(token=token)
    if urlparse(location).netloc != urlparse(url).netloc:
        headers.pop("authorization", None)  # never send the token to a CDN's signed URL
    try:
        with partial.open("ab") as handle:
            http_get(location, handle, resume_size=resume, headers=headers, expected_size=meta.size,
                     displayed_filename=filename, tqdm_class=_progress_class(progress))
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        have = partial.stat().st_size if partial.exists() else 0
        raise DownloadError(f"download of {filename} stopped at {have} bytes ({type(exc).__name__}: "
                            f"{str(exc).splitlines()[0] if str(exc) else ''}): run the same pull again to resume") from None


def _progress_class(progress: bool | None) -> Any:
    """None: huggingface_hub's default (a bar when stderr is a terminal); True: always; False: never."""
    if progress is None:
        return None
    from huggingface_hub.utils import tqdm as hf_tqdm

    class Bar(hf_tqdm):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = not progress
            super().__init__(*args, **kwargs)

    return Bar


def file_sha256(path: Path, label: str = "hashing", progress: bool | None = None) -> str:
    digest = hashlib.sha256()
    size = path.stat().st_size
    bar = None
    if progress is not False and size > 64 * 1024 * 1024:
        from huggingface_hub.utils import tqdm as hf_tqdm

        bar = hf_tqdm(total=size, unit="B", unit_scale=True, desc=label, disable=None if progress is None else False)
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(4 << 20), b""):
            digest.update(chunk)
            if bar is not None:
                bar.update(len(chunk))
    if bar is not None:
        bar.close()
    return digest.hexdigest()


def _install(storage: Path, blob: Path, pointer: Path, revision: str, commit: str, from_path: Path | None) -> None:
    """huggingface_hub's cache layout: blobs/<sha256>, snapshots/<commit>/<file> -> blob, refs/<revision>."""
    if from_path is not None:
        os.replace(from_path, blob)
        os.chmod(blob, 0o644)
    pointer.parent.mkdir(parents=True, exist_ok=True)
    if not pointer.exists():
        if pointer.is_symlink():
            pointer.unlink()  # dangling
        try:
            pointer.symlink_to(os.path.relpath(blob, pointer.parent))
        except OSError:  # no symlinks (Windows without developer mode): huggingface_hub then keeps the file itself
            os.replace(blob, pointer)
    if revision != commit:
        (storage / "refs").mkdir(parents=True, exist_ok=True)
        ref_file = storage / "refs" / revision
        ref_file.parent.mkdir(parents=True, exist_ok=True)
        ref_file.write_text(commit)


def _remove(*paths: Path) -> None:
    for path in paths:
        if path.is_symlink() or path.exists():
            path.unlink()
