# coding=utf-8
"""Reading a pre-training corpus: files, lines, documents, shards.

The format: plain UTF-8 text, one sentence per line, an empty line between
two documents. `--input_file` names the files as comma-separated paths or
glob patterns. create_pretraining_data.py and create_vocab.py both read
their text here, so the vocabulary is learned from exactly the text the
pre-training records are made of, cut into the same shards as
`--mode=scalable` cuts it. Lines are read as Google's
create_pretraining_data.py reads them. Paths go through tf.io.gfile, so
they may be on any file system TensorFlow knows (gs:// too).

Shards (`plan_shards`, `read_shard`) are decided without a sequential scan
of the text: each file is cut into ceil(size / shard_bytes) byte ranges,
each range's ends moved forward to the end of the next document
(`shard_range`). A worker that is handed a ShardSpec finds its own text
from the file's bytes alone, so every runner and every worker count reads
the same shards.
"""

import collections
import contextlib
import os

from absl import logging
import tensorflow as tf

from userio import cli
from userio import file_systems
from userio import utf8

_MB = 1e6
# Bytes read at a time when counting lines.
_BLOCK_BYTES = 1 << 24


def resolve_input_files(input_file, flag="--input_file"):
  """The files named by --input_file (comma-separated paths or globs), or
  by the command's `flag` of that kind.

  Each pattern's matches keep the order tf.io.gfile.glob gives, as in
  Google's script.

  Raises:
    cli.UserError: a pattern matches nothing, or a match is a directory or
      cannot be read.
  """
  input_files = []
  for pattern in input_file.split(","):
    if not pattern:
      raise cli.UserError("%s=%s has an empty entry; separate the files "
                          "by single commas." % (flag, input_file))
    try:
      matches = tf.io.gfile.glob(pattern)
    except tf.errors.UnimplementedError:
      raise file_systems.unknown_scheme(pattern, flag) from None
    if not matches:
      raise cli.UserError("%s: %s matches no file." % (flag, pattern))
    input_files.extend(matches)
  for path in input_files:
    _check_readable(path, flag)
  return input_files


def _check_readable(path, flag):
  if tf.io.gfile.isdir(path):
    raise cli.UserError("%s: %s is a directory; name the text files in it "
                        "(e.g. %s)." % (flag, path,
                                        os.path.join(path, "*.txt")))
  try:
    with tf.io.gfile.GFile(path, "rb") as reader:
      reader.read(1)
  except (tf.errors.OpError, OSError) as e:
    raise cli.UserError("%s: cannot read %s (%s)." %
                        (flag, path, _error_text(e))) from None


def _error_text(error):
  return getattr(error, "message", None) or str(error)


def read_documents(input_files):
  """Yields the documents of the text files as lists of lines.

  Lines are read as Google's script reads them through tf.io.gfile: split
  at "\\n" with every "\\r" dropped, decoded as UTF-8 and stripped. An
  empty line ends a document, and so does nothing else: a file that does
  not end with an empty line continues its last document into the next
  file.

  Args:
    input_files: paths, read in this order.

  Yields:
    (lines, bytes_read): a document's non-empty lines (a non-empty list of
    str) and the input bytes read so far.

  Raises:
    cli.UserError: a line is not valid UTF-8, or a file cannot be read.
  """
  document = []
  bytes_read = 0
  for path in input_files:
    for _, line, size in read_lines(path):
      bytes_read += size
      if line:
        document.append(line)
      elif document:
        yield document, bytes_read
        document = []
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


# ---------------------------------------------------------------------------
# Shards: byte ranges of a file, cut where a document ends.
# ---------------------------------------------------------------------------

# A shard of the corpus. `index` numbers the shards of all files in order
# (its records' seed and output name derive from it); `path` is its file and
# `number` its place in that file: it covers about the bytes
# [number * shard_bytes, (number + 1) * shard_bytes) of the file, moved to
# document ends by `shard_range`.
ShardSpec = collections.namedtuple("ShardSpec",
                                   ["index", "path", "number", "shard_bytes"])


def text_bytes(input_files, why_not_empty):
  """The total size of the text files in bytes, refused when it is 0 before
  any of them is read.

  Args:
    input_files: the paths of --input_file.
    why_not_empty: what an empty corpus leaves the command without, e.g.
      "there are no words to learn from".

  Raises:
    cli.UserError naming the files.
  """
  total = sum(tf.io.gfile.stat(path).length for path in input_files)
  if not total:
    raise cli.UserError(
        "--input_file: %s %s empty (0 bytes): %s; name the corpus's text "
        "files." % (", ".join(input_files),
                    "is" if len(input_files) == 1 else "are", why_not_empty))
  return total


