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
# Ray's own handler of fatal signals answers SIGTERM too: it prints a raw stack dump and ends the process at once,
# before a server's graceful shutdown (finish the request, stop the jobs, stop Ray) can run. Crashes still get
# Python's traceback (faulthandler, which Ray enables).
os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
