"""Ingestion: what to do with each input, the run over the stages, index writes and progress."""
