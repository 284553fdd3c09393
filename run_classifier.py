# coding=utf-8
"""BERT finetuning runner for sentence (pair) classification: GLUE and XNLI.

Google's command, flags, processors, feature files and outputs, with the
rest of GLUE (SST-2, QQP, QNLI, RTE, WNLI, STS-B as regression), the
official GLUE metrics, GLUE submission files, reusable feature files and
long texts read in windows. The task lives in tasks/classification.py,
the modules beside it (classification_features.py, classification_model.py,
classification_predictions.py, classification_serving.py,
file_processor.py) and tasks/glue.py; this file holds the flags, Google's
public names and `main`.
"""

from absl import flags

from checkpoints import problem_types
from startup import shared_flags
from tasks import labeled_files
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
      "QQP, RTE, SST-2, STS-B, WNLI or XNLI (any case); or file, your own "
      "data in --train_file / --dev_file / --predict_file (implied by "
      "those flags).", flag_values=flag_values)
  _define_file_flags(flag_values)
  shared_flags.define_common_flags(
      max_seq_length_default=128, flag_values=flag_values,
      serving_outputs="probabilities [batch, labels] (for a regression "
      "task, predictions [batch])",
      text_inputs="text_a [batch] (and text_b for a pair task)")
  shared_flags.define_skip_padding_flag(flag_values)
  shared_flags.define_evaluation_flags(
      flag_values, best_metric_default="eval_f1 for MRPC and QQP, eval_mcc "
      "for CoLA, eval_pearson for STS-B and your own regressions, "
      "eval_micro_f1 for multi-label, else eval_accuracy")
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


def _define_file_flags(flag_values):
  """The flags of a task on your own files (tasks/labeled_files.py)."""
  for name, what in (("train_file", "training"), ("dev_file", "--do_eval's"),
                     ("predict_file", "--do_predict's")):
    flags.DEFINE_string(
        name, None, "Your own %s examples: a CSV, TSV or JSON Lines file "
        "(instead of --data_dir and --task_name)." % what,
        flag_values=flag_values)
  flags.DEFINE_enum(
      "input_format", labeled_files.AUTO,
      [labeled_files.AUTO] + list(labeled_files.FORMATS),
      "The files' format; auto: by extension (.csv; .tsv or .tab; .jsonl, "
      ".ndjson or .json).", flag_values=flag_values)
  for name, default, what in (
      ("text_a", "text", "the text (the first of a pair)"),
      ("text_b", None, "the second text of a pair; none: single texts"),
      ("label", "label", "the label: one, several (a JSON list, or "
       "separated by --label_separator) or a number"),
      ("id", None, "an id that predictions.jsonl gives each example; none: "
       "its line number")):
    flags.DEFINE_string(
        name + "_column", default,
        "The column (header name or JSON key; a 0-based index for a file "
        "without a header) of %s." % what, flag_values=flag_values)
  flags.DEFINE_enum(
      "problem_type", labeled_files.AUTO,
      [labeled_files.AUTO] + list(problem_types.PROBLEM_TYPES),
      "auto: multi_label when a training label cell holds several labels, "
      "regression when the labels are numbers with a fractional part, else "
      "single_label. A run that does not train takes the trained run's.",
      flag_values=flag_values)
  flags.DEFINE_string(
      "label_separator", ",",
      "What separates the labels of a multi-label CSV/TSV cell.",
      flag_values=flag_values)
  flags.DEFINE_list(
      "labels", None,
      "The label list, in this order; default: the training file's labels, "
      "sorted (as numbers when they all are integers).",
      flag_values=flag_values)
  flags.DEFINE_float(
      "threshold", None,
      "Multi-label: a label is predicted when its probability is above "
      "this; default: the one --tune_threshold recorded, else 0.5.",
      flag_values=flag_values)
  flags.DEFINE_bool(
      "tune_threshold", False,
      "Multi-label, with --do_eval: pick the threshold with the best "
      "micro-averaged F1 on --dev_file and record it in run_info.json.",
      flag_values=flag_values)
  flags.DEFINE_list(
      "pos_weight", None,
      "Multi-label: the weight of a label's positive examples in the loss "
      "(one number for all labels, or one per label).",
      flag_values=flag_values)


