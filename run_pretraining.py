# coding=utf-8
"""Pre-trains BERT on the masked LM and next-sentence objectives.

Reads the TFRecord files of create_pretraining_data.py (Google's format),
trains the encoder with Google's two heads and evaluates the masked-LM and
next-sentence accuracy and loss into eval_results.txt. The flags, variable
names, losses and metrics are those of Google's run_pretraining.py; the
runner adds what the fine-tuning scripts have (accumulation, mixed
precision, LAMB, data parallelism, XLA, resuming killed runs). The task
lives in tasks/pretraining.py; this file holds the flags, Google's public
names and `main`.
"""

from absl import flags

from startup import shared_flags
from userio import cli

FLAGS = flags.FLAGS


def define_flags(flag_values=flags.FLAGS):
  """Defines the script's flags: Google's names and defaults, then the
  shared ones.

  Called from `__main__` rather than at import, so that tests and other
  scripts can import this module next to one defining the shared flags.
  """
  flags.DEFINE_string(
      "input_file", None,
      "The TFRecord files of create_pretraining_data.py: comma-separated "
      "paths or glob patterns. Evaluation reads the same files.",
      flag_values=flag_values)
  shared_flags.define_model_flags(128, flag_values)
  flags.DEFINE_string(
      "vocab_file", None,
      "Optional: the vocab.txt (or SentencePiece .model) the records were "
      "made with. Checked against the config's vocab_size and against the "
      "vocabulary the records' sidecars name, and copied into --output_dir "
      "(run_info.json names it), so that fine-tuning can take it from "
      "there.", flag_values=flag_values)
  flags.DEFINE_integer(
      "max_predictions_per_seq", 20,
      "Masked positions per sequence in the records; must be the value "
      "create_pretraining_data.py was run with (as --max_seq_length).",
      flag_values=flag_values)
  shared_flags.define_training_flags(flag_values)
  flags.DEFINE_bool("do_eval", False,
                    "Evaluate on --eval_input_file (else --input_file); "
                    "writes eval_results.txt.",
                    flag_values=flag_values)
  flags.DEFINE_integer("eval_batch_size", 8, "Examples per eval batch.",
                       flag_values=flag_values)
  flags.DEFINE_string(
      "eval_input_file", None,
      "Records to evaluate on (held out from --input_file), in its form; "
      "default: --input_file's, as Google's script evaluates.",
      flag_values=flag_values)
  flags.DEFINE_integer("num_train_steps", 100000,
                       "Optimizer updates to train for (across restarts).",
                       flag_values=flag_values)
  flags.DEFINE_integer(
      "num_warmup_steps", 10000,
      "Updates over which the learning rate rises linearly from 0 to "
      "--learning_rate; it then falls linearly to 0 at --num_train_steps.",
      flag_values=flag_values)
  flags.DEFINE_integer(
      "max_eval_steps", 100,
      "Eval batches to run; the files are read in order and repeated when "
      "they hold fewer.", flag_values=flag_values)
  shared_flags.define_tpu_flags(flag_values)
  shared_flags.define_memory_flags(flag_values)
  shared_flags.define_scale_flags(flag_values)
  shared_flags.define_evaluation_flags(
      flag_values, best_metric_default="masked_lm_accuracy", epochs=False)
  # --help lists the shared flags with the script's own.
  flags.adopt_module_key_flags(shared_flags, flag_values=flag_values)


# --help is answered here, before TensorFlow loads (seconds).
cli.answer_help(__name__, define_flags)

# pylint: disable=g-import-not-at-top,wrong-import-position
# Before TensorFlow: it imports TensorFlow without the CPU start-up noise.
from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order

from driver import training
from tasks import pretraining
# pylint: enable=g-import-not-at-top,wrong-import-position

# Google's public names, defined in the task's module.
model_fn_builder = pretraining.model_fn_builder
get_masked_lm_output = pretraining.get_masked_lm_output
get_next_sentence_output = pretraining.get_next_sentence_output
gather_indexes = pretraining.gather_indexes
input_fn_builder = pretraining.input_fn_builder


def main(_, flag_values=FLAGS):
  """Runs the actions of the command line (or of `flag_values`)."""
  task = pretraining.PretrainingTask(
      flag_values.input_file,
      max_predictions_per_seq=flag_values.max_predictions_per_seq,
      num_train_steps=flag_values.num_train_steps,
      num_warmup_steps=flag_values.num_warmup_steps,
      max_eval_steps=flag_values.max_eval_steps,
      eval_input_file=flag_values.eval_input_file)
  training.run(task, shared_flags.read(flag_values))


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("input_file")
  flags.mark_flag_as_required("output_dir")
  cli.run(main)
