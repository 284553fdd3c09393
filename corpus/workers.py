# coding=utf-8
"""Worker processes that work through a corpus's shards, results in order.

    with workers.results_in_order(count_shard, jobs, num_workers) as results:
      for result, tag in results:
        ...

runs `count_shard(*args)` for each `(args, tag)` of `jobs` in `num_workers`
processes forked from this one (they start at once, without importing
TensorFlow again) and yields `(result, tag)` in the order of `jobs`, however
the workers' times differ. `jobs` is read lazily, with at most two jobs per
worker handed out and not yet yielded: one being worked on and one
waiting, so that no worker idles while the next shard is read, and the
memory of the jobs in flight stays bounded. A job whose args are None runs
nothing; its `(None, tag)` keeps its place in the order.

The workers belong to the run that forked them:

  * they end when it ends, however it ends (a kill -9 included), by Linux's
    PR_SET_PDEATHSIG; where that is missing, nothing is set. A worker
    outliving its run would wait for work forever, holding the flock of
    the output folder it inherited (userio/folder_lock.py), and every rerun
    would be refused.
  * they ignore SIGINT and SIGTERM: a terminal's Ctrl-C reaches the whole
    process group, and the run alone decides what stopping means (it stops
    its workers, below), so a stop always ends the same way.
  * when the run stops inside the context (an error, Ctrl-C, SIGTERM as
    userio/cli.py raises it), every worker is killed at once and the jobs
    not started are dropped: what they would produce is not wanted, and the
    caller removes what the finished ones wrote.
  * a worker that dies (the kernel's out-of-memory killer ends it) ends the
    run with one line, cli.UserError, naming the flags that shrink a
    worker.

Use it from the main thread: PR_SET_PDEATHSIG fires when the thread that
forked the worker ends.
"""

import collections
import concurrent.futures
import contextlib
import ctypes
import multiprocessing
import os
import signal

from userio import cli

# Jobs per worker handed out and not yet yielded: one being worked on and
# one waiting.
_JOBS_IN_FLIGHT_PER_WORKER = 2
# Linux's prctl option: the signal a process gets when its parent ends.
_PR_SET_PDEATHSIG = 1


def _start_worker(parent_pid):
  """Runs first in each worker: the signal settings of the module
  docstring."""
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.signal(signal.SIGTERM, signal.SIG_IGN)
  try:
    prctl = ctypes.CDLL(None).prctl
  except (OSError, AttributeError):
    return
  prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
  if os.getppid() != parent_pid:  # The run ended before prctl took effect.
    os._exit(1)  # pylint: disable=protected-access


@contextlib.contextmanager
def results_in_order(function, jobs, num_workers,
                     size_flag="--shard_size_mb"):
  """A context yielding the generator of `(result, tag)` pairs, in the
  order of `jobs` (see the module docstring).

  Args:
    function: called in a worker as function(*args); it and its args and
      result must pickle (a module-level function).
    jobs: iterable of (args tuple or None, tag); tags stay in this process.
    num_workers: worker processes.
    size_flag: the flag that makes a job smaller, named when a worker dies.

  Raises:
    cli.UserError: a worker process died.
    What `function` raised, for the first job in order that raised.
  """
  pool = concurrent.futures.ProcessPoolExecutor(
      num_workers, mp_context=multiprocessing.get_context("fork"),
      initializer=_start_worker, initargs=(os.getpid(),))
  try:
    yield _results(pool, function, jobs,
                   _JOBS_IN_FLIGHT_PER_WORKER * num_workers, size_flag)
  except BaseException:
    # A stop that came while the pool was forking can leave a worker
    # unknown to the pool, waiting for work forever, and the interpreter's
    # exit waits for every child: end all children, not only the pool's.
    for worker in multiprocessing.active_children():
      worker.kill()
    raise
  finally:
    pool.shutdown(cancel_futures=True)


def _results(pool, function, jobs, most_in_flight, size_flag):
  """The generator of `results_in_order`."""
  pending = collections.deque()
  try:
    for args, tag in jobs:
      future = None if args is None else pool.submit(function, *args)
      pending.append((future, tag))
      while len(pending) >= most_in_flight:
        yield _result(*pending.popleft())
    while pending:
      yield _result(*pending.popleft())
  except concurrent.futures.process.BrokenProcessPool:
    raise cli.UserError(
        "A worker process died (out of memory?); lower %s or --num_workers."
        % size_flag) from None


def _result(future, tag):
  return (None if future is None else future.result()), tag


def run_in_child(function, *args):
  """function(*args) in one worker process forked from this one; its
  result (or what it raised) comes back here.

  For work that starts TensorFlow's runtime (its thread pools) before the
  run forks its workers: a worker forked from a process whose pools have
  started waits on them forever, so such work runs in a child instead.
  """
  with results_in_order(function, [(args, None)], 1) as results:
    (result, _), = list(results)
  return result
