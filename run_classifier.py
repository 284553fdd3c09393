# coding=utf-8
"""BERT finetuning runner for sentence (pair) classification: GLUE and XNLI.

Google's command, flags, processors, feature files and outputs, with the
rest of GLUE (SST-2, QQP, QNLI, RTE, WNLI, STS-B as regression), the
official GLUE metrics, GLUE submission files, reusable feature files and
long texts read in windows. The task lives in tasks/classification.py and
tasks/glue.py; this file holds the flags, Google's public names and `main`.
"""

from absl import flags

from startup import shared_flags
from tasks import windows
from userio import cli

FLAGS = flags.FLAGS


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
  shared_flags.define_common_flags(
      max_seq_length_default=128, flag_values=flag_values,
      serving_outputs="probabilities [batch, labels] (for a regression "
      "task, predictions [batch])")
  shared_flags.define_skip_padding_flag(flag_values)
  # --help lists the shared flags with the script's own.
  flags.adopt_module_key_flags(shared_flags, flag_values=flag_values)
  flags.DEFINE_bool("do_eval", False,
                    "Evaluate on the dev set; writes eval_results.txt.",
                    flag_values=flag_values)
  flags.DEFINE_integer("eval_batch_size", 8, "Examples per eval batch.",
                       flag_values=flag_values)
  flags.DEFINE_enum(
      "long_text", windows.TRUNCATE, list(windows.LONG_TEXT_MODES),
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
      "train_example_order", "shuffled",
      list(shared_flags.TRAIN_EXAMPLE_ORDERS),
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

from driver import training
from tasks import classification
from tasks import glue
from tasks import task as task_lib
# pylint: enable=g-import-not-at-top,wrong-import-position

# Google's public names, defined in the task's modules.
InputExample = glue.InputExample
PaddingInputExample = task_lib.PaddingInputExample
InputFeatures = classification.InputFeatures
DataProcessor = glue.DataProcessor
XnliProcessor = glue.XnliProcessor
MnliProcessor = glue.MnliProcessor
MrpcProcessor = glue.MrpcProcessor
ColaProcessor = glue.ColaProcessor
convert_single_example = classification.convert_single_example
file_based_convert_examples_to_features = (
    classification.file_based_convert_examples_to_features)
file_based_input_fn_builder = classification.file_based_input_fn_builder
create_model = classification.create_model
model_fn_builder = classification.model_fn_builder


def task_from_flags(flag_values):
  """The ClassificationTask of the command line's own flags."""
  if flag_values.doc_stride is not None and flag_values.doc_stride < 1:
    raise cli.UserError("--doc_stride=%d must be at least 1 (tokens between "
                        "the starts of two windows)." %
                        flag_values.doc_stride)
  return classification.ClassificationTask(
      glue.processor_for(flag_values.task_name), flag_values.data_dir,
      flag_values.task_name, long_text=flag_values.long_text,
      doc_stride=flag_values.doc_stride,
      train_example_order=flag_values.train_example_order)


def main(_, flag_values=FLAGS):
  """Runs the actions of the command line (or of `flag_values`)."""
  training.run(task_from_flags(flag_values), shared_flags.read(flag_values))


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("data_dir")
  flags.mark_flag_as_required("task_name")
  flags.mark_flag_as_required("output_dir")
  cli.run(main)
