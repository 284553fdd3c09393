# coding=utf-8
"""A user's own labeled texts: a CSV, TSV or JSON Lines file.

Each row is one example: a text (or two, for a pair), its label and,
optionally, an id that the predictions carry. Columns are named by the
header (CSV, TSV) or the keys (JSON Lines), or given as 0-based indices
for a CSV or TSV file without a header. The format comes from the file's
extension (.csv; .tsv or .tab; .jsonl, .ndjson or .json) unless given.

CSV and TSV cells follow the csv module's rules (quoted fields may hold
separators, tabs and line breaks); a UTF-8 byte-order mark, blank lines
and Windows line ends are fine. A row's line number is the line it starts
on, as an editor shows it.

A label cell is one of three kinds, which make the problem's type
(`problem_type_of`): several labels (a JSON list, in a CSV or TSV cell
too, or a cell split by the label separator) make a multi-label problem; numbers of which one has a
fractional part make a regression; anything else is single-label
classification, one label per example.
"""

import collections
import csv
import io
import json
import math
import os

from checkpoints import problem_types
from userio import cli
from userio import file_systems
from userio import utf8

CSV, TSV, JSONL = "csv", "tsv", "jsonl"
FORMATS = (CSV, TSV, JSONL)
# The --input_format that takes the format from the file's extension.
AUTO = "auto"
_EXTENSIONS = {".csv": CSV, ".tsv": TSV, ".tab": TSV, ".jsonl": JSONL,
               ".ndjson": JSONL, ".json": JSONL}
_DELIMITERS = {CSV: ",", TSV: "\t"}


Columns = collections.namedtuple("Columns",
                                 ["text_a", "text_b", "label", "id"])
Columns.__doc__ = """Where an example's fields are: each a column's name
(CSV/TSV header, JSON key), a 0-based index as a string of digits (a
CSV/TSV file without a header), or None (text_b: single texts; label: none
read; id: the row's line number stands in)."""

Row = collections.namedtuple("Row", ["line", "text_a", "text_b", "label",
                                     "example_id"])
Row.__doc__ = """One example as read: the line it starts on, its texts
(text_b None without a second text column), its label cell as it stands
(a string, or a JSON value) or None when no label column is read, and its
id (the id column's value, else the line number, as a string)."""


def file_format(path, input_format=AUTO):
  """The format of `path`: `input_format`, or the one its extension names.

  Raises:
    cli.UserError for an extension that names none.
  """
  if input_format != AUTO:
    return input_format
  extension = os.path.splitext(path)[1].lower()
  if extension not in _EXTENSIONS:
    raise cli.UserError(
        "%s: cannot tell the format from the extension %r" % (
            path, extension),
        fix="Name the file .csv, .tsv or .jsonl, or pass --input_format.")
  return _EXTENSIONS[extension]


def _decoded(path):
  """The text of `path`; cli.UserError when it is missing or not UTF-8."""
  if not file_systems.isfile(path):
    raise cli.UserError("%s: file not found (or a folder)" % path,
                        fix="Pass the path of the data file itself.")
  return utf8.decode(file_systems.read_bytes(path), path,
                     fix="Save the file as UTF-8 or repair that line.")


def _has_header(columns):
  """Whether the columns are named (a header), not indices."""
  return not all(name is None or name.isdigit() for name in columns)


def _table_records(path, text, delimiter):
  """(line number, cells) of every row of CSV/TSV `text` that is not
  blank."""
  reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter,
                      strict=True)
  records = []
  line = 1
  try:
    for cells in reader:
      if any(cell.strip() for cell in cells):
        records.append((line, cells))
      line = reader.line_num + 1
  except csv.Error as e:
    raise cli.UserError("%s:%d: not valid %s (%s)" % (
        path, line, "CSV" if delimiter == "," else "TSV", e),
                        fix="Repair that line (an unclosed quote?).") from None
  return records


