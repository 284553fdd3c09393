# coding=utf-8
"""What run_pretraining's heads cost per FLOP, next to the encoder's.

Builds one training step of BERT with run_pretraining's masked-LM and
next-sentence heads (bench/throughput.py's synthetic inputs and model
sizes, our `create_optimizer`), runs it a few times, then traces one step
and sums the ops' times in three groups by name:

  * heads: `cls/...` and their gradients (the masked-LM transform, the
    output layer on the tied word embeddings, the softmax cross-entropy,
    the next-sentence classifier);
  * encoder: `bert/...` and their gradients (embeddings, layers, pooler);
  * rest: the optimizer's update, gradient clipping, the input iterator.

Each of the first two is divided into its model FLOPs (throughput.py's
accounting), giving GFLOP/s per group: if the heads' rate is not below the
encoder's, the masked-LM head costs no more than its FLOPs. The step runs
with one inter-op thread, so ops run one after another and their times add
up to the step's.

  python -m bench.pretraining_head_cost --model=small --dtype=fp32
"""

import collections
import statistics
import time

from absl import app
from absl import flags

from bench import throughput

FLAGS = flags.FLAGS

flags.DEFINE_enum("model", "small", list(throughput.MODELS),
                  "Model size (bench/throughput.py's MODELS).")
flags.DEFINE_integer("seq_length", 128, "Tokens per example.")
flags.DEFINE_integer("batch_size", None,
                     "Examples per step; default 32 (small) or 8 (base).")
flags.DEFINE_enum("dtype", "fp32", ["fp32", "bf16"],
                  "Encoder compute dtype (the heads run in float32).")
# --threads and --warmup_steps are throughput.py's flags (defined on import).
flags.DEFINE_integer("traced_steps", 3,
                     "Traced steps (each op's time is its median over them), "
                     "and as many untraced ones timed before them.",
                     lower_bound=1)

GROUPS = ("heads", "encoder", "rest")


def group_of(node_name):
  """'heads', 'encoder' or 'rest' for an op of the training graph."""
  name = node_name[len("gradients/"):] if node_name.startswith(
      "gradients/") else node_name
  if name.startswith("cls/"):
    return "heads"
  if name.startswith("bert/"):
    return "encoder"
  return "rest"


def group_flops(model, seq_length, batch_size):
  """Model FLOPs of one training step: {'heads': ..., 'encoder': ...}.

  The encoder's are a classifier step's minus its 2-label layer (the
  pooler stays in the encoder); the heads' are the masked-LM positions'
  plus the next-sentence layer, which has the classifier's shape.
  """
  hidden = model["hidden"]
  label_layer = 6 * (hidden * throughput.NUM_LABELS + throughput.NUM_LABELS)
  classifier = throughput.flops_per_example(model, seq_length, True)
  pretraining = throughput.flops_per_example(model, seq_length, True,
                                             throughput.PRETRAINING)
  return {"encoder": batch_size * (classifier - label_layer),
          "heads": batch_size * (pretraining - classifier + label_layer)}


def traced_group_seconds(model, seq_length, batch_size, dtype, threads,
                         warmup_steps, traced_steps):
  """(seconds per group of one step, untraced step seconds: the mean of
  `traced_steps` steps run after the warm-up, before the traced ones)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  step = throughput._ours_step_fn(dict(  # pylint: disable=protected-access
      model=model, seq_length=seq_length, batch_size=batch_size,
      training=True, head=throughput.PRETRAINING, dtype=dtype, xla=False,
      checkpointing=False, skip_padding=False, threads=threads))
  for _ in range(warmup_steps):
    step()
  start = time.perf_counter()
  for _ in range(traced_steps):
    step()
  step_seconds = (time.perf_counter() - start) / traced_steps
  per_op = collections.defaultdict(list)
  options = tf.compat.v1.RunOptions(
      trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
  for _ in range(traced_steps):
    metadata = tf.compat.v1.RunMetadata()
    step(options=options, run_metadata=metadata)
    for device in metadata.step_stats.dev_stats:
      for node in device.node_stats:
        per_op[node.node_name].append(node.all_end_rel_micros * 1e-6)
  seconds = dict.fromkeys(GROUPS, 0.0)
  for name, times in per_op.items():
    seconds[group_of(name)] += statistics.median(times)
  return seconds, step_seconds


def main(argv):
  del argv
  batch_size = FLAGS.batch_size or (32 if FLAGS.model == "small" else 8)
  seconds, step_seconds = traced_group_seconds(
      FLAGS.model, FLAGS.seq_length, batch_size, FLAGS.dtype, FLAGS.threads,
      FLAGS.warmup_steps, FLAGS.traced_steps)
  flops = group_flops(throughput.MODELS[FLAGS.model], FLAGS.seq_length,
                      batch_size)
  print("model %s, %d tokens, batch %d, %s, %d threads; untraced step "
        "%.3f s, traced ops %.3f s" % (
            FLAGS.model, FLAGS.seq_length, batch_size, FLAGS.dtype,
            FLAGS.threads, step_seconds, sum(seconds.values())))
  print("| group | op seconds | share | model GFLOP | GFLOP/s |")
  print("|---|---:|---:|---:|---:|")
  total = sum(seconds.values())
  for group in GROUPS:
    rate = ("%.0f" % (flops[group] / seconds[group] / 1e9)
            if group in flops else "-")
    gflop = "%.1f" % (flops[group] / 1e9) if group in flops else "-"
    print("| %s | %.3f | %.0f%% | %s | %s |" % (
        group, seconds[group], 100 * seconds[group] / total, gflop, rate))


if __name__ == "__main__":
  app.run(main)
