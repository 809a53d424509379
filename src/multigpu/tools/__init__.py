"""Tools beside training: the benchmark, the cost model, reports, the GPU acceptance."""
