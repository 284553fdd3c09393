# coding=utf-8
"""SWAG's CSV files, and a multiple-choice example laid out as BERT reads it.

SWAG (Zellers et al., 2018) is distributed as train.csv, val.csv and
test.csv, comma-separated with a header:

    ,video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,
    ending2,ending3,label

(one line; the first column, without a name, numbers the rows; test.csv has
no label). `startphrase` is `sent1` followed by `sent2`, the first words of
the next sentence, which each of the four endings completes; `label` is the
index of the true ending. Columns are found by their names, so other
columns and another order are accepted.

As in the BERT paper (Section 4.4), each ending makes one input: segment A
is the given sentence (`sent1`), segment B its candidate continuation
(`sent2` and the ending, joined by a space, as the SWAG authors' own
baselines read the files). Each pair is laid out and cut to the sequence
length as run_classifier.py lays out a sentence pair (tasks/text_pair.py).
"""

import csv
import io
import os

from tasks import text_pair
from userio import cli
from userio import file_systems
from userio import utf8

NUM_CHOICES = 4
CONTEXT_COLUMN = "sent1"
START_COLUMN = "sent2"
ENDING_COLUMNS = tuple("ending%d" % i for i in range(NUM_CHOICES))
LABEL_COLUMN = "label"
# The files of each set, as the SWAG release names them.
FILE_NAMES = {"train": "train.csv", "dev": "val.csv", "test": "test.csv"}
# What the message of a bad file suggests.
_FIX_FILE = ("Use SWAG's CSV files as released (train.csv, val.csv, "
             "test.csv), or repair that line.")


class SwagExample(object):
  """One multiple-choice question, not yet tokenized.

  Attributes:
    guid: "<set type>-<data row>", e.g. "dev-17" (rows counted from 0).
    example_id: the file's first, unnamed column (its row number in the
      release) when the header has one, else the data row from 0; the id
      the prediction files list.
    context: segment A, the given sentence (sent1).
    start: the first words of the continuation (sent2), possibly "".
    endings: list of the candidate endings of `start`.
    label: index of the true ending, or None (test set).
  """

  def __init__(self, guid, example_id, context, start, endings, label=None):
    self.guid = guid
    self.example_id = example_id
    self.context = context
    self.start = start
    self.endings = list(endings)
    self.label = label

  def continuations(self):
    """Segment B of each choice: the start and the ending, joined."""
    return [" ".join(part for part in (self.start, ending) if part)
            for ending in self.endings]


def read_csv_rows(input_file):
  """(header, [(line number, row)]) of a CSV file; blank lines skipped.

  A line number is the 1-based line on which the row starts (a quoted
  field may hold line breaks). A UTF-8 byte-order mark is dropped.

  Raises:
    cli.UserError naming the file (and line) when it is missing, not
    UTF-8, empty or not valid CSV.
  """
  if not file_systems.isfile(input_file):
    raise cli.UserError(
        "Data file %s does not exist" % input_file,
        fix="Point --data_dir at the folder holding SWAG's train.csv, "
        "val.csv and test.csv.")
  text = utf8.decode(file_systems.read_bytes(input_file), input_file,
                     fix="Save the file as UTF-8 (SWAG's files are) or "
                     "repair that line.")
  reader = csv.reader(io.StringIO(text, newline=""), strict=True)
  rows = []
  next_line = 1
  try:
    for row in reader:
      if row:
        rows.append((next_line, row))
      next_line = reader.line_num + 1
  except csv.Error as e:
    raise cli.UserError("%s:%d: not valid CSV (%s)" % (
        input_file, next_line, e), fix=_FIX_FILE) from None
  if not rows:
    raise cli.UserError("%s is empty" % input_file, fix=_FIX_FILE)
  return rows[0][1], rows[1:]


