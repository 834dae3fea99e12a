"""Sparse normalisers with exact zeros: sparsemax and entmax (alpha = 1.5)."""
