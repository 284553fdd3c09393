# coding=utf-8
"""Where one step's time goes, and how fast its matmuls run.

Builds ours exactly as bench/throughput.py times it (its "ours" step for one
of its configurations: BERT-Base, 128 tokens, the fixed synthetic inputs
with padding, skip_padding on unless --skip_padding=off), warms up, times
untraced steps, then runs --steps steps with a full trace
(`RunOptions(trace_level=FULL_TRACE)`). It prints:

  1. op types (after grappler's rewrites, so fused ops appear under their
     fused names, e.g. _MklNativeFusedMatMul) and single ops by their share
     of the summed op time;
  2. the MFU of the untraced step split in two factors: the share of op
     time spent in matmul-kind ops (every op type with "MatMul" in its
     name; a fused op's bias, GELU or residual work is inside it), and the
     rate those ops reach, the executed FLOPs of bench/throughput.py's count
     over their traced time, as a share of the peak measured here (the
     2048^3 matmul of bench/throughput.py, same threads);
  3. the encoder's dense matmuls, each shape timed alone in a graph of its
     own (same threads): the rate a step made of nothing else would reach.

  bench/.venv/bin/python -m bench.profile_step          # inference, fp32, bf16
  bench/.venv/bin/python -m bench.profile_step --configs=base-s128-b8-train \
      --dtypes=fp32

It takes bench/throughput.py's flags of the same names (--configs, one
config; --dtypes, --steps, --warmup_steps, --threads, --skip_padding) and
writes bench/out/profile_step-<date>.json. On a shared machine the absolute
times vary; the shares are the finding.
"""

import collections
import datetime
import json
import os
import re
import statistics
import time

from absl import app
from absl import flags

from bench import throughput

FLAGS = flags.FLAGS

flags.DEFINE_integer("top", 20, "Op types (and single ops) listed.")

DEFAULT_CONFIG = "base-s128-b32-infer"
DEFAULT_TRACED_STEPS = 5
# "name = OpType(inputs)": the op type of a traced node, as executed.
_LABEL_RE = re.compile(r"=\s*([\w>]+)\(")


def op_type(node_stats):
  """The executed op type of one traced node (its name if unlabeled)."""
  match = _LABEL_RE.search(node_stats.timeline_label)
  return match.group(1) if match else node_stats.node_name


def aggregate(step_stats_list):
  """Sums traced node times by op type and by node, per step.

  Args:
    step_stats_list: list of StepStats protos (one per traced step), or
      any objects with the same fields (dev_stats[].node_stats[] with
      node_name, timeline_label, all_start_micros, op_end_rel_micros).

  Returns:
    (by_type, by_node): dicts of name -> (microseconds per step, count per
    step), each sorted by time, largest first.
  """
  by_type = collections.defaultdict(lambda: [0.0, 0])
  by_node = collections.defaultdict(lambda: [0.0, 0])
  for step_stats in step_stats_list:
    for device in step_stats.dev_stats:
      for node in device.node_stats:
        micros = node.op_end_rel_micros
        for table, key in ((by_type, op_type(node)),
                           (by_node, node.node_name)):
          table[key][0] += micros
          table[key][1] += 1
  steps = max(1, len(step_stats_list))

  def per_step(table):
    return dict(sorted(((k, (v[0] / steps, v[1] / steps))
                        for k, v in table.items()),
                       key=lambda item: -item[1][0]))
  return per_step(by_type), per_step(by_node)


def share_table(rows, total, top, title):
  """Markdown: name, count per step, ms per step, share of `total`."""
  lines = ["| %s | per step | ms per step | share |" % title,
           "|---|---|---|---|"]
  shown = list(rows.items())[:top]
  for name, (micros, count) in shown:
    lines.append("| %s | %g | %.2f | %.1f%% |" % (
        name, count, micros / 1e3, 100 * micros / total))
  rest = sum(micros for _, (micros, _) in list(rows.items())[top:])
  if rest:
    lines.append("| (the rest) | | %.2f | %.1f%% |" % (
        rest / 1e3, 100 * rest / total))
  return "\n".join(lines)


