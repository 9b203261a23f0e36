"""Bring your own model: find GGUF models on this machine, pull recommended ones, check what a model can do.

Top layer (beside the CLI, evaluation and bench): it uses the engine layer's references and GGUF reader,
and, for `check`, the strategies. Nothing here runs unless a `prefcall model ...` command asks for it.
"""
