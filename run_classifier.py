# coding=utf-8
"""BERT finetuning runner for sentence (pair) classification: GLUE and XNLI.

Keeps the flags, processors, feature files and outputs of Google's
run_classifier.py and adds the rest of GLUE (SST-2, QQP, QNLI, RTE, WNLI,
STS-B as regression), the official GLUE metrics, GLUE submission files,
reusable feature files and refusing an --output_dir of another task.
"""

import collections
import csv
import io
import itertools
import os
import random

from absl import flags
from absl import logging
import numpy as np

from userio import cli
from userio import utf8
from startup import shared_flags

FLAGS = flags.FLAGS

# Values of --train_example_order.
TRAIN_EXAMPLE_ORDERS = shared_flags.TRAIN_EXAMPLE_ORDERS
# Values of --long_text.
LONG_TEXT_MODES = ("truncate", "windows")


def define_flags(flag_values=flags.FLAGS):
  """Defines the script's flags: Google's names and defaults.

  Called from `__main__` rather than at import, so that importing this
  module next to run_squad.py (which defines the shared flags too) does not
  define them twice.
  """
  flags.DEFINE_string(
      "data_dir", None,
      "Folder with the task's data files as GLUE/XNLI distribute them "
      "(train.tsv, dev.tsv, test.tsv, ...).", flag_values=flag_values)
  flags.DEFINE_string(
      "task_name", None,
      "Task whose files --data_dir holds: CoLA, MNLI, MNLI-mm, MRPC, QNLI, "
      "QQP, RTE, SST-2, STS-B, WNLI or XNLI (any case).",
      flag_values=flag_values)
  shared_flags.define_common_flags(max_seq_length_default=128,
                                   flag_values=flag_values)
  shared_flags.define_skip_padding_flag(flag_values)
  # --help lists the shared flags with the script's own.
  flags.adopt_module_key_flags(shared_flags, flag_values=flag_values)
  flags.DEFINE_bool("do_eval", False,
                    "Evaluate on the dev set; writes eval_results.txt.",
                    flag_values=flag_values)
  flags.DEFINE_integer("eval_batch_size", 8, "Examples per eval batch.",
                       flag_values=flag_values)
  flags.DEFINE_enum(
      "long_text", "truncate", list(LONG_TEXT_MODES),
      "A text longer than --max_seq_length: truncate (Google's: the pair's "
      "longer text loses its end) or windows (its first text is read in "
      "overlapping windows, --doc_stride tokens apart, each window a "
      "training example with the text's label; evaluation and prediction "
      "classify the text by the mean of its windows' log-probabilities, "
      "renormalized; a regression score is the mean of the windows'; a "
      "second text stays whole in every window, cut to at most half of it).",
      flag_values=flag_values)
  flags.DEFINE_integer(
      "doc_stride", None,
      "With --long_text=windows: tokens between the starts of two windows; "
      "default: half of a window's room.", flag_values=flag_values)
  flags.DEFINE_enum(
      "train_example_order", "shuffled", list(TRAIN_EXAMPLE_ORDERS),
      "Order of the examples in train.tf_record. shuffled: the whole "
      "training set permuted with --seed before the features are written, "
      "as run_squad.py does (GLUE files are grouped by source, and the "
      "input's 100-example shuffle buffer cannot mix them). file: the "
      "order of train.tsv, as Google's run_classifier.py writes it, for "
      "bit-for-bit comparisons with it. Both then shuffle with the "
      "100-example buffer while training.", flag_values=flag_values)


# --help is answered here, before TensorFlow loads (seconds).
cli.answer_help(__name__, define_flags)

# pylint: disable=g-import-not-at-top,wrong-import-position
# Before TensorFlow: it imports TensorFlow without the CPU start-up noise.
from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order
import tensorflow as tf

from tasks import classifier_metrics
from runner import estimator as estimator_lib
import modeling
from userio import output_files
from userio import progress
from checkpoints import run_info
from startup import run_setup
from runner import serving_input
from tasks import text_pair
from tasks import windows
from runner import tfrecord_input
import tokenization
from runner import training_graph
from userio import verbosity
from runner import feature_cache
# pylint: enable=g-import-not-at-top,wrong-import-position


# Bumped whenever the TFRecord layout written here changes, so feature files
# of an older layout are rebuilt instead of reused.
_RECORD_FORMAT_VERSION = 1
# The smallest probability the windows' combination takes the log of.
_MIN_PROBABILITY = 1e-30


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


