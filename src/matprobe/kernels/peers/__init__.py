"""The peers: families that run someone else's kernels — the cuBLAS baseline
(``torch_ref``), numpy, ``torch.compile``, MLX, gemlite — measured as ours are."""
