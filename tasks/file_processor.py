# coding=utf-8
"""A user's own labeled files as a DataProcessor of run_classifier.py.

FileProcessor reads CSV, TSV or JSON Lines files (tasks/labeled_files.py)
into InputExamples; the problem type (single-label, multi-label,
regression) and the labels come from the flags, the training file or the
trained run's run_info.json (`settle`).
"""

from checkpoints import problem_types
from tasks import glue
from tasks import labeled_files
from tasks import task
from userio import cli


class FileProcessor(glue.DataProcessor):
  """A user's CSV, TSV or JSON Lines files (tasks/labeled_files.py) as a
  DataProcessor: their rows are the examples, and the training file tells
  the problem's type and labels unless they are given (`settle`)."""

  def __init__(self, files, columns, *, input_format=labeled_files.AUTO,
               problem_type=None, labels=None, label_separator=","):
    """Args:
      files: {set type ("train", "dev", "test"): path or None}.
      columns: labeled_files.Columns.
      input_format: one of labeled_files.FORMATS, or AUTO.
      problem_type: one of problem_types.PROBLEM_TYPES, or None (settled
        from the training file or a trained run).
      labels: the label list, or None (likewise).
      label_separator: what cuts a multi-label cell into its labels.
    """
    self.files = dict(files)
    self.columns = columns
    self.input_format = input_format
    self.problem_type = problem_type
    self.labels = tuple(labels) if labels else None
    self.label_separator = label_separator
    self.text_pairs = columns.text_b is not None
    # How the problem type and the labels were settled, for the log.
    self.source = "given"
    self._read = {}

  @property
  def is_regression(self):
    return self.problem_type == problem_types.REGRESSION

  @property
  def multi_label(self):
    return self.problem_type == problem_types.MULTI_LABEL

  def settle(self, train, recorded):
    """Fixes the problem type and the labels not given: from the training
    file when the run trains (`train`), else from `recorded`, the
    run_info.json of the trained run (None: none found).

    Raises:
      cli.UserError when nothing tells them, or the training file gives a
      classifier fewer than two labels.
    """
    if train:
      cells = [row.label for row in self._rows(task.TRAIN)]
      if self.problem_type is None:
        self.problem_type = labeled_files.problem_type_of(
            cells, self.label_separator)
        self.source = "inferred from %s" % self.files[task.TRAIN]
      if self.labels is None and not self.is_regression:
        self.labels = tuple(labeled_files.label_list(
            cells, self.problem_type, self.label_separator))
      self._check_labels()
    elif self.problem_type is None or self.labels is None:
      if not recorded or "problem_type" not in recorded:
        raise cli.UserError(
            "Cannot tell the model's labels: no --train_file, and no "
            "run_info.json of a run_classifier.py run on files in "
            "--output_dir or beside --init_checkpoint",
            fix="Add --do_train with --train_file, or point --output_dir "
            "(or --init_checkpoint) at the trained run.")
      self.problem_type = self.problem_type or recorded["problem_type"]
      self.labels = self.labels or tuple(recorded["labels"])
      self.source = "the trained run's"
    if self.is_regression:
      self.labels = (None,)

  def _check_labels(self):
    if self.is_regression or len(self.labels) >= 2 or self.multi_label:
      return
    raise cli.UserError(
        "%s has one label, %r; a classifier needs two or more" % (
            self.files[task.TRAIN], self.labels[0] if self.labels else ""),
        fix="Check --label_column, or pass --problem_type=regression for "
        "scores.")

  def get_labels(self):
    return list(self.labels)

  def get_data_files(self, data_dir, set_type):
    del data_dir  # The files are named one by one.
    return [self.files[set_type]]

  def get_train_examples(self, data_dir):
    return self._examples(task.TRAIN)

  def get_dev_examples(self, data_dir):
    return self._examples(task.DEV)

  def get_test_examples(self, data_dir):
    return self._examples(task.TEST)

  def example_ids(self, set_type):
    """The id of each example of a set (the id column's, else its line)."""
    return [row.example_id for row in self._rows(set_type)]

  def _rows(self, set_type):
    """The rows of a set's file, read once."""
    if set_type not in self._read:
      self._read[set_type] = labeled_files.read_rows(
          self.files[set_type], self.columns, self.input_format,
          needs_label=set_type != task.TEST)
    return self._read[set_type]

  def _examples(self, set_type):
    path = self.files[set_type]
    examples = []
    for row in self._rows(set_type):
      label = None
      if set_type != task.TEST:
        label = labeled_files.example_label(path, row, self.problem_type,
                                            self.labels, self.label_separator)
      elif not self.is_regression:
        # A test row's label stands in only for the features' uniform shape.
        label = () if self.multi_label else self.labels[0]
      else:
        label = "0"
      examples.append(glue.InputExample(
          guid="%s-%d" % (set_type, row.line), text_a=row.text_a,
          text_b=row.text_b, label=label))
    return examples
