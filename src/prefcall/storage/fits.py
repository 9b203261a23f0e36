"""Fitted rules per model fingerprint (`prefcall fit` writes them; the pipeline reads them).

A model is known by a fingerprint, never by the name in its GGUF metadata (two quantisations of one model share a
name; a served engine reports none): `gguf-sha256:<hash of the file>` for a model file loaded in-process. The hash
of a multi-GB file takes seconds, so it is cached in DATA_DIR/fingerprints.json under the file's path, size and
modification time. A llama.cpp server whose model file is on this machine is known by that file's hash (`shares_file_fit`: it scores
as the in-process engine does). Any other served engine is `served-sha256:<hash>` of its backend, the model id it serves,
a hash of its chat template and its tokenizer's token counts of fixed probe texts (`engine_fingerprint`): another
model, template or tokenizer behind the same URL is another fingerprint. A backend without a tokenizer endpoint
estimates its counts (engine.served.base.estimate_tokens), so there the model id and the template decide.

Fits live in DATA_DIR/fits/<fingerprint digest>.json (the user's, from `prefcall fit`) and in the package's
data/fits/ (shipped for recommended models); the user's wins. A fit file names its fingerprint, the model, the
command and data that made it, and per fitted rule its numbers.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import weakref
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from prefcall.errors import StoreError

FITS_DIR = "fits"
FINGERPRINTS = "fingerprints.json"
_LOCK = threading.Lock()  # one writer of the fingerprint cache per process
# Fingerprints already computed in this process (hashes, not models): by file path, size and mtime, or by a served
# engine's URL, model id and template; rules looked up per request (NLT) must not hash a GB file each time.
_SEEN: dict[str, str] = {}
_SERVED: dict[str, tuple[weakref.ref[Any], str]] = {}


class Fit(BaseModel):
    """One model's fitted rules. `grounding`: the filler's combination per argument kind, [a, b, c] (span and
    number: [a, b, c, length] where fitted with the length weight) as in strategies.grounding.fill.GroundingWeights;
    kinds not listed keep the shipped defaults; `required_floor` is a probability (GroundingWeights.required_floor),
    `required_lead` a lead in nats (GroundingWeights.required_lead).
    `selection`: stage 1's weights over its evidence
    (strategies.fnctod.SelectionRule)."""

    fingerprint: str
    model_name: str = ""
    grounding: dict[str, list[float] | float] = Field(default_factory=dict)
    # stage 1's rule: weights over strategies.fnctod.SELECTION_FEATURES (`prefcall fit --selection`); None: hand-set
    selection: list[float] | None = None
    # stage 1's bound on the calibration's gain (strategies.fnctod.smoothed; `prefcall fit --selection`); None: the
    # hand-set CALIBRATION_FLOOR
    calibration_floor: float | None = None
    # whether any function fits: {"weights": [bias, *over strategies.fnctod.RELEVANCE_FEATURES], "threshold": t}
    # (`prefcall fit --relevance`); None: stage 1's hand-set "None" prior and the embedder's threshold decide
    relevance: dict[str, Any] | None = None
    # stage 1's "None" prior, {"cosine": c, "slope": s, "named": n} (strategies.fnctod.NonePrior, `prefcall fit
    # --relevance`); None: the hand-set prior
    none_prior: dict[str, float] | None = None
    # the model's own reading of whether a tool can do what is asked, beside the embedder's relevance score:
    # {"weights": [bias, *over strategies.model_check.CHECK_FEATURES, *one per message question], "threshold": t,
    # "embedder_first": bool, "question": version, "calibrated": bool, "messages": [MESSAGE_QUESTIONS versions]}
    # (`prefcall fit --relevance`); None: the embedder's rule alone refuses
    check: dict[str, Any] | None = None
    source: dict[str, Any] = Field(default_factory=dict)  # command, data, commit, date, counts, tune F1
    origin: str = ""  # where it was read from (set on load): "user" or "package"


def file_fingerprint(path: str | Path, cache_dir: Path | None = None) -> str | None:
    """`gguf-sha256:<hex>` of a model file (cached by path, size and mtime in cache_dir), None if no such file."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError:
        return None
    if not path.is_file():
        return None
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    if key in _SEEN:
        return _SEEN[key]
    cache = cache_dir / FINGERPRINTS if cache_dir is not None else None
    known = _read_json(cache) if cache is not None else {}
    if key in known:
        _SEEN[key] = str(known[key])
        return _SEEN[key]
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    fingerprint = f"gguf-sha256:{digest.hexdigest()}"
    _SEEN[key] = fingerprint
    if cache is not None:
        with _LOCK:
            known = _read_json(cache)
            known[key] = fingerprint
            try:
                _write_json(cache, known)
            except OSError:
                pass  # the cache only saves time: a read-only data folder costs a hash per start, not the request
    return fingerprint


