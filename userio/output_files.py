# coding=utf-8
"""Writing output files so that none is ever found half-written.

Every file goes to `<path>.tmp` first and is renamed to `<path>` when
complete; when writing fails (a full disk, an interrupted conversion, bad
input found half-way) the temporary file is removed, so the output folder
holds either the whole file or none. A full disk or a folder that cannot be
written ends in disk_space.WriteFailed, naming the file, its folder and its
size. Paths go through tf.io.gfile, so they may be on any file system
TensorFlow knows.
"""

import contextlib
import os

import tensorflow as tf

from userio import disk_space

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


def write_eval_results(path, results, *, flag=None):
  """Writes a dict of metrics as Google's eval_results.txt, atomically: one
  "key = value" line per metric, sorted by key, values as str() writes
  them."""
  write_text(path, "".join("%s = %s\n" % (key, str(results[key]))
                           for key in sorted(results)), flag=flag)
