# coding=utf-8
"""BERT fine-tuning runner for multiple choice: SWAG, as the paper ran it.

Google's repository has no multiple-choice script; this one follows the
BERT paper's Section 4.4 with run_classifier.py's flags, feature files,
checkpoints, precision, memory planning, distribution, export and outputs.
Each question of SWAG's train.csv, val.csv and test.csv becomes four
sequences, the given sentence paired with each candidate continuation; a
softmax over their scores picks the ending (tasks/multiple_choice.py).

The defaults are the paper's recipe: 3 epochs, learning rate 2e-5, batch
16. --do_eval writes eval_results.txt (accuracy and loss on val.csv);
--do_predict writes test_results.tsv (the four probabilities of each
question of test.csv) and predictions.csv (its id, the probabilities and
the chosen ending).
"""

from absl import flags

from startup import shared_flags
from userio import cli

FLAGS = flags.FLAGS

# The paper's recipe (Section 4.4), where the shared flags default to
# run_classifier.py's values.
RECIPE_DEFAULTS = {"train_batch_size": 16, "learning_rate": 2e-5,
                   "num_train_epochs": 3.0}


def define_flags(flag_values=flags.FLAGS):
  """Defines the script's flags: run_classifier.py's, with the paper's SWAG
  recipe as defaults. Called from `__main__`, not at import."""
  flags.DEFINE_string(
      "data_dir", None,
      "Folder with SWAG's files as released: train.csv, val.csv, test.csv.",
      flag_values=flag_values)
  shared_flags.define_common_flags(
      max_seq_length_default=128, flag_values=flag_values,
      serving_inputs="int32 input_ids, input_mask and segment_ids [batch, "
      "choices, length], any number of choices and any length up to "
      "--max_seq_length", serving_outputs="probabilities [batch, choices]",
      text_inputs="sentence [batch] and endings [batch, choices]")
  for name, value in RECIPE_DEFAULTS.items():
    flag_values.set_default(name, value)
  shared_flags.define_skip_padding_flag(flag_values)
  shared_flags.define_evaluation_flags(flag_values,
                                      best_metric_default="eval_accuracy")
  flags.adopt_module_key_flags(shared_flags, flag_values=flag_values)
  flags.DEFINE_bool("do_eval", False,
                    "Evaluate on val.csv; writes eval_results.txt.",
                    flag_values=flag_values)
  flags.DEFINE_integer("eval_batch_size", 8, "Questions per eval batch.",
                       flag_values=flag_values)
  flags.DEFINE_enum(
      "train_example_order", "shuffled",
      list(shared_flags.TRAIN_EXAMPLE_ORDERS),
      "Order of the questions in train.tf_record: shuffled (permuted with "
      "--seed) or file (train.csv's order).", flag_values=flag_values)


# --help is answered here, before TensorFlow loads (seconds).
cli.answer_help(__name__, define_flags)

# pylint: disable=g-import-not-at-top,wrong-import-position
# Before TensorFlow: it imports TensorFlow without the CPU start-up noise.
from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order

from driver import training
from tasks import multiple_choice
# pylint: enable=g-import-not-at-top,wrong-import-position


def main(_, flag_values=FLAGS):
  task = multiple_choice.MultipleChoiceTask(
      flag_values.data_dir,
      train_example_order=flag_values.train_example_order)
  training.run(task, shared_flags.read(flag_values))


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("data_dir")
  flags.mark_flag_as_required("output_dir")
  cli.run(main)
