"""Execution engines for the index build: local worker processes or a Ray cluster.

The build is a list of independent map tasks followed by a list of independent reduce tasks.
Each task is a top-level function called with plain keyword arguments that reads and writes
files. An engine runs such a list and returns the results in submission order, so what the
build writes never depends on which worker finished first.

Ray is optional: it is imported only when a ``RayEngine`` starts.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import socket
import sys
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from tcqa_data.errors import ConfigError, TcqaError
from tcqa_data.outputs import OUTPUT_ERRNOS, os_error_line

ENGINE_NAMES = ("local", "ray")
RAY_EXTRA_HINT = "install the ray extra: pip install 'tcqa-data[ray]'"
RESUME_HINT = "rerun the same command to resume from the finished shards"

# Called on the driver as each task finishes (in completion order): (task index, result).
OnDone = Callable[[int, Any], None]


def check_task_function(fn: Callable[..., Any]) -> None:
    """Refuse functions a worker cannot import by name.

    Worker processes (spawned locally, or on other Ray nodes) receive the function by reference,
    so lambdas, nested functions and functions defined in ``__main__`` cannot run there.
    """
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "")
    if (module in (None, "__main__") or "<" in qualname
            or getattr(sys.modules.get(module or ""), qualname, None) is not fn):
        raise TypeError(f"{fn!r} must be a top-level function of an importable module "
                        "so that worker processes can import it")


def _task_failed(desc: str, index: int, exc: BaseException) -> BaseException:
    """The exception to raise on the driver for a failed task."""
    if isinstance(exc, TcqaError):
        return exc  # already says what is wrong and where
    if isinstance(exc, OSError) and exc.errno in OUTPUT_ERRNOS:
        # a full or read-only disk, too many open files: the output side, whatever file it names
        return TcqaError(f"{desc} task {index}: {os_error_line(exc)}")
    if isinstance(exc, OSError) and exc.filename is not None:
        # Typically an output folder some node cannot write or an input it cannot see.
        return TcqaError(f"{desc} task {index}: cannot access {exc.filename}: "
                         f"{exc.strerror or exc}")
    return exc


def _raise_task_failure(desc: str, index: int, exc: Exception) -> NoReturn:
    """Re-raise a local task's exception, translated by ``_task_failed`` where that helps."""
    failure = _task_failed(desc, index, exc)
    if failure is exc:
        raise exc
    raise failure from exc