# Texts whose token counts tell tokenizers apart: accents, CJK, code, JSON, long words, whitespace, digits, emoji.
PROBES = (
    "Book a table for two at Café Délice tomorrow at 7 pm, please.",
    "東京から大阪までの新幹線を予約してください。",
    "def area(r):\n    return 3.14159 * r ** 2  # circle",
    '{"city": "San José", "guests": 3, "smoking": false}',
    "antidisestablishmentarianism supercalifragilisticexpialidocious",
    "  two  spaces,\ta tab\n\nand blank lines  ",
    "Order 12345678901234567890 and 0.000314 units 🙂👍🏽",
)


def served_fingerprint(backend: str, model: str, chat_template: str | None, token_counts: list[int]) -> str:
    """`served-sha256:<hex>` of what identifies a served model: backend, model id, template, tokenizer counts."""
    material = json.dumps({"backend": backend, "model": model,
                           "template": hashlib.sha256((chat_template or "").encode()).hexdigest(),
                           "tokenizer": token_counts}, sort_keys=True)
    return "served-sha256:" + hashlib.sha256(material.encode()).hexdigest()


def shares_file_fit(info: Any) -> bool:
    """Whether a served engine is known by its model file's fingerprint, so that it reads (and `prefcall fit`
    writes) the fit of the file: its server named a GGUF that is on this machine, it scores candidates as the
    in-process engine does (engine.base.LLAMA_CPP_SCORES: llama-server, llama-cpp-python's server), and the engine
    set `model_file` only where it renders the file's own chat template. Any other served engine has its own fingerprint, so a fit made on one backend is
    never used on a backend whose scores differ."""
    from prefcall.engine.base import LLAMA_CPP_SCORES

    return bool(info.model_file) and info.scores == LLAMA_CPP_SCORES


def engine_fingerprint(engine: Any, data_dir: Path | None = None) -> str | None:
    """The fingerprint of the model an engine runs: its file's hash in-process, else (a served engine, whose
    EngineInfo.extra names its `url`) `served_fingerprint`; None when neither can be had (no such file)."""
    info = engine.info
    if "url" not in info.extra:
        return file_fingerprint(info.model_path, data_dir)
    if shares_file_fit(info):
        return file_fingerprint(info.model_file, data_dir)
    # Probed once per engine object (a reconnect probes again: another model may be behind the URL by then); the
    # weak reference tells a live engine from a new one that got the id of a collected one.
    key = json.dumps([id(engine), info.extra["url"], info.backend, info.model_name, info.chat_template])
    known = _SERVED.get(key)
    if known is not None and known[0]() is engine:
        return known[1]
    fingerprint = served_fingerprint(info.backend, info.model_name, info.chat_template,
                                     [int(engine.count_tokens(text)) for text in PROBES])
    _SERVED[key] = (weakref.ref(engine), fingerprint)
    return fingerprint


def file_name(fingerprint: str) -> str:
    """The fit's file name: the kind and the first 24 hex digits of the digest."""
    kind, _, digest = fingerprint.partition(":")
    return f"{kind}-{digest[:24]}.json"


def load(fingerprint: str | None, data_dir: Path | None) -> Fit | None:
    """The user's fit for this fingerprint, else the shipped one, else None."""
    if not fingerprint:
        return None
    if data_dir is not None:
        path = Path(data_dir) / FITS_DIR / file_name(fingerprint)
        if path.is_file():
            return _parse(path.read_text(encoding="utf-8"), fingerprint, "user", path)
    packaged = resources.files("prefcall").joinpath("data", FITS_DIR, file_name(fingerprint))
    if packaged.is_file():
        return _parse(packaged.read_text(encoding="utf-8"), fingerprint, "package", Path(str(packaged)))
    return None


def save(fit: Fit, folder: Path) -> Path:
    """Write the fit to folder/<name> atomically; returns the path."""
    path = Path(folder) / file_name(fit.fingerprint)
    _write_json(path, fit.model_dump(exclude={"origin"}))
    return path


def _parse(text: str, fingerprint: str, origin: str, path: Path) -> Fit:
    try:
        fit = Fit.model_validate_json(text)
    except ValueError as exc:
        raise StoreError(f"fit file {path} is damaged ({exc}): delete it or run `prefcall fit` again") from exc
    if fit.fingerprint != fingerprint:
        raise StoreError(f"fit file {path} is for another model ({fit.fingerprint}): delete it")
    return fit.model_copy(update={"origin": origin})


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
