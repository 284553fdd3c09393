# coding=utf-8
"""The GLUE and XNLI data files as their downloads lay them out.

A processor reads one task's train, dev and test files (TSV) into
`InputExample`s and knows the task's labels, whether an example is one
text or a pair, whether it is a regression (STS-B), its official metrics
and the name of its GLUE submission file. Every row is checked as it is
read: a wrong number of columns, a label that is not the task's or a
score that is not a number ends the run with one line naming the file and
the line.
"""

import collections
import csv
import io
import os

import tokenization
from userio import cli
from userio import file_systems
from userio import utf8


class InputExample(object):
  """One sentence or sentence pair, not yet tokenized."""

  def __init__(self, guid, text_a, text_b=None, label=None):
    """Stores the fields of one example.

    Args:
      guid: identifier such as "dev-17" (set type and row).
      text_a: string, the first (or only) sentence.
      text_b: string or None, the second sentence of a pair task.
      label: string, the gold label (a float's text for STS-B); test
        examples carry a placeholder.
    """
    self.guid = guid
    self.text_a = text_a
    self.text_b = text_b
    self.label = label


# A TSV layout: column indices of the fields (text_b/label None if absent).
# With a header, the header fixes the column count and `num_columns` is the
# least it may be; without one, rows must have exactly `num_columns`.
TsvLayout = collections.namedtuple(
    "TsvLayout", ["has_header", "num_columns", "text_a", "text_b", "label"])


