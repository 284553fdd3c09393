# coding=utf-8
"""Fine-tunes BERT on SQuAD 1.1 / 2.0 and predicts answer spans.

Google's command, flags, file formats and outputs (predictions.json,
nbest_predictions.json, null_odds.json for SQuAD 2.0), with clear errors
for bad files, the official metrics when --predict_file holds answers
(eval_results.json; for SQuAD 2.0 also the predictions at the best null
threshold) and the training run's window flags reused by a run that only
predicts. The task lives in tasks/squad.py (SquadTask) and the modules
beside it: squad_examples.py (reading), squad_features.py (windows and
feature files), squad_model.py (the span head), squad_predictions.py (the
n-best search) and squad_metrics.py (the official metrics); this file
holds the flags, Google's public names and `main`.
"""

from absl import flags

from startup import shared_flags
from userio import cli

FLAGS = flags.FLAGS


def define_flags(flag_values=flags.FLAGS):
  """Defines the script's flags: Google's names and defaults.

  Called from `__main__` rather than at import, so that importing this
  module next to run_classifier.py (which defines the shared flags too) does
  not define them twice.
  """
  shared_flags.define_common_flags(
      max_seq_length_default=384, flag_values=flag_values,
      serving_outputs="start_logits and end_logits [batch, length]",
      text_inputs="question and context [batch] (the answer, its logits and "
      "offsets, searched with this run's window and n-best flags)")
  shared_flags.define_evaluation_flags(
      flag_values, best_metric_default="f1 (the official evaluation's)")
  # --help lists the shared flags with the script's own.
  flags.adopt_module_key_flags(shared_flags, flag_values=flag_values)
  flags.DEFINE_string(
      "train_file", None,
      "SQuAD json file to train on, e.g. train-v1.1.json.",
      flag_values=flag_values)
  flags.DEFINE_bool(
      "do_eval", False,
      "Answer the questions of --dev_file and score them with the official "
      "evaluation (eval_results.json); with --eval_every_steps or "
      "--eval_every_epochs, also during training.", flag_values=flag_values)
  flags.DEFINE_string(
      "dev_file", None,
      "SQuAD json file with answers that --do_eval scores, e.g. "
      "dev-v1.1.json.", flag_values=flag_values)
  flags.DEFINE_integer("eval_batch_size", 8, "Windows per eval batch.",
                       flag_values=flag_values)
  flags.DEFINE_string(
      "predict_file", None,
      "SQuAD json file to predict on, e.g. dev-v1.1.json; when it holds "
      "answers, the official metrics are computed too.",
      flag_values=flag_values)
  flags.DEFINE_integer(
      "doc_stride", 128,
      "Distance in tokens between the starts of two consecutive windows of a "
      "long context. A run that does not train uses the training run's "
      "value (--output_dir's run_info.json) unless this flag is given.",
      flag_values=flag_values)
  flags.DEFINE_integer(
      "max_query_length", 64,
      "Questions are cut to this many tokens. A run that does not train "
      "uses the training run's value unless this flag is given.",
      flag_values=flag_values)
  flags.DEFINE_integer(
      "n_best_size", 20,
      "How many candidate answers per question nbest_predictions.json lists "
      "(and start/end positions considered per window).",
      flag_values=flag_values)
  flags.DEFINE_integer(
      "max_answer_length", 30,
      "Longest answer in tokens that may be predicted; start and end are "
      "predicted independently, so this bound is needed.",
      flag_values=flag_values)
  flags.DEFINE_bool(
      "verbose_logging", False,
      "Log every problem met while mapping predictions back to the text; a "
      "number of them is normal on SQuAD.",
      flag_values=flag_values)
  flags.DEFINE_bool(
      "version_2_with_negative", False,
      "SQuAD 2.0: some questions have no answer in the context.",
      flag_values=flag_values)
  flags.DEFINE_float(
      "null_score_diff_threshold", 0.0,
      "SQuAD 2.0: predict no answer when the null score minus the best "
      "non-null score exceeds this.",
      flag_values=flag_values)


# --help is answered here, before TensorFlow loads (seconds).
cli.answer_help(__name__, define_flags)

# pylint: disable=g-import-not-at-top,wrong-import-position
# Before TensorFlow: it imports TensorFlow without the CPU start-up noise.
from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order

from driver import training
from startup import checks
from tasks import squad
from tasks import squad_examples
from tasks import squad_features
from tasks import squad_model
from tasks import squad_predictions
# pylint: enable=g-import-not-at-top,wrong-import-position

# Google's public names, defined in the task's modules.
SquadExample = squad_examples.SquadExample
InputFeatures = squad_features.InputFeatures
read_squad_examples = squad_examples.read_squad_examples
convert_examples_to_features = squad_features.convert_examples_to_features
FeatureWriter = squad_features.FeatureWriter
input_fn_builder = squad_features.input_fn_builder
create_model = squad_model.create_model
model_fn_builder = squad_model.model_fn_builder
RawResult = squad_predictions.RawResult
write_predictions = squad_predictions.write_predictions
get_final_text = squad_predictions.get_final_text


def validate_flags_or_throw(bert_config, flag_obj=FLAGS):
  """Checks the script's flag combinations before any slow work starts.

  Args:
    bert_config: modeling.BertConfig of --bert_config_file.
    flag_obj: parsed flags (absl FLAGS or any object with the attributes).

  Raises:
    cli.UserError naming the flags and the fix.
  """
  squad.check_data_flags(
      do_train=flag_obj.do_train, train_file=flag_obj.train_file,
      do_predict=flag_obj.do_predict, predict_file=flag_obj.predict_file)
  checks.check_max_seq_length(flag_obj.max_seq_length, bert_config,
                              flag_obj.bert_config_file)
  squad.check_window_flags(flag_obj.max_seq_length, flag_obj.doc_stride,
                           flag_obj.max_query_length, flag_obj.n_best_size,
                           flag_obj.max_answer_length)


def main(_, flag_values=FLAGS):
  """Runs the actions of the command line (or of `flag_values`)."""
  task = squad.SquadTask(
      train_file=flag_values.train_file,
      predict_file=flag_values.predict_file,
      dev_file=flag_values.dev_file,
      version_2_with_negative=flag_values.version_2_with_negative,
      window_flags={name: flag_values[name].value
                    for name in squad.WINDOW_FLAGS},
      given_window_flags=[name for name in squad.WINDOW_FLAGS
                          if flag_values[name].present],
      n_best_size=flag_values.n_best_size,
      max_answer_length=flag_values.max_answer_length,
      null_score_diff_threshold=flag_values.null_score_diff_threshold,
      verbose_logging=flag_values.verbose_logging)
  training.run(task, shared_flags.read(flag_values))


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("output_dir")
  cli.run(main)
