"""A fake engine that names a model file, for tests of what is stored per model (fits are found by the file's hash)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from prefcall.engine.fake import FakeEngine


class FileEngine(FakeEngine):
    """FakeEngine whose info names `model`: fits are stored for it and found by that file's hash."""

    def __init__(self, model: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._model = model

    @property
    def info(self):
        return dataclasses.replace(super().info, model_path=str(self._model))
