"""mediaindex: search and question video and audio archives in plain language."""

__version__ = "0.1.0"
