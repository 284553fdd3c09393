# coding=utf-8
"""Where our inference step's time goes, by TensorFlow op type.

Builds ours exactly as bench/throughput.py times it (its "ours" step: the
classifier on BertModel, BERT-Base, batch 32, 128 tokens, the fixed
synthetic inputs with padding, skip_padding on), warms up, then runs
--steps steps with a full trace (`RunOptions(trace_level=FULL_TRACE)`)
and sums the traced ops' times (step_stats) by op type, after grappler's
rewrites (so fused ops appear under their fused names, e.g.
_FusedMatMul). It prints, per dtype, a table of op types by share of the
summed op time, and the most expensive single ops; the untraced step time
is given too, as a check that tracing did not change the picture.

  bench/.venv/bin/python -m bench.profile_inference              # fp32, bf16
  bench/.venv/bin/python -m bench.profile_inference --steps=2 --dtypes=bf16

It takes bench/throughput.py's flags of the same names (--configs, one
config; --dtypes, --steps, --warmup_steps, --threads, --skip_padding) and
writes bench/out/profile_inference-<date>.json. On a shared machine the
absolute times vary; the shares are the finding.
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


def main(argv):
  del argv
  configs = FLAGS.configs or [DEFAULT_CONFIG]
  if len(configs) != 1 or configs[0] not in throughput.CONFIGS:
    raise app.UsageError("--configs: give one of %s." %
                         ",".join(throughput.CONFIGS))
  model, seq_length, batch_size, training, _, head = throughput.CONFIGS[
      configs[0]]
  records = []
  for dtype in FLAGS.dtypes:
    spec = dict(config=configs[0], impl="ours", model=model,
                seq_length=seq_length, batch_size=batch_size,
                training=training, head=head, dtype=dtype, xla=False,
                checkpointing=False,
                skip_padding=FLAGS.skip_padding == ["on"],
                threads=FLAGS.threads, warmup_steps=FLAGS.warmup_steps)
    record = profile(spec, FLAGS.steps or DEFAULT_TRACED_STEPS)
    records.append(record)
    total = 1e3 * record["op_ms_per_step"]
    print("\n## %s, %s, skip_padding %s: untraced step %.0f ms, traced ops "
          "%.0f ms per step\n" % (configs[0], dtype,
                                  "on" if spec["skip_padding"] else "off",
                                  record["untraced_step_ms"],
                                  record["op_ms_per_step"]))
    print(share_table(record["by_type"], total, FLAGS.top, "op type"))
    print()
    print(share_table(record["by_node"], total, FLAGS.top, "op"))
  os.makedirs(FLAGS.out_dir, exist_ok=True)
  path = os.path.join(FLAGS.out_dir, "profile_inference-%s.json" %
                      datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
  with open(path, "w") as f:
    json.dump(dict(machine=throughput.machine_info(),
                   load_average=os.getloadavg(), records=records), f,
              indent=1)
  print("\nwrote %s" % path)


if __name__ == "__main__":
  app.run(main)