def dense_matmul_shapes(model, rows, training):
  """The encoder's dense-layer matmuls of one step, grouped by shape.

  Every layer has four hidden x hidden projections (query, key, value,
  attention output) and the feed-forward pair hidden -> intermediate ->
  hidden, each applied to `rows` rows. Training adds, per forward matmul
  x[m, k] @ w[k, n], the input gradient dy @ w^T (m x n x k) and the
  weight gradient x^T @ dy (k x m x n). Attention's batched matmuls, the
  pooler and the head are left out (a few percent of the FLOPs).

  Args:
    model: dict with layers, hidden, intermediate (an entry of
      bench.throughput.MODELS).
    rows: int, rows each dense layer gets (tokens of the batch it runs).
    training: bool.

  Returns:
    list of dicts with rows, inner, cols (the product is rows x cols, summed
    over inner), transpose_a, transpose_b, count (per step), role.
  """
  layers, hidden, inner = (model["layers"], model["hidden"],
                           model["intermediate"])
  shapes = []
  for k, n, per_layer in ((hidden, hidden, 4), (hidden, inner, 1),
                          (inner, hidden, 1)):
    passes = [("forward", rows, k, n, False, False)]
    if training:
      passes += [("input gradient", rows, n, k, False, True),
                 ("weight gradient", k, rows, n, True, False)]
    for role, m, contracted, cols, ta, tb in passes:
      shapes.append(dict(rows=m, inner=contracted, cols=cols, transpose_a=ta,
                         transpose_b=tb, count=per_layer * layers,
                         role=role))
  return shapes


def matmul_flops(shape):
  """FLOPs of one matmul of `shape` (a multiply-add is 2)."""
  return 2 * shape["rows"] * shape["inner"] * shape["cols"]


def time_matmul(shape, dtype, threads, steps):
  """GFLOP/s of one matmul of `shape` alone: the fastest of `steps` runs."""
  return throughput.matmul_gflops(
      shape["rows"], shape["inner"], shape["cols"], dtype, threads, steps,
      transpose_a=shape["transpose_a"], transpose_b=shape["transpose_b"])


def dense_alone(shapes, rates, peak_gflops):
  """The dense matmuls' combined rate if each ran as fast as alone.

  Args:
    shapes: dense_matmul_shapes' list.
    rates: GFLOP/s of each shape alone, in the same order.
    peak_gflops: the peak to compare with.

  Returns:
    (GFLOP/s, share of the peak): total FLOPs over the summed times.
  """
  flops = sum(matmul_flops(s) * s["count"] for s in shapes)
  secs = sum(matmul_flops(s) * s["count"] / (r * 1e9)
             for s, r in zip(shapes, rates))
  gflops = flops / secs / 1e9
  return gflops, gflops / peak_gflops


def mfu_factors(executed_flops, step_secs, by_type, peak_gflops):
  """The untraced step's MFU and the three factors it is the product of.

  Args:
    executed_flops: matmul FLOPs the step runs (bench.throughput's count).
    step_secs: untraced step time.
    by_type: aggregate()'s op types: name -> (microseconds, count).
    peak_gflops: the measured peak.

  Returns:
    dict: mfu (executed FLOPs over step time, over the peak),
    matmul_share (matmul-kind ops' share of the traced op time),
    matmul_of_peak (executed FLOPs over the matmul ops' traced time, over
    the peak), traced_over_untraced (summed op time over the untraced
    step time); mfu = matmul_share x matmul_of_peak x
    traced_over_untraced.
  """
  total = sum(micros for micros, _ in by_type.values())
  matmul = sum(micros for name, (micros, _) in by_type.items()
               if "MatMul" in name)
  peak = peak_gflops * 1e9
  return dict(mfu=executed_flops / step_secs / peak,
              matmul_share=matmul / total,
              matmul_of_peak=executed_flops / (matmul / 1e6) / peak,
              traced_over_untraced=(total / 1e6) / step_secs)


