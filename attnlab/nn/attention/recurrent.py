"""Attention as a recurrence over positions: stick-breaking and decayed-linear."""
