# coding=utf-8
"""The process's C heap: how much it holds, and handing freed parts back.

TensorFlow builds a session's executors, optimizes the graph and compiles XLA
kernels on the first run of a graph's fetches, all in C++ objects on the
process's malloc heap. Much of that is scratch memory, freed when the first
run ends, but glibc keeps freed memory in the middle of the heap resident:
for a BERT-Large training graph about 0.2 GiB that later steps never need
(docs/memory.md). `release_freed_heap` returns those pages to the operating
system; memory still in use is untouched, so nothing is slower afterwards.
Tensors do not live on this heap (TensorFlow's CPU allocator keeps its own
pool), so this is safe to call at any time, also from another thread while a
run goes on (`releasing_freed_heap`; malloc_trim takes each arena's lock).

The functions do nothing (and return None or {}) where the C library is not
glibc.
"""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function

import contextlib
import ctypes
import threading


def _glibc():
  try:
    return ctypes.CDLL("libc.so.6")
  except OSError:
    return None


class _MallInfo2(ctypes.Structure):
  """glibc's `struct mallinfo2`."""
  _fields_ = [(name, ctypes.c_size_t) for name in (
      "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
      "uordblks", "fordblks", "keepcost")]


def heap_bytes():
  """{'in_use', 'free'} bytes of glibc's main heap, or {} without glibc.

  'free' counts freed memory whether or not its pages were handed back.
  """
  libc = _glibc()
  mallinfo2 = getattr(libc, "mallinfo2", None)
  if mallinfo2 is None:
    return {}
  mallinfo2.restype = _MallInfo2
  info = mallinfo2()
  return {"in_use": info.uordblks, "free": info.fordblks}


def release_freed_heap():
  """Hands the pages of freed heap memory back to the system (malloc_trim).

  Returns:
    True if some memory was released, False if none, None without glibc.
  """
  malloc_trim = getattr(_glibc(), "malloc_trim", None)
  if malloc_trim is None:
    return None
  malloc_trim.argtypes = [ctypes.c_size_t]
  return bool(malloc_trim(0))


@contextlib.contextmanager
def releasing_freed_heap(interval_seconds=1.0):
  """Context in which a thread calls `release_freed_heap` every
  `interval_seconds`, and once more when the block ends, for work that
  frees scratch memory on the heap while it goes on (a first training step
  compiles kernels, then allocates the step's largest tensors)."""
  done = threading.Event()

  def release_until_done():
    while not done.wait(interval_seconds):
      release_freed_heap()

  thread = threading.Thread(target=release_until_done, daemon=True,
                            name="release_freed_heap")
  thread.start()
  try:
    yield
  finally:
    done.set()
    thread.join()
    release_freed_heap()
