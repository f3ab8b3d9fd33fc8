"""Start Ray: a local instance with bounded memory by default, or join a cluster when configured."""

from __future__ import annotations

import logging
import os
import socket
import time

from mediaindex.config import Settings
from mediaindex.errors import ConfigError
from mediaindex.workers.orphans import OWNER_VARIABLE, mark_as_owner, mark_session, reap_orphans, unmark
from mediaindex.workers.watchdog import start_watchdog

log = logging.getLogger(__name__)

# Stage actors reserve logical CPUs; a local Ray advertises at least this many so that a pipeline (about
# 3 CPUs of reservations), a second one (e.g. an API server's) and the summary stage fit on a laptop.
LOCAL_LOGICAL_CPUS = 8
_RAY_SOCKET_SUFFIX = len("/ray/session_2026-01-01_00-00-00_000000_4194304/sockets/plasma_store")


class _MainThreadNotice(logging.Filter):
    """Drops Ray's notice that, started outside the main thread, it leaves SIGTERM to the process's own handler:
    that is what a server wants (its graceful shutdown), not something to warn its log about."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()


_MAIN_THREAD_NOTICE = _MainThreadNotice()  # one instance: adding it again is then a no-op


def _check_reachable(address: str) -> None:
    """Fail fast: ray.init waits minutes on an address where nothing listens."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise ConfigError(f"cannot reach the Ray cluster at {address!r}: {exc.strerror or exc}") from exc


def ensure_ray(settings: Settings) -> None:
    """Start (or join) Ray once per process; later calls reuse the running instance."""
    import ray

    if ray.is_initialized():
        return
    logging.getLogger("ray._private.worker").addFilter(_MAIN_THREAD_NOTICE)
    env = {"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    if settings.ray.address:
        _check_reachable(settings.ray.address)
        try:
            ray.init(address=settings.ray.address, runtime_env={"env_vars": env}, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
            # The port answered (_check_reachable), so a refusal is most often another token or not a Ray head.
            hint = ("; is RAY_AUTH_TOKEN the cluster's token, and the port its head's GCS port?"
                    if isinstance(exc, ConnectionError) and settings.ray.address != "auto" else "")
            raise ConfigError(f"cannot join the Ray cluster at {settings.ray.address!r}: {exc}{hint}") from exc
        log.info("joined the Ray cluster at %s", settings.ray.address)
        return
    # Ray puts unix sockets at <temp>/ray/session_<date>_<pid>/sockets/plasma_store: 108 bytes at most.
    if len(str(settings.temp_dir).encode()) + _RAY_SOCKET_SUFFIX > 107:
        raise ConfigError(f"temp_dir {settings.temp_dir} is too long for Ray's unix sockets: "
                          f"set MEDIAINDEX_TEMP_DIR to a path of at most {107 - _RAY_SOCKET_SUFFIX} bytes")
    settings.temp_dir.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    # A killed run's Ray processes would hold cores and memory beside the new ones: they go first.
    reap_orphans()
    env[OWNER_VARIABLE] = mark_as_owner()
    start_watchdog(env[OWNER_VARIABLE])  # and this run's go with it, however it ends
    try:
        _start_local(settings, env)
        mark_session(settings.temp_dir)
    finally:
        unmark()
    log.info("started a local Ray instance in %.1f s", time.monotonic() - began)


def _start_local(settings: Settings, env: dict[str, str]) -> None:
    import ray

    ray.init(
        # Logical CPUs: stage actors reserve fractions, so a 2-core laptop still runs every stage.
        num_cpus=settings.ray.num_cpus or max(os.cpu_count() or 1, LOCAL_LOGICAL_CPUS),
        num_gpus=settings.ray.num_gpus,
        object_store_memory=settings.ray.object_store_memory,
        _temp_dir=str(settings.temp_dir / "ray"),
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": env},
    )


def shutdown_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()
