"""Shared and compressed keys/values: gqa (grouped-query; kv_heads = 1 is MQA) and mla."""
