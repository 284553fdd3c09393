# coding=utf-8
"""One run per output folder.

A run that writes into a folder (a training script's --output_dir, the
folder of create_pretraining_data.py's --output_file, convert_checkpoint.py's
--output_dir) holds that folder's lock for its lifetime: an exclusive
`fcntl.flock` on the lock file `run.lock` in the folder (or, for a folder
that must appear whole, `<folder>.lock` beside it), which holds the
process id, host, start time and command line of the run. A second run
that asks for the lock is refused with one line naming the first
(user_errors.UserError). The kernel drops a flock when its process dies
however it dies, so a lock file whose flock nobody holds was left by a
killed run: it is stale, and the next run takes it over (and says so).

`hold` returns a FolderLock, which the run keeps for as long as it works in
the folder (startup/run_setup.py's RunSetup holds it; the other commands use it
as a context manager). The lock is released, and its file removed, when the
FolderLock is released or no longer referenced, or by `release_all`, which
userio/cli.py calls when the command ends. While a FolderLock lives, `hold`
on the same folder in the same process returns it (a process may reach the
same folder twice in one run). Only local folders are locked: flock means
nothing on a remote file system, so `hold` on a remote folder says in one
line that a second run writing there is not detected.

This module imports no TensorFlow (of the project, userio/file_systems.py
and userio/user_errors.py alone).
"""

import datetime
import fcntl
import json
import os
import shlex
import socket
import sys
import weakref

from absl import logging

from userio import file_systems
from userio import user_errors

LOCK_FILE = "run.lock"
# The locks alive in this process, by the lock file's absolute path; a lock
# nothing else refers to any more is released and leaves this map.
_held = weakref.WeakValueDictionary()


class FolderLock(object):
  """A held lock: the open lock file (closing it drops the flock)."""

  def __init__(self, path, handle):
    self.path = path
    self._handle = handle

  def __enter__(self):
    return self

  def __exit__(self, *unused_exc_info):
    self.release()
    return False

  def release(self):
    """Removes the lock file, then drops the lock."""
    if self._handle is None:
      return
    for drop in (lambda: os.remove(self.path), self._handle.close):
      try:
        drop()
      except OSError:
        pass  # Gone already, or what a full disk kept from being written.
    self._handle = None
    if _held.get(self.path) is self:
      del _held[self.path]

  def __del__(self):
    self.release()


def lock_path(folder, beside=False, lock_file=LOCK_FILE):
  """The lock file of `folder`: `lock_file` in it, or `<folder>.lock`
  beside it when `beside`."""
  folder = os.path.abspath(folder)
  return folder.rstrip(os.sep) + ".lock" if beside else os.path.join(
      folder, lock_file)


def _owner():
  """What the lock file says of this process."""
  return {"pid": os.getpid(), "host": socket.gethostname(),
          "started": datetime.datetime.now().isoformat(timespec="seconds"),
          "command": shlex.join([os.path.basename(sys.executable)] +
                                list(sys.argv))}


def read_owner(path):
  """The run a lock file names (a dict, empty when unreadable)."""
  try:
    with open(path, encoding="utf-8") as f:
      owner = json.load(f)
  except (OSError, ValueError):
    return {}
  return owner if isinstance(owner, dict) else {}


def describe(owner):
  """How messages name the run of a lock file."""
  if not owner:
    return "a run whose lock file is unreadable"
  return "pid %s on %s since %s: %s" % (
      owner.get("pid", "?"), owner.get("host", "?"),
      owner.get("started", "?"), owner.get("command", "?"))


def _try_lock(path):
  """The open, flocked lock file at `path`, or None when a live process
  holds it. Retries when the file was replaced while it was being locked
  (a run ending removes it)."""
  while True:
    handle = open(path, "a+", encoding="utf-8")  # pylint: disable=consider-using-with
    try:
      fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      handle.close()
      return None
    try:
      same = os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
    except FileNotFoundError:
      same = False
    if same:
      return handle
    handle.close()


def held_by(folder, beside=False, lock_file=LOCK_FILE):
  """The owner (dict) of the lock of `folder` when a live process holds it,
  else None. Takes no lock that it keeps."""
  path = lock_path(folder, beside, lock_file)
  if path in _held or not os.path.exists(path):
    return None
  try:
    with open(path, encoding="utf-8") as handle:
      fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
  except BlockingIOError:
    return read_owner(path)
  except OSError:
    return None
  return None


def hold(folder, *, flag="--output_dir", beside=False, name=None,
         lock_file=LOCK_FILE):
  """Takes the lock of local `folder` for the rest of this run.

  Args:
    folder: the folder; it must exist unless `beside`.
    flag: the flag that chose the folder, for the message.
    beside: lock `<folder>.lock` next to the folder instead of run.lock in
      it (for a folder that is written elsewhere and renamed into place).
    name: how the message names the folder (default "<flag>=<folder>").
    lock_file: the lock file's name in the folder: another name makes
      another lock, for a run that works beside the folder's main run (an
      evaluator beside a training).

  Returns:
    The FolderLock (None for a remote folder, after a note saying so).

  Raises:
    user_errors.UserError naming the run that holds it.
  """
  if file_systems.is_remote(folder):
    file_systems.note_remote(folder, "a second run writing there at the "
                             "same time is not detected")
    return None
  path = lock_path(folder, beside, lock_file)
  lock = _held.get(path)
  if lock is not None:
    return lock
  handle = _try_lock(path)
  if handle is None:
    raise user_errors.UserError(
        "%s is in use by another run (%s). Wait for it to end, or pass "
        "another %s." % (name or "%s=%s" % (flag, folder),
                         describe(read_owner(path)), flag))
  handle.seek(0)
  stale = handle.read().strip()
  if stale:
    logging.info("Taking over the lock of %s: %s had it and ended without "
                 "releasing it.", folder, describe(read_owner(path)))
  lock = FolderLock(path, handle)
  try:
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps(_owner()) + "\n")
    handle.flush()
  except OSError:
    lock.release()  # A full disk: no half-written lock file stays.
    raise
  _held[path] = lock
  return lock


def release_all():
  """Releases every lock this process holds (the end of a run)."""
  for lock in list(_held.values()):
    lock.release()