def _table_rows(path, text, file_kind, columns):
  """(line, {column: cell}) of a CSV/TSV file, by header name or index."""
  records = _table_records(path, text, _DELIMITERS[file_kind])
  if not records:
    raise cli.UserError("%s holds no rows" % path,
                        fix="Pass a file with a header and examples.")
  if _has_header(columns):
    (header_line, header), records = records[0], records[1:]
    names = [name.strip() for name in header]
    _check_named(path, header_line, columns, names)
  else:
    names = None
  rows = []
  for line, cells in records:
    width = len(names) if names else None
    if width is not None and len(cells) != width:
      raise cli.UserError(
          "%s:%d: found %d fields, expected %d as in the header" % (
              path, line, len(cells), width),
          fix="Repair that line (a separator inside an unquoted field?).")
    keys = names or [str(i) for i in range(len(cells))]
    rows.append((line, dict(zip(keys, cells))))
  return rows


def _check_named(path, line, columns, names):
  """Every named column is in the header."""
  for field, name in zip(Columns._fields, columns):
    if name is not None and name not in names:
      raise cli.UserError(
          "%s:%d: the header has no column %r (it has %s)" % (
              path, line, name, ", ".join(repr(n) for n in names)),
          fix="Pass --%s_column with one of them." % field)


def _json_rows(path, text):
  """(line, object) of every non-blank line of a JSON Lines file."""
  rows = []
  for line, content in enumerate(text.splitlines(), 1):
    if not content.strip():
      continue
    try:
      value = json.loads(content)
    except json.JSONDecodeError as e:
      raise cli.UserError("%s:%d: not valid JSON (%s)" % (path, line, e.msg),
                          fix="Repair that line: one JSON object per "
                          "line.") from None
    if not isinstance(value, dict):
      raise cli.UserError("%s:%d: a JSON %s, not an object" % (
          path, line, type(value).__name__),
                          fix="Write one JSON object per line, e.g. "
                          "{\"text\": ..., \"label\": ...}.")
    rows.append((line, value))
  return rows


def _cell(path, line, values, field, name):
  """The value of column `name` in a row; cli.UserError when it lacks it
  (a JSON line without the key, a CSV row too short)."""
  if name not in values:
    raise cli.UserError("%s:%d: no %r (the --%s_column)" % (
        path, line, name, field),
                        fix="Add it to that row, or pass the column that "
                        "holds it.")
  return values[name]


def _text(path, line, values, field, name):
  """A text cell: a non-empty string."""
  value = _cell(path, line, values, field, name)
  if not isinstance(value, str):
    raise cli.UserError("%s:%d: %s %r is %s, not a text" % (
        path, line, field, name, json.dumps(value)),
                        fix="Give the text as a string.")
  if not value.strip():
    raise cli.UserError("%s:%d: %s %r is empty" % (path, line, field, name),
                        fix="Fill in the text or delete that row.")
  return value


def _table_label(path, line, cell):
  """A CSV/TSV label cell as it stands, or the list a cell in brackets
  writes as JSON (["billing", "account"]), which the label separator must
  not cut into pieces.

  Raises:
    cli.UserError for a cell in brackets that is not a JSON list.
  """
  text = cell.strip()
  if not (text.startswith("[") and text.endswith("]")):
    return cell
  try:
    value = json.loads(text)
  except json.JSONDecodeError as e:
    value, reason = None, e.msg
  else:
    reason = "a JSON %s" % type(value).__name__
  if not isinstance(value, list):
    raise cli.UserError(
        "%s:%d: the label cell %s is in brackets but not a JSON list (%s)" %
        (path, line, text, reason),
        fix="Write several labels as a JSON list, each in double quotes "
        "(doubled inside a quoted CSV cell: \"[\"\"a\"\", \"\"b\"\"]\"), or "
        "separate them with --label_separator.")
  return value