def _column_indices(header, input_file, needs_label):
  """{column name: index} of the columns an example is read from."""
  wanted = [CONTEXT_COLUMN, START_COLUMN] + list(ENDING_COLUMNS)
  if needs_label:
    wanted.append(LABEL_COLUMN)
  missing = [name for name in wanted if name not in header]
  if missing:
    raise cli.UserError(
        "%s:1: the header lacks the column%s %s; a SWAG file has %s" % (
            input_file, "s" if len(missing) > 1 else "", ", ".join(missing),
            ", ".join(wanted)),
        fix="Pass SWAG's files as released (test.csv alone has no label).")
  columns = {name: header.index(name) for name in wanted}
  if not needs_label and LABEL_COLUMN in header:
    columns[LABEL_COLUMN] = header.index(LABEL_COLUMN)
  return columns


def _label(value, input_file, line_number):
  """The ending index `value` names; UserError unless 0 to NUM_CHOICES-1."""
  text = value.strip()
  if not (text.isdigit() and int(text) < NUM_CHOICES):
    raise cli.UserError(
        "%s:%d: label %r is not an ending's index (0 to %d)" % (
            input_file, line_number, value, NUM_CHOICES - 1),
        fix="Repair that line: the label names the true ending, 0 for "
        "ending0.")
  return int(text)


def read_examples(input_file, set_type, needs_label):
  """The SwagExamples of one SWAG CSV file.

  Args:
    input_file: train.csv, val.csv or test.csv (any CSV with the columns
      sent1, sent2, ending0 to ending3 and, if `needs_label`, label).
    set_type: "train", "dev" or "test" (the guids' prefix).
    needs_label: whether the file must have labels (train and dev); a
      test file's labels, if it has them, are read too.

  Raises:
    cli.UserError naming the file and line of a missing column, a row with
    another number of fields than the header, an empty ending or a label
    that is not 0 to 3.
  """
  header, rows = read_csv_rows(input_file)
  columns = _column_indices(header, input_file, needs_label)
  numbered = header[0] == ""
  examples = []
  for index, (line_number, row) in enumerate(rows):
    if len(row) != len(header):
      raise cli.UserError(
          "%s:%d: found %d fields, expected %d as in the header" % (
              input_file, line_number, len(row), len(header)),
          fix=_FIX_FILE)
    endings = [row[columns[name]] for name in ENDING_COLUMNS]
    for name, ending in zip(ENDING_COLUMNS, endings):
      if not ending.strip():
        raise cli.UserError(
            "%s:%d: %s is empty; each question needs %d endings" % (
                input_file, line_number, name, NUM_CHOICES),
            fix=_FIX_FILE)
    label = None
    if LABEL_COLUMN in columns:
      label = _label(row[columns[LABEL_COLUMN]], input_file, line_number)
    examples.append(SwagExample(
        guid="%s-%d" % (set_type, index),
        example_id=row[0] if numbered else str(index),
        context=row[columns[CONTEXT_COLUMN]],
        start=row[columns[START_COLUMN]], endings=endings, label=label))
  return examples


def data_file(data_dir, set_type):
  """The file of `set_type` ("train", "dev", "test") in `data_dir`."""
  return os.path.join(data_dir, FILE_NAMES[set_type])


def choice_layouts(context, continuations, max_seq_length, tokenizer):
  """The model's tokens of each choice of one question, unpadded.

  Args:
    context: segment A, the given sentence.
    continuations: segment B of each choice (SwagExample.continuations).
    max_seq_length: the longest sequence, special tokens included.
    tokenizer: a tokenization.FullTokenizer.

  Returns:
    list, per choice, of (tokens, segment_ids): [CLS] A [SEP] B [SEP], the
    pair cut longest first to fit (tasks/text_pair.py).
  """
  tokens_a = tokenizer.tokenize(context)
  # text_pair.layout cuts its lists in place: each choice gets a copy of A.
  return [text_pair.layout(list(tokens_a), tokenizer.tokenize(text_b),
                           max_seq_length)
          for text_b in continuations]
