"""Ray's process environment, owned in one place.

Ray reads its auth settings when it is first imported, so they are set before any `import ray`: importing
this module first is enough. A local cluster keeps token auth, with a per-process token held in the
environment (inherited by the workers it starts) instead of a token file written into the user's home
directory.
"""

import os
import secrets

if "RAY_ADDRESS" not in os.environ:
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