class Engine(ABC):
    """Runs lists of independent tasks; use as a context manager (``close`` releases workers)."""

    name: str = ""

    @property
    @abstractmethod
    def parallelism(self) -> int:
        """How many tasks can run at once (used to size input shards)."""

    @abstractmethod
    def map(self, fn: Callable[..., Any], calls: Sequence[Mapping[str, Any]], *, desc: str = "",
            on_done: OnDone | None = None, shared: Mapping[str, Any] | None = None) -> list[Any]:
        """Run ``fn(**shared, **kwargs)`` for each ``kwargs`` in ``calls``; results in the order
        of ``calls``. ``shared`` holds arguments common to every task (sent once on Ray).

        The first failing task stops the run: tasks not started are cancelled and the error is
        raised (``TcqaError`` as is; an ``OSError`` on a file as a ``TcqaError`` naming it).
        """

    def check_shared_paths(self, out_dir: str | os.PathLike, inputs: Iterable[str] = ()) -> None:
        """Fail early, naming the path, if ``out_dir`` cannot be written from this machine."""
        check_writable_dir(out_dir)

    @abstractmethod
    def close(self) -> None:
        """Release worker processes or the Ray connection."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _call(job: tuple[Callable[..., Any], dict[str, Any]]) -> Any:
    fn, kwargs = job
    return fn(**kwargs)


def run_tasks(fn: Callable[..., Any], calls: Sequence[Mapping[str, Any]], *, desc: str,
              shared: Mapping[str, Any] | None = None, engine: Engine | None = None, pool: Any = None,
              on_done: OnDone | None = None, chunksize: int = 1) -> list[Any]:
    """``fn(**shared, **call)`` for each call, results in the order of ``calls``: as ``engine``'s
    tasks (``shared`` sent once), else on ``pool`` (a local process pool: ``pool.map``), else one
    after the other in this process. ``on_done(i, result)`` as each result arrives. The build's
    steps run their tasks through this one function whichever of the three it has."""
    if engine is not None:
        return engine.map(fn, calls, desc=desc, shared=shared, on_done=on_done)
    jobs = [(fn, {**(shared or {}), **c}) for c in calls]
    results = []
    done = pool.map(_call, jobs, chunksize=chunksize) if pool is not None else map(_call, jobs)
    for i, r in enumerate(done):
        results.append(r)
        if on_done is not None:
            on_done(i, r)
    return results


def local_output_dir(path: str | os.PathLike) -> Path:
    """The output folder as a local path; object-storage URIs are refused with the reason.

    The index's buckets are ``.npy`` files that queries memory-map (``numpy.load(mmap_mode='r')``),
    and every output is written atomically by renaming a temporary file, which object stores do
    not offer (``pyarrow.fs`` opens ``s3://``, ``gs://``, ``abfs://``, but a "move" there is a copy
    and a delete). So the index lives on a file system; on a cluster, a shared one every node
    mounts at the same path.
    """
    text = os.fspath(path)
    scheme, sep, rest = text.partition("://")
    if not sep:
        return Path(text)
    if scheme == "file":
        return Path(rest)
    raise TcqaError(
        f"{text}: the index must be on a file system, not object storage ({scheme}://): its "
        "buckets are memory-mapped .npy files and every file is written by an atomic rename. "
        "Use a folder on a shared filesystem every node mounts (NFS, Lustre, CephFS, a FUSE mount "
        "of the bucket), then copy the finished index to object storage if you want a copy there")


def check_writable_dir(path: str | os.PathLike) -> Path:
    """Create ``path`` if needed and prove a file can be written there; ``TcqaError`` names it."""
    out = local_output_dir(path)
    probe = out / f".tcqa-probe-{uuid.uuid4().hex}"
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise TcqaError(f"cannot write the output folder {out}: {exc.strerror or exc}") from exc
    return out


class LocalEngine(Engine):
    """Tasks in local worker processes (``spawn``ed, so no state leaks from the driver).

    ``workers=1`` runs the tasks inline in the calling process.
    """

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers if workers is not None else (os.cpu_count() or 1)
        if self.workers < 1:
            raise ConfigError(f"workers must be at least 1, not {self.workers}")
        self._pool: cf.ProcessPoolExecutor | None = None

    @property
    def parallelism(self) -> int:
        return self.workers

    def map(self, fn: Callable[..., Any], calls: Sequence[Mapping[str, Any]], *, desc: str = "",
            on_done: OnDone | None = None, shared: Mapping[str, Any] | None = None) -> list[Any]:
        check_task_function(fn)
        desc = desc or fn.__name__
        calls = [{**(shared or {}), **kwargs} for kwargs in calls]
        results: list[Any] = [None] * len(calls)
        if self.workers == 1:
            for i, kwargs in enumerate(calls):
                try:
                    results[i] = fn(**kwargs)
                except Exception as exc:
                    _raise_task_failure(desc, i, exc)
                if on_done is not None:
                    on_done(i, results[i])
            return results
        # imported here: a build on one worker never loads multiprocessing (~0.04 CPU-s)
        import multiprocessing
        from concurrent.futures.process import BrokenProcessPool

        if self._pool is None:
            # The pool lives as long as the engine, so map and reduce share warm workers.
            self._pool = cf.ProcessPoolExecutor(self.workers,
                                                mp_context=multiprocessing.get_context("spawn"),
                                                initializer=quiet_worker, initargs=(os.getpid(),))
        futures = {self._pool.submit(fn, **kwargs): i for i, kwargs in enumerate(calls)}
        try:
            for fut in cf.as_completed(futures):
                i = futures[fut]
                try:
                    results[i] = fut.result()
                except BrokenProcessPool as exc:
                    broken, self._pool = self._pool, None
                    if broken is not None:
                        broken.shutdown(wait=False, cancel_futures=True)
                    raise TcqaError(f"{desc}: a local worker process died (killed, or out of "
                                    f"memory?); {RESUME_HINT}") from exc
                except Exception as exc:
                    _raise_task_failure(desc, i, exc)
                if on_done is not None:
                    on_done(i, results[i])
        except BaseException:
            if self._pool is not None:  # Ctrl-C or a failed task: the workers' results are not wanted
                stop_pool(self._pool, kill=True)
                self._pool = None
            raise
        finally:
            for fut in futures:
                fut.cancel()  # no-op for finished tasks; stops queued ones after a failure
        return results

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int | None = None) -> None:
    """Have the kernel kill this worker (SIGKILL) when the process that started it dies, however
    it dies (kill -9, SIGTERM, out of memory): a worker left running holds the memory, and an
    output's lock inherited with its fork, so every rerun would be refused. Linux's
    ``PR_SET_PDEATHSIG``; a no-op elsewhere. ``parent``: the pid that started this worker; if it
    died before the call, this worker exits at once."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if parent is not None and os.getppid() != parent:
        os._exit(1)  # the parent died before the prctl: no signal will come


