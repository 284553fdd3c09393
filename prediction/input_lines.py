# coding=utf-8
"""The input lines of predictor.py: a text, texts separated by tabs, or a
JSON object, each checked against the fields of the model's examples, read
in batches from a file or stdin."""

import json
import re
import sys

from prediction import exported_models
from userio import cli
from userio import file_systems
from userio import utf8


# extract_features.py's separator of a line's two texts.
_FEATURE_PAIR = re.compile(r"^(.*) \|\|\| (.*)$")


def parse_feature_line(line):
  """(text_a, text_b or None) of one of extract_features.py's input lines
  (without its "\n"), as Google's script reads it: stripped, then split at
  the last " ||| " (its regular expression's greedy match). A blank line
  is an empty text_a."""
  line = line.strip()
  match = _FEATURE_PAIR.match(line)
  if match is None:
    return line, None
  return match.group(1), match.group(2)


class LineError(cli.UserError):
  """An input line the command cannot use; the message names the line."""


def parse_line(text, fields, input_format):
  """(id or None, field values) of one input line.

  Args:
    text: the line without its newline.
    fields: the two field names of the model's examples; a text line gives
      the first, or both separated by a tab (the second is None otherwise).
    input_format: "text", "json" or "auto" (JSON when the line starts with
      "{").

  Raises:
    ValueError saying what is wrong with the line.
  """
  if not text.strip():
    raise ValueError("the line is empty")
  if input_format == "json" or (input_format == "auto" and
                                text.lstrip().startswith("{")):
    return _parse_json(text, fields)
  parts = text.split("\t")
  if fields == exported_models.CHOICE_FIELDS:
    return None, [parts[0], parts[1:]]
  if len(parts) > 2:
    raise ValueError("%d tab-separated fields; a line holds one text or two "
                     "separated by one tab" % len(parts))
  return None, (parts + [None])[:2]


def _parse_json(text, fields):
  """(id or None, field values) of a JSON line."""
  try:
    value = json.loads(text)
  except ValueError as e:
    raise ValueError("not valid JSON (%s)" % e) from None
  if not isinstance(value, dict):
    raise ValueError("expected a JSON object with %s" % " and ".join(fields))
  unknown = sorted(set(value) - set(fields) - {"id"})
  if unknown:
    raise ValueError("unknown field %r; the fields are %s and an optional "
                     "\"id\"" % (unknown[0], ", ".join(fields)))
  return value.get("id"), [value.get(name) for name in fields]


def check_line(name, number, line, task, fields, input_format,
               text_pairs=None):
  """(id or None, field values) of input line `number` of `name`, checked
  for a model of `task`.

  Args:
    name: the input's name in messages (a path, or "stdin").
    number: the line's number, from 1.
    line: its bytes, with or without the line end.
    task, fields, text_pairs: as exported_models.check_example takes them.
    input_format: as parse_line takes it.

  Raises:
    LineError naming the file and line.
  """
  try:
    text = line.decode("utf-8").rstrip("\r\n")
    line_id, values = parse_line(text, fields, input_format)
    exported_models.check_example(task, values, text_pairs, fields)
  except UnicodeDecodeError as e:
    raise LineError("%s; save the input as UTF-8." % utf8.finding(
        name, line, e.start, first_line=number)) from None
  except ValueError as e:
    raise LineError("%s:%d: %s." % (name, number,
                                     str(e).rstrip("."))) from None
  return line_id, values


class LineSource(object):
  """The command's input lines, parsed and checked, in batches.

  A file is read and checked whole before the model is loaded, so a bad
  line stops the command before any output; stdin is checked as it comes,
  and a bad line stops it after the batches before that line.
  """

  def __init__(self, path, task, input_format, batch_size, text_pairs=None,
               text_columns=None):
    self.name = "stdin" if path == "-" else path
    self.task = task
    self.text_pairs = text_pairs
    self.fields = exported_models.example_fields(task, text_columns)
    self.input_format = input_format
    # A person typing lines wants each answer at once.
    self.batch_size = (1 if path == "-" and sys.stdin.isatty() else
                       batch_size)
    self.total = None
    self._path = path
    if path != "-":
      if not file_systems.isfile(path):
        raise cli.UserError("--input=%s is not a file." % path)
      self.total = sum(1 for _ in self._lines())

  def _lines(self):
    """Yields (line number, id, field values); LineError for a bad line."""
    reader = (sys.stdin.buffer if self._path == "-" else
              file_systems.open_file(self._path, "rb"))
    try:
      for number, line in enumerate(reader, 1):
        line_id, values = check_line(self.name, number, line, self.task,
                                     self.fields, self.input_format,
                                     self.text_pairs)
        yield number, line_id, values
    finally:
      if reader is not sys.stdin.buffer:
        reader.close()

  def batches(self):
    """Yields lists of (line number, id, field values), batch_size at
    most."""
    batch = []
    for line in self._lines():
      batch.append(line)
      if len(batch) == self.batch_size:
        yield batch
        batch = []
    if batch:
      yield batch
