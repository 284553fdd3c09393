# coding=utf-8
"""Writing output files so that none is ever found half-written.

Every file goes to `<path>.tmp` first and is renamed to `<path>` when
complete; when writing fails (a full disk, an interrupted conversion, bad
input found half-way) the temporary file is removed, so the output folder
holds either the whole file or none. Paths go through tf.io.gfile, so they
may be on any file system TensorFlow knows.
"""

import contextlib

import tensorflow as tf

TEMPORARY_SUFFIX = ".tmp"


def _remove_quietly(path):
  try:
    if tf.io.gfile.exists(path):
      tf.io.gfile.remove(path)
  except (tf.errors.OpError, OSError):
    pass  # The original error is what the user needs to see.


@contextlib.contextmanager
def replacing(path):
  """Yields a temporary path to write; renamed to `path` on success.

  On an exception the temporary file is removed and the exception goes on.
  """
  temporary = path + TEMPORARY_SUFFIX
  try:
    yield temporary
    tf.io.gfile.rename(temporary, path, overwrite=True)
  except BaseException:
    _remove_quietly(temporary)
    raise


def write_text(path, text):
  """Writes `text` to `path` atomically (a temporary file and a rename)."""
  with replacing(path) as temporary:
    with tf.io.gfile.GFile(temporary, "w") as writer:
      writer.write(text)


def copy(source, path):
  """Copies file `source` to `path` atomically."""
  with replacing(path) as temporary:
    tf.io.gfile.copy(source, temporary, overwrite=True)


def write_eval_results(path, results):
  """Writes a dict of metrics as Google's eval_results.txt, atomically: one
  "key = value" line per metric, sorted by key, values as str() writes
  them."""
  write_text(path, "".join("%s = %s\n" % (key, str(results[key]))
                           for key in sorted(results)))