def quiet_worker(parent: int | None = None) -> None:
    """Initializer of every local worker process: it dies with its parent (:func:`die_with_parent`;
    ``parent``: the parent's pid, ``os.getpid()`` where the pool is made), and Ctrl-C reaches the
    whole process group, where only the parent should answer it (one line, then it stops the
    workers: :func:`stop_pool`), not each worker with a KeyboardInterrupt traceback."""
    import signal

    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def stop_pool(pool: cf.ProcessPoolExecutor, *, kill: bool) -> None:
    """Shut a local pool down. ``kill`` (Ctrl-C or an error): terminate its workers rather than wait
    for their running tasks, whose results nobody will read (a rerun redoes them)."""
    # the executor keeps no public handle on its processes
    procs = list((getattr(pool, "_processes", None) or {}).values()) if kill else []
    pool.shutdown(wait=not kill, cancel_futures=True)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.join(10)


def _split_address(address: str) -> tuple[str, int]:
    """(host, port) of a Ray address: ``host:port`` (GCS, default 6379) or ``ray://host:port``."""
    client = address.startswith("ray://")
    hostport = address[len("ray://"):] if client else address
    host, sep, port = hostport.rpartition(":")
    if not sep:
        return hostport, 10001 if client else 6379
    try:
        return host.strip("[]"), int(port)
    except ValueError as exc:
        raise ConfigError(f"invalid Ray address {address!r}: expected host:port, ray://host:port "
                          "or auto") from exc


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """A TCP connect first: ``ray.init`` retries an unreachable GCS for minutes before failing."""
    host, port = _split_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise TcqaError(
            f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}. Is a head node "
            f"running there (ray start --head) and is port {port} open? Leave --ray-address "
            "unset to start a local Ray instance instead") from exc


def probe_node(out_dir: str, marker: str, token: str, inputs: list[str]) -> list[str]:
    """Ray task run on every node: what this node cannot see or write (empty when all is well)."""
    node = socket.gethostname()
    problems: list[str] = []
    seen = Path(out_dir, marker)
    try:
        if seen.read_text() != token:
            raise FileNotFoundError
    except OSError:
        problems.append(f"node {node} does not see {out_dir} as the driver does (the file the "
                        "driver wrote there is missing): put the index on a shared filesystem "
                        "every node mounts at the same path (and give it as an absolute path)")
        return problems
    probe = Path(out_dir, f".tcqa-probe-{uuid.uuid4().hex}")
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        problems.append(f"node {node} cannot write the output folder {out_dir}: "
                        f"{exc.strerror or exc}")
    missing = [p for p in inputs if not os.path.exists(p)]
    if missing:
        problems.append(f"node {node} cannot see {len(missing)} input file(s), e.g. {missing[0]}: "
                        "put the corpus on a shared filesystem every node mounts at the same path "
                        "(and give absolute paths)")
    return problems


