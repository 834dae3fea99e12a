"""The Textual lab (the only package that imports textual). Entry point: ``attnlab.tui.app``."""