class DataProcessor(object):
  """Turns one task's data files into lists of `InputExample`s."""

  # The label strings in label-id order; [None] for regression.
  labels = None
  # Regression tasks (STS-B) predict one float instead of a class.
  is_regression = False
  # Multi-label tasks give an example any number of the labels (a tuple).
  multi_label = False
  # Whether an example is a pair of texts (min. --max_seq_length 5, else 3).
  text_pairs = True
  # Official GLUE metrics beside accuracy: names in classifier_metrics.
  official_metrics = ()
  # File name (without .tsv) of the GLUE submission; None: no submission.
  submission_name = None

  def get_train_examples(self, data_dir):
    """Examples of the training set in `data_dir`."""
    raise NotImplementedError()

  def get_dev_examples(self, data_dir):
    """Examples of the dev (evaluation) set in `data_dir`."""
    raise NotImplementedError()

  def get_test_examples(self, data_dir):
    """Examples of the test set in `data_dir`, with placeholder labels."""
    raise NotImplementedError()

  def get_labels(self):
    """The task's label strings; an example's label id is its index here."""
    if self.labels is None:
      raise NotImplementedError()
    return list(self.labels)

  def get_data_files(self, data_dir, set_type):
    """The files a set ("train", "dev", "test") is read from (fingerprints)."""
    raise NotImplementedError()

  @classmethod
  def _read_tsv(cls, input_file, quotechar=None):
    """Returns the rows of a tab-separated file, one list per line.

    Blank lines stay in the list as empty rows, so row i is line i + 1.
    A UTF-8 byte-order mark (MRPC's header has one) is dropped.
    """
    if file_systems.isdir(input_file):
      raise cli.UserError(
          "Data file %s is a folder, not a file" % input_file,
          fix="Point --data_dir at the folder that holds the task's files "
          "as the GLUE/XNLI download writes them.")
    if not file_systems.isfile(input_file):
      raise cli.UserError(
          "Data file %s does not exist" % input_file,
          fix="Point --data_dir at the folder that holds the task's files "
          "as the GLUE/XNLI download writes them.")
    text = utf8.decode(file_systems.read_bytes(input_file), input_file,
                       fix="Save the file as UTF-8 (GLUE's files are) or "
                       "repair that line.")
    return list(csv.reader(io.StringIO(text, newline=""), delimiter="\t",
                           quotechar=quotechar))

  @classmethod
  def _read_rows(cls, input_file, layout):
    """Reads a TSV file and checks its column counts against `layout`.

    Returns:
      list of (line_number, row) for the data rows (no header, no blank
      lines); line numbers are 1-based as an editor shows them.
    """
    lines = cls._read_tsv(input_file)
    if not any(lines):
      raise cli.UserError(
          "%s is empty" % input_file,
          fix="Download the task's files again, or point --data_dir at the "
          "folder that holds them.")
    expected = layout.num_columns
    first_data_row = 0
    if layout.has_header:
      if len(lines[0]) < layout.num_columns:
        raise cli.UserError(
            "%s:1: the header has %d columns, but this task's layout needs "
            "at least %d" % (input_file, len(lines[0]), layout.num_columns),
            fix="Check that --task_name matches the files in --data_dir.")
      expected = len(lines[0])
      first_data_row = 1
    rows = []
    for index in range(first_data_row, len(lines)):
      row = lines[index]
      if not row:
        continue
      if len(row) != expected:
        fix = ("Repair or delete that line (a stray tab or a missing field)."
               if rows else "As the file's first line already differs, the "
               "file may be another task's: check that --task_name matches "
               "the files in --data_dir.")
        raise cli.UserError("%s:%d: found %d columns, expected %d" % (
            input_file, index + 1, len(row), expected), fix=fix)
      rows.append((index + 1, row))
    return rows

  def _check_label(self, label, input_file, line_number):
    """Raises a ValueError naming the line if `label` is not a task label."""
    if self.is_regression:
      try:
        float(label)
      except ValueError:
        raise cli.UserError(
            "%s:%d: label %r is not a number" % (input_file, line_number,
                                                 label),
            fix="This regression task needs a float score in the last "
            "column.") from None
      return
    if label not in self.get_labels():
      raise cli.UserError(
          "%s:%d: label %r is not one of this task's labels %s"
          % (input_file, line_number, label, self.get_labels()),
          fix="Fix the line or pass the --task_name that matches the file.")

  def _create_examples(self, input_file, set_type, layout):
    """Reads `input_file` with `layout` into `InputExample`s."""
    examples = []
    for line_number, row in self._read_rows(input_file, layout):
      guid = "%s-%d" % (set_type, line_number - 1)
      text_a = tokenization.convert_to_unicode(row[layout.text_a])
      text_b = None
      if layout.text_b is not None:
        text_b = tokenization.convert_to_unicode(row[layout.text_b])
      if layout.label is None:
        # Test sets carry no labels; a placeholder keeps the features uniform.
        label = "0" if self.is_regression else self.get_labels()[0]
      else:
        label = tokenization.convert_to_unicode(row[layout.label])
        self._check_label(label, input_file, line_number)
      examples.append(
          InputExample(guid=guid, text_a=text_a, text_b=text_b, label=label))
    return examples


class GlueProcessor(DataProcessor):
  """A GLUE task stored as train.tsv, dev.tsv and test.tsv in one folder.

  Subclasses set `labels`, `file_names` and `layouts` (the last two keyed
  by set type).
  """

  file_names = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}
  layouts = {}

  def get_data_files(self, data_dir, set_type):
    return [os.path.join(data_dir, self.file_names[set_type])]

  def _examples(self, data_dir, set_type):
    input_file = self.get_data_files(data_dir, set_type)[0]
    return self._create_examples(input_file, set_type, self.layouts[set_type])

  def get_train_examples(self, data_dir):
    return self._examples(data_dir, "train")

  def get_dev_examples(self, data_dir):
    return self._examples(data_dir, "dev")

  def get_test_examples(self, data_dir):
    return self._examples(data_dir, "test")