class RayEngine(Engine):
    """Tasks on Ray: a private local instance (``address=None``) or an existing cluster.

    ``address``: ``None`` starts a local instance with ``num_cpus`` CPUs; ``"auto"`` joins the
    cluster this machine belongs to (``RAY_ADDRESS`` or the one ``ray start`` left here);
    ``"host:port"`` or ``"ray://host:port"`` joins that cluster. If Ray is already initialized in
    this process it is used as is and left running. Lost tasks (a worker or node died) are
    retried ``max_retries`` times by Ray; an exception raised by a task is not retried.
    """

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None, *,
                 max_retries: int = 3, runtime_env: dict[str, Any] | None = None) -> None:
        if address is not None and num_cpus is not None:
            raise ConfigError("the number of CPUs only sizes a local Ray instance; a cluster at "
                              f"{address} runs on the CPUs its nodes offer")
        if num_cpus is not None and num_cpus < 1:
            raise ConfigError(f"num_cpus must be at least 1, not {num_cpus}")
        self.address = address
        self.num_cpus = num_cpus
        self.max_retries = max_retries
        self.runtime_env = runtime_env
        self._ray: Any = None
        self._owns_ray = False

    def start(self) -> RayEngine:
        """Import Ray and connect (or start a local instance); called by the first ``map``."""
        if self._ray is not None:
            return self
        try:
            import ray
        except ImportError as exc:
            raise TcqaError(f"the ray engine needs Ray: {RAY_EXTRA_HINT}") from exc
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"runtime_env": self.runtime_env, "logging_level": "WARNING"}
            where = self.address
            if self.address is None:
                # "local" always starts a private instance, even if this machine is part of a
                # cluster (Ray then turns on token authentication and says so in a warning).
                kwargs.update(address="local", num_cpus=self.num_cpus, include_dashboard=False)
                where = "a new local instance"
            else:
                target = os.environ.get("RAY_ADDRESS") if self.address == "auto" else self.address
                if target and target not in ("auto", "local"):
                    _check_reachable(target)
                kwargs["address"] = self.address
            try:
                ray.init(**kwargs)
            except Exception as exc:
                hint = ""
                if "authentication" in str(exc).lower():
                    hint = (" The cluster uses token authentication: copy the head's token "
                            "(`ray get-auth-token` there) to ~/.ray/auth_token here, or set "
                            "RAY_AUTH_TOKEN.")
                raise TcqaError(f"could not start or join Ray at {where}: {exc}.{hint}") from exc
            self._owns_ray = True
        self._ray = ray
        return self

    @property
    def parallelism(self) -> int:
        self.start()
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def map(self, fn: Callable[..., Any], calls: Sequence[Mapping[str, Any]], *, desc: str = "",
            on_done: OnDone | None = None, shared: Mapping[str, Any] | None = None) -> list[Any]:
        check_task_function(fn)
        self.start()
        ray = self._ray
        from ray.exceptions import RayError, RayTaskError

        desc = desc or fn.__name__
        # Ray pickles a top-level function by reference: workers import it from tcqa_data.
        remote = ray.remote(max_retries=self.max_retries, num_cpus=1)(fn)
        # Shared arguments go to the object store once; Ray resolves top-level refs in each task.
        common = {k: ray.put(v) for k, v in (shared or {}).items()}
        refs = [remote.options(name=f"{desc}[{i}]").remote(**common, **kwargs)
                for i, kwargs in enumerate(calls)]
        index = {ref: i for i, ref in enumerate(refs)}
        results: list[Any] = [None] * len(refs)
        pending = list(refs)
        try:
            while pending:
                # Everything that finished in the last 0.2 s: one wait per task is quadratic.
                done, pending = ray.wait(pending, num_returns=len(pending), timeout=0.2)
                for ref in done:
                    i = index[ref]
                    try:
                        results[i] = ray.get(ref)
                    except RayTaskError as exc:
                        failure = _task_failed(desc, i, exc.cause)
                        if failure is exc.cause:
                            if isinstance(failure, TcqaError):
                                raise failure from None  # its message says it all
                            raise  # a bug: keep Ray's error with the worker's traceback
                        raise failure from exc
                    except RayError as exc:
                        # A worker or node was lost more often than max_retries allows.
                        raise TcqaError(f"{desc} task {i} failed after {self.max_retries} "
                                        f"retries: {exc}; {RESUME_HINT}") from exc
                    if on_done is not None:
                        on_done(i, results[i])
        finally:
            for ref in pending:
                ray.cancel(ref)
        return results

    def check_shared_paths(self, out_dir: str | os.PathLike, inputs: Iterable[str] = ()) -> None:
        """Check on every node with CPUs that ``out_dir`` is the driver's folder and writable,
        and that the input files exist there; one ``TcqaError`` lists every problem.

        Paths are checked as the tasks will use them: a relative path is resolved in each
        worker's working directory, so on a cluster it fails here unless that is shared too.
        """
        out = check_writable_dir(out_dir)
        inputs = [p for p in inputs if "://" not in p]  # URLs: each node reads the object store itself
        self.start()
        ray = self._ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        marker, token = f".tcqa-probe-{uuid.uuid4().hex}", uuid.uuid4().hex
        (out / marker).write_text(token)
        try:
            nodes = [n["NodeID"] for n in ray.nodes()
                     if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
            remote = ray.remote(num_cpus=0, max_retries=self.max_retries)(probe_node)
            refs = [remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
                    .remote(str(out), marker, token, [os.fspath(p) for p in inputs])
                    for node in nodes]
            problems = [p for found in ray.get(refs) for p in found]
        finally:
            (out / marker).unlink(missing_ok=True)
        if problems:
            raise TcqaError("; ".join(problems))

    def close(self) -> None:
        if self._ray is not None and self._owns_ray:
            self._ray.shutdown()
        self._ray = None
        self._owns_ray = False


def make_engine(name: str = "local", workers: int | None = None,
                ray_address: str | None = None) -> Engine:
    """The engine a CLI option names. ``workers`` sizes the local pool or a local Ray instance."""
    if name == "local":
        if ray_address is not None:
            raise ConfigError("--ray-address needs --engine ray")
        return LocalEngine(workers)
    if name == "ray":
        return RayEngine(address=ray_address, num_cpus=workers if ray_address is None else None)
    raise ConfigError(f"unknown engine {name!r}: choose one of {', '.join(ENGINE_NAMES)}")
