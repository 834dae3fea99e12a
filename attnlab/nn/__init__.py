"""Neural modules: attention variants, RNN and Transformer encoder-decoders."""