class WindowExample(InputExample):
  """One window of a long example (--long_text=windows): its tokens and
  segment ids, already laid out, and the example's guid and label."""

  def __init__(self, example, tokens, segment_ids):
    super().__init__(example.guid, example.text_a, example.text_b,
                     example.label)
    self.tokens = tokens
    self.segment_ids = segment_ids


class PaddingInputExample(object):
  """Stand-in that fills up the last eval or predict batch.

  Every eval/predict batch has the same size (the original needed this for
  TPUs; it is kept so batches stay uniform). A padding example becomes
  all-zero features with `is_real_example` False: the metrics give it
  weight 0 and the prediction writers skip it.
  """


class InputFeatures(object):
  """Model inputs of one example: token ids, mask, segments, label id."""

  def __init__(self, input_ids, input_mask, segment_ids, label_id,
               is_real_example=True):
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.segment_ids = segment_ids
    self.label_id = label_id
    self.is_real_example = is_real_example


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
    if os.path.isdir(input_file):
      raise cli.UserError(
          "Data file %s is a folder, not a file" % input_file,
          fix="Point --data_dir at the folder that holds the task's files "
          "as the GLUE/XNLI download writes them.")
    if not os.path.isfile(input_file):
      raise cli.UserError(
          "Data file %s does not exist" % input_file,
          fix="Point --data_dir at the folder that holds the task's files "
          "as the GLUE/XNLI download writes them.")
    with open(input_file, "rb") as f:
      text = utf8.decode(f.read(), input_file,
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


def _is_regression(label_list):
  """A label list of [None] marks a regression task (one float output)."""
  return list(label_list) == [None]


def convert_single_example(ex_index, example, label_list, max_seq_length,
                           tokenizer):
  """Tokenizes one example into fixed-length model inputs.

  Returns:
    InputFeatures with int lists of length max_seq_length; label_id is the
    label's index in `label_list`, or the float score for regression.
  """
  if isinstance(example, PaddingInputExample):
    return InputFeatures(
        input_ids=[0] * max_seq_length,
        input_mask=[0] * max_seq_length,
        segment_ids=[0] * max_seq_length,
        label_id=0.0 if _is_regression(label_list) else 0,
        is_real_example=False)

  tokens, segment_ids = example_tokens(example, max_seq_length, tokenizer)

  input_ids = tokenizer.convert_tokens_to_ids(tokens)
  # 1 marks a real token, 0 padding; attention never looks at padding.
  input_mask = [1] * len(input_ids)
  padding = [0] * (max_seq_length - len(input_ids))
  input_ids += padding
  input_mask += padding
  segment_ids += padding

  label_id = _label_id(example, label_list)
  if ex_index < 5 and verbosity.details():
    logging.info("*** Example ***")
    logging.info("guid: %s", example.guid)
    logging.info("tokens: %s", " ".join(tokens))
    logging.info("input_ids: %s", " ".join(str(x) for x in input_ids))
    logging.info("input_mask: %s", " ".join(str(x) for x in input_mask))
    logging.info("segment_ids: %s", " ".join(str(x) for x in segment_ids))
    logging.info("label: %s (id = %s)", example.label, label_id)

  return InputFeatures(
      input_ids=input_ids,
      input_mask=input_mask,
      segment_ids=segment_ids,
      label_id=label_id,
      is_real_example=True)


def example_tokens(example, max_seq_length, tokenizer):
  """The tokens of one example as the model reads them, unpadded.

  Returns:
    (tokens, segment_ids): [CLS] a [SEP] (b [SEP]), the pair cut to fit
    max_seq_length, and the segment of each token (0 up to the first [SEP],
    1 after it); see tasks/text_pair.py. The [CLS] vector is what the
    pooler, and so the classifier, reads. A WindowExample's own.
  """
  if isinstance(example, WindowExample):
    return list(example.tokens), list(example.segment_ids)
  tokens_a = tokenizer.tokenize(example.text_a)
  tokens_b = None
  if example.text_b:
    tokens_b = tokenizer.tokenize(example.text_b)
  return text_pair.layout(tokens_a, tokens_b, max_seq_length)


def example_windows(example, max_seq_length, tokenizer, doc_stride=None):
  """The windows of one example (--long_text=windows).

  An example that fits is one window, laid out as `example_tokens` lays it
  out. A longer one: its second text (if any) cut to at most half of the
  room, and its first text in windows of the rest of the room started every
  `doc_stride` tokens (default: half that room), tasks/windows.py's.

  Returns:
    list of WindowExample.
  """
  tokens_a = tokenizer.tokenize(example.text_a)
  tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else []
  room = max_seq_length - (3 if tokens_b else 2)
  if len(tokens_a) + len(tokens_b) <= room:
    return [WindowExample(example, *text_pair.layout(tokens_a, tokens_b,
                                                     max_seq_length))]
  tokens_b = tokens_b[:room // 2]
  room_a = room - len(tokens_b)
  spans = windows.doc_spans(
      len(tokens_a), room_a, doc_stride or max(1, room_a // 2),
      fix="Raise --max_seq_length and keep --doc_stride at least 1.")
  return [WindowExample(example, *text_pair.layout(
      tokens_a[span.start:span.start + span.length], list(tokens_b),
      max_seq_length)) for span in spans]


def expand_windows(examples, max_seq_length, tokenizer, doc_stride=None):
  """(the windows of all `examples` in order, the number of each one's
  windows)."""
  expanded, counts = [], []
  for example in examples:
    parts = example_windows(example, max_seq_length, tokenizer, doc_stride)
    expanded += parts
    counts.append(len(parts))
  return expanded, counts


def combine_windows(outputs, counts, is_regression):
  """Each example's output from its windows' (in order): the mean of the
  regression scores, or the probabilities of the mean log-probabilities
  (tasks/windows.mean_log_probabilities)."""
  combined, start = [], 0
  for count in counts:
    part = np.asarray(outputs[start:start + count], np.float64)
    start += count
    if is_regression:
      combined.append(float(part.mean()))
    else:
      # float32 probabilities: a floor keeps log() finite.
      combined.append(np.exp(windows.mean_log_probabilities(
          np.log(np.maximum(part, _MIN_PROBABILITY)))))
  return combined


def _label_id(example, label_list):
  """The class index of `example.label`, or its float value (regression)."""
  if _is_regression(label_list):
    return float(example.label)
  if example.label not in label_list:
    raise ValueError("Example %s has label %r, which is not in the task's "
                     "labels %s." % (example.guid, example.label, label_list))
  return label_list.index(example.label)


def _int64_feature(values):
  return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def _float_feature(values):
  return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def file_based_convert_examples_to_features(examples, label_list,
                                            max_seq_length, tokenizer,
                                            output_file, *, fingerprint=None):
  """Writes the features of `examples` to a TFRecord file.

  Features: input_ids, input_mask, segment_ids (int64 [max_seq_length]),
  label_ids (int64 [1], float [1] for regression), is_real_example (int64
  [1]). The file is written under a temporary name and renamed when
  complete (a failure leaves no temporary file; a full disk ends in one
  line with about the space the file needs); then `fingerprint` (a dict)
  goes to the sidecar `<output_file>.meta.json` with the file's size,
  checksum and record count, so a file without a sidecar is known to be
  incomplete (runner/feature_cache.py). Progress is logged every 10
  seconds.
  """
  meter = progress.Progress("Writing features to %s" % output_file,
                            len(examples))
  with feature_cache.FeatureFile(output_file, len(examples),
                                 depends_on=fingerprint) as writer:
    for (ex_index, example) in enumerate(examples):
      feature = convert_single_example(ex_index, example, label_list,
                                       max_seq_length, tokenizer)
      features = collections.OrderedDict()
      features["input_ids"] = _int64_feature(feature.input_ids)
      features["input_mask"] = _int64_feature(feature.input_mask)
      features["segment_ids"] = _int64_feature(feature.segment_ids)
      if _is_regression(label_list):
        features["label_ids"] = _float_feature([feature.label_id])
      else:
        features["label_ids"] = _int64_feature([feature.label_id])
      features["is_real_example"] = _int64_feature(
          [int(feature.is_real_example)])
      tf_example = tf.train.Example(
          features=tf.train.Features(feature=features))
      writer.write(tf_example.SerializeToString())
      meter.advance()
  meter.finish()


def record_fingerprint(data_files, vocab_file, do_lower_case, max_seq_length,
                       task_name, num_examples, *, example_order="file",
                       shuffle_seed=None, window_stride=None):
  """What a feature file depends on (feature_cache.fingerprint of this
  script's record layout): equal fingerprints -> same records.

  `example_order` is "file" (the records follow the data file) or
  "shuffled" (permuted with `shuffle_seed`, which then changes the file).
  `window_stride`: with --long_text=windows, its --doc_stride (0: the
  default); None: truncation.
  """
  return feature_cache.fingerprint(
      data_files, vocab_file, do_lower_case, max_seq_length, task_name,
      num_examples, record_format=_RECORD_FORMAT_VERSION,
      example_order=example_order, shuffle_seed=shuffle_seed,
      window_stride=window_stride)


def prepare_record_file(examples, label_list, max_seq_length, tokenizer,
                        output_file, fingerprint):
  """Reuses `output_file` if its sidecar vouches for it (same fingerprint,
  size and checksum), else writes it, saying why."""
  feature_cache.prepare(
      output_file, fingerprint,
      lambda: file_based_convert_examples_to_features(
          examples, label_list, max_seq_length, tokenizer, output_file,
          fingerprint=fingerprint))


def file_based_input_fn_builder(input_file, seq_length, is_training,
                                drop_remainder, *, seed=None,
                                is_regression=False):
  """Returns input_fn(params): the records of `input_file` in batches.

  Training repeats the file forever and shuffles it with `seed`.
  """
  name_to_features = {
      "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
      "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
      "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
      "label_ids": tf.io.FixedLenFeature(
          [], tf.float32 if is_regression else tf.int64),
      "is_real_example": tf.io.FixedLenFeature([], tf.int64),
  }

  return tfrecord_input.tfrecord_input_fn(input_file, name_to_features,
                                          is_training, drop_remainder, seed)


def create_model(bert_config, is_training, input_ids, input_mask, segment_ids,
                 labels, num_labels, use_one_hot_embeddings, *,
                 gradient_checkpointing=False, compute_dtype=tf.float32,
                 skip_padding=False):
  """A classifier (or regressor) head on BertModel's pooled [CLS] vector.

  With `skip_padding`, the encoder's feed-forward layers run on the
  non-padding tokens only (`modeling.BertModel`); the head reads the pooled
  vector alone, so the results are the same.

  Args:
    input_ids, input_mask, segment_ids: int32 Tensors [batch, seq_length].
    labels: int32 Tensor [batch] of class ids, or float32 [batch] scores
      when num_labels == 1 (regression).
    num_labels: number of classes; 1 means regression.

  Returns:
    (loss, per_example_loss [batch], logits [batch, num_labels] float32,
     outputs): outputs are the probabilities [batch, num_labels], or the
     predicted scores [batch] for regression.
  """
  model = modeling.BertModel(
      config=bert_config,
      is_training=is_training,
      input_ids=input_ids,
      input_mask=input_mask,
      token_type_ids=segment_ids,
      use_one_hot_embeddings=use_one_hot_embeddings,
      gradient_checkpointing=gradient_checkpointing,
      compute_dtype=compute_dtype,
      skip_padding=skip_padding)

  # The head is tiny; float32 keeps its softmax and loss exact when the
  # encoder runs in half precision.
  output_layer = tf.cast(model.get_pooled_output(), tf.float32)
  hidden_size = output_layer.shape[-1]

  output_weights = tf.compat.v1.get_variable(
      "output_weights", [num_labels, hidden_size],
      initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.02))
  output_bias = tf.compat.v1.get_variable(
      "output_bias", [num_labels], initializer=tf.compat.v1.zeros_initializer())

  with tf.compat.v1.variable_scope("loss"):
    if is_training:
      output_layer = modeling.dropout(output_layer, 0.1)
    logits = tf.matmul(output_layer, output_weights, transpose_b=True)
    logits = tf.nn.bias_add(logits, output_bias)
    if num_labels == 1:
      predictions = tf.squeeze(logits, axis=-1)
      per_example_loss = tf.square(predictions - tf.cast(labels, tf.float32))
      return (tf.reduce_mean(per_example_loss), per_example_loss, logits,
              predictions)
    probabilities = tf.nn.softmax(logits, axis=-1)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot_labels = tf.one_hot(labels, depth=num_labels, dtype=tf.float32)
    per_example_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)
    loss = tf.reduce_mean(per_example_loss)
    return (loss, per_example_loss, logits, probabilities)


def serving_input_receiver_fn_builder(seq_length, is_regression=False):
  """The serving input of an exported classifier (see runner/serving_input.py).

  A request feeds int32 "input_ids", "input_mask" and "segment_ids" of shape
  [batch, seq_length], as `convert_single_example` makes them.
  """
  return serving_input.receiver_fn_builder(seq_length, {
      "label_ids": tf.float32 if is_regression else tf.int32,
      "is_real_example": tf.int32})


def model_fn_builder(bert_config, num_labels, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, use_tpu,
                     use_one_hot_embeddings, *, optimizer="adamw",
                     is_regression=False, official_metrics=(),
                     gradient_checkpointing=False,
                     compute_dtype=tf.float32, skip_padding=False):
  """Builds the model_fn(features, labels, mode, params) the runner calls.

  `official_metrics` names the classification metrics ("f1", "mcc") to add
  to accuracy and loss; regression ignores it and always reports the loss
  (mean squared error), Pearson and Spearman. float16 activations train with
  dynamic loss scaling. `skip_padding`: see `create_model`.
  """

  def model_fn(features, labels, mode, params):
    """Builds the graph of `mode`; labels arrive inside `features`, the
    accumulation steps in `params` (training_graph.train_op)."""
    del labels  # The runner's signature; unused here.
    if verbosity.details():
      logging.info("*** Features ***")
      for name in sorted(features.keys()):
        logging.info("  name = %s, shape = %s", name, features[name].shape)

    input_ids = features["input_ids"]
    input_mask = features["input_mask"]
    segment_ids = features["segment_ids"]
    label_ids = features["label_ids"]
    is_real_example = tf.cast(features["is_real_example"], tf.float32)

    is_training = (mode == estimator_lib.ModeKeys.TRAIN)
    (total_loss, per_example_loss, logits, outputs) = create_model(
        bert_config, is_training, input_ids, input_mask, segment_ids,
        label_ids, 1 if is_regression else num_labels,
        use_one_hot_embeddings, gradient_checkpointing=gradient_checkpointing,
        compute_dtype=compute_dtype, skip_padding=skip_padding)

    training_graph.init_from_checkpoint(init_checkpoint)

    if mode == estimator_lib.ModeKeys.TRAIN:
      train_op = training_graph.train_op(
          total_loss, learning_rate, num_train_steps, num_warmup_steps,
          use_tpu, params=params,
          optimizer=optimizer, compute_dtype=compute_dtype)
      return estimator_lib.EstimatorSpec(
          mode=mode, loss=total_loss, train_op=train_op)
    if mode == estimator_lib.ModeKeys.EVAL:
      if is_regression:
        metric_ops = classifier_metrics.regression_metric_ops(
            label_ids, outputs, per_example_loss, is_real_example)
      else:
        predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
        metric_ops = classifier_metrics.classification_metric_ops(
            label_ids, predictions, per_example_loss, is_real_example,
            official_metrics)
      return estimator_lib.EstimatorSpec(
          mode=mode, loss=total_loss, eval_metric_ops=metric_ops)
    key = "predictions" if is_regression else "probabilities"
    return estimator_lib.EstimatorSpec(mode=mode, predictions={key: outputs})

  return model_fn


def _pad_to_batch_multiple(examples, batch_size):
  """Appends PaddingInputExamples until len(examples) % batch_size == 0."""
  padded = list(examples)
  while len(padded) % batch_size != 0:
    padded.append(PaddingInputExample())
  return padded


def _check_flags():
  """Validates the script's own flags; returns the task's processor."""
  if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict or
          FLAGS.export_dir):
    raise cli.UserError("Nothing to do: pass at least one of --do_train, "
                        "--do_eval, --do_predict and --export_dir.")
  if not os.path.isdir(FLAGS.data_dir):
    raise cli.UserError("--data_dir=%s is not a directory; point it at the "
                        "task's data folder." % FLAGS.data_dir)
  if FLAGS.doc_stride is not None and FLAGS.doc_stride < 1:
    raise cli.UserError("--doc_stride=%d must be at least 1 (tokens between "
                        "the starts of two windows)." % FLAGS.doc_stride)
  return _processor_for(FLAGS.task_name)