# --help is answered here, before TensorFlow loads (seconds).
cli.answer_help(__name__, define_flags)

# pylint: disable=g-import-not-at-top,wrong-import-position
# Before TensorFlow: it imports TensorFlow without the CPU start-up noise.
from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order

from driver import training
from tasks import classification
from tasks import classification_features
from tasks import classification_model
from tasks import file_processor
from tasks import glue
from tasks import task as task_lib
# pylint: enable=g-import-not-at-top,wrong-import-position

# Google's public names, defined in the task's modules.
InputExample = glue.InputExample
PaddingInputExample = task_lib.PaddingInputExample
InputFeatures = classification_features.InputFeatures
DataProcessor = glue.DataProcessor
XnliProcessor = glue.XnliProcessor
MnliProcessor = glue.MnliProcessor
MrpcProcessor = glue.MrpcProcessor
ColaProcessor = glue.ColaProcessor
convert_single_example = classification_features.convert_single_example
file_based_convert_examples_to_features = (
    classification_features.file_based_convert_examples_to_features)
file_based_input_fn_builder = (
    classification_features.file_based_input_fn_builder)
create_model = classification_model.create_model
model_fn_builder = classification_model.model_fn_builder


def task_from_flags(flag_values):
  """The ClassificationTask of the command line's own flags: GLUE's files
  (--data_dir, --task_name), or your own (--train_file, ...)."""
  if flag_values.doc_stride is not None and flag_values.doc_stride < 1:
    raise cli.UserError("--doc_stride=%d must be at least 1 (tokens between "
                        "the starts of two windows)." %
                        flag_values.doc_stride)
  options = dict(long_text=flag_values.long_text,
                 doc_stride=flag_values.doc_stride,
                 train_example_order=flag_values.train_example_order)
  files = {name: flag_values[name].value
           for name in ("train_file", "dev_file", "predict_file")}
  if any(files.values()) or (flag_values.task_name or "").lower() == (
      classification.FILE_TASK):
    return _file_task(flag_values, files, options)
  if not (flag_values.data_dir and flag_values.task_name):
    raise cli.UserError("Pass --data_dir and --task_name for GLUE's or "
                        "XNLI's files, or --train_file / --dev_file / "
                        "--predict_file for your own.")
  return classification.ClassificationTask(
      glue.processor_for(flag_values.task_name), flag_values.data_dir,
      flag_values.task_name, **options)


def _file_task(flag_values, files, options):
  """The FileClassificationTask of your own files' flags."""
  if flag_values.data_dir:
    raise cli.UserError("--data_dir reads GLUE's files; your own files "
                        "come with --train_file, --dev_file and "
                        "--predict_file alone.")
  problem_type = flag_values.problem_type
  processor = file_processor.FileProcessor(
      {task_lib.TRAIN: files["train_file"], task_lib.DEV: files["dev_file"],
       task_lib.TEST: files["predict_file"]},
      labeled_files.Columns(flag_values.text_a_column,
                            flag_values.text_b_column,
                            flag_values.label_column, flag_values.id_column),
      input_format=flag_values.input_format,
      problem_type=None if problem_type == labeled_files.AUTO else
      problem_type, labels=flag_values.labels,
      label_separator=flag_values.label_separator)
  return classification.FileClassificationTask(
      processor, threshold=flag_values.threshold,
      tune_threshold=flag_values.tune_threshold,
      pos_weight=_pos_weight(flag_values.pos_weight), **options)


def _pos_weight(values):
  """--pos_weight as a float, a list of floats, or None."""
  if not values:
    return None
  try:
    weights = [float(value) for value in values]
  except ValueError:
    raise cli.UserError("--pos_weight=%s must be numbers, e.g. 2 or 1,3,2."
                        % ",".join(values)) from None
  return weights[0] if len(weights) == 1 else weights


def main(_, flag_values=FLAGS):
  """Runs the actions of the command line (or of `flag_values`)."""
  training.run(task_from_flags(flag_values), shared_flags.read(flag_values))


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("output_dir")
  cli.run(main)