class XnliProcessor(DataProcessor):
  """XNLI in one language: translated MultiNLI to train, XNLI dev/test."""

  labels = ("contradiction", "entailment", "neutral")

  def __init__(self, language="zh"):
    self.language = language

  def get_data_files(self, data_dir, set_type):
    names = {
        "train": os.path.join("multinli",
                              "multinli.train.%s.tsv" % self.language),
        "dev": "xnli.dev.tsv",
        "test": "xnli.test.tsv",
    }
    return [os.path.join(data_dir, names[set_type])]

  def get_train_examples(self, data_dir):
    """Machine-translated MultiNLI: premise, hypothesis, label + header."""
    input_file = self.get_data_files(data_dir, "train")[0]
    layout = TsvLayout(has_header=True, num_columns=3, text_a=0, text_b=1,
                       label=2)
    examples = []
    for line_number, row in self._read_rows(input_file, layout):
      label = tokenization.convert_to_unicode(row[2])
      # The translated MultiNLI files spell this label differently.
      if label == "contradictory":
        label = "contradiction"
      self._check_label(label, input_file, line_number)
      examples.append(InputExample(
          guid="train-%d" % (line_number - 1),
          text_a=tokenization.convert_to_unicode(row[0]),
          text_b=tokenization.convert_to_unicode(row[1]), label=label))
    return examples

  def _xnli_examples(self, data_dir, set_type):
    """xnli.{dev,test}.tsv rows of `self.language`: sentence1/2 in 6/7."""
    input_file = self.get_data_files(data_dir, set_type)[0]
    layout = TsvLayout(has_header=True, num_columns=8, text_a=6, text_b=7,
                       label=1)
    examples = []
    for line_number, row in self._read_rows(input_file, layout):
      if tokenization.convert_to_unicode(row[0]) != self.language:
        continue
      label = tokenization.convert_to_unicode(row[1])
      self._check_label(label, input_file, line_number)
      examples.append(InputExample(
          guid="%s-%d" % (set_type, line_number - 1),
          text_a=tokenization.convert_to_unicode(row[6]),
          text_b=tokenization.convert_to_unicode(row[7]), label=label))
    return examples

  def get_dev_examples(self, data_dir):
    return self._xnli_examples(data_dir, "dev")

  def get_test_examples(self, data_dir):
    return self._xnli_examples(data_dir, "test")


class MnliProcessor(GlueProcessor):
  """MultiNLI: premise/hypothesis pairs, three classes; matched dev/test."""

  labels = ("contradiction", "entailment", "neutral")
  submission_name = "MNLI-m"
  file_names = {"train": "train.tsv", "dev": "dev_matched.tsv",
                "test": "test_matched.tsv"}
  # train has 12 columns and dev 16 (more annotator labels); gold is last.
  layouts = {
      "train": TsvLayout(True, 12, text_a=8, text_b=9, label=-1),
      "dev": TsvLayout(True, 12, text_a=8, text_b=9, label=-1),
      "test": TsvLayout(True, 10, text_a=8, text_b=9, label=None),
  }


class MnliMismatchedProcessor(MnliProcessor):
  """MultiNLI evaluated on the mismatched dev/test sets (task "mnli-mm")."""

  submission_name = "MNLI-mm"
  file_names = {"train": "train.tsv", "dev": "dev_mismatched.tsv",
                "test": "test_mismatched.tsv"}


class MrpcProcessor(GlueProcessor):
  """MRPC: news sentence pairs, 1 if they are paraphrases, else 0."""

  labels = ("0", "1")
  official_metrics = ("f1",)
  submission_name = "MRPC"
  # Quality, #1 ID, #2 ID, #1 String, #2 String; test has index for Quality.
  layouts = {
      "train": TsvLayout(True, 5, text_a=3, text_b=4, label=0),
      "dev": TsvLayout(True, 5, text_a=3, text_b=4, label=0),
      "test": TsvLayout(True, 5, text_a=3, text_b=4, label=None),
  }


