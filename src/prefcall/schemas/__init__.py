"""API schema catalogues: models, importers, prompt renderings, call parsing and validation."""

from prefcall.schemas.model import Call, Catalogue, Function, Turn, as_dialogue, render_dialogue

__all__ = ["Call", "Catalogue", "Function", "Turn", "as_dialogue", "render_dialogue"]
