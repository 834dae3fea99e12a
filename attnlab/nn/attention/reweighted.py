"""Softmax reweighted or replaced: differential, sigmoid, sinks, qk-norm."""