def profile(spec, traced_steps):
  """Times untraced steps, then traces `traced_steps`; returns a record."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  step = throughput.STEP_FNS["ours"](spec)
  for _ in range(spec["warmup_steps"]):
    step()
  wall = []
  for _ in range(traced_steps):
    start = time.perf_counter()
    step()
    wall.append(time.perf_counter() - start)
  traces = []
  for _ in range(traced_steps):
    metadata = tf.compat.v1.RunMetadata()
    step(options=tf.compat.v1.RunOptions(
        trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
         run_metadata=metadata)
    traces.append(metadata.step_stats)
  by_type, by_node = aggregate(traces)
  return dict(spec, untraced_step_ms=1e3 * statistics.median(wall),
              op_ms_per_step=sum(m for m, _ in by_type.values()) / 1e3,
              by_type=by_type, by_node=by_node)


def shapes_table(shapes, rates, peak_gflops):
  """Markdown: each dense matmul shape alone, GFLOP/s and share of peak."""
  total = sum(matmul_flops(s) * s["count"] for s in shapes)
  lines = ["| matmul (rows x inner x cols) | role | per step | FLOP share | "
           "GFLOP/s alone | of peak |", "|---|---|---|---|---|---|"]
  for shape, rate in zip(shapes, rates):
    lines.append("| %d x %d x %d%s%s | %s | %d | %.1f%% | %.0f | %.0f%% |" % (
        shape["rows"], shape["inner"], shape["cols"],
        " (a^T)" if shape["transpose_a"] else "",
        " (b^T)" if shape["transpose_b"] else "", shape["role"],
        shape["count"], 100 * matmul_flops(shape) * shape["count"] / total,
        rate, 100 * rate / peak_gflops))
  return "\n".join(lines)


def main(argv):
  del argv
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  configs = FLAGS.configs or [DEFAULT_CONFIG]
  if len(configs) != 1 or configs[0] not in throughput.CONFIGS:
    raise app.UsageError("--configs: give one of %s." %
                         ",".join(throughput.CONFIGS))
  model, seq_length, batch_size, training, _, head = throughput.CONFIGS[
      configs[0]]
  skip_padding = FLAGS.skip_padding == ["on"]
  lengths = throughput.synthetic_lengths(seq_length, batch_size)
  executed_flops = sum(
      throughput.executed_flops_per_example(
          throughput.MODELS[model], seq_length, length, training, head,
          "ours", skip_padding) for length in lengths)
  shapes = dense_matmul_shapes(
      throughput.MODELS[model],
      sum(lengths) if skip_padding else seq_length * batch_size, training)
  peaks = throughput.run_peak_worker(
      dict(threads=FLAGS.threads, steps=10))["gflops"]
  records = []
  for dtype in FLAGS.dtypes:
    spec = dict(config=configs[0], impl="ours", model=model,
                seq_length=seq_length, batch_size=batch_size,
                training=training, head=head, dtype=dtype, xla=False,
                checkpointing=False, skip_padding=skip_padding,
                threads=FLAGS.threads, warmup_steps=FLAGS.warmup_steps)
    record = profile(spec, FLAGS.steps or DEFAULT_TRACED_STEPS)
    rates = [time_matmul(shape, tf.bfloat16 if dtype == "bf16"
                         else tf.float32, FLAGS.threads, 10)
             for shape in shapes]
    factors = mfu_factors(executed_flops, record["untraced_step_ms"] / 1e3,
                          record["by_type"], peaks[dtype])
    alone_gflops, alone_of_peak = dense_alone(shapes, rates, peaks[dtype])
    record.update(peak_gflops=peaks[dtype], executed_flops=executed_flops,
                  dense_shapes=[dict(s, gflops=r)
                                for s, r in zip(shapes, rates)],
                  dense_alone_gflops=alone_gflops, **factors)
    records.append(record)
    total = 1e3 * record["op_ms_per_step"]
    print("\n## %s, %s, skip_padding %s: untraced step %.0f ms, traced ops "
          "%.0f ms per step\n" % (configs[0], dtype,
                                  "on" if skip_padding else "off",
                                  record["untraced_step_ms"],
                                  record["op_ms_per_step"]))
    print(share_table(record["by_type"], total, FLAGS.top, "op type"))
    print()
    print(share_table(record["by_node"], total, FLAGS.top, "op"))
    print("\npeak %.0f GFLOP/s; MFU %.1f%% = matmul ops' share of op time "
          "%.1f%% x their rate %.1f%% of peak x traced-over-untraced %.2f\n" % (
              peaks[dtype], 100 * factors["mfu"],
              100 * factors["matmul_share"], 100 * factors["matmul_of_peak"],
              factors["traced_over_untraced"]))
    print(shapes_table(shapes, rates, peaks[dtype]))
    print("\ndense matmuls alone: %.0f GFLOP/s, %.1f%% of peak" % (
        alone_gflops, 100 * alone_of_peak))
  os.makedirs(FLAGS.out_dir, exist_ok=True)
  path = os.path.join(FLAGS.out_dir, "profile_step-%s.json" %
                      datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
  with open(path, "w") as f:
    json.dump(dict(machine=throughput.machine_info(),
                   load_average=os.getloadavg(), records=records), f,
              indent=1)
  print("\nwrote %s" % path)


if __name__ == "__main__":
  app.run(main)
