"""`prefcall model pull` against a local stand-in for the Hugging Face hub (127.0.0.1, started by the test).

Network-free: HF_ENDPOINT and huggingface_hub's endpoint constant point at the local server, telemetry is off,
and HF_HUB_OFFLINE is unset only inside these tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefcall.cli import main
from prefcall.engine.recommended import find_recommended
from prefcall.engine.references import resolve_reference
from prefcall.errors import ConfigError, DownloadError, IntegrityError
from prefcall.modelhub.pull import pull, split_parts
from prefcall.modelhub.testing import FakeHub, gguf_bytes, sha256_of

REPO = "org/tiny-GGUF"
FILE = "tiny-q4_k_m.gguf"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from huggingface_hub import constants

    with FakeHub() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN",
                     "HUGGING_FACE_HUB_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        # huggingface_hub reads these at import. Telemetry off: its user-agent code would otherwise fetch
        # {constants.ENDPOINT}/api/agent-harnesses, an endpoint fixed at import (pull passes its endpoint explicitly).
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
        yield server
    assert all(r["path"].startswith(("/org/", "/Qwen/", "/other/")) for r in server.requests)


def cache(tmp_path: Path) -> Path:
    return tmp_path / "hf" / "hub"


def test_pull_downloads_verifies_and_resolves_offline(hub, tmp_path):
    data = gguf_bytes(name="pulled")
    hub.add(REPO, FILE, data)
    result = pull(f"hf:{REPO}/{FILE}", progress=False)
    assert result.sha256 == sha256_of(data) == result.hub_sha256 and not result.already_present
    assert result.downloaded == len(data) and result.path.read_bytes() == data
    blob = cache(tmp_path) / "models--org--tiny-GGUF" / "blobs" / sha256_of(data)
    assert result.path.is_symlink() and result.path.resolve() == blob.resolve()
    assert (cache(tmp_path) / "models--org--tiny-GGUF" / "refs" / "main").read_text() == result.commit
    assert not list(blob.parent.glob("*.incomplete"))
    hub.stop_requests = len(hub.requests)
    assert resolve_reference(f"hf:{REPO}/{FILE}").path == result.path  # no request: the cache alone
    assert len(hub.requests) == hub.stop_requests
    again = pull(f"hf:{REPO}/{FILE}", progress=False)
    assert again.already_present and again.downloaded == 0
    assert [r["method"] for r in hub.requests[hub.stop_requests:]] == ["HEAD"]  # verified locally, not fetched


def test_a_file_that_does_not_match_the_hub_hash_is_refused_and_deleted(hub, tmp_path):
    hub.add(REPO, FILE, gguf_bytes(name="tampered"), advertise_sha256=sha256_of(b"the real file"))
    with pytest.raises(IntegrityError) as err:
        pull(f"hf:{REPO}/{FILE}", progress=False)
    message = str(err.value)
    assert "\n" not in message and "refused and deleted" in message and sha256_of(b"the real file") in message
    repo = cache(tmp_path) / "models--org--tiny-GGUF"
    assert not list(repo.rglob("*.gguf")) and not list((repo / "blobs").iterdir())
    with pytest.raises(Exception):
        resolve_reference(f"hf:{REPO}/{FILE}")


def test_an_interrupted_pull_resumes_with_a_range_request(hub, tmp_path):
    data = gguf_bytes(name="resumable", vocab=2000)
    hub.add(REPO, FILE, data)
    partial = cache(tmp_path) / "models--org--tiny-GGUF" / "blobs" / f"{sha256_of(data)}.incomplete"
    partial.parent.mkdir(parents=True)
    partial.write_bytes(data[:1000])  # what a killed pull leaves behind
    result = pull(f"hf:{REPO}/{FILE}", progress=False)
    assert result.resumed_from == 1000 and result.downloaded == len(data) - 1000
    assert [r["range"] for r in hub.gets()] == ["bytes=1000-"]
    assert result.path.read_bytes() == data and not partial.exists()


def test_a_corrupt_partial_file_is_caught_by_the_hash(hub, tmp_path):
    data = gguf_bytes(name="resumable")
    hub.add(REPO, FILE, data)
    partial = cache(tmp_path) / "models--org--tiny-GGUF" / "blobs" / f"{sha256_of(data)}.incomplete"
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"X" * 100)  # wrong bytes, then the rest resumed on top
    with pytest.raises(IntegrityError):
        pull(f"hf:{REPO}/{FILE}", progress=False)
    assert not partial.exists()
    assert pull(f"hf:{REPO}/{FILE}", progress=False).path.read_bytes() == data  # a clean retry succeeds


def test_catalogue_pin_is_checked_before_downloading(hub):
    entry = find_recommended("qwen2.5-coder-0.5b")
    hub.add(entry.repo, entry.file, gguf_bytes(name="not the pinned file"))
    with pytest.raises(IntegrityError, match="prefcall pins"):
        pull("qwen2.5-coder-0.5b", progress=False)
    assert hub.gets() == []  # refused on the hub's hash, nothing downloaded


def test_catalogue_pin_also_checks_the_bytes(hub):
    entry = find_recommended("qwen2.5-coder-0.5b")
    # The hub advertises the pinned hash but serves other bytes: the pin catches it after download.
    hub.add(entry.repo, entry.file, gguf_bytes(name="liar"), advertise_sha256=entry.sha256)
    with pytest.raises(IntegrityError, match="prefcall's pin"):
        pull("qwen2.5-coder-0.5b", progress=False)


def test_revisions_split_files_and_tokens(hub, tmp_path, monkeypatch):
    hub.add(REPO, FILE, gguf_bytes(name="v2"), revisions=("v2",), commit="b" * 40)
    result = pull(f"hf:{REPO}/{FILE}", revision="v2", progress=False)
    assert result.commit == "b" * 40 and result.reference == f"hf:{REPO}/{FILE}@v2"
    assert resolve_reference(f"hf:{REPO}/{FILE}@v2").path == result.path

    parts = split_parts("big-q4_k_m-00001-of-00003.gguf")
    assert parts == [f"big-q4_k_m-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    for number, part in enumerate(parts):
        hub.add("other/split-GGUF", part, gguf_bytes(name=f"part {number}"))
    split = pull(f"hf:other/split-GGUF/{parts[0]}", progress=False)
    assert split.parts == parts and all((split.path.parent / p).is_file() for p in parts)

    hub.required_token = "secret-token"
    hub.add("org/private-GGUF", "p.gguf", gguf_bytes(name="private"))
    with pytest.raises(DownloadError, match="gated|not found"):
        pull("hf:org/private-GGUF/p.gguf", progress=False)
    monkeypatch.setenv("HF_TOKEN", "secret-token")
    assert pull("hf:org/private-GGUF/p.gguf", progress=False).path.is_file()
    assert hub.requests[-1]["authorization"] == "Bearer secret-token"


def test_hub_errors_are_one_line(hub, monkeypatch):
    hub.add(REPO, FILE, gguf_bytes())
    for target, pattern in ((f"hf:{REPO}/absent.gguf", "no such file"), ("hf:org/absent-GGUF/x.gguf", "not found"),
                            (f"hf:{REPO}/{FILE}@nope", "revision 'nope' not found")):
        with pytest.raises(DownloadError, match=pattern) as err:
            pull(target, progress=False)
        assert "\n" not in str(err.value)
    hub.add(REPO, "notes.gguf", b"GGUF small", lfs=False)
    with pytest.raises(IntegrityError, match="no LFS SHA-256"):
        pull(f"hf:{REPO}/notes.gguf", progress=False)
    with pytest.raises(ConfigError, match="ollama pull"):
        pull("ollama:qwen2.5", progress=False)
    with pytest.raises(ConfigError, match="embedded"):
        pull("smollm2-135m", progress=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DownloadError, match="HF_HUB_OFFLINE"):
        pull(f"hf:{REPO}/{FILE}", progress=False)


def test_unreachable_hub_says_what_to_check(hub, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens
    with pytest.raises(DownloadError, match="cannot reach http://127.0.0.1:9"):
        pull(f"hf:{REPO}/{FILE}", progress=False)


def test_pull_command_prints_the_reference_and_one_json_line(hub, capsys):
    hub.add(REPO, FILE, gguf_bytes(name="cli"))
    assert main(["model", "pull", f"hf:{REPO}/{FILE}", "--no-progress"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert f"--model hf:{REPO}/{FILE}" in "\n".join(out)
    assert json.loads(out[-1])["verified_against"] == ["hub"]
    hub.add(REPO, "bad.gguf", gguf_bytes(name="bad"), advertise_sha256="0" * 64)
    assert main(["model", "pull", f"hf:{REPO}/bad.gguf", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("prefcall: error:") and "refused" in err[0]


def test_concurrent_pulls_download_once(hub):
    from concurrent.futures import ThreadPoolExecutor

    data = gguf_bytes(name="shared", vocab=20000)
    hub.add(REPO, FILE, data)
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: pull(f"hf:{REPO}/{FILE}", progress=False), range(3)))
    assert all(r.path.read_bytes() == data for r in results)
    assert len(hub.gets()) == 1 and sum(not r.already_present for r in results) == 1
