# coding=utf-8
"""The input files of a corpus prediction: their records, checked, and
shards of whole batches of them.

A file is read in one of these formats:

  lines   predictor.py's input lines (input_lines.check_line): a text, texts
          separated by tabs, or a JSON object (JSON Lines), one per line.
  feature_lines
          extract_features.py's lines (input_lines.parse_feature_line):
          "text_a" or "text_a ||| text_b", a blank line an empty text.
  csv     (and tsv) a table as run_classifier.py reads a user's files
          (docs/own_data.md): a header naming the columns, or none and
          0-based indices; cells by Python's csv module, so a quoted cell
          may hold line breaks; blank rows are skipped.

`plan` reads every record of every file once, before any model is loaded,
so that a bad record stops the run before anything is written, and cuts
each file into shards of `records_per_shard` records (whole batches). A
shard records the byte offset where it starts and its first line number,
so `read_shard` reads it alone, on any worker, and finds the same records.
"""

import codecs
import collections
import csv
import os

import tensorflow as tf

from corpus import text_files
from prediction import exported_models
from prediction import input_formats
from prediction import input_lines
from userio import cli
from userio import file_systems
from userio import utf8

LINES, CSV, TSV = input_formats.LINES, input_formats.CSV, input_formats.TSV
FEATURE_LINES = input_formats.FEATURE_LINES
_DELIMITERS = {CSV: ",", TSV: "\t"}
_GLOB_CHARACTERS = "*?["
# Bytes read at a time.
_BLOCK_BYTES = 1 << 20

Record = collections.namedtuple("Record", ["line", "id", "values"])
Record.__doc__ = """One input: the line it starts on (from 1), its id (the
JSON "id", the --id_column's cell) or None, and the values of the model's
example fields (as the predictor's predict_batch takes them)."""

InputSettings = collections.namedtuple(
    "InputSettings", ["task", "input_format", "fields", "text_pairs",
                      "columns"])
InputSettings.__doc__ = """How the files are read for an export: its task,
the --input_format, the names of its example fields
(exported_models.example_fields), whether it reads text pairs (None: the
task says), and the table columns (text_a, text_b, id) as given, each a
name, a 0-based index as digits, or None (text_b None: the second example
field's name when the header has it)."""

Shard = collections.namedtuple(
    "Shard", ["index", "path", "begin", "end", "first_line", "num_records",
              "header", "columns", "first_record"])
Shard.__doc__ = """Records [k * n, k * n + num_records) of a file: `index`
numbers the shards of all files in order; they lie in bytes [begin, end)
of `path`, where line `first_line` starts (blank table rows before the
first record included); `first_record` is the 0-based index of the
shard's first record among the records of all files; `header` is a table's
column names (None for lines, or a table named by indices) and `columns`
the (text_a, text_b, id) columns read in this file."""


def resolve_inputs(input_spec, flag="--input"):
  """The files `flag` (--input) names (comma-separated paths or globs), in
  order.

  Raises:
    cli.UserError: a path is not a file, a glob matches nothing.
  """
  for pattern in input_spec.split(","):
    if pattern and not any(c in pattern for c in _GLOB_CHARACTERS) and (
        not file_systems.isfile(pattern)):
      raise cli.UserError("%s=%s is not a file." % (flag, pattern))
  return text_files.resolve_input_files(input_spec, flag=flag)


def file_format(path, input_format):
  """LINES, CSV or TSV: --input_format's, or for auto the extension's."""
  if input_format in (CSV, TSV):
    return input_format
  if input_format == "auto":
    return input_formats.TABLE_EXTENSIONS.get(
        os.path.splitext(path)[1].lower(), LINES)
  return LINES


def _raw_lines(reader):
  """Yields the lines from the reader's position, each its exact bytes with
  its line end ("\r" kept: tf.io.gfile's readline drops it, which would
  put the offsets of the next shards off)."""
  pending = b""
  while True:
    block = reader.read(_BLOCK_BYTES)
    if not block:
      break
    lines = (pending + block).split(b"\n")
    pending = lines.pop()
    for line in lines:
      yield line + b"\n"
  if pending:
    yield pending


def _line_records(reader, path, settings, first_line):
  """Yields (Record, byte offset after it, next line's number) of the lines
  from the reader's position."""
  offset = reader.tell()
  for number, raw in enumerate(_raw_lines(reader), first_line):
    if settings.input_format == FEATURE_LINES:
      line_id, values = None, _feature_line(path, number, raw, offset)
    else:
      line_id, values = input_lines.check_line(
          path, number, raw, settings.task, settings.fields,
          settings.input_format, settings.text_pairs)
    offset += len(raw)
    yield Record(number, line_id, values), offset, number + 1


def _feature_line(path, number, raw, offset):
  """[text_a, text_b or None] of the bytes `raw` of extract_features.py's
  line `number`, which starts at byte `offset` of `path`."""
  if offset == 0 and raw.startswith(codecs.BOM_UTF8):
    raw = raw[len(codecs.BOM_UTF8):]
  try:
    return list(input_lines.parse_feature_line(raw.decode("utf-8")))
  except UnicodeDecodeError as e:
    raise cli.UserError(
        utf8.finding(path, raw, e.start, first_line=number),
        fix="Save the file as UTF-8 or repair that line.") from None


class _DecodedLines(object):
  """The lines of a binary reader as text, for csv.reader, counting the
  bytes and lines taken (a record's end is where the reader stopped)."""

  def __init__(self, reader, path, first_line):
    self.offset = reader.tell()
    self.lines_read = 0
    self._reader = reader
    self._path = path
    self._first_line = first_line

  def __iter__(self):
    for raw in _raw_lines(self._reader):
      number = self._first_line + self.lines_read
      start = self.offset
      self.offset += len(raw)
      self.lines_read += 1
      if start == 0 and raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8):]
      try:
        yield raw.decode("utf-8")
      except UnicodeDecodeError as e:
        raise cli.UserError(utf8.finding(self._path, raw, e.start, number),
                            fix="Save the input as UTF-8.") from None


