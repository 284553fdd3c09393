# coding=utf-8
"""The tensors alive at the peak of one training step, op by op.

Builds the training step of bench/process_memory.py (our library path:
BertModel, a 2-label head, create_optimizer, a plain Session) with
TensorFlow's BFC allocator serving CPU tensors, runs it once, then traces a
second run (RunOptions FULL_TRACE). Replaying the trace's allocation records
in time order gives the step's peak of live bytes and the ops whose outputs
or scratch buffers make it up. Weights and Adam slots exist before the step
and are not counted; the allocator's own step peak (reset before the traced
run) is printed beside the replayed one as a check.

A few layers of a model's shape show the same per-layer working set as the
whole model in seconds rather than minutes:

    python -m bench.peak_breakdown --model=large --layers=2 --batch=8 \
        --checkpointing=true
"""

import argparse
import collections
import os

from bench import process_memory

MIB = 2**20
CPU_DEVICE = "CPU:0"


def live_at_peak(step_stats):
  """Replays a StepStats' allocation records in time order.

  At equal times frees come before allocations, so simultaneous events never
  raise the peak.

  Returns:
    (peak bytes, name of the node whose allocation reached it, list of
    (node name, bytes of it alive at the peak), largest first).
  """
  events = sorted(
      (record.alloc_micros, record.alloc_bytes, node.node_name)
      for device in step_stats.dev_stats for node in device.node_stats
      for memory in node.memory for record in memory.allocation_records)
  current, peak, peak_index = 0, 0, -1
  for index, (_, size, _) in enumerate(events):
    current += size
    if current > peak:
      peak, peak_index = current, index
  live = collections.Counter()
  for _, size, name in events[:peak_index + 1]:
    live[name] += size
  at_peak = events[peak_index][2] if peak_index >= 0 else None
  return peak, at_peak, [(name, size) for name, size in live.most_common()
                         if size > 0]


def _config(args):
  values = process_memory.model_config(args.model)
  if args.layers:
    values["num_hidden_layers"] = args.layers
  return values


def _traced_step(args):
  """(StepStats of the second run, allocator peak bytes of that run)."""
  from userio import quiet_tensorflow  # pylint: disable=g-import-not-at-top,unused-import
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  ids, labels = process_memory.random_batch(args.batch, args.seq)
  with tf.Graph().as_default():
    train_op, _, _ = process_memory.library_step(
        _config(args), ids, labels, args.checkpointing == "true")
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      session.run(train_op)
      before = tf.config.experimental.get_memory_info(CPU_DEVICE)["current"]
      tf.config.experimental.reset_memory_stats(CPU_DEVICE)
      metadata = tf.compat.v1.RunMetadata()
      session.run(train_op, options=tf.compat.v1.RunOptions(
          trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
                  run_metadata=metadata)
      peak = tf.config.experimental.get_memory_info(CPU_DEVICE)["peak"]
  return metadata.step_stats, peak - before


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  process_memory.add_step_arguments(parser, batch=8)
  parser.add_argument("--layers", type=process_memory.int_in(0, 24),
                      default=0,
                      help="number of layers (default 0: the model's)")
  parser.add_argument("--checkpointing", choices=("false", "true"),
                      default="true")
  parser.add_argument("--top", type=process_memory.int_in(0, 10000),
                      default=25,
                      help="ops to list, largest first")
  args = parser.parse_args()
  # The CPU allocator is chosen when TensorFlow starts: set it before
  # _traced_step imports it. (bench/memory.py uses the same switch;
  # importing it would define its absl flags a second time in a process
  # that already loaded it.) Set here rather than on import, so that
  # importing this module, as the tests do, leaves the environment alone.
  os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
  step_stats, allocator_peak = _traced_step(args)
  peak, at_peak, live = live_at_peak(step_stats)
  print("model %s, %d layers, %d tokens, batch %d, checkpointing %s" % (
      args.model, _config(args)["num_hidden_layers"], args.seq, args.batch,
      args.checkpointing))
  print("peak of the step's tensors: %.1f MiB replayed from the trace, "
        "%.1f MiB by the allocator" % (peak / MIB, allocator_peak / MIB))
  print("reached by: %s" % at_peak)
  print("| MiB alive | op |\n|---:|---|")
  for name, size in live[:args.top]:
    print("| %.1f | %s |" % (size / MIB, name))
  rest = sum(size for _, size in live[args.top:])
  print("| %.1f | (%d more ops) |" % (rest / MIB, max(0, len(live) - args.top)))


if __name__ == "__main__":
  main()
