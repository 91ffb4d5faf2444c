"""embedpipe.pipeline."""
