"""Interpretation beyond raw attention maps (issue 15): pure functions, no textual, no click.

- ``rollout``: attention rollout (Abnar & Zuidema 2020) and the encoder-decoder relevancy
  rules of Chefer et al. 2021 (arXiv:2103.15679).
- ``attribution``: gradient-weighted attention (Chefer et al. 2021a) and value-norm-weighted
  attention (Kobayashi et al. 2020), with the hooks that collect maps, inputs and gradients.
- ``heads``: runtime head gates, head importance (Michel et al. 2019), pruning order.
- ``alignment``: Pharaoh files, arg-max and Shift-Att alignments, AER (Och & Ney 2003).
- ``compare``: two maps on one scale, A − B, Jensen-Shannon divergence per row.
- ``average``: checkpoint averaging and ``train.keep_last`` step copies.
- ``entropy``: attention entropy per role × layer × head.
- ``reports``: the heads and compare reports (CLI and lab), with progress and cancel hooks.
- ``maps``: which map ``translate`` shows (role, layer, head or method) and computing it.
"""
