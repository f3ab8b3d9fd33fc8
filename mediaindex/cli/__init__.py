"""The `mediaindex` command line: typer commands, thin (parse, call, render)."""

from mediaindex.cli.app import app, main

__all__ = ["app", "main"]
