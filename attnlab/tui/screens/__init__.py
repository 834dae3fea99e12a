"""Screens the lab pushes over its tabs: head importance and a two-run comparison."""
