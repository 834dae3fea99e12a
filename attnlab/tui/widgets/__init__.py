"""Widgets of the lab: the attention heatmap, the decoding-step bar chart, metric plots."""