class ColaProcessor(GlueProcessor):
  """CoLA: single sentences, 1 if grammatically acceptable, else 0."""

  labels = ("0", "1")
  official_metrics = ("mcc",)
  submission_name = "CoLA"
  text_pairs = False
  # train/dev: source, label, original mark, sentence, no header.
  layouts = {
      "train": TsvLayout(False, 4, text_a=3, text_b=None, label=1),
      "dev": TsvLayout(False, 4, text_a=3, text_b=None, label=1),
      "test": TsvLayout(True, 2, text_a=1, text_b=None, label=None),
  }


class Sst2Processor(GlueProcessor):
  """SST-2: movie review phrases, 1 for positive sentiment, 0 negative."""

  labels = ("0", "1")
  submission_name = "SST-2"
  text_pairs = False
  layouts = {
      "train": TsvLayout(True, 2, text_a=0, text_b=None, label=1),
      "dev": TsvLayout(True, 2, text_a=0, text_b=None, label=1),
      "test": TsvLayout(True, 2, text_a=1, text_b=None, label=None),
  }


class QqpProcessor(GlueProcessor):
  """QQP: Quora question pairs, 1 if they ask the same thing, else 0."""

  labels = ("0", "1")
  official_metrics = ("f1",)
  submission_name = "QQP"
  # id, qid1, qid2, question1, question2, is_duplicate; test: id, q1, q2.
  layouts = {
      "train": TsvLayout(True, 6, text_a=3, text_b=4, label=5),
      "dev": TsvLayout(True, 6, text_a=3, text_b=4, label=5),
      "test": TsvLayout(True, 3, text_a=1, text_b=2, label=None),
  }


class _EntailmentPairProcessor(GlueProcessor):
  """index, sentence 1, sentence 2, label; test without the label."""

  labels = ("entailment", "not_entailment")
  layouts = {
      "train": TsvLayout(True, 4, text_a=1, text_b=2, label=3),
      "dev": TsvLayout(True, 4, text_a=1, text_b=2, label=3),
      "test": TsvLayout(True, 3, text_a=1, text_b=2, label=None),
  }


class QnliProcessor(_EntailmentPairProcessor):
  """QNLI: does the sentence contain the answer to the question?"""

  submission_name = "QNLI"


class RteProcessor(_EntailmentPairProcessor):
  """RTE: does the first sentence entail the second?"""

  submission_name = "RTE"


class WnliProcessor(_EntailmentPairProcessor):
  """WNLI: pronoun resolution as entailment, labels 1 and 0."""

  labels = ("0", "1")
  submission_name = "WNLI"


class StsbProcessor(GlueProcessor):
  """STS-B: sentence pairs scored 0-5 for similarity (regression)."""

  # One output and no class names: the model predicts a float.
  labels = (None,)
  is_regression = True
  official_metrics = ("pearson", "spearman")
  submission_name = "STS-B"
  # index genre filename year old_index source1 source2 sentence1 sentence2
  # score; test lacks the score.
  layouts = {
      "train": TsvLayout(True, 10, text_a=7, text_b=8, label=9),
      "dev": TsvLayout(True, 10, text_a=7, text_b=8, label=9),
      "test": TsvLayout(True, 9, text_a=7, text_b=8, label=None),
  }


PROCESSORS = {
    "cola": ColaProcessor,
    "mnli": MnliProcessor,
    "mnli-mm": MnliMismatchedProcessor,
    "mrpc": MrpcProcessor,
    "qnli": QnliProcessor,
    "qqp": QqpProcessor,
    "rte": RteProcessor,
    "sst-2": Sst2Processor,
    "sts-b": StsbProcessor,
    "wnli": WnliProcessor,
    "xnli": XnliProcessor,
}



def processor_for(task_name):
  """The processor of --task_name (any case); cli.UserError naming the
  known tasks when there is none."""
  processor_class = PROCESSORS.get(task_name.lower())
  if processor_class is None:
    raise cli.UserError("Unknown --task_name=%s; known tasks (any case): %s."
                        % (task_name, ", ".join(sorted(PROCESSORS))))
  return processor_class()
