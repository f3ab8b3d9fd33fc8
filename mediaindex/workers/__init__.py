"""Ray actors that run the ingestion stages, and the Ray runtime."""

import mediaindex.raylib  # noqa: F401  (Ray's environment is set before Ray is imported)
