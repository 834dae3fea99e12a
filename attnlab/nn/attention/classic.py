"""Placeholder: filled in by the owning developer."""
