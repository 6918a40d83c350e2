"""Where `plan` runs its work: in this process, in a pool of processes, or on a Ray cluster
(``pip install "rooflinesim[ray]"``), a search too large for one machine run on an existing
cluster rather than a scheduler of our own."""

from __future__ import annotations

from ..errors import UserError


class Workers:
    """Maps a function over items in order: here (jobs 1), in a process pool, or on Ray."""

    def __init__(self, jobs: int, ray_address: str | None):
        self.jobs, self.ray, self.pool = jobs, None, None
        if ray_address:
            try:
                import ray
            except ImportError:
                raise UserError('--ray-address needs Ray: pip install "rooflinesim[ray]"') from None
            if not ray.is_initialized():
                reachable(ray_address)
                try:
                    ray.init(address=None if ray_address == "local" else ray_address, include_dashboard=False,
                             log_to_driver=False, **({"num_cpus": jobs} if ray_address == "local" else {}))
                except (ConnectionError, RuntimeError, ValueError) as e:
                    raise UserError(f"cannot reach the Ray cluster at {ray_address}: {e}") from None
            self.ray = ray
        elif jobs > 1:
            from concurrent.futures import ProcessPoolExecutor

            self.pool = ProcessPoolExecutor(max_workers=jobs)

    def map(self, fn, items: list) -> list:
        if not items:
            return []
        if self.ray is not None:
            remote = self.ray.remote(fn)
            out = self.ray.get([remote.remote(x) for x in items])
        elif self.pool is not None and len(items) > 1:
            out = list(self.pool.map(fn, items))
        else:
            out = [fn(x) for x in items]
        return out

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


def reachable(address: str, timeout_s: float = 10.0) -> None:
    """One sentence, soon, where a Ray address's host and port take no connection (Ray itself
    retries for minutes): 'local' and 'auto' are left to Ray."""
    import socket
    from urllib.parse import urlsplit

    if address in ("local", "auto"):
        return
    parts = urlsplit(address if "://" in address else "ray-gcs://" + address)
    try:
        host, port = parts.hostname, parts.port or (10001 if parts.scheme == "ray" else 6379)
    except ValueError:
        host = port = None
    if not host:
        raise UserError(f"--ray-address must be host:port, ray://host:port, auto or local (got {address!r})")
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as e:
        raise UserError(f"cannot reach the Ray cluster at {address}: {e.strerror or e}") from None
