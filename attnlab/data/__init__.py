"""Data: toy tasks, parallel corpora, tokenizers, vocabularies and batching."""
