"""prefcall.bench: `prefcall bench` measures speed on the current machine, every figure side by side in one run."""
