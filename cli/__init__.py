"""embedpipe.cli."""
