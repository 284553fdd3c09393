# coding=utf-8
"""What an Apache Beam run prints and leaves behind: only the project's own.

A run on a Beam runner (corpus/beam_pipeline.py) reads as a local run
does: its settings, progress lines, warnings and last line, each in the
project's format (userio/verbosity.py). Unless -v 1 asks for details:

  * `quiet_import`: importing apache_beam logs that BigQuery's client
    libraries are missing, which nothing here uses; those lines are
    dropped.
  * `aside(log_path)`: while the pipeline is built and runs, file
    descriptor 2, which the runner's worker processes inherit (DirectRunner
    in multi_processing mode starts them through a shell), goes to
    `log_path`: their logging, TensorFlow's start-up lines in each worker,
    a shell's "Killed". So do the records of every logger but absl's (Beam's
    own, and the worker lines the runner relays), and what threads write to
    sys.stderr (Beam's threads print their tracebacks when a worker is
    lost). The project's lines, absl's, go to the terminal.
  * `own_temporary_folder`: the run's temporary files, and its workers'
    ($TMPDIR), go to a folder of its own, removed when the run ends,
    however it ends: Beam's runners leave theirs (beam-temp*, staging
    folders) behind.

`LostWorkers` tells a worker process that died (kill -9, the out-of-memory
killer) from other failures, for a one-line ending.
"""

import contextlib
import logging as logging_module
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time

from absl import logging

from userio import verbosity

# The error with which Beam's local job service ends the thread of a worker
# process that exited before it was stopped (local_job_service.py's
# SubprocessSdkWorker, in the thread of this name); the status is the
# shell's (128 + the signal's number when the worker was killed).
_WORKER_THREAD = "run_worker"
_WORKER_EXITED = re.compile(r"Worker subprocess exited with return code "
                            r"(-?\d+)")
# The longest wait for Beam's worker threads to report their processes'
# ends once the pipeline failed.
_WORKER_THREADS_SECONDS = 10.0
_SHELL_SIGNAL_BASE = 128
# How the log shows the records of other loggers than absl's.
_OTHERS_FORMAT = "%(levelname)s:%(name)s:%(message)s"


@contextlib.contextmanager
def quiet_import():
  """Drops the log records made within (apache_beam's import notices),
  unless -v 1 asks for details."""
  if verbosity.details():
    yield
    return
  before = logging_module.root.manager.disable
  logging_module.disable(logging_module.CRITICAL)
  try:
    yield
  finally:
    logging_module.disable(before)


@contextlib.contextmanager
def own_temporary_folder():
  """Yields a new folder that is this process's and its children's
  temporary folder (tempfile's and $TMPDIR) within the context, and
  removes it with all it holds when the context ends."""
  folder = tempfile.mkdtemp(prefix="beam-run-")
  saved = tempfile.tempdir, os.environ.get("TMPDIR")
  tempfile.tempdir = os.environ["TMPDIR"] = folder
  try:
    yield folder
  finally:
    tempfile.tempdir = saved[0]
    if saved[1] is None:
      del os.environ["TMPDIR"]
    else:
      os.environ["TMPDIR"] = saved[1]
    shutil.rmtree(folder, ignore_errors=True)


class _OnlyAbsl(logging_module.Filter):
  """Passes the records of absl's logger (the project's lines) only, or
  (`invert`) all others."""

  def __init__(self, invert=False):
    super().__init__()
    self._invert = invert

  def filter(self, record):
    return (record.name == logging.get_absl_logger().name) != self._invert


@contextlib.contextmanager
def aside(log_path):
  """Within it, what the runner and its workers print goes to `log_path`
  and the project's lines to the terminal (module docstring); everything
  stays where it was with -v 1."""
  if verbosity.details():
    yield
    return
  handler = logging.get_absl_handler().python_handler
  sys.stderr.flush()
  terminal_fd = os.dup(2)
  terminal = os.fdopen(os.dup(terminal_fd), "w", buffering=1,
                       encoding=sys.stderr.encoding, errors="backslashreplace")
  log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
  os.dup2(log_fd, 2)
  os.close(log_fd)
  stream = handler.setStream(terminal)
  others = logging_module.StreamHandler(sys.stderr)
  others.setFormatter(logging_module.Formatter(_OTHERS_FORMAT))
  others.addFilter(_OnlyAbsl(invert=True))
  only_absl = _OnlyAbsl()
  handler.addFilter(only_absl)
  logging_module.root.addHandler(others)
  try:
    yield
  finally:
    logging_module.root.removeHandler(others)
    handler.removeFilter(only_absl)
    handler.setStream(stream)
    sys.stderr.flush()
    os.dup2(terminal_fd, 2)
    os.close(terminal_fd)
    terminal.close()


class LostWorkers(object):
  """A context that notes the worker processes of Beam's local runners that
  ended before they were stopped, from the errors their threads end with
  (threading.excepthook, which it chains to)."""

  def __init__(self):
    self._statuses = []
    self._chained = None

  def __enter__(self):
    self._chained = threading.excepthook
    threading.excepthook = self._hook
    return self

  def __exit__(self, *unused_exc_info):
    threading.excepthook = self._chained
    return False

  def _hook(self, args):
    found = _WORKER_EXITED.search(str(args.exc_value))
    if found:
      self._statuses.append(int(found.group(1)))
    self._chained(args)

  def ending(self):
    """How the first lost worker ended ("was killed (SIGKILL)", "ended
    with exit status 1"), or None when none was lost. Called after the
    pipeline failed, it waits (boundedly) for the threads of Beam's
    workers: a lost worker's reports its end a moment after the pipeline
    notices that its worker is gone."""
    deadline = time.monotonic() + _WORKER_THREADS_SECONDS
    for thread in threading.enumerate():
      if thread.name == _WORKER_THREAD:
        thread.join(max(0.0, deadline - time.monotonic()))
    if not self._statuses:
      return None
    return _describe_status(self._statuses[0])


def _describe_status(status):
  """A shell's exit status in words."""
  if status < 0:
    number = -status
  elif status > _SHELL_SIGNAL_BASE:
    number = status - _SHELL_SIGNAL_BASE
  else:
    return "ended with exit status %d" % status
  try:
    return "was killed (%s)" % signal.Signals(number).name
  except ValueError:
    return "ended with exit status %d" % status
