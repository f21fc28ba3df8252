"""What the daemon process sets on itself: logging, umask, file limit, the collector."""

from __future__ import annotations

import gc
import logging
import os
import sys
from dataclasses import replace
from pathlib import Path

from jobctl import files
from jobctl.daemon.wiring import DaemonConfig, daemon_log
from jobctl.engine import process
from jobctl.logfmt import BackgroundStreamHandler, make_formatter

log = logging.getLogger("jobctl.daemon")


def setup_logging(level: str = "info", fmt: str = "logfmt") -> None:
    """One line per event on stderr (the journal's input): ``logfmt`` or ``json``; the
    daemon's own log file once stderr is gone (:func:`log_fallback`)."""
    handler = BackgroundStreamHandler(sys.stderr)
    handler.setFormatter(make_formatter(fmt))
    # No caller lookup (a stack walk per line) and no thread or process names (a third of
    # a record's cost): neither format shows them. The logging HOWTO's documented switches.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    root = logging.getLogger("jobctl")
    for old in root.handlers:
        old.close()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def log_fallback(path: Path) -> None:
    """Where the daemon's lines go once its stderr is gone for good (jobctl/daemonlog.py):
    ``path``, the daemon's own log file, said once there."""
    for handler in logging.getLogger("jobctl").handlers:
        if isinstance(handler, BackgroundStreamHandler):
            handler.fallback = path


def harden_process(config: DaemonConfig) -> DaemonConfig:
    """What the daemon process sets on itself at start: umask 077 (whatever it creates is
    private), the open-file soft limit raised to the hard one (idle connections and
    running commands hold descriptors; commands get the old limit back), and the file its
    log lines go to once its stderr is gone (an ssh session closed, ``| tee`` killed)."""
    os.umask(files.DAEMON_UMASK)
    log_fallback(daemon_log(config))
    old, new = process.raise_nofile()
    log.debug("event=nofile_limit soft_was=%d soft=%d for_commands=%d", old, new, old)
    return replace(config, child_nofile=old if new != old else None)


#: The cyclic collector's thresholds once the daemon serves (Python's are 700, 10, 10).
#: A request of 1,000 schedules allocates some 30,000 objects that live until its answer
#: is sent: with the defaults a young collection ran every 700 allocations and walked
#: them again each time, a third of the daemon's CPU per schedule (docs/benchmarks.md,
#: "Schedules", workload d). The garbage a cycle leaves waits a little longer: a few MB.
GC_THRESHOLDS = (50_000, 20, 10)


def tune_gc() -> None:
    """Once ready: what start-up built (the app, its schemas, the module caches) is kept
    out of every later collection (``gc.freeze``), and :data:`GC_THRESHOLDS` apply. For
    the daemon process only (``run_daemon``), never a test that runs a daemon in-process."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
