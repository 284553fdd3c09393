# coding=utf-8
"""A user's file decoded as UTF-8, or one line saying where it is not.

Every command that reads a data file of the user's (GLUE's TSV files, SWAG's
CSV, CoNLL, SQuAD's JSON, a corpus, the predictor's input) reports a byte
that is not UTF-8 the same way: "<file>:<line>: byte 0x<hex> at column <n>
is not UTF-8", followed by the caller's advice.
"""

import codecs

from userio import user_errors


def finding(name, data, start, first_line=1):
  """Where decoding failed, as "<name>:<line>: byte 0x.. at column <n> ...".

  Args:
    name: the file's name as the user gave it.
    data: the bytes that were decoded.
    start: the index in `data` of the first byte that is not UTF-8 (a
      UnicodeDecodeError's `start` when `data` itself was decoded).
    first_line: the line number of data's first line.

  Returns:
    str, without a final full stop.
  """
  line = first_line + data.count(b"\n", 0, start)
  column = start - (data.rfind(b"\n", 0, start) + 1) + 1
  return "%s:%d: byte 0x%02x at column %d is not UTF-8" % (
      name, line, data[start], column)


def decode(data, name, fix):
  """A whole file's `data` as text, without a leading byte-order mark.

  Args:
    data: bytes read from the file.
    name: the file's name as the user gave it.
    fix: the advice that follows the finding (a sentence).

  Returns:
    str.

  Raises:
    user_errors.UserError: `data` is not UTF-8 (finding() and `fix`).
  """
  # Columns are counted after the mark, which editors do not show.
  if data.startswith(codecs.BOM_UTF8):
    data = data[len(codecs.BOM_UTF8):]
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError as e:
    raise user_errors.UserError(finding(name, data, e.start),
                                fix=fix) from None
