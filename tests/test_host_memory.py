"""host_memory: the heap figures and handing freed pages back, checked
against the kernel's count of resident memory (/proc/self/status).

The resident-memory checks run in a fresh interpreter (`_in_fresh_process`):
in a test worker, a releaser thread of a training graph that another test
built may hand the pages back in the middle of a measurement.
"""

import ctypes
import gc
import os
import re
import subprocess
import sys
import threading
import time

from engine import host_memory

MIB = 2**20
BLOCK = 4096
NUM_BLOCKS = 16384  # 64 MiB of blocks below malloc's mmap threshold


def _rss():
  with open("/proc/self/status") as f:
    return int(re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M).group(1)) * 1024


def _releaser_threads():
  return {thread for thread in threading.enumerate()
          if thread.name == "release_freed_heap"}


def _wait_for_no_releaser_threads(timeout_seconds=30):
  deadline = time.monotonic() + timeout_seconds
  while _releaser_threads() and time.monotonic() < deadline:
    time.sleep(0.05)
  return not _releaser_threads()


def _in_fresh_process(check):
  """Runs the module-level function `check` in a new interpreter that
  imports only this module (and host_memory); fails with its output."""
  tests_dir = os.path.dirname(os.path.abspath(__file__))
  code = ("import sys; sys.path[:0] = [%r, %r]; import test_host_memory; "
          "test_host_memory.%s()" % (tests_dir, os.path.dirname(tests_dir),
                                     check.__name__))
  done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                        text=True, timeout=120, check=False)
  assert done.returncode == 0, done.stdout + done.stderr


def _libc():
  libc = ctypes.CDLL("libc.so.6")
  libc.malloc.restype = ctypes.c_void_p
  libc.malloc.argtypes = [ctypes.c_size_t]
  libc.free.argtypes = [ctypes.c_void_p]
  return libc


def _heap_bytes_count_what_is_allocated_and_freed():
  libc = _libc()
  before = host_memory.heap_bytes()
  blocks = [libc.malloc(BLOCK) for _ in range(NUM_BLOCKS)]
  allocated = host_memory.heap_bytes()
  for block in blocks:
    libc.free(block)
  freed = host_memory.heap_bytes()
  size = NUM_BLOCKS * BLOCK
  # Each block carries malloc's 16-byte header; Python allocates a little too.
  assert size <= allocated["in_use"] - before["in_use"] < size + 2 * MIB
  assert size - 2 * MIB < allocated["in_use"] - freed["in_use"] < size + 2 * MIB


def _release_freed_heap_hands_freed_pages_back():
  libc = _libc()
  blocks = [libc.malloc(BLOCK) for _ in range(NUM_BLOCKS)]
  for block in blocks:
    ctypes.memset(block, 1, BLOCK)  # resident
  # A block above them keeps the heap's top in use, so glibc's own trimming
  # of the top cannot return the freed blocks: they stay resident, as the
  # runtime's scratch memory does among its live objects.
  pin = libc.malloc(BLOCK)
  try:
    resident = _rss()
    for block in blocks:
      libc.free(block)
    kept = _rss()
    assert resident - kept < 16 * MIB
    assert host_memory.release_freed_heap() is True
    assert kept - _rss() > 48 * MIB
  finally:
    libc.free(pin)


def _heap_releaser_hands_pages_back_while_work_goes_on():
  libc = _libc()
  releaser = host_memory.HeapReleaser(interval_seconds=0.05)
  try:
    blocks = [libc.malloc(BLOCK) for _ in range(NUM_BLOCKS)]
    for block in blocks:
      ctypes.memset(block, 1, BLOCK)
    pin = libc.malloc(BLOCK)  # See _release_freed_heap_hands_freed_pages_back.
    try:
      resident = _rss()
      for block in blocks:
        libc.free(block)
      deadline = time.monotonic() + 30
      while resident - _rss() < 48 * MIB and time.monotonic() < deadline:
        time.sleep(0.05)
      assert resident - _rss() > 48 * MIB
    finally:
      libc.free(pin)
  finally:
    releaser.stop()
  assert not _releaser_threads()


def _heap_releaser_hands_pages_back_when_stopped():
  libc = _libc()
  blocks = [libc.malloc(BLOCK) for _ in range(NUM_BLOCKS)]
  for block in blocks:
    ctypes.memset(block, 1, BLOCK)
  pin = libc.malloc(BLOCK)  # See _release_freed_heap_hands_freed_pages_back.
  try:
    releaser = host_memory.HeapReleaser(interval_seconds=3600)
    for block in blocks:
      libc.free(block)
    kept = _rss()
    releaser.stop()
    assert kept - _rss() > 48 * MIB
  finally:
    libc.free(pin)


def test_first_runs_releaser_stops_after_its_runs():
  releaser = host_memory.FirstRunsReleaser(runs=2, interval_seconds=0.01)
  thread = releaser._releaser._thread  # pylint: disable=protected-access
  assert thread.is_alive()
  assert releaser.run_ended() == 0
  assert thread.is_alive()
  releaser.run_ended()
  assert not thread.is_alive()


def _first_runs_releaser_stops_when_dropped_before_its_runs():
  releaser = host_memory.FirstRunsReleaser(runs=2, interval_seconds=0.01)
  releaser.run_ended()
  assert _releaser_threads()
  del releaser
  gc.collect()
  assert _wait_for_no_releaser_threads()


def test_heap_bytes_count_what_is_allocated_and_freed():
  _in_fresh_process(_heap_bytes_count_what_is_allocated_and_freed)


def test_release_freed_heap_hands_freed_pages_back():
  _in_fresh_process(_release_freed_heap_hands_freed_pages_back)


def test_heap_releaser_hands_pages_back_while_work_goes_on():
  _in_fresh_process(_heap_releaser_hands_pages_back_while_work_goes_on)


def test_heap_releaser_hands_pages_back_when_stopped():
  _in_fresh_process(_heap_releaser_hands_pages_back_when_stopped)


def test_first_runs_releaser_stops_when_dropped_before_its_runs():
  _in_fresh_process(_first_runs_releaser_stops_when_dropped_before_its_runs)