def _table_rows(reader, path, kind, first_line):
  """Yields (line, cells, byte offset after the row, next line's number) of
  the non-blank rows from the reader's position."""
  lines = _DecodedLines(reader, path, first_line)
  rows = csv.reader(lines, delimiter=_DELIMITERS[kind], strict=True)
  while True:
    line = first_line + lines.lines_read
    try:
      cells = next(rows)
    except StopIteration:
      return
    except csv.Error as e:
      raise cli.UserError("%s:%d: not valid %s (%s)" % (
          path, line, kind.upper(), e),
                          fix="Repair that line (an unclosed quote?).") from None
    if any(cell.strip() for cell in cells):
      yield line, cells, lines.offset, first_line + lines.lines_read


def has_header(columns):
  """Whether table columns are named by a header, not by indices."""
  return not all(name is None or name.isdigit() for name in columns)


def _check_header(path, line, header, settings):
  """(column names, the columns read): refuses a column the header lacks,
  naming its flag."""
  names = [name.strip() for name in header]
  text_a, text_b, id_column = settings.columns
  for flag, name in (("text_a", text_a), ("text_b", text_b),
                     ("id", id_column)):
    if name is not None and name not in names:
      raise cli.UserError(
          "--%s_column=%s: %s:%d: the header has no such column (it has %s)"
          % (flag, name, path, line, ", ".join(repr(n) for n in names)),
          fix="Pass --%s_column with one of them." % flag)
  if text_b is None and settings.fields[1] in names:
    text_b = settings.fields[1]
  return names, (text_a, text_b, id_column)


def _table_record(path, line, cells, header, columns, settings):
  """The Record of one table row; cli.UserError for a row that does not
  fit."""
  keys = header or [str(i) for i in range(len(cells))]
  if header and len(cells) != len(header):
    raise cli.UserError(
        "%s:%d: found %d fields, expected %d as in the header" % (
            path, line, len(cells), len(header)),
        fix="Repair that line (a separator inside an unquoted field?).")
  row = dict(zip(keys, cells))
  text_a, text_b, id_column = columns
  for name in (text_a, text_b, id_column):
    if name is not None and name not in row:
      raise cli.UserError("%s:%d: no column %s (the row has %d)" % (
          path, line, name, len(cells)),
                          fix="Pass column indices the rows have.")
  values = [row[text_a], row[text_b] if text_b is not None else None]
  try:
    exported_models.check_example(settings.task, values, settings.text_pairs,
                                  settings.fields)
  except ValueError as e:
    raise cli.UserError("%s:%d: %s" % (path, line, e)) from None
  return Record(line, row[id_column] if id_column is not None else None,
                values)


def _records(reader, path, kind, settings, first_line, header, columns):
  """Yields (Record, byte offset after it, next line's number) from the
  reader's position, which is at the start of line `first_line`."""
  if kind == LINES:
    yield from _line_records(reader, path, settings, first_line)
    return
  for line, cells, offset, next_line in _table_rows(reader, path, kind,
                                                    first_line):
    yield (_table_record(path, line, cells, header, columns, settings),
           offset, next_line)


def _read_header(reader, path, kind, settings):
  """(column names or None, the columns read, line after the header, byte
  offset after it) of a file at its start; no names, the columns as given,
  line 1 and offset 0 for lines or indexed columns."""
  if kind == LINES or not has_header(settings.columns):
    return None, settings.columns, 1, 0
  for line, cells, offset, next_line in _table_rows(reader, path, kind, 1):
    return _check_header(path, line, cells, settings) + (next_line, offset)
  raise cli.UserError("%s holds no header" % path,
                      fix="Pass a file whose first row names its columns.")


def plan(paths, settings, records_per_shard):
  """Reads and checks every record of `paths`; cuts each file into shards
  of `records_per_shard` records (the last one of a file may be shorter;
  a file without records has none).

  Returns:
    (list of Shard in file order, the number of records).

  Raises:
    cli.UserError naming the file, the line (or the flag) and the fix.
  """
  shards, total = [], 0
  for path in paths:
    kind = file_format(path, settings.input_format)
    with _open(path) as reader:
      header, columns, line, offset = _read_header(reader, path, kind,
                                                   settings)
      reader.seek(offset)
      count = 0
      for _, end, next_line in _records(reader, path, kind, settings, line,
                                        header, columns):
        if count % records_per_shard == 0:
          shards.append(Shard(len(shards), path, offset, None, line, 0,
                              header, columns, total + count))
        count += 1
        shards[-1] = shards[-1]._replace(
            num_records=shards[-1].num_records + 1, end=end)
        offset, line = end, next_line
      total += count
  return shards, total


def read_shard(shard, settings):
  """The records of one shard (a list of Record), as `plan` read them."""
  kind = file_format(shard.path, settings.input_format)
  records = []
  with _open(shard.path) as reader:
    reader.seek(shard.begin)
    for record, _, _ in _records(reader, shard.path, kind, settings,
                                 shard.first_line, shard.header,
                                 shard.columns):
      records.append(record)
      if len(records) == shard.num_records:
        break
  return records


def _open(path):
  """`path` opened for reading bytes (any file system)."""
  try:
    return tf.io.gfile.GFile(path, "rb")
  except tf.errors.OpError as e:
    raise cli.UserError("--input: cannot read %s (%s)" % (
        path, getattr(e, "message", e))) from None
