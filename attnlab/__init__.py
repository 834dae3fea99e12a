"""attnlab: a terminal lab for attention variants in sequence-to-sequence models."""

__version__ = "0.1.0"
