"""Where configurations are evaluated: this process, a local process pool, or Dask."""

from __future__ import annotations

import importlib
import math
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import ConfigError
from ..specs import Scenario
from .columns import CHUNK_SIZE, MAX_JOBS_PER_CPU
from .evaluation import _evaluate_chunk_args, evaluate_chunk


# ----------------------------------------------------------------------------- running
def _chunks(items: Sequence[Any], size: int) -> list[list[Any]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


class Runner:
    """Where configurations are evaluated: this process, a local process pool, or Dask.

    One runner serves both passes of a sweep (closed form, then the engine for the best),
    so the pool or the Dask cluster starts once. jobs = 1: in this process. jobs > 1: a
    process pool (fork where available), chunks in order. `dask`: 'local' (a LocalCluster of
    `jobs` worker processes) or a scheduler address; chunks as they complete. Use as a
    context manager: leaving it closes the pool or the cluster.
    """

    def __init__(self, base_scn: Scenario, *, jobs: int = 1, dask: str | None = None) -> None:
        self.base_scn = base_scn
        self.jobs = max(1, min(jobs, MAX_JOBS_PER_CPU * (os.cpu_count() or 1)))
        self.dask = dask
        self._pool: Any = None
        self._client: Any = None
        self._cluster: Any = None
        self._base_future: Any = None

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close(terminate=exc_type is not None)

    def close(self, terminate: bool = False) -> None:
        if self._pool is not None:
            if terminate:
                self._pool.terminate()
            else:
                self._pool.close()
            self._pool.join()
            self._pool = None
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def run(
        self, todo: Sequence[Mapping[str, Any]], engine: str, on_rows: Callable[[list[dict[str, Any]]], None]
    ) -> None:
        """Evaluate `todo` (resolved configurations); hand each finished chunk's rows to `on_rows`."""
        if not todo:
            return
        size = max(1, min(CHUNK_SIZE, math.ceil(len(todo) / (4 * self.jobs))))
        chunks = _chunks(todo, size)
        if self.dask:
            self._run_dask(chunks, engine, on_rows)
        elif self.jobs <= 1 or len(chunks) == 1:
            for chunk in chunks:
                on_rows(evaluate_chunk(self.base_scn, chunk, engine))
        else:
            pool = self._local_pool()
            for rows in pool.imap(_evaluate_chunk_args, [(self.base_scn, c, engine) for c in chunks]):
                on_rows(rows)

    def _local_pool(self) -> Any:
        if self._pool is None:
            # import both evaluators here, once: forked workers inherit them
            importlib.import_module("..analytic", __package__)
            importlib.import_module("..engine", __package__)
            methods = multiprocessing.get_all_start_methods()
            ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
            self._pool = ctx.Pool(processes=self.jobs, initializer=pool_worker_init, initargs=(os.getpid(),))
        return self._pool

    def _run_dask(
        self, chunks: list[list[Any]], engine: str, on_rows: Callable[[list[dict[str, Any]]], None]
    ) -> None:
        try:
            from distributed import Client, LocalCluster, as_completed
        except ImportError:
            raise ConfigError(
                "needs the optional Dask extra: pip install 'mfusim[dask]'", key="--dask"
            ) from None
        if self._client is None:
            if self.dask == "local":
                self._cluster = LocalCluster(
                    n_workers=self.jobs, threads_per_worker=1, processes=True, dashboard_address=None
                )
                self._client = Client(self._cluster)
            else:
                try:
                    self._client = Client(self.dask, timeout="20s")
                except (OSError, TimeoutError, ValueError) as exc:
                    raise ConfigError(
                        f"cannot reach the Dask scheduler {self.dask!r}: {exc}", key="--dask"
                    ) from None
            self._base_future = self._client.scatter(self.base_scn, broadcast=True)
        futures = [
            self._client.submit(evaluate_chunk, self._base_future, chunk, engine, pure=False)
            for chunk in chunks
        ]
        for fut in as_completed(futures):
            on_rows(fut.result())


def run_configs(
    base_scn: Scenario,
    todo: Sequence[Mapping[str, Any]],
    engine: str,
    *,
    jobs: int = 1,
    dask: str | None = None,
    on_rows: Callable[[list[dict[str, Any]]], None],
) -> None:
    """Evaluate `todo` with a runner of its own (see Runner)."""
    with Runner(base_scn, jobs=jobs, dask=dask) as runner:
        runner.run(todo, engine, on_rows)


def _ignore_sigint() -> None:
    """Pool workers leave Ctrl-C to the parent, which terminates them (no worker tracebacks)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def pool_worker_init(parent_pid: int) -> None:
    """A pool worker dies quietly with its parent: Ctrl-C is left to the parent (which
    terminates the pool), SIGTERM keeps its default action (the forked worker must not inherit
    the CLI's handler, which raises to clean up), and on Linux the kernel sends SIGTERM when
    the parent dies, even by SIGKILL, so no orphan runs on and crashes on a broken pipe."""
    _ignore_sigint()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(0)
