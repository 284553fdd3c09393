# coding=utf-8
"""Reading a pre-training corpus: files, lines, documents, shards.

The format: plain UTF-8 text, one sentence per line, an empty line between
two documents. `--input_file` names the files as comma-separated paths or
glob patterns. create_pretraining_data.py and create_vocab.py both read
their text here, so the vocabulary is learned from exactly the text the
pre-training records are made of, cut into the same shards as
`--mode=scalable` cuts it. Lines are read as Google's
create_pretraining_data.py reads them. Paths go through tf.io.gfile.
"""

import os

from absl import logging
import tensorflow as tf

from userio import cli
from userio import utf8

_MB = 1e6


def resolve_input_files(input_file):
  """The files named by --input_file (comma-separated paths or globs).

  Each pattern's matches keep the order tf.io.gfile.glob gives, as in
  Google's script.

  Raises:
    cli.UserError: a pattern matches nothing, or a match is a directory or
      cannot be read.
  """
  input_files = []
  for pattern in input_file.split(","):
    if not pattern:
      raise cli.UserError("--input_file=%s has an empty entry; separate "
                          "the files by single commas." % input_file)
    matches = tf.io.gfile.glob(pattern)
    if not matches:
      raise cli.UserError("--input_file: %s matches no file." % pattern)
    input_files.extend(matches)
  for path in input_files:
    _check_readable(path)
  return input_files


def _check_readable(path):
  if tf.io.gfile.isdir(path):
    raise cli.UserError("--input_file: %s is a directory; name the text "
                        "files in it (e.g. %s)." %
                        (path, os.path.join(path, "*.txt")))
  try:
    with tf.io.gfile.GFile(path, "rb") as reader:
      reader.read(1)
  except (tf.errors.OpError, OSError) as e:
    raise cli.UserError("--input_file: cannot read %s (%s)." %
                        (path, _error_text(e))) from None


def _error_text(error):
  return getattr(error, "message", None) or str(error)


def read_documents(input_files, max_document_bytes=None):
  """Yields the documents of the text files as lists of lines.

  Lines are read as Google's script reads them through tf.io.gfile: split
  at "\\n" with every "\\r" dropped, decoded as UTF-8 and stripped. An
  empty line ends a document, and so does nothing else: a file that does
  not end with an empty line continues its last document into the next
  file.

  Args:
    input_files: paths, read in this order.
    max_document_bytes: if set, a document is also ended once it holds more
      than this many bytes of lines (with a warning the first time), so
      that text without empty lines cannot fill the memory.

  Yields:
    (lines, bytes_read): a document's non-empty lines (a non-empty list of
    str) and the input bytes read so far.

  Raises:
    cli.UserError: a line is not valid UTF-8, or a file cannot be read.
  """
  document = []
  document_bytes = 0
  bytes_read = 0
  for path in input_files:
    for number, line, size in read_lines(path):
      bytes_read += size
      if line:
        document.append(line)
        document_bytes += size
      if document and (not line or (max_document_bytes is not None and
                                    document_bytes > max_document_bytes)):
        if line:
          logging.log_first_n(
              logging.WARNING, "%s, line %d: a document longer than %.1f MB "
              "(is an empty line missing between documents?); it is cut "
              "into documents of that size.", 1, path, number,
              max_document_bytes / _MB)
        yield document, bytes_read
        document = []
        document_bytes = 0
  if document:
    yield document, bytes_read


def read_lines(path):
  """(line number, stripped text, bytes) of each line of a file."""
  try:
    with tf.io.gfile.GFile(path, "rb") as reader:
      for number, raw in enumerate(reader, 1):
        try:
          text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
          raise cli.UserError(utf8.finding(path, raw, e.start, number),
                              fix="Convert the file to UTF-8.") from None
        yield number, text.strip(), len(raw)
  except tf.errors.OpError as e:
    raise cli.UserError("Cannot read %s: %s" %
                        (path, _error_text(e))) from None


def shard_documents(documents, shard_bytes):
  """Groups (lines, bytes_read) documents into shards of whole documents.

  A shard closes before the document that would take it past `shard_bytes`
  of input (a bigger document forms a shard alone). Lazy: only the shard
  being filled is held.

  Yields:
    (list of documents' lines, bytes_read at the shard's end).
  """
  shard = []
  shard_start = 0
  last_read = 0
  for lines, bytes_read in documents:
    if shard and bytes_read - shard_start > shard_bytes:
      yield shard, last_read
      shard = []
      shard_start = last_read
    shard.append(lines)
    last_read = bytes_read
  if shard:
    yield shard, last_read


def read_shards(input_files, shard_bytes):
  """The shards of the corpus (`shard_documents`) as `read_documents` reads
  it, a document cut at `shard_bytes` too, so that no shard holds much more
  than `shard_bytes` of text.

  Yields:
    (list of documents' lines, bytes_read at the shard's end).
  """
  return shard_documents(read_documents(input_files, shard_bytes),
                         shard_bytes)
