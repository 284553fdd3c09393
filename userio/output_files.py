# coding=utf-8
"""Writing output files so that none is ever found half-written.

Every file goes to `<path>.tmp` first and is renamed to `<path>` when
complete; when writing fails (a full disk, an interrupted conversion, bad
input found half-way) the temporary file is removed, so the output folder
holds either the whole file or none. A full disk or a folder that cannot be
written ends in disk_space.WriteFailed, naming the file, its folder and its
size. Paths go through tf.io.gfile, so they may be on any file system
TensorFlow knows.

Before a command's slow work, `claim` refuses output files that could not be
written (or would replace an input) in one line, and takes the locks of
their folders (userio/folder_lock.py) for the run; a remote folder has none
(a note says so).
"""

import contextlib
import os

import tensorflow as tf

from userio import disk_space
from userio import file_systems
from userio import folder_lock
from userio import user_errors

TEMPORARY_SUFFIX = ".tmp"


def _remove_quietly(path):
  try:
    if tf.io.gfile.exists(path):
      tf.io.gfile.remove(path)
  except (tf.errors.OpError, OSError):
    pass  # The original error is what the user needs to see.


@contextlib.contextmanager
def replacing(path, *, size=None, flag=None):
  """Yields a temporary path to write; renamed to `path` on success.

  On an exception the temporary file is removed and the exception goes on;
  a full disk or an unwritable folder as disk_space.WriteFailed.

  Args:
    path: the file to write.
    size: its bytes, or a callable returning about as many (called when
      writing fails), for the message; None when unknown.
    flag: the flag that chose the folder, for the message.
  """
  temporary = path + TEMPORARY_SUFFIX
  folder, name = os.path.split(path)
  with disk_space.writing(
      folder or ".", name, size=size, flag=flag,
      partial=lambda entry: entry.startswith(name) and (
          disk_space.is_partial(entry))):
    try:
      yield temporary
      tf.io.gfile.rename(temporary, path, overwrite=True)
    except BaseException:
      _remove_quietly(temporary)
      raise


def write_text(path, text, *, flag=None):
  """Writes `text` to `path` atomically (a temporary file and a rename)."""
  with replacing(path, size=len(text.encode("utf-8")), flag=flag) as (
      temporary):
    with tf.io.gfile.GFile(temporary, "w") as writer:
      writer.write(text)


def copy(source, path, *, flag=None):
  """Copies file `source` to `path` atomically."""
  with replacing(path, size=lambda: tf.io.gfile.stat(source).length,
                 flag=flag) as temporary:
    tf.io.gfile.copy(source, temporary, overwrite=True)


def link_or_copy(source, path, *, flag=None):
  """Makes `path` hold the bytes of `source`, atomically: a hard link on a
  local disk (no space taken; the file stays when `source` is removed), a
  copy where links cannot be made (a remote file system, another device,
  a file system without them)."""
  if not (file_systems.is_remote(source) or file_systems.is_remote(path)):
    temporary = path + TEMPORARY_SUFFIX
    _remove_quietly(temporary)
    try:
      os.link(source, temporary)
    except OSError:
      pass  # No links here: copied below.
    else:
      os.replace(temporary, path)
      return
  copy(source, path, flag=flag)


def write_eval_results(path, results, *, flag=None):
  """Writes a dict of metrics as Google's eval_results.txt, atomically: one
  "key = value" line per metric, sorted by key, values as str() writes
  them."""
  write_text(path, "".join("%s = %s\n" % (key, str(results[key]))
                           for key in sorted(results)), flag=flag)


def claim(outputs, input_files):
  """Refuses outputs that cannot be written, then locks their folders.

  Each output must be no folder, in a folder that exists (local paths), not
  an input and not another output; with the locks held, writing and
  removing its temporary file (`<path>.tmp`) must work, so that an
  unwritable place is found now rather than after hours of work (and no
  other run's temporary file is touched meanwhile). Remote folders are not
  locked (flock means nothing there); folder_lock.hold notes it.

  Args:
    outputs: (flag, path) pairs: each file the run writes (for a sharded
      output, the prefix of its files) and the flag that names it, e.g.
      ("--output_file", "data/vocab.txt").
    input_files: the paths the run reads.

  Returns:
    A context manager (contextlib.ExitStack) holding the folders' locks;
    the run keeps it entered while it writes.

  Raises:
    user_errors.UserError naming the flag, the file and the fix.
  """
  _check_names(outputs, input_files)
  with contextlib.ExitStack() as stack:
    for folder, flag, path in _folders(outputs):
      try:
        lock = folder_lock.hold(
            folder, flag=flag, name="%s, the folder of %s," % (folder, flag))
      except OSError as e:
        raise _unwritable(flag, path, e) from None
      if lock is not None:
        stack.enter_context(lock)
    for flag, path in outputs:
      _probe(flag, path)
    return stack.pop_all()


def _identity(path):
  """A key equal for two names of the same file."""
  return file_systems.absolute(path)


def _check_names(outputs, input_files):
  """The checks of `claim` that write nothing."""
  inputs = {_identity(p) for p in input_files}
  flags_of = {}
  for flag, path in outputs:
    other = flags_of.get(_identity(path))
    if other is not None:
      raise user_errors.UserError(
          "%s names a file twice." % flag if other == flag else
          "%s=%s is also the file of %s; give each its own file." % (
              flag, path, other))
    flags_of[_identity(path)] = flag
    _check_place(flag, path, inputs)


def _check_place(flag, path, inputs):
  """Refuses an output in a missing folder, a folder, or an input."""
  folder = os.path.dirname(path) or "."
  if not file_systems.is_remote(path) and not os.path.isdir(folder):
    raise user_errors.UserError("%s=%s: folder %s does not exist." %
                                (flag, path, folder))
  if tf.io.gfile.isdir(path):
    raise user_errors.UserError("%s=%s is a folder; name a file in it." %
                                (flag, path))
  if _identity(path) in inputs:
    raise user_errors.UserError("%s=%s is also an input file." % (flag, path))


def _folders(outputs):
  """(folder, flag, path) of each folder the outputs go into, sorted by
  folder, with the first output there."""
  folders = {}
  for flag, path in outputs:
    folders.setdefault(os.path.dirname(_identity(path)), (flag, path))
  return [(folder, flag, path)
          for folder, (flag, path) in sorted(folders.items())]


def _probe(flag, path):
  """Writes and removes `path`'s temporary file."""
  probe = path + TEMPORARY_SUFFIX
  try:
    with tf.io.gfile.GFile(probe, "w") as writer:
      writer.write("")
    tf.io.gfile.remove(probe)
  except (tf.errors.OpError, OSError) as e:
    raise _unwritable(flag, path, e) from None


def _unwritable(flag, path, error):
  text = (getattr(error, "message", None) or str(error)).strip()
  return user_errors.UserError(
      "%s=%s: cannot write there (%s); choose a writable folder." % (
          flag, path, text.splitlines()[0] if text else type(error).__name__))
