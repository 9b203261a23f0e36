"""Old name of `prefcall.tagging`, kept only until `strategies/pipeline.py` (being edited on another branch)
imports `prefcall.tagging.tags`; then delete this package and its line in tests/test_architecture.py LAYERS."""
