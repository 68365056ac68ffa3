"""The Ray session of a command that translates on Ray (`translate-corpus`, `distill`): started quietly when first
needed, SIGTERM taken as Ctrl-C while it lasts, shut down at the end where the command started it."""

import logging
import os
import signal
import sys

from .corpus import ray_module


class RaySession:
    """`with RaySession(address, verbose) as session:` and `session.connect` where the work first needs Ray. Inside the
    block SIGTERM raises `KeyboardInterrupt` as Ctrl-C does (the shards written stay whole, a rerun resumes), and
    `stopped_by` is the signal that ended it."""

    def __init__(self, address: str | None = None, verbose: bool = False):
        self.address, self.verbose = address, verbose
        self.started, self.stopped_by, self.previous = False, signal.SIGINT, None

    def connect(self) -> None:
        if not ray_module().is_initialized():
            start_ray(self.address, self.verbose)
            signal.signal(signal.SIGTERM, self.stop)  # again: Ray's core takes SIGTERM over as it starts
            self.started = True

    def stop(self, number, frame):
        self.stopped_by = number
        raise KeyboardInterrupt

    def __enter__(self):
        self.previous = signal.signal(signal.SIGTERM, self.stop)
        return self

    def __exit__(self, *exception):
        signal.signal(signal.SIGTERM, self.previous)
        if self.started:
            ray_module().shutdown()
            self.started = False


def start_ray(address: str | None = None, verbose: bool = False, **arguments) -> None:
    """`ray.init` with [`init_arguments`] (and `arguments` over them), quiet unless `verbose`: Ray's log lines (its C++
    core's, which would say that Ray Data's actors take their arguments from the object store, its Python loggers',
    Ray Data's own) stay in the session's log files, and so does the workers' output. RAY_BACKEND_LOG_LEVEL is read as
    Ray starts, which reports it on stderr: that one line is not shown either."""
    ray = ray_module()

    arguments = {**init_arguments(address), **arguments}
    if verbose:
        ray.init(**arguments)
        return
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
    import ray.data  # which sets up its logger as it is imported

    for handler in logging.getLogger("ray.data").handlers:
        if isinstance(handler, logging.StreamHandler):  # the console's; its log file keeps everything
            handler.setLevel(logging.ERROR)
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        ray.init(**arguments, log_to_driver=False, logging_level=logging.ERROR)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def init_arguments(address: str | None) -> dict:
    """`ray.init`'s arguments: a cluster's address, or a local Ray on this machine's cores with an object store of at
    most 2 GiB (a fifth of the memory on small machines): the blocks are shard descriptions and summaries."""
    if address:
        return dict(address=address)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 8 << 30
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return dict(num_cpus=cores, include_dashboard=False, object_store_memory=min(2 << 30, memory // 5))


__all__ = ["RaySession", "init_arguments", "start_ray"]
