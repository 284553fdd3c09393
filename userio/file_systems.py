# coding=utf-8
"""Paths on any file system TensorFlow knows, as Google's scripts had them.

Data, models and outputs are named by paths that tf.io.gfile opens: local
paths, gs:// (TensorFlow's own Cloud Storage support), ram:// (in memory,
one process), and s3:// or hdfs:// once tensorflow-io is imported. A path
with a scheme ("<scheme>://") is remote: it is no folder of this machine,
so what only a local disk offers (flock, free space, an atomic rename)
either has a remote equivalent where it is used or is announced by
`note_remote`.

A local path is read and written with Python's own files and os
functions, which do what tf.io.gfile's local file system does (the same
bytes, the same folders) without importing TensorFlow, so that light
commands (squad_evaluate.py, reproduce.py) stay free of it; a remote path
goes through tf.io.gfile, imported then.
"""

import importlib
import os

from absl import logging

from userio import user_errors

# Schemes whose file systems the tensorflow-io package adds to TensorFlow
# (they register when it is imported); gs:// and ram:// are TensorFlow's own.
TENSORFLOW_IO_SCHEMES = ("s3", "hdfs")


def _tensorflow():
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  return tf


def load_file_systems(argv):
  """Imports tensorflow-io when an argument of the command line `argv`
  names a path of one of TENSORFLOW_IO_SCHEMES.

  Raises:
    user_errors.UserError naming the argument when tensorflow-io is not
    installed.
  """
  for arg in argv[1:]:
    value = arg.split("=", 1)[-1]
    scheme = value.split("://", 1)[0] if is_remote(value) else None
    if scheme in TENSORFLOW_IO_SCHEMES:
      try:
        importlib.import_module("tensorflow_io")
      except ImportError:
        raise user_errors.UserError(
            "%s: TensorFlow reads %s:// paths through the tensorflow-io "
            "package, which is not installed" % (arg, scheme),
            fix="Install the tensorflow-io release made for your "
            "TensorFlow (pip install tensorflow-io).") from None
      return


def gfile():
  """tf.io.gfile, imported on first use."""
  return _tensorflow().io.gfile


def errors(path):
  """The exceptions a failed read or write of `path` raises: OSError, and
  TensorFlow's OpError for a remote path."""
  if is_remote(path):
    return (OSError, _tensorflow().errors.OpError)
  return (OSError,)


def is_remote(path):
  """Whether `path` names a place on another file system than the local
  one ("gs://bucket/run", "ram://data")."""
  return "://" in path


def absolute(path):
  """`path` made absolute when local (os.path.abspath would fold the "//"
  of a remote one into a local name)."""
  return path if is_remote(path) else os.path.abspath(path)


def open_file(path, mode):
  """`path` opened in `mode` ("r", "rb", "w", ...; text as UTF-8)."""
  if is_remote(path):
    return gfile().GFile(path, mode)
  return open(path, mode, encoding=None if "b" in mode else "utf-8")  # pylint: disable=consider-using-with


def unknown_scheme(path, flag=None):
  """The UserError for `path` (the value of `flag`, when given), whose
  scheme no file system of TensorFlow's serves (tf.io.gfile raised
  UnimplementedError)."""
  return user_errors.UserError(
      "%s%s: TensorFlow has no file system for %s:// paths" % (
          flag + "=" if flag else "", path, path.split("://", 1)[0]),
      fix="Use a local path, gs:// or ram:// (s3:// and hdfs:// with "
      "tensorflow-io installed).")


def _remote_exists(path):
  try:
    return gfile().exists(path)
  except _tensorflow().errors.UnimplementedError:
    raise unknown_scheme(path) from None


def exists(path):
  """Whether `path` exists (on any file system).

  Raises:
    user_errors.UserError when no file system serves the path's scheme.
  """
  return _remote_exists(path) if is_remote(path) else os.path.exists(path)


def isdir(path):
  """Whether `path` is a folder (on any file system)."""
  return gfile().isdir(path) if is_remote(path) else os.path.isdir(path)


def isfile(path):
  """Whether `path` exists and is no folder (on any file system).

  Raises:
    user_errors.UserError when no file system serves the path's scheme.
  """
  if is_remote(path):
    return _remote_exists(path) and not gfile().isdir(path)
  return os.path.isfile(path)


def listdir(path):
  """The names in folder `path` (a remote file system may end a folder's
  name with "/"; it is dropped)."""
  if is_remote(path):
    return [name.rstrip("/") for name in gfile().listdir(path)]
  return os.listdir(path)


def read_bytes(path):
  """The whole content of file `path` (on any file system).

  Raises:
    user_errors.UserError naming the file and what kept it from being read.
  """
  try:
    with open_file(path, "rb") as reader:
      return reader.read()
  except errors(path) as e:
    text = " ".join((getattr(e, "strerror", None) or
                     getattr(e, "message", None) or str(e)).split())
    raise user_errors.UserError(
        "%s: cannot be read (%s)" % (path, text),
        fix="Check the path and your access to it.") from None


def move_folder(source, target):
  """Moves folder `source` to the new name `target` on the same file system.

  Locally one atomic rename. A remote file system has no folders to rename
  (Cloud Storage renames a folder object by object; ram:// moves only the
  folder's own entry and loses its files), so there each file moves on its
  own, those of subfolders first and those of `source` itself last (a
  SavedModel is taken for whole once its saved_model.pb is there), and
  `source` is removed at the end.
  """
  if not is_remote(source):
    os.rename(source, target)
    return
  for folder, _, names in gfile().walk(source, topdown=False):
    inside = target + folder[len(source):]
    gfile().makedirs(inside)
    for name in names:
      gfile().rename(folder + "/" + name, inside + "/" + name,
                     overwrite=True)
  gfile().rmtree(source)


def note_remote(folder, limits):
  """Logs the one line that says what remote `folder` does not guarantee:
  "Note: <folder> is not a local folder: <limits>."."""
  logging.info("Note: %s is not a local folder: %s.", folder, limits)
