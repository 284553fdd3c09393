"""corpus/workers.py: shards worked on in forked processes, results in
order.

In-process: results in the jobs' order whatever the workers' times, the
jobs read a bounded number ahead, a dead worker in one line, a stop that
kills busy workers at once. tests/test_create_vocab.py stops a whole run
(SIGTERM, Ctrl-C, kill -9) and finds its workers gone.
"""
import multiprocessing
import os
import signal
import time

import pytest

from corpus import workers
from userio import cli


# The value of a job whose worker kills itself, as the OOM killer would.
_DIE = "die"


def _after(seconds, value):
  """(value, the worker's pid) after `seconds`."""
  if value == _DIE:
    os.kill(os.getpid(), signal.SIGKILL)
  time.sleep(seconds)
  return value, os.getpid()


def test_results_come_in_the_jobs_order_with_two_jobs_per_worker_ahead():
  # The first job is the slowest: every later one finishes before it.
  delays = [1.0, 0.0, 0.2, 0.0, 0.1, 0.0, 0.0]
  taken = []

  def jobs():
    for index, delay in enumerate(delays):
      taken.append(index)
      # Job 3 runs nothing and keeps its place.
      yield (None if index == 3 else (delay, "v%d" % index)), index

  got = []
  with workers.results_in_order(_after, jobs(), num_workers=2) as results:
    for result, tag in results:
      got.append((tag, result and result[0], len(taken)))
  assert [(tag, value) for tag, value, _ in got] == [
      (i, None if i == 3 else "v%d" % i) for i in range(len(delays))]
  # While job 0 ran, jobs 1-3 were handed out, and no more: 2 per worker.
  assert got[0][2] == 4
  assert all(read <= tag + 4 for tag, _, read in got)
  assert not multiprocessing.active_children()


def test_workers_run_in_other_processes_forked_from_this_one():
  with workers.results_in_order(
      _after, [((0.0, None), 0), ((0.0, None), 1)], num_workers=2) as results:
    pids = {result[1] for result, _ in results}
  assert os.getpid() not in pids and pids


def test_a_worker_that_dies_ends_in_one_line():
  jobs = [((0.0, 1), 0), ((0.0, _DIE), 1), ((0.0, 2), 2)]
  with pytest.raises(cli.UserError) as raised:
    with workers.results_in_order(_after, jobs, num_workers=1) as results:
      list(results)
  assert str(raised.value) == (
      "A worker process died (out of memory?); lower --shard_size_mb or "
      "--num_workers.")
  assert not multiprocessing.active_children()


def test_a_stop_kills_busy_workers_instead_of_waiting_for_them():
  """Ctrl-C while both workers are an hour from done: the context ends at
  once, and no worker is left."""
  jobs = [((0.0, 0), 0)] + [((3600.0, i), i) for i in range(1, 6)]
  with pytest.raises(KeyboardInterrupt):
    with workers.results_in_order(_after, jobs, num_workers=2) as results:
      next(results)  # Jobs 1 to 4 are handed out now.
      time.sleep(0.5)
      start = time.monotonic()
      raise KeyboardInterrupt()
  assert time.monotonic() - start < 30
  assert not multiprocessing.active_children()
