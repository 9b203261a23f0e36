"""Temporary: see `prefcall.profiles` (the tag language lives in `prefcall.tagging.tags`)."""

from prefcall.tagging.tags import TaggedInstruction

__all__ = ["TaggedInstruction"]