# The data set each action reads: (action flag, set type, reader method).
_ACTION_SETS = (("do_train", "train", "get_train_examples"),
                ("do_eval", "dev", "get_dev_examples"),
                ("do_predict", "test", "get_test_examples"))


def _read_examples(processor):
  """{set type: examples} of every requested action, read and checked
  before anything slow starts, so a bad test.tsv is not found only after
  training."""
  examples = {}
  for action, set_type, reader in _ACTION_SETS:
    if not FLAGS[action].value:
      continue
    examples[set_type] = getattr(processor, reader)(FLAGS.data_dir)
    if not examples[set_type]:
      raise cli.UserError(
          "%s holds no examples for --%s. Download the task's files again, "
          "or point --data_dir at the folder that holds them." % (
              processor.get_data_files(FLAGS.data_dir, set_type)[0], action))
  return examples


def _record(task_name, label_list, shared, long_text, doc_stride):
  """The run_info.json of this run (checkpoints/run_info.py). A run with
  --long_text=windows records it and its --doc_stride (None: the default),
  so that predictor.py reads long texts in the same windows."""
  windows = ({"long_text": long_text, "doc_stride": doc_stride}
             if long_text == "windows" else {})
  return run_info.make_record(
      task_name, label_list, shared.do_lower_case, shared.max_seq_length,
      shared.bert_config_file, shared.vocab_file, shared.spm_model_file,
      **windows)


