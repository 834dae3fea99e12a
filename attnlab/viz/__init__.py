"""Terminal renderings of decoding results (Rich only; no textual, no torch at import)."""

from attnlab.viz.heatmap import heatmap_cell_style, heatmap_rgb, render_heatmap
from attnlab.viz.nbest import render_nbest

__all__ = ["heatmap_cell_style", "heatmap_rgb", "render_heatmap", "render_nbest"]
