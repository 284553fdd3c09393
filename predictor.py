# coding=utf-8
"""Predicts raw text with a model run_classifier.py, run_squad.py,
run_swag.py or run_ner.py exported.

    python predictor.py --export_dir=/tmp/mrpc_export --input=pairs.txt
    echo '{"question": "Who won?", "context": "..."}' | \
      python predictor.py --export_dir=/tmp/squad_export

Each input line is a sentence, a sentence pair separated by a tab (a
question and its context for SQuAD), or a JSON object ({"text_a": ...,
"text_b": ...} or {"question": ..., "context": ...}, with an optional "id"
that is copied to the output). Each line gets one JSON line on stdout, in
input order: {"label", "probabilities"} (or {"score"} for a regression
task such as STS-B), or {"answer", "nbest"} for SQuAD ("null_score_diff"
too for a SQuAD 2.0 model). A NER model reads one text per line (or
{"text": ...}) and gives {"entities": [{"text", "type", "start", "end",
"score"}, ...]}, the character offsets into the line's text.

A run_swag.py model reads a sentence and its candidate endings: a text line
holds the sentence, then each ending, separated by tabs, a JSON line
{"sentence": ..., "endings": [...]}; its output line is {"choice",
"ending", "probabilities"} (one probability per ending).

The models and their Python API live in prediction/exported_models.py
(`exported_models.load(path).predict(...)`), the input lines in
prediction/input_lines.py; this file is the command's flags and main.
"""

import json
import sys

from absl import flags
from absl import logging

from prediction import window_defaults
from userio import cli

FLAGS = flags.FLAGS


def define_flags(flag_values=flags.FLAGS):
  """The command's flags; the SQuAD ones have run_squad.py's names and
  defaults."""
  flags.DEFINE_string(
      "export_dir", None,
      "The folder --export_dir of a fine-tuning script wrote "
      "(its newest <unix time> model is used) or one model folder in it.",
      flag_values=flag_values)
  flags.DEFINE_string(
      "input", "-", "File of input lines; - reads stdin.",
      flag_values=flag_values)
  flags.DEFINE_enum(
      "input_format", "auto", ["auto", "text", "json"],
      "text: a sentence, or two fields separated by a tab; json: one JSON "
      "object per line; auto: JSON when a line starts with '{'.",
      flag_values=flag_values)
  flags.DEFINE_integer(
      "batch_size", 32,
      "Lines predicted together (SQuAD: questions; each of their windows "
      "is a row of the model's batch). From a terminal, each line is "
      "predicted as soon as it is typed.", flag_values=flag_values)
  flags.DEFINE_integer("doc_stride", None,
                       "SQuAD: tokens between the starts of two windows of "
                       "a long context; NER: the same for a long text. "
                       "Default: the value the model was trained with (the "
                       "export's run_info.json), else %d." %
                       window_defaults.WINDOW_DEFAULTS["doc_stride"],
                       flag_values=flag_values)
  flags.DEFINE_integer("max_query_length", None,
                       "SQuAD: questions are cut to this many tokens; "
                       "default: the value the model was trained with, else "
                       "%d." %
                       window_defaults.WINDOW_DEFAULTS["max_query_length"],
                       flag_values=flag_values)
  flags.DEFINE_integer("n_best_size", 20,
                       "SQuAD: answers listed per question (and start/end "
                       "positions considered per window).",
                       flag_values=flag_values)
  flags.DEFINE_integer("max_answer_length", 30,
                       "SQuAD: longest answer in tokens.",
                       flag_values=flag_values)
  flags.DEFINE_float("null_score_diff_threshold", 0.0,
                     "SQuAD 2.0: answer \"\" when the null score minus the "
                     "best non-null score exceeds this.",
                     flag_values=flag_values)
  flags.DEFINE_float(
      "threshold", None,
      "A multi-label classifier: predict the labels whose probability is "
      "above this; default: the threshold its training run recorded, else "
      "0.5.", flag_values=flag_values)
  flags.DEFINE_bool(
      "pad_to_max_seq_length", False,
      "SQuAD: pad every window to the export's max_seq_length, as "
      "run_squad.py does, so that padding positions take part in the n-best "
      "search as in its predictions.json (slower; see docs/serving.md).",
      flag_values=flag_values)


# --help is answered here, before TensorFlow loads (seconds).
cli.answer_help(__name__, define_flags)

# pylint: disable=g-import-not-at-top,wrong-import-position
# Before TensorFlow: it imports TensorFlow without the CPU start-up noise.
from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order

from checkpoints import problem_types
from prediction import exported_models
from prediction import input_lines
from userio import progress
from userio import verbosity
# pylint: enable=g-import-not-at-top,wrong-import-position

# The command's Python API, by the names it has always had.
load = exported_models.load
find_saved_model = exported_models.find_saved_model
read_record = exported_models.read_record
check_example = exported_models.check_example
ExportedModel = exported_models.ExportedModel
ClassifierPredictor = exported_models.ClassifierPredictor
SquadPredictor = exported_models.SquadPredictor
MultipleChoicePredictor = exported_models.MultipleChoicePredictor
NerPredictor = exported_models.NerPredictor
LineError = input_lines.LineError
LineSource = input_lines.LineSource
parse_line = input_lines.parse_line


def main(_):
  verbosity.start_logging()
  if FLAGS.batch_size < 1:
    raise cli.UserError("--batch_size=%d must be at least 1." %
                        FLAGS.batch_size)
  path = find_saved_model(FLAGS.export_dir)
  record = read_record(path)
  task = record["task"]
  source = LineSource(FLAGS.input, task, FLAGS.input_format,
                      FLAGS.batch_size, record.get("text_pairs"),
                      record.get("text_columns"))
  options = {"batch_size": FLAGS.batch_size}
  if task == exported_models.SQUAD_TASK:
    options.update(
        doc_stride=FLAGS.doc_stride, max_query_length=FLAGS.max_query_length,
        n_best_size=FLAGS.n_best_size,
        max_answer_length=FLAGS.max_answer_length,
        null_score_diff_threshold=FLAGS.null_score_diff_threshold,
        pad_to_max_seq_length=FLAGS.pad_to_max_seq_length)
  if task == exported_models.NER_TASK and FLAGS["doc_stride"].present:
    options["doc_stride"] = FLAGS.doc_stride
  if FLAGS.threshold is not None:
    if record.get("problem_type") != problem_types.MULTI_LABEL:
      raise cli.UserError("--threshold applies to a multi-label classifier; "
                          "%s is a %s model." % (path, task))
    options["threshold"] = FLAGS.threshold
  model = load(path, **options)
  logging.info("Predicting with %s (task %s).", path, task)
  meter = progress.Progress("Predicting %s" % source.name, source.total,
                            unit="lines")
  for batch in source.batches():
    results = model.predict_batch(
        [values[0] if task == exported_models.NER_TASK else values
         for _, _, values in batch])
    for (_, line_id, _), result in zip(batch, results):
      if line_id is not None:
        result = dict(id=line_id, **result)
      sys.stdout.write(json.dumps(result, ensure_ascii=False) + "\n")
    sys.stdout.flush()
    meter.advance(len(batch))
  meter.finish()


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("export_dir")
  cli.run(main)