def _processor_for(task_name):
  processor_class = PROCESSORS.get(task_name.lower())
  if processor_class is None:
    raise cli.UserError("Unknown --task_name=%s; known tasks (any case): %s."
                        % (task_name, ", ".join(sorted(PROCESSORS))))
  return processor_class()


def _prepare_features(shared, processor, set_type, examples, label_list,
                      tokenizer, file_name, **order):
  """Writes (or reuses) output_dir/file_name for `examples`; returns its path.

  `shared`: the run's shared_flags.SharedFlags (vocabulary and casing as
  run_setup.start resolved them). `order`: the example_order / shuffle_seed
  of `record_fingerprint`.
  """
  output_file = os.path.join(shared.output_dir, file_name)
  fingerprint = record_fingerprint(
      processor.get_data_files(FLAGS.data_dir, set_type),
      shared.spm_model_file or shared.vocab_file,
      shared.do_lower_case, shared.max_seq_length, FLAGS.task_name.lower(),
      len(examples), **order)
  prepare_record_file(examples, label_list, shared.max_seq_length, tokenizer,
                      output_file, fingerprint)
  return output_file


def _train(shared, estimator, processor, train_examples, label_list,
           tokenizer, num_train_steps):
  """Writes train.tf_record in --train_example_order and trains."""
  order = {"example_order": FLAGS.train_example_order}
  order.update(_window_order())
  if FLAGS.train_example_order == "shuffled":
    # The input's shuffle buffer only mixes neighbours; a whole-set
    # permutation keeps a run from ending on one source of the data.
    train_examples = list(train_examples)
    random.Random(shared.seed).shuffle(train_examples)
    order["shuffle_seed"] = shared.seed
  train_file = _prepare_features(shared, processor, "train", train_examples,
                                 label_list, tokenizer, "train.tf_record",
                                 **order)
  logging.info("***** Running training *****")
  logging.info("  Num examples = %d", len(train_examples))
  logging.info("  Batch size = %d", shared.train_batch_size)
  logging.info("  Num steps = %d", num_train_steps)
  train_input_fn = file_based_input_fn_builder(
      input_file=train_file, seq_length=shared.max_seq_length,
      is_training=True, drop_remainder=True, seed=shared.seed,
      is_regression=processor.is_regression)
  estimator.train(input_fn=train_input_fn, max_steps=num_train_steps)


