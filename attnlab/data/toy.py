"""Placeholder: toy tasks, filled in by the data developer."""
