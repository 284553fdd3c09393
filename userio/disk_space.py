# coding=utf-8
"""Writes that fail for want of disk space or permission: one line, and
nothing half-written left behind.

Whatever a command writes (features, records, checkpoints, summaries,
predictions, exports, conversions) is written inside
`writing(folder, what, size=...)`. When the write fails because the file
system is full (ENOSPC), a quota is used up (EDQUOT), a file outgrows the
process's file-size limit (EFBIG, `ulimit -f`) or the folder cannot be
written (EROFS, EACCES, EPERM), `writing` removes what the write left in
`folder` and raises `WriteFailed`. Its message is one line:

  No space left on device writing checkpoint model.ckpt-20 into /runs/mrpc
  (it needs about 23.4 MiB; 2.1 MiB free there). Free space there or pass
  another --output_dir, then run the same command again: it resumes from
  model.ckpt-10.

userio/cli.py ends the program with it, status 1. TensorFlow reports these
failures as its own errors, not OSErrors (a checkpoint's save op raises
ResourceExhaustedError, which is then no out-of-memory); they are known by
the C library's words, which TensorFlow's messages keep.

This module imports no TensorFlow, and of the project's modules only
userio/units.py and userio/file_systems.py.
"""

import contextlib
import errno
import os
import re
import resource
import shutil

from userio import file_systems
from userio import units

FULL = "full"
UNWRITABLE = "unwritable"
# What each errno means for a write.
_ERRNOS = {errno.ENOSPC: FULL, errno.EDQUOT: FULL, errno.EFBIG: FULL,
           errno.EROFS: UNWRITABLE, errno.EACCES: UNWRITABLE,
           errno.EPERM: UNWRITABLE}
# The words by which the same failures are known in TensorFlow's messages.
_WORDS = {os.strerror(code): kind for code, kind in _ERRNOS.items()
          if code != errno.EPERM}
_TOO_LARGE = os.strerror(errno.EFBIG)
_PATH_BEFORE_WORDS = re.compile(
    r"([^\s;'\"]+); (?:%s)" % "|".join(re.escape(w) for w in _WORDS))


class WriteFailed(Exception):
  """A write failed for want of space or permission; the message is the
  one line a user sees.

  Attributes:
    kind: FULL or UNWRITABLE.
    reason: the C library's words, e.g. "No space left on device".
    size: the bytes the write needed (an estimate), or None.
  """

  def __init__(self, message, kind=FULL, reason="", size=None):
    super().__init__(message)
    self.kind = kind
    self.reason = reason
    self.size = size

  def __reduce__(self):
    # Raised in worker processes too, and pickled back whole.
    return (type(self), (str(self), self.kind, self.reason, self.size))


def problem(error):
  """(kind, reason) when `error` is a write that failed for want of space
  or permission (FULL or UNWRITABLE, and the C library's words), else
  None."""
  if isinstance(error, WriteFailed):
    return error.kind, error.reason
  if isinstance(error, OSError) and error.errno in _ERRNOS:
    return _ERRNOS[error.errno], os.strerror(error.errno)
  if isinstance(error, ValueError):
    return None  # Bad input; its message may quote a file's words.
  text = _text(error)
  for words, kind in _WORDS.items():
    if words in text:
      return kind, words
  return None


def _text(error):
  return str(getattr(error, "message", None) or error)


def is_partial(name):
  """Whether `name` is what an unfinished write leaves: this project's
  `<file>.tmp` and `<folder>.incomplete`, TensorFlow's
  `<file>.tempstate<digits>` (checkpoints) and `<file>.tmp<hex>` (its
  atomic writes)."""
  return (".tempstate" in name or ".tmp" in name or
          name.endswith(".incomplete"))


def _names(folder):
  """The names in local `folder` (empty if it does not exist), or None for
  a remote one."""
  if file_systems.is_remote(folder):
    return None
  try:
    return set(os.listdir(folder))
  except OSError:
    return set()


def _remove_new(folder, before, partial):
  """Removes the entries of `folder` that are not in `before` and that
  `partial(name)` accepts."""
  if before is None:
    return
  for name in sorted(_names(folder) - before):
    if not partial(name):
      continue
    path = os.path.join(folder, name)
    try:
      if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
      else:
        os.remove(path)
    except OSError:
      pass  # The original error is what the user needs to see.


def free_bytes(folder):
  """The bytes this process may still write in local `folder` (or its
  nearest existing parent), or None when unknown."""
  if file_systems.is_remote(folder):
    return None
  path = os.path.abspath(folder)
  while not os.path.isdir(path) and os.path.dirname(path) != path:
    path = os.path.dirname(path)
  try:
    return shutil.disk_usage(path).free
  except OSError:
    return None