def _evaluate(shared, estimator, processor, eval_examples, label_list,
              tokenizer, window_counts=None):
  """Evaluates on the dev set and writes eval_results.txt.

  `window_counts`: with --long_text=windows, the number of windows of each
  example (`eval_examples` are the windows); the examples are then scored
  from their windows' combined outputs.
  """
  num_actual_eval_examples = len(eval_examples)
  eval_examples = _pad_to_batch_multiple(eval_examples, FLAGS.eval_batch_size)
  eval_file = _prepare_features(shared, processor, "dev", eval_examples,
                                label_list, tokenizer, "eval.tf_record",
                                **_window_order())
  logging.info("***** Running evaluation *****")
  logging.info("  Num examples = %d (%d actual, %d padding)",
               len(eval_examples), num_actual_eval_examples,
               len(eval_examples) - num_actual_eval_examples)
  logging.info("  Batch size = %d", FLAGS.eval_batch_size)
  eval_input_fn = file_based_input_fn_builder(
      input_file=eval_file, seq_length=shared.max_seq_length,
      is_training=False, drop_remainder=window_counts is None,
      is_regression=processor.is_regression)
  if window_counts is None:
    result = estimator.evaluate(
        input_fn=eval_input_fn, steps=None,
        num_batches=len(eval_examples) // FLAGS.eval_batch_size)
  else:
    result = _window_eval_results(processor, estimator, eval_input_fn,
                                  eval_examples, window_counts)

  logging.info("***** Eval results *****")
  for key in sorted(result.keys()):
    logging.info("  %s = %s", key, str(result[key]))
  output_files.write_eval_results(
      os.path.join(shared.output_dir, "eval_results.txt"), result,
      flag="--output_dir")


def _window_order():
  """The feature files' fingerprint of --long_text (nothing for Google's
  truncation, so its files keep their fingerprints)."""
  if FLAGS.long_text != "windows":
    return {}
  return {"window_stride": FLAGS.doc_stride or 0}


def _combined_results(processor, results, window_counts):
  """The predict results of windows combined per example, in the form
  `_prediction_lines` reads."""
  key = "predictions" if processor.is_regression else "probabilities"
  outputs = [result[key] for result in
             itertools.islice(results, sum(window_counts))]
  return [{key: value} for value in combine_windows(
      outputs, window_counts, processor.is_regression)]


def _window_eval_results(processor, estimator, input_fn, eval_examples,
                         window_counts):
  """eval_results.txt's metrics of examples read in windows: the metrics
  of the combined outputs (run_classifier's names; eval_loss is the mean
  cross-entropy, or squared error, of the combined outputs)."""
  combined = [r["predictions" if processor.is_regression else
                "probabilities"] for r in _combined_results(
                    processor, estimator.predict(input_fn), window_counts)]
  first_windows = np.cumsum([0] + list(window_counts[:-1]))
  labels = [eval_examples[i].label for i in first_windows]
  if processor.is_regression:
    scores, predictions = np.array(labels, np.float64), np.array(combined)
    result = {"eval_loss": float(np.mean((predictions - scores) ** 2)),
              "eval_pearson": classifier_metrics.pearson(predictions, scores),
              "eval_spearman": classifier_metrics.spearman(predictions,
                                                           scores)}
  else:
    label_ids = np.array([processor.get_labels().index(label)
                          for label in labels])
    probabilities = np.array(combined)
    predictions = probabilities.argmax(axis=1)
    result = {"eval_accuracy": classifier_metrics.accuracy(label_ids,
                                                           predictions),
              "eval_loss": float(-np.mean(np.log(probabilities[
                  np.arange(len(label_ids)), label_ids])))}
    numpy_metrics = {"f1": classifier_metrics.f1_score,
                     "mcc": classifier_metrics.matthews_corrcoef}
    for metric in processor.official_metrics:
      result["eval_" + metric] = numpy_metrics[metric](label_ids, predictions)
  checkpoint = estimator.latest_checkpoint()
  if checkpoint:
    result["global_step"] = int(checkpoint.rsplit("-", 1)[1])
  return result


def _prediction_lines(processor, label_list, results, num_actual):
  """(test_results.tsv lines, submission lines) for the real examples."""
  result_lines = []
  submission_lines = ["index\tprediction\n"]
  for (i, prediction) in enumerate(results):
    if i >= num_actual:
      break
    if processor.is_regression:
      score = float(prediction["predictions"])
      result_lines.append("%s\n" % score)
      submission_lines.append("%d\t%.3f\n" % (i, score))
    else:
      probabilities = [float(p) for p in prediction["probabilities"]]
      result_lines.append("\t".join(str(p) for p in probabilities) + "\n")
      best = max(range(len(probabilities)), key=probabilities.__getitem__)
      submission_lines.append("%d\t%s\n" % (i, label_list[best]))
  return result_lines, submission_lines


def _predict(shared, estimator, processor, predict_examples, label_list,
             tokenizer, window_counts=None):
  """Predicts the test set: test_results.tsv and the GLUE submission file.

  `window_counts`: as `_evaluate`'s; one line per example, from its windows.
  """
  num_actual_predict_examples = len(predict_examples)
  predict_examples = _pad_to_batch_multiple(predict_examples,
                                            shared.predict_batch_size)
  predict_file = _prepare_features(shared, processor, "test",
                                   predict_examples, label_list, tokenizer,
                                   "predict.tf_record", **_window_order())
  logging.info("***** Running prediction *****")
  logging.info("  Num examples = %d (%d actual, %d padding)",
               len(predict_examples), num_actual_predict_examples,
               len(predict_examples) - num_actual_predict_examples)
  logging.info("  Batch size = %d", shared.predict_batch_size)
  predict_input_fn = file_based_input_fn_builder(
      input_file=predict_file, seq_length=shared.max_seq_length,
      is_training=False, drop_remainder=True,
      is_regression=processor.is_regression)
  results = estimator.predict(
      input_fn=predict_input_fn,
      num_batches=len(predict_examples) // shared.predict_batch_size)
  if window_counts is not None:
    results = _combined_results(processor, results, window_counts)
    num_actual_predict_examples = len(window_counts)
  result_lines, submission_lines = _prediction_lines(
      processor, label_list, results, num_actual_predict_examples)
  if len(result_lines) != num_actual_predict_examples:
    raise RuntimeError("Got %d predictions for %d test examples."
                       % (len(result_lines), num_actual_predict_examples))
  output_files.write_text(os.path.join(shared.output_dir, "test_results.tsv"),
                          "".join(result_lines), flag="--output_dir")
  if processor.submission_name:
    output_files.write_text(
        os.path.join(shared.output_dir, processor.submission_name + ".tsv"),
        "".join(submission_lines), flag="--output_dir")


def main(_):
  processor = _check_flags()
  task_name = FLAGS.task_name.lower()
  shared, bert_config, tokenizer = run_setup.start(
      shared_flags.read(FLAGS), do_train=FLAGS.do_train,
      min_seq_length=(text_pair.MIN_SEQ_LENGTH_PAIR if processor.text_pairs
                      else text_pair.MIN_SEQ_LENGTH_ONE_TEXT))
  label_list = processor.get_labels()
  record = _record(task_name, label_list, shared, FLAGS.long_text,
                   FLAGS.doc_stride)
  run_setup.check_output_dir(shared.output_dir, record, do_train=FLAGS.do_train)
  examples = _read_examples(processor)
  window_counts = {}
  if FLAGS.long_text == "windows":
    for set_type in examples:
      examples[set_type], window_counts[set_type] = expand_windows(
          examples[set_type], shared.max_seq_length, tokenizer,
          FLAGS.doc_stride)
  num_train_steps = num_warmup_steps = None
  if FLAGS.do_train:
    num_train_steps, num_warmup_steps = run_setup.num_train_and_warmup_steps(
        len(examples["train"]), shared.train_batch_size,
        shared.num_train_epochs, shared.warmup_proportion,
        processor.get_data_files(FLAGS.data_dir, "train")[0])
  setup = run_setup.set_up(shared, bert_config, do_train=FLAGS.do_train,
                         record=record)

  model_fn = model_fn_builder(
      bert_config=bert_config,
      num_labels=len(label_list),
      init_checkpoint=shared.init_checkpoint,
      learning_rate=shared.learning_rate,
      num_train_steps=num_train_steps,
      num_warmup_steps=num_warmup_steps,
      use_tpu=shared.use_tpu,
      use_one_hot_embeddings=shared.use_tpu,
      optimizer=shared.optimizer,
      is_regression=processor.is_regression,
      official_metrics=processor.official_metrics,
      gradient_checkpointing=setup.gradient_checkpointing,
      compute_dtype=setup.compute_dtype,
      skip_padding=run_setup.skip_padding(FLAGS.skip_padding, shared.use_xla))
  estimator = estimator_lib.Estimator(
      model_fn=model_fn, config=setup.run_config,
      train_batch_size=shared.train_batch_size,
      eval_batch_size=FLAGS.eval_batch_size,
      predict_batch_size=shared.predict_batch_size)

  if FLAGS.do_train:
    _train(shared, estimator, processor, examples["train"], label_list,
           tokenizer, num_train_steps)
  if not estimator.config.is_chief:
    # Evaluation and prediction run on one device; the chief writes them.
    logging.info("This worker's training is done; the chief writes the "
                 "evaluation and prediction outputs.")
    return
  if FLAGS.do_eval:
    _evaluate(shared, estimator, processor, examples["dev"], label_list,
              tokenizer, window_counts.get("dev"))
  if FLAGS.do_predict:
    _predict(shared, estimator, processor, examples["test"], label_list,
             tokenizer, window_counts.get("test"))
  if shared.export_dir:
    estimator.export_saved_model(
        shared.export_dir, serving_input_receiver_fn_builder(
            shared.max_seq_length, processor.is_regression),
        assets=run_info.assets(shared.output_dir))


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("data_dir")
  flags.mark_flag_as_required("task_name")
  flags.mark_flag_as_required("output_dir")
  cli.run(main)
