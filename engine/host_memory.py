# coding=utf-8
"""The process's C heap: how much it holds, and handing freed parts back.

TensorFlow builds a session's executors, optimizes the graph and compiles XLA
kernels on the first run of a graph's fetches, all in C++ objects on the
process's malloc heap, and its default CPU allocator takes tensors from
malloc as well. glibc keeps memory freed in the middle of the heap
resident, so a step's peak can include scratch memory that earlier work
freed long before.
`release_freed_heap` returns those pages to the operating system; memory
still in use is untouched. It is safe to call at any time, also from
another thread while a run goes on (malloc_trim takes each arena's lock).

The functions do nothing (and return None or {}) where the C library is not
glibc.
"""

import ctypes
import threading
import weakref


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


class HeapReleaser(object):
  """A thread that calls `release_freed_heap` every `interval_seconds`
  until `stop`, which also releases once more."""

  def __init__(self, interval_seconds=1.0):
    self._done = threading.Event()
    self._thread = threading.Thread(target=self._release_until_done,
                                    args=(interval_seconds,), daemon=True,
                                    name="release_freed_heap")
    self._thread.start()

  def _release_until_done(self, interval_seconds):
    while not self._done.wait(interval_seconds):
      release_freed_heap()

  def request_stop(self):
    """Lets the thread end after its current call, without waiting."""
    self._done.set()

  def stop(self):
    self.request_stop()
    self._thread.join()
    release_freed_heap()


class FirstRunsReleaser(object):
  """A `HeapReleaser` from creation until `runs` runs of a training step
  have ended.

  A graph's first runs build its executors, compile its XLA kernels and
  create oneDNN's primitives: scratch memory freed there stays resident
  (glibc keeps it) and adds to the peak of the steps that follow. Later runs
  reuse what they free, and handing it back would only make them fault it
  in again, so the thread stops. The step calls `run_ended` at its end
  (engine/training_step.py puts that call in the train op).
  If this object is garbage-collected before that (with a graph that ran
  fewer times and was dropped), the thread ends too.
  """

  def __init__(self, runs=2, interval_seconds=1.0):
    self._runs_left = runs
    self._lock = threading.Lock()
    self._releaser = HeapReleaser(interval_seconds)
    weakref.finalize(self, self._releaser.request_stop)

  def run_ended(self):
    """Counts a run; after the last one, stops the thread. Returns 0 (a
    value for tf.numpy_function)."""
    with self._lock:
      self._runs_left -= 1
      if self._runs_left == 0:
        self._releaser.stop()
    return 0
