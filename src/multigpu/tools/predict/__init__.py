"""``python -m multigpu.tools.predict``: the cost model that predicts each strategy's speedup."""
