"""Native sparse attention: compressed, selected and sliding-window branches, gated."""