def plan_shards(input_files, shard_bytes):
  """The shards of the corpus: ceil(size / shard_bytes) per file, in file
  order, numbered from 0 (an empty file has none).

  This is the only pass over the input before the shards are read, and it
  reads the files' sizes only, so any worker of any runner can read shard
  `index` on its own and find the same text.

  Returns:
    list of ShardSpec.
  """
  specs = []
  for path in input_files:
    size = tf.io.gfile.stat(path).length
    for number in range(-(-size // shard_bytes)):
      specs.append(ShardSpec(len(specs), path, number, shard_bytes))
  return specs


def _cut(reader, nominal, window, size):
  """The offset where the shard that starts near byte `nominal` starts.

  The cut is after the first empty line (empty once stripped) that starts
  in [nominal, nominal + window); when none does (a document longer than
  the window), at the first line start from nominal + window on. Offset 0
  and offsets past the end stay where they are. Reading starts one byte
  before `nominal`, so the result depends on the file's bytes alone, never
  on where the reading shard began.
  """
  if nominal <= 0:
    return 0
  if nominal >= size:
    return size
  reader.seek(nominal - 1)
  position = nominal - 1 + len(reader.readline())
  while position < min(nominal + window, size):
    raw = reader.readline()
    position += len(raw)
    if not raw.decode("utf-8", "replace").strip():
      return position
  return min(position, size)


def shard_range(spec, reader=None):
  """(begin, end, size): the byte range of the shard's file that the shard
  holds, and the file's size.

  Shard k of a file holds the lines from the cut near k * shard_bytes to
  the cut near (k + 1) * shard_bytes (`_cut`): consecutive shards meet, so
  every line belongs to exactly one shard, and each cut lies at a
  document's end unless a document is longer than a shard.
  """
  size = tf.io.gfile.stat(spec.path).length
  with contextlib.ExitStack() as stack:
    if reader is None:
      reader = stack.enter_context(tf.io.gfile.GFile(spec.path, "rb"))
    return tuple(_cut(reader, k * spec.shard_bytes, spec.shard_bytes, size)
                 for k in (spec.number, spec.number + 1)) + (size,)


def read_shard(spec):
  """The documents of one shard, read as `read_documents` reads them.

  An empty line ends a document, and so do the shard's end and its file's
  end (a document does not run on into the next file, unlike in
  `read_documents`). A shard cut inside a document (one longer than
  shard_bytes) logs a warning.

  Returns:
    (list of documents, each a non-empty list of lines (str); the number
    of input bytes of the shard).

  Raises:
    cli.UserError: a line is not valid UTF-8 (naming the file and line),
      or the file cannot be read.
  """
  try:
    with tf.io.gfile.GFile(spec.path, "rb") as reader:
      begin, end, size = shard_range(spec, reader)
      reader.seek(begin)
      documents = [[]]
      position = begin
      while position < end:
        raw = reader.readline()
        line = _decode(spec.path, raw, position)
        position += len(raw)
        if line:
          documents[-1].append(line)
        elif documents[-1]:
          documents.append([])
  except tf.errors.OpError as e:
    raise cli.UserError("Cannot read %s: %s" %
                        (spec.path, _error_text(e))) from None
  if documents[-1] and end < size:
    logging.warning(
        "%s: a document longer than a shard (%s, --shard_size_mb) ends at "
        "byte %d (is an empty line missing between documents?); it is cut "
        "there.", spec.path, _megabytes(spec.shard_bytes), end)
  return [lines for lines in documents if lines], end - begin


def _megabytes(num_bytes):
  """`num_bytes` in MB as --shard_size_mb gives them, to the digits that
  matter: "4 MB", "0.004 MB" (where "%.1f" would show 0.0)."""
  return "%g MB" % (num_bytes / _MB)


def _decode(path, raw, offset):
  """The stripped text of the line `raw` read at byte `offset` of `path`.

  Raises:
    cli.UserError naming the file and the line (its number is counted only
    then: a shard read from the middle of a file does not know it).
  """
  try:
    return raw.decode("utf-8").strip()
  except UnicodeDecodeError as e:
    raise cli.UserError(
        utf8.finding(path, raw, e.start, 1 + _newlines_before(path, offset)),
        fix="Convert the file to UTF-8.") from None


def _newlines_before(path, offset):
  """The number of line ends in the first `offset` bytes of `path`."""
  count = 0
  with tf.io.gfile.GFile(path, "rb") as reader:
    while offset > 0:
      block = reader.read(min(offset, _BLOCK_BYTES))
      if not block:
        break
      count += block.count(b"\n")
      offset -= len(block)
  return count
