# coding=utf-8
"""Where an exported model's request time goes, op type by op type.

    python -m bench.export_profile --export=bench/out/mrpc_minilm_export_bf16 \\
      --batch_size=1 --seq_length=128

Loads the SavedModel's graph in a tf.compat.v1 Session (its main op run,
as TensorFlow Serving runs it), feeds its serving_default signature
--batch_size rows of --seq_length random ids (no padding), times
untraced calls (--calls) after --warmup_calls, then sums the op times of
--traced_calls traced calls by op type (bench/profile_step.py's
aggregation; its --top types listed). Prints the untraced call's mean and
the op-type table; the shares are the finding.

With --baseline (another export of the same model, e.g. made at an earlier
commit), both are loaded in sessions of their own threads and their
untraced calls alternate (each first in every other round, --calls each);
the medians, their ratio and the largest difference of the outputs are
printed before the profile of --export.
"""

import os
import time

from absl import app
from absl import flags
import numpy as np

from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order
import tensorflow as tf
import tensorflow_text  # pylint: disable=unused-import  (the export's ops)

import bench
from bench import profile_step
from prediction import exported_models
from runner import serving_input

FLAGS = flags.FLAGS
flags.DEFINE_string("export", None, "An --export_dir (its newest version) "
                    "or one SavedModel folder.")
flags.DEFINE_integer("batch_size", 1, "Rows per call.")
flags.DEFINE_integer("seq_length", 128, "Tokens per row.")
flags.DEFINE_integer("warmup_calls", 10, "Untimed calls first.")
flags.DEFINE_integer("calls", 30, "Timed untraced calls.")
flags.DEFINE_integer("traced_calls", 10, "Traced calls summed.")
flags.DEFINE_string("baseline", None, "(optional) An export to time "
                    "against --export, calls alternated.")


def load(export, batch_size, seq_length):
  """(session, fetches, feeds) of `export`'s serving_default signature on
  `batch_size` rows of `seq_length` random ids."""
  graph = tf.Graph()
  # Threads of its own: two sessions in one process would otherwise share
  # the pools the first one created.
  sess = tf.compat.v1.Session(graph=graph, config=tf.compat.v1.ConfigProto(
      use_per_session_threads=True))
  with graph.as_default():
    meta_graph = tf.compat.v1.saved_model.loader.load(
        sess, [tf.compat.v1.saved_model.SERVING],
        exported_models.find_saved_model(export))
  signature = meta_graph.signature_def["serving_default"]
  shape = (batch_size, seq_length)
  values = {"input_ids": np.random.RandomState(0).randint(
      1000, 2000, size=shape).astype(np.int32),
            "input_mask": np.ones(shape, np.int32),
            "segment_ids": np.zeros(shape, np.int32)}
  feeds = {signature.inputs[name].name: values[name]
           for name in serving_input.MODEL_INPUTS}
  fetches = [signature.outputs[name].name for name in sorted(
      signature.outputs)]
  return sess, fetches, feeds


def compare(runs, names, warmup_calls, calls):
  """Alternated untraced calls of [(session, fetches, feeds)] x 2, `calls`
  each after `warmup_calls`: prints each median under its name of
  `names` (baseline, export), their ratio and the outputs' largest
  difference."""
  outputs = [sess.run(fetches, feeds) for sess, fetches, feeds in runs]
  difference = max(float(np.abs(a.astype(np.float64) - b).max())
                   for a, b in zip(*outputs))
  times = [[], []]
  for index in range(warmup_calls + calls):
    for which in bench.in_turn([0, 1], index):
      sess, fetches, feeds = runs[which]
      start = time.perf_counter()
      sess.run(fetches, feeds)
      if index >= warmup_calls:
        times[which].append(time.perf_counter() - start)
  baseline, export = (float(np.median(t)) * 1e3 for t in times)
  print("median call: %s %.2f ms, %s %.2f ms; baseline / export %.3f; "
        "largest output difference %.3g\n" % (
            names[0], baseline, names[1], export, baseline / export,
            difference))


def main(_):
  for name in ("export", "baseline"):
    path = FLAGS[name].value
    if path and not os.path.isdir(path):
      raise SystemExit("bench.export_profile: --%s=%s is not a folder; pass "
                       "a fine-tuning script's --export_dir (or one "
                       "SavedModel in it)." % (name, path))
  sess, fetches, feeds = load(FLAGS.export, FLAGS.batch_size,
                              FLAGS.seq_length)
  if FLAGS.baseline:
    compare([load(FLAGS.baseline, FLAGS.batch_size, FLAGS.seq_length),
             (sess, fetches, feeds)], [FLAGS.baseline, FLAGS.export],
            FLAGS.warmup_calls, FLAGS.calls)
  for _ in range(FLAGS.warmup_calls):
    sess.run(fetches, feeds)
  start = time.perf_counter()
  for _ in range(FLAGS.calls):
    sess.run(fetches, feeds)
  call_ms = (time.perf_counter() - start) / FLAGS.calls * 1e3
  traces = []
  options = tf.compat.v1.RunOptions(
      trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
  for _ in range(FLAGS.traced_calls):
    metadata = tf.compat.v1.RunMetadata()
    sess.run(fetches, feeds, options=options, run_metadata=metadata)
    traces.append(metadata.step_stats)
  by_type, _ = profile_step.aggregate(traces)
  total = sum(micros for micros, _ in by_type.values())
  print("%s, %d x %d ids: %.2f ms per untraced call\n" % (
      FLAGS.export, FLAGS.batch_size, FLAGS.seq_length, call_ms))
  print(profile_step.share_table(by_type, total, FLAGS.top, "op type"))


if __name__ == "__main__":
  flags.mark_flag_as_required("export")
  app.run(main)
