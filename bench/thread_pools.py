# coding=utf-8
"""Ours with TensorFlow's default thread pools against fixed ones.

The scripts leave TensorFlow's session thread pools at their defaults (as
many intra-op and inter-op threads as cores); bench/throughput.py pins
every implementation to --threads intra-op threads and 1 inter-op thread
so that the peers compare alike. "pinned" here is one intra-op thread per
core and 1 inter-op thread. This runs ours' step of bench/throughput.py
both ways, each run in its own process, alternated over --pool_rounds, and
prints examples/sec per round and the ratio of the medians, default / pinned.

    bench/.venv/bin/python -m bench.thread_pools
    bench/.venv/bin/python -m bench.thread_pools --configs=base-s128-b8-train \
        --pool_rounds=5
"""

import json
import os
import statistics
import subprocess
import sys

from absl import app
from absl import flags

from bench import throughput

FLAGS = flags.FLAGS
flags.DEFINE_list("pool_configs", ["base-s128-b8-train",
                                   "base-s128-b32-infer"],
                  "bench/throughput.py configurations to run.")
flags.DEFINE_integer("pool_rounds", 3, "Rounds; each runs both pool settings.")
flags.DEFINE_integer("timed_steps", 6, "Timed steps per run.")
flags.DEFINE_enum("pools", None, ["default", "pinned"],
                  "Internal: run one measurement in this process.")
flags.DEFINE_string("pool_config", None, "Internal: its configuration.")

SETTINGS = ("default", "pinned")


def _measure(setting, config_name):
  """Examples/sec of ours' step with `setting`'s thread pools."""
  model, seq_length, batch_size, training, _, head = throughput.CONFIGS[
      config_name]
  spec = dict(config=config_name, impl="ours", model=model,
              seq_length=seq_length, batch_size=batch_size,
              training=training, head=head, dtype="fp32", xla=False,
              checkpointing=False, skip_padding=True,
              threads=os.cpu_count(), warmup_steps=2,
              steps=FLAGS.timed_steps,
              default_thread_pools=setting == "default")
  return throughput.run_worker(spec)["examples_per_sec"]


def main(argv):
  del argv
  if FLAGS.pools:
    print(json.dumps({"examples_per_sec": _measure(FLAGS.pools,
                                                   FLAGS.pool_config)}))
    return
  rates = {(c, s): [] for c in FLAGS.pool_configs for s in SETTINGS}
  for _ in range(FLAGS.pool_rounds):
    for config_name in FLAGS.pool_configs:
      for setting in SETTINGS:
        output = subprocess.run(
            [sys.executable, "-m", "bench.thread_pools", "--pools=" + setting,
             "--pool_config=" + config_name,
             "--timed_steps=%d" % FLAGS.timed_steps],
            check=True, capture_output=True, text=True).stdout
        rates[(config_name, setting)].append(
            json.loads(output.strip().splitlines()[-1])["examples_per_sec"])
  print("| configuration | TensorFlow's default pools | %d intra-op, 1 "
        "inter-op | default / pinned (medians) |" % os.cpu_count())
  print("|---|---|---|---:|")
  for config_name in FLAGS.pool_configs:
    default, pinned = (rates[(config_name, s)] for s in SETTINGS)
    print("| %s | %s | %s | %.2f |" % (
        config_name, ", ".join("%.2f" % r for r in default),
        ", ".join("%.2f" % r for r in pinned),
        statistics.median(default) / statistics.median(pinned)))


if __name__ == "__main__":
  app.run(main)