def file_size_limit():
  """The largest file this process may write (RLIMIT_FSIZE, `ulimit -f`),
  or None without a limit."""
  soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
  return None if soft == resource.RLIM_INFINITY else soft


def _value(value):
  """`value`, or what the callable `value` returns (None if it fails: an
  estimate must not hide the error it explains)."""
  if not callable(value):
    return value
  try:
    return value()
  except Exception:  # pylint: disable=broad-except
    return None


def _facts(kind, reason, folder, size):
  """What is known about the space: needed, free, the file-size limit."""
  if kind != FULL:
    return []
  facts = []
  if size:
    facts.append("it needs about %s" % units.describe_bytes(size))
  limit = file_size_limit()
  if reason == _TOO_LARGE and limit is not None:
    facts.append("this process may write files of at most %s (ulimit -f)"
                 % units.describe_bytes(limit))
  else:
    free = free_bytes(folder) if folder else None
    if free is not None:
      facts.append("%s free there" % units.describe_bytes(free))
  return facts


def message(kind, reason, folder, what, *, size=None, flag=None, then=None,
            into=True):
  """The one line of a write of `what` into `folder` that failed.

  Args:
    kind, reason: as `problem` returns them.
    folder: the folder written to.
    what: what was written, e.g. "checkpoint model.ckpt-20".
    size: the bytes it needs (an estimate), or None.
    flag: the flag that chose the folder (e.g. "--output_dir"), or None.
    then: what running the same command again does, e.g. "it resumes from
      model.ckpt-10", or None.
    into: whether the line names `folder` after `what` (not when `what` is
      a path in it).
  """
  facts = _facts(kind, reason, folder, size)
  line = "%s writing %s%s%s." % (
      reason, what, " into %s" % folder if into else "",
      " (%s)" % "; ".join(facts) if facts else "")
  other = " or pass another %s" % flag if flag else " or write elsewhere"
  if kind == UNWRITABLE:
    action = "Make the folder writable"
  elif reason == _TOO_LARGE:
    action = "Raise the limit"
  else:
    action = "Free space there"
  return "%s %s%s, then run the same command again%s." % (
      line, action, other, ": " + then if then else "")


@contextlib.contextmanager
def writing(folder, what, *, size=None, partial=is_partial, flag=None,
            then=None):
  """Context of a write of `what` into `folder`; see the module docstring.

  Args:
    folder: the folder the write goes to.
    what: what is written, for the message (e.g. "features train.tf_record").
    size: the bytes the write needs, or a callable returning them (called
      only when the write fails), or None.
    partial: callable(name) -> whether an entry of `folder` that the write
      created is unfinished and to be removed when it fails.
    flag, then: see `message`; `then` may be a callable returning it.

  Raises:
    WriteFailed when the body fails for want of space or permission (a
    WriteFailed of a nested `writing` is worded again with what this one
    knows); other errors pass unchanged.
  """
  before = _names(folder)
  try:
    yield
  except Exception as e:  # pylint: disable=broad-except
    found = problem(e)
    if found is None:
      raise
    _remove_new(folder, before, partial)
    kind, reason = found
    needed = _value(size)
    if needed is None and isinstance(e, WriteFailed):
      needed = e.size
    raise WriteFailed(message(kind, reason, folder, what, size=needed,
                              flag=flag, then=_value(then)),
                      kind, reason, needed) from None


def failure_of(error, flag=None):
  """WriteFailed for an `error` that no `writing` wrapped, naming the file
  its message (or OSError's filename) names; None if `error` is no such
  failure."""
  found = problem(error)
  if found is None:
    return None
  if isinstance(error, WriteFailed):
    return error
  kind, reason = found
  path = getattr(error, "filename", None)
  if not path:
    match = _PATH_BEFORE_WORDS.search(_text(error))
    path = match.group(1) if match else None
  if not path:
    return WriteFailed(message(kind, reason, None, "a file", flag=flag,
                               into=False), kind, reason)
  return WriteFailed(message(kind, reason, os.path.dirname(path) or ".",
                             path, flag=flag, into=False), kind, reason)


def extrapolated(done_bytes, done_items, total_items):
  """About the bytes of `total_items` items when `done_items` took
  `done_bytes`; None before the first item."""
  if not done_items:
    return None
  return int(done_bytes * max(total_items, done_items) / done_items)
