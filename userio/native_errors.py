# coding=utf-8
"""What TensorFlow's native code writes to the process's stderr, held back
while a step runs, then let through, filtered, or dropped.

TensorFlow's C++ code writes its log lines to file descriptor 2 directly,
past Python's sys.stderr. `held()` sends that descriptor to a temporary
file for a block; at its end the lines come out on the real stderr, but
those a `keep` function leaves out, or none when the block found that
they only repeat the one line the command is about to end with
(`Held.drop_and_silence`).

Nothing here imports TensorFlow.
"""

import contextlib
import os
import sys
import tempfile


class Held(object):
  """The block's handle: `drop_and_silence` says its lines are not to be
  written, and that native code is to write nothing for the rest of the
  process (TensorFlow logs a failed cluster's state once more as the
  process ends); Python's own stderr keeps writing where it did."""

  def __init__(self):
    self.dropped = False

  def drop_and_silence(self):
    self.dropped = True


@contextlib.contextmanager
def held(keep=None):
  """Holds file descriptor 2 for the block (see the module docstring).

  Args:
    keep: callable(list of lines, each with its line end) -> the lines to
      write out; None: all of them.

  Yields:
    A Held.
  """
  sys.stderr.flush()
  saved = os.dup(2)
  handle = Held()
  with tempfile.TemporaryFile(mode="w+b") as captured:
    os.dup2(captured.fileno(), 2)
    try:
      yield handle
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      if handle.dropped:
        _silence_native_code(saved)
      else:
        os.close(saved)
        captured.seek(0)
        lines = captured.read().decode("utf-8", "replace").splitlines(
            keepends=True)
        lines = lines if keep is None else keep(lines)
        if lines:
          sys.stderr.write("".join(lines))
          sys.stderr.flush()


def _silence_native_code(saved):
  """Sends file descriptor 2 to /dev/null and Python's sys.stderr to
  `saved`, a copy of where descriptor 2 went: Python's lines (the command's
  last one) are still seen, native code's are not."""
  sys.stderr = os.fdopen(saved, "w", buffering=1)
  devnull = os.open(os.devnull, os.O_WRONLY)
  os.dup2(devnull, 2)
  os.close(devnull)