def read_rows(path, columns, input_format=AUTO, needs_label=True):
  """The examples of a user's file.

  Args:
    path: the CSV, TSV or JSON Lines file.
    columns: Columns; label None (or not `needs_label`) reads no labels.
    input_format: one of FORMATS, or AUTO (the extension's).
    needs_label: whether every row must have its label.

  Returns:
    list of Row, in file order.

  Raises:
    cli.UserError naming the file, the line and the fix, for the first bad
    row: not UTF-8, not CSV/TSV/JSON, a missing column, an empty text, a
    missing label.
  """
  kind = file_format(path, input_format)
  text = _decoded(path)
  if not needs_label:
    columns = columns._replace(label=None)
  if kind == JSONL:
    records = _json_rows(path, text)
  else:
    records = _table_rows(path, text, kind, columns)
  rows = []
  for line, values in records:
    label = None
    if columns.label is not None:
      label = _cell(path, line, values, "label", columns.label)
      if kind != JSONL:
        label = _table_label(path, line, label)
    example_id = (str(_cell(path, line, values, "id", columns.id))
                  if columns.id is not None else str(line))
    rows.append(Row(
        line, _text(path, line, values, "text_a", columns.text_a),
        (_text(path, line, values, "text_b", columns.text_b)
         if columns.text_b is not None else None), label, example_id))
  return rows


# ------------------------------------------------------------------ labels


def _number(cell):
  """The float a label cell stands for, or None."""
  if isinstance(cell, bool):
    return None
  if isinstance(cell, (int, float)):
    return float(cell)
  if isinstance(cell, str):
    try:
      value = float(cell.strip())
    except ValueError:
      return None
    return value if math.isfinite(value) else None
  return None


def split_labels(cell, separator):
  """The labels of a multi-label cell: a JSON list's items, or a string
  cut at `separator`; empty parts left out (an empty cell: no label)."""
  if isinstance(cell, list):
    parts = [str(item) for item in cell]
  else:
    parts = str(cell).split(separator) if separator else [str(cell)]
  return [part.strip() for part in parts if part.strip()]


def problem_type_of(cells, separator):
  """What the training file's label cells make of the problem.

  Args:
    cells: the label cells (strings, numbers or JSON lists).
    separator: what cuts a text cell into several labels (None: nothing).

  Returns:
    MULTI_LABEL when a cell is a list or holds `separator`; else REGRESSION
    when every cell is a number and one has a fractional part; else
    SINGLE_LABEL (checkpoints/problem_types.py).
  """
  if any(isinstance(cell, list) or (
      separator and isinstance(cell, str) and separator in cell)
         for cell in cells):
    return problem_types.MULTI_LABEL
  numbers = [_number(cell) for cell in cells]
  if cells and all(n is not None for n in numbers) and any(
      n != int(n) for n in numbers):
    return problem_types.REGRESSION
  return problem_types.SINGLE_LABEL


def label_list(cells, problem_type, separator):
  """The labels of a classification problem in a stable order: sorted, as
  numbers when they all are integers."""
  names = set()
  for cell in cells:
    if problem_type == problem_types.MULTI_LABEL:
      names.update(split_labels(cell, separator))
    else:
      names.add(str(cell).strip())
  if all(name.lstrip("-").isdigit() for name in names):
    return sorted(names, key=int)
  return sorted(names)


def example_label(path, row, problem_type, labels, separator):
  """The label of `row` as an InputExample holds it: a label string
  (single-label), the number's text (regression) or a tuple of label
  strings (multi-label).

  Raises:
    cli.UserError naming the file and line of a label that is not one of
    `labels`, a number that is not one, or a missing single label.
  """
  cell = row.label
  if problem_type == problem_types.REGRESSION:
    value = _number(cell)
    if value is None:
      raise cli.UserError("%s:%d: label %s is not a number" % (
          path, row.line, json.dumps(cell)),
                          fix="A regression needs a number in every label "
                          "cell.")
    return repr(value)
  if problem_type == problem_types.MULTI_LABEL:
    names = tuple(split_labels(cell, separator))
  else:
    names = (str(cell).strip(),)
    if not names[0]:
      raise cli.UserError("%s:%d: the label is empty" % (path, row.line),
                          fix="Fill in the label or delete that row.")
  for name in names:
    if name not in labels:
      raise cli.UserError(
          "%s:%d: label %r is not one of the model's labels (%s)" % (
              path, row.line, name, ", ".join(labels)),
          fix="Train with a file that has it, or add it to --labels.")
  return names if problem_type == problem_types.MULTI_LABEL else names[0]
