# coding=utf-8
"""Plans GPU memory for training BERT: the largest micro-batch that fits,
and the accumulation steps for a batch.

    python memory_plan.py --bert_config_file=$BERT/bert_config.json \
        --max_seq_length=128,256,384,512 --gpu_memory_gb=12 \
        --train_batch_size=32 --precision=all --gradient_checkpointing=auto

prints one table row per sequence length (add --max_predictions_per_seq=20
to plan for pretraining's heads at 128 tokens, 80 at 512), then each
setting's plan for the batch with its predicted time per update by the GPU
time model (the output names it), and the plan picked: the one predicted
fastest. The estimates and predictions are
memory/memory_model.py's; docs/memory.md states its terms, how they were
fitted and the assumptions of the time model.
"""

import math
import os

from absl import app
from absl import flags

from engine import optimizer_names
from memory import memory_model
from userio import cli
from userio import file_systems
from userio import units


def load_config(path):
  """The modeling.BertConfig of the bert_config.json at `path`; ValueError
  naming the flag when it is missing or not a BERT config."""
  if not path or not file_systems.isfile(path):
    raise ValueError("--bert_config_file=%r is not a file; point it at the "
                     "model's bert_config.json." % path)
  return modeling.BertConfig.from_json_file(path)


def define_flags():
  """Defines the command's flags (not at import: the names are shared)."""
  flags.DEFINE_string("bert_config_file", None,
                      "The bert_config.json of the model to plan for.")
  flags.DEFINE_list("max_seq_length", ["128", "256", "384", "512"],
                    "Comma-separated sequence lengths (table rows).")
  flags.DEFINE_float("gpu_memory_gb", 12, "GPU memory in GiB.")
  flags.DEFINE_integer("train_batch_size", 32,
                       "Examples per update to plan micro-batches for.")
  flags.DEFINE_enum("precision", "all", list(memory_model.PRECISIONS) + ["all"],
                    "Activation precision; fp16 and bf16 have the same size.")
  flags.DEFINE_enum("gradient_checkpointing", "auto", ["auto", "true", "false"],
                    "auto: show both and plan with checkpointing when it is "
                    "predicted faster.")
  flags.DEFINE_enum("optimizer", "adamw", list(optimizer_names.OPTIMIZERS),
                    "The optimizer (both keep two slots per parameter).")
  flags.DEFINE_integer(
      "max_predictions_per_seq", 0,
      "0 plans for fine-tuning (a classifier head); more plans for "
      "run_pretraining.py's masked-LM and next-sentence heads with this "
      "many masked positions per sequence (e.g. 20 at 128 tokens, 80 at "
      "512).")
  flags.mark_flag_as_required("bert_config_file")


# --help is answered here, before TensorFlow loads (seconds).
cli.answer_help(__name__, define_flags)

# pylint: disable=g-import-not-at-top,wrong-import-position
# Before TensorFlow: it imports TensorFlow without the CPU start-up noise.
from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order
import modeling
# pylint: enable=g-import-not-at-top,wrong-import-position


def _parse_seq_lengths(values):
  try:
    return [int(v) for v in values]
  except ValueError as e:
    raise app.UsageError("--max_seq_length=%s must be comma-separated "
                         "integers, e.g. 128,256,384,512." % ",".join(values)
                         ) from e


def main(argv):
  del argv  # Unused.
  f = flags.FLAGS
  try:
    config = load_config(f.bert_config_file)
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  if not (math.isfinite(f.gpu_memory_gb) and f.gpu_memory_gb > 0):
    raise app.UsageError("--gpu_memory_gb=%s must be a positive number (GiB "
                         "of the GPU, e.g. 12 or 16)." % f.gpu_memory_gb)
  if f.train_batch_size < 1:
    raise app.UsageError("--train_batch_size=%d must be at least 1 (the "
                         "examples per update to plan for)." %
                         f.train_batch_size)
  precisions = memory_model.PRECISIONS if f.precision == "all" else (f.precision,)
  checkpointing = {"auto": (False, True), "true": (True,),
                   "false": (False,)}[f.gradient_checkpointing]
  try:
    table = memory_model.format_table(config, _parse_seq_lengths(f.max_seq_length),
                         f.gpu_memory_gb * units.GIB, precisions, checkpointing,
                         f.train_batch_size, f.optimizer,
                         name=os.path.basename(
                             os.path.dirname(file_systems.absolute(
                                 f.bert_config_file))),
                         max_predictions_per_seq=f.max_predictions_per_seq)
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  print(table, end="")


if __name__ == "__main__":
  define_flags()
  cli.run(main)
