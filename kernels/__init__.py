"""embedpipe.kernels."""
