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

With --output_file, the command predicts a corpus: --input names files
(comma-separated paths or globs, local or remote) of such lines, or CSV /
TSV tables (--text_a_column, --text_b_column, --id_column, as
run_classifier.py reads a user's files), and the predictions go to
<output_file>-0000k-of-0000n.jsonl, one shard per --batches_per_shard
batches of a file, each line as above with the input's "id", else its
"file" and "line". --runner=local (the default) predicts the shards in
--num_workers processes here; any other --runner is an Apache Beam runner,
which takes the flags this script does not define as Beam's options:

    python predictor.py --export_dir=/tmp/mrpc_export \
      --input='pairs/*.jsonl' --output_file=/tmp/preds/mrpc
    python predictor.py ... --runner=DirectRunner \
      --direct_running_mode=multi_processing --direct_num_workers=2

The files are the same bytes on every runner and with any number of
workers, and their lines are those the command prints for the same input
without --output_file (docs/serving.md says why).

The models and their Python API live in prediction/exported_models.py
(`exported_models.load(path).predict(...)`), the input lines in
prediction/input_lines.py and prediction/input_records.py, the corpus job
in prediction/batch_prediction.py; this file is the command's flags and
main.
"""

import os
import sys

from absl import flags
from absl import logging

from corpus import shard_job
from prediction import input_formats
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
      "input", "-",
      "Input file(s): a comma-separated list of paths or glob patterns "
      "(local, gs://, ...); - reads stdin.", flag_values=flag_values)
  flags.DEFINE_enum(
      "input_format", "auto", list(input_formats.INPUT_FORMATS),
      "text: a sentence, or two fields separated by a tab; json: one JSON "
      "object per line; csv, tsv: a table (--text_a_column, ...); auto: a "
      "table for a .csv, .tsv or .tab file, else lines, JSON when a line "
      "starts with '{'.", flag_values=flag_values)
  for field, default in (("text_a", "the export's first text field: its "
                          "training file's column, else text_a, or "
                          "question for SQuAD, text for NER"),
                         ("text_b", "the export's second text field, when "
                          "the header has it"),
                         ("id", "none: the output names the file and line")):
    flags.DEFINE_string(
        "%s_column" % field, None,
        "CSV/TSV input: the column of the %s, by header name or 0-based "
        "index (default: %s)." % (field.replace("_", " "), default),
        flag_values=flag_values)
  flags.DEFINE_integer(
      "batch_size", 32,
      "Lines predicted together (SQuAD: questions; each of their windows "
      "is a row of the model's batch). From a terminal, each line is "
      "predicted as soon as it is typed.", flag_values=flag_values)
  flags.DEFINE_string(
      "output_file", None,
      "Predict --input's files as a corpus job: write the JSON lines to "
      "<output_file>-0000k-of-0000n.jsonl instead of stdout, on --runner.",
      flag_values=flag_values)
  flags.DEFINE_integer(
      "batches_per_shard", 100,
      "With --output_file: batches of --batch_size records per shard, the "
      "unit of work of a worker and of an output file.",
      flag_values=flag_values)
  flags.DEFINE_integer(
      "num_workers", None,
      "Processes predicting shards with --runner=local (default: one per "
      "CPU core; each loads the model); with a Beam --runner, Beam's "
      "option of that name (Dataflow's worker machines).",
      flag_values=flag_values)
  # --runner: local processes or an Apache Beam runner.
  shard_job.define_runner_flag(flag_values)
  flags.adopt_module_key_flags(shard_job, flag_values=flag_values)
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
from corpus import beam_pipeline
from corpus import shard_files
from prediction import batch_prediction
from prediction import exported_models
from prediction import input_lines
from prediction import input_records
from serving import graph_tokenizer
from userio import output_files
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


def check_flags(flag_values):
  """Refuses flag values that cannot work, before anything is read.

  Raises:
    cli.UserError naming the flag and the fix.
  """
  for name in ("batch_size", "batches_per_shard", "num_workers"):
    value = flag_values[name].value
    if value is not None and value < 1:
      raise cli.UserError("--%s=%d must be at least 1." % (name, value))
  if flag_values.output_file is None:
    for name in ("runner", "batches_per_shard", "num_workers"):
      if flag_values[name].present:
        raise cli.UserError("--%s applies with --output_file, which "
                            "predicts --input's files as a corpus job." %
                            name)
  elif flag_values.input == "-":
    raise cli.UserError("--output_file needs --input files; stdin is "
                        "predicted to stdout.")


def predictor_options(flag_values, path, record):
  """The keyword arguments of exported_models.load that the flags give
  for the export at `path` (its run_info.json `record`).

  Raises:
    cli.UserError: --threshold for a model that is not multi-label.
  """
  task = record["task"]
  options = {"batch_size": flag_values.batch_size}
  if task == exported_models.SQUAD_TASK:
    options.update(
        doc_stride=flag_values.doc_stride,
        max_query_length=flag_values.max_query_length,
        n_best_size=flag_values.n_best_size,
        max_answer_length=flag_values.max_answer_length,
        null_score_diff_threshold=flag_values.null_score_diff_threshold,
        pad_to_max_seq_length=flag_values.pad_to_max_seq_length)
  if task == exported_models.NER_TASK and flag_values["doc_stride"].present:
    options["doc_stride"] = flag_values.doc_stride
  if flag_values.threshold is not None:
    if record.get("problem_type") != problem_types.MULTI_LABEL:
      raise cli.UserError("--threshold applies to a multi-label classifier; "
                          "%s is a %s model." % (path, task))
    options["threshold"] = flag_values.threshold
  return options


def input_settings(flag_values, record):
  """The input_records.InputSettings of the flags, for an export's
  run_info.json `record`.

  Raises:
    cli.UserError: a table for a multiple-choice export (its endings are
      a list).
  """
  task = record["task"]
  fields = exported_models.example_fields(task, record.get("text_columns"))
  if task == exported_models.SWAG_TASK and flag_values.input_format in (
      input_records.CSV, input_records.TSV):
    raise cli.UserError(
        "--input_format=%s: a multiple-choice export reads JSON lines "
        "({\"sentence\": ..., \"endings\": [...]}) or text lines (the "
        "sentence, then each ending, separated by tabs)." %
        flag_values.input_format)
  return input_records.InputSettings(
      task, flag_values.input_format, fields, record.get("text_pairs"),
      (flag_values.text_a_column or fields[0], flag_values.text_b_column,
       flag_values.id_column))


def predict_stdin(model, record):
  """Today's command: stdin's lines, predicted as they come, to stdout."""
  source = LineSource("-", record["task"], FLAGS.input_format,
                      FLAGS.batch_size, record.get("text_pairs"),
                      record.get("text_columns"))
  meter = progress.Progress("Predicting stdin", None, unit="lines")
  for lines in source.batches():
    _write(model, record["task"],
           [input_records.Record(*line) for line in lines], meter)
  meter.finish()


def _write(model, task, records, meter):
  """Predicts `records` in batches of --batch_size from the first, each
  batch's lines written to stdout as soon as it is done."""
  for batch, results in batch_prediction.predict_batches(
      model, task, records, FLAGS.batch_size):
    sys.stdout.write("".join(batch_prediction.output_line(r, result)
                             for r, result in zip(batch, results)))
    sys.stdout.flush()
    meter.advance(len(batch))


def predict_files(model, task, settings, shards, total):
  """--input's files in this process, to stdout: each shard's records in
  batches from the shard's start, the batches of the corpus job."""
  meter = progress.Progress("Predicting %s" % FLAGS.input, total,
                            unit="lines")
  for shard in shards:
    _write(model, task, input_records.read_shard(shard, settings), meter)
  meter.finish()


def predict_corpus(path, record, settings, shards, beam_options):
  """The corpus job: --input's shards predicted on --runner into
  --output_file's shard files."""
  batch_prediction.check_export(path)
  # Every worker loads the export, whose text signature needs the package:
  # its absence is one line here rather than one per worker.
  graph_tokenizer.import_tensorflow_text()
  settings = batch_prediction.PredictionSettings(
      path, tuple(sorted(predictor_options(FLAGS, path, record).items())),
      FLAGS.batch_size, settings)
  job = batch_prediction.PredictionJob(settings, FLAGS.output_file,
                                       len(shards))
  with output_files.claim([("--output_file", FLAGS.output_file)],
                          sorted({shard.path for shard in shards})):
    logging.info("Predicting with %s (task %s): %d shards on %s.", path,
                 record["task"], len(shards),
                 FLAGS.runner if not shard_job.is_local(FLAGS.runner) else
                 "%d local workers" % _num_workers())
    shard_files.run(job, shards, FLAGS.runner, _num_workers(),
                    beam_options)


def _num_workers():
  return FLAGS.num_workers or len(os.sched_getaffinity(0))


def main(argv):
  verbosity.start_logging()
  check_flags(FLAGS)
  beam_pipeline.check_local_args(FLAGS.runner, argv[1:])
  beam_options = None
  if not shard_job.is_local(FLAGS.runner):
    beam_options = beam_pipeline.pipeline_options(
        FLAGS.runner, argv[1:], FLAGS.num_workers)
  path = find_saved_model(FLAGS.export_dir)
  record = read_record(path)
  task = record["task"]
  if FLAGS.input == "-":
    model = load(path, **predictor_options(FLAGS, path, record))
    logging.info("Predicting with %s (task %s).", path, task)
    predict_stdin(model, record)
    return
  predictor_options(FLAGS, path, record)  # Refuses a bad --threshold now.
  settings = input_settings(FLAGS, record)
  shards, total = input_records.plan(
      input_records.resolve_inputs(FLAGS.input), settings,
      FLAGS.batch_size * FLAGS.batches_per_shard)
  if not shards:
    raise cli.UserError("--input=%s holds no input to predict; pass files "
                        "with at least one line." % FLAGS.input)
  if FLAGS.output_file is not None:
    predict_corpus(path, record, settings, shards, beam_options)
    return
  model = load(path, **predictor_options(FLAGS, path, record))
  logging.info("Predicting with %s (task %s).", path, task)
  predict_files(model, task, settings, shards, total)


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("export_dir")
  # Flags this script does not define are Apache Beam's options.
  cli.run(main, known_only=True)
