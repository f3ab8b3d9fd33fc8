"""Search: ranking candidates from the index, then deciding which of them match (see searcher)."""
