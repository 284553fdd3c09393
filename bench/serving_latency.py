# coding=utf-8
"""Serving latency: an export's "text" signature against transformers'
pipeline, raw text in, probabilities out, on the same model and text.

    bench/.venv/bin/python -m bench.serving_latency \\
      --export=bench/out/mrpc_minilm_export --hf_model=bench/out/mrpc_minilm_hf \\
      --bf16_export=bench/out/mrpc_minilm_export_bf16

Runs in bench/.venv (TensorFlow with TensorFlow Text, torch and
transformers). The requests are (question, context) pairs of SQuAD dev laid
out as a sentence pair and cut to --max_seq_length tokens by both sides
(the context is the longer text, so every request is exactly that long).
For each precision and batch size (--batch_sizes), one request at a time:

  * ours: `tf.saved_model.load(export).signatures["text"]` on the strings:
    tokenization, layout and the model in the SavedModel's graph, the path
    TensorFlow Serving runs;
  * hf: transformers.pipeline("text-classification") of the same weights
    converted by convert_checkpoint.py, `truncation=True` at the same
    length, `torch_dtype` bfloat16 for bf16.

With --isolation=process (the default) each side runs in a process of its
own, as a server runs one library: the two take turns in blocks of --block
requests, each going first in every other turn, and a side starts its turn
only after the other's threads have had --switch_pause to go idle. With
--isolation=shared both run in this process and alternate request by
request; each side's thread pools then reach into the other's time.
p50 and p99 in milliseconds after --warmup untimed requests. The first
requests' probabilities are compared (their largest difference is
printed: both sides compute the same model). Writes
bench/out/serving_latency-<date>.json and prints a markdown table.
"""

import datetime
import functools
import json
import os
import platform
import subprocess
import sys
import time

from absl import app
from absl import flags
import numpy as np

import bench

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
ASSETS_DIR = os.path.join(os.path.dirname(bench.REPO_ROOT), "shared", "assets")

FLAGS = flags.FLAGS
flags.DEFINE_string("export", os.path.join(BENCH_DIR, "out",
                                           "mrpc_minilm_export"),
                    "A run_classifier.py export of a text pair task (fp32).")
flags.DEFINE_string("bf16_export", None,
                    "The same model exported with --precision=bf16; none: "
                    "fp32 only.")
flags.DEFINE_string("hf_model", os.path.join(BENCH_DIR, "out",
                                             "mrpc_minilm_hf"),
                    "The same model in Hugging Face's layout "
                    "(convert_checkpoint.py).")
flags.DEFINE_string("squad_data", os.path.join(ASSETS_DIR, "squad", "v1.1",
                                               "dev-v1.1.json"),
                    "SQuAD dev, whose questions and contexts are the text.")
flags.DEFINE_integer("max_seq_length", 128, "Tokens per request row.")
flags.DEFINE_list("batch_sizes", ["1", "8"], "Rows per request.")
flags.DEFINE_integer("rounds", 100, "Timed requests per kind and batch size.")
flags.DEFINE_integer("warmup", 10, "Untimed requests first.")
flags.DEFINE_string("out_dir", os.path.join(BENCH_DIR, "out"),
                    "Where the JSON goes.")
flags.DEFINE_enum("isolation", "process", ["process", "shared"],
                  "process: each side in a process of its own, taking "
                  "turns in blocks; shared: both in this process, "
                  "alternating request by request.")
flags.DEFINE_integer("block", 10, "Requests per turn with "
                     "--isolation=process.")
flags.DEFINE_float("switch_pause", 0.5,
                   "Seconds between turns with --isolation=process, for the "
                   "side that just ran to let its threads go idle.")
flags.DEFINE_enum("worker", None, ["ours", "hf"],
                  "Internal: serve one side's requests over stdin/stdout.")
flags.DEFINE_bool("worker_bf16", False, "Internal: the worker's precision.")

# A worker's replies start with this, so that whatever a library prints
# to standard output is not read as one.
REPLY_MARK = "@@reply "
CHECK_ROWS = 8


class Ours(object):
  """The export's text signature on raw pairs."""

  def __init__(self, export):
    # Imported here: transformers' worker process does not load TensorFlow.
    from userio import quiet_tensorflow  # pylint: disable=g-import-not-at-top,unused-import
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import  (the export's ops)
    from prediction import exported_models  # pylint: disable=g-import-not-at-top
    self.constant = tf.constant
    self.serve = tf.saved_model.load(
        exported_models.find_saved_model(export)).signatures["text"]

  def __call__(self, pairs):
    outputs = self.serve(text_a=self.constant([q for q, _ in pairs]),
                         text_b=self.constant([c for _, c in pairs]))
    return outputs["probabilities"].numpy().astype(np.float64)


class HuggingFace(object):
  """transformers' text-classification pipeline on raw pairs, cut to
  `max_seq_length` tokens."""

  def __init__(self, model_dir, bf16, max_seq_length):
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    self.pipe = transformers.pipeline(
        "text-classification", model=model_dir, device="cpu",
        torch_dtype=torch.bfloat16 if bf16 else torch.float32)
    self.max_seq_length = max_seq_length

  def __call__(self, pairs):
    results = self.pipe([{"text": q, "text_pair": c} for q, c in pairs],
                        batch_size=len(pairs), truncation=True,
                        max_length=self.max_seq_length, top_k=None)
    return np.array([[r["score"] for r in sorted(
        row, key=lambda r: int(r["label"].rsplit("_", 1)[-1]))]
                     for row in results], np.float64)


def measure(calls, pairs, batch_size, warmup, rounds):
  """{kind: percentiles} of interleaved requests of `batch_size` rows,
  `rounds` timed of each kind after `warmup` untimed."""
  requests = bench.batches(pairs, batch_size)
  times = {kind: [] for kind in calls}
  kinds = list(calls)
  for index in range(warmup + rounds):
    request = requests[index % len(requests)]
    # Each side goes first in every other round: neither always follows
    # the other's work.
    for kind in bench.in_turn(kinds, index):
      call = calls[kind]
      start = time.perf_counter()
      call(request)
      if index >= warmup:
        times[kind].append(time.perf_counter() - start)
  return {kind: bench.percentiles(values) for kind, values in times.items()}


def run_precision(export, bf16, pairs, hf_model, max_seq_length,
                  batch_sizes, warmup, rounds):
  """One precision in this process: `export` against `hf_model` on
  `pairs` cut to `max_seq_length` tokens, measure's times at each of
  `batch_sizes`, and the largest difference of their probabilities."""
  calls = {"ours": Ours(export),
           "hf": HuggingFace(hf_model, bf16, max_seq_length)}
  check = pairs[:CHECK_ROWS]
  difference = float(np.abs(calls["ours"](check) - calls["hf"](check)).max())
  result = {"max_probability_difference": difference}
  for batch_size in batch_sizes:
    result["batch_%d" % batch_size] = measure(calls, pairs, batch_size,
                                              warmup, rounds)
  return result


def serve_requests(call, pairs):
  """The worker's loop: one JSON order per stdin line, one reply each.

  An order {"check": true} is answered with the probabilities of the first
  CHECK_ROWS pairs; {"batch_size": b, "first": i, "count": n} with the
  seconds of requests i .. i+n-1 (taken cyclically) of b rows each.
  """
  for line in sys.stdin:
    order = json.loads(line)
    if order.get("check"):
      reply = call(pairs[:CHECK_ROWS]).tolist()
    else:
      requests = bench.batches(pairs, order["batch_size"])
      reply = []
      for index in range(order["first"], order["first"] + order["count"]):
        start = time.perf_counter()
        call(requests[index % len(requests)])
        reply.append(time.perf_counter() - start)
    sys.stdout.write(REPLY_MARK + json.dumps(reply) + "\n")
    sys.stdout.flush()


class Worker(object):
  """One side in a process of its own (this module with --worker): the
  model of `model` on the pairs of `squad_data` cut to `max_seq_length`
  tokens, as many pairs read as the largest of `batch_sizes` needs."""

  def __init__(self, kind, model, bf16, squad_data, max_seq_length,
               batch_sizes):
    self.kind = kind
    args = ["--worker=" + kind, "--export=" + model, "--hf_model=" + model,
            "--worker_bf16=%s" % bf16, "--squad_data=" + squad_data,
            "--max_seq_length=%d" % max_seq_length,
            "--batch_sizes=" + ",".join(str(b) for b in batch_sizes)]
    self.process = subprocess.Popen(
        bench.child_command("serving_latency", args), cwd=bench.REPO_ROOT,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

  def ask(self, order):
    self.process.stdin.write(json.dumps(order) + "\n")
    self.process.stdin.flush()
    for line in self.process.stdout:
      if line.startswith(REPLY_MARK):
        return json.loads(line[len(REPLY_MARK):])
    raise SystemExit("bench.serving_latency: the %s worker ended without "
                     "replying (exit %s); its error is above." % (
                         self.kind, self.process.wait()))

  def close(self):
    self.process.stdin.close()
    self.process.wait()


def measure_in_turns(workers, batch_size, warmup, rounds, block,
                     switch_pause):
  """{kind: percentiles} of `rounds` requests of each kind after `warmup`:
  the workers take turns of `block` requests, `switch_pause` seconds
  apart."""
  times = {kind: [] for kind in workers}
  kinds = list(workers)
  turns = -(-(warmup + rounds) // block)
  for turn in range(turns):
    for kind in bench.in_turn(kinds, turn):
      # The side that just ran spins its threads a while after its work;
      # the pause lets them sleep before the other side is timed.
      time.sleep(switch_pause)
      first = turn * block
      seconds = workers[kind].ask({"batch_size": batch_size, "first": first,
                                   "count": block})
      times[kind].extend(s for i, s in enumerate(seconds, first)
                         if warmup <= i < warmup + rounds)
  return {kind: bench.percentiles(values) for kind, values in times.items()}


def run_precision_in_processes(export, bf16, hf_model, squad_data,
                               max_seq_length, batch_sizes, warmup, rounds,
                               block, switch_pause):
  """run_precision's measurements with each side in a Worker reading the
  pairs of `squad_data`, the two taking turns as measure_in_turns'."""
  request = dict(squad_data=squad_data, max_seq_length=max_seq_length,
                 batch_sizes=batch_sizes)
  workers = {"ours": Worker("ours", export, bf16, **request),
             "hf": Worker("hf", hf_model, bf16, **request)}
  try:
    probabilities = {kind: np.array(worker.ask({"check": True}))
                     for kind, worker in workers.items()}
    result = {"max_probability_difference": float(
        np.abs(probabilities["ours"] - probabilities["hf"]).max())}
    for batch_size in batch_sizes:
      result["batch_%d" % batch_size] = measure_in_turns(
          workers, batch_size, warmup, rounds, block, switch_pause)
  finally:
    for worker in workers.values():
      worker.close()
  return result


def table(results):
  lines = ["| precision | batch | ours p50 / p99 ms | hf p50 / p99 ms | "
           "hf / ours (p50) |", "|---|---:|---|---|---:|"]
  for precision in ("fp32", "bf16"):
    if precision not in results:
      continue
    for key, value in results[precision].items():
      if not key.startswith("batch_"):
        continue
      ours, hf = value["ours"], value["hf"]
      lines.append("| %s | %s | %.2f / %.2f | %.2f / %.2f | %.2fx |" % (
          precision, key[len("batch_"):], ours["p50_ms"], ours["p99_ms"],
          hf["p50_ms"], hf["p99_ms"], hf["p50_ms"] / ours["p50_ms"]))
  for precision in ("fp32", "bf16"):
    if precision in results:
      lines.append("\n%s: largest probability difference ours - hf %.2g" % (
          precision, results[precision]["max_probability_difference"]))
  return "\n".join(lines)


def _precision_runner(pairs):
  """run(export, bf16) of --isolation with the command line's settings
  (`pairs`: the requests' text, for the shared process)."""
  sides = dict(hf_model=FLAGS.hf_model, max_seq_length=FLAGS.max_seq_length,
               batch_sizes=[int(b) for b in FLAGS.batch_sizes],
               warmup=FLAGS.warmup, rounds=FLAGS.rounds)
  if FLAGS.isolation == "process":
    return functools.partial(
        run_precision_in_processes, squad_data=FLAGS.squad_data,
        block=FLAGS.block, switch_pause=FLAGS.switch_pause, **sides)
  return functools.partial(run_precision, pairs=pairs, **sides)


def main(_):
  started = datetime.datetime.now(datetime.timezone.utc)
  largest = max(int(b) for b in FLAGS.batch_sizes)
  pairs = bench.squad_questions(FLAGS.squad_data, max(64, 4 * largest))
  if FLAGS.worker:
    serve_requests(Ours(FLAGS.export) if FLAGS.worker == "ours" else
                   HuggingFace(FLAGS.hf_model, FLAGS.worker_bf16,
                               FLAGS.max_seq_length), pairs)
    return
  for name in ("export", "bf16_export", "hf_model"):
    if FLAGS[name].value and not os.path.isdir(FLAGS[name].value):
      raise SystemExit(
          "bench.serving_latency: --%s=%s is not a folder; make it with the "
          "commands in docs/results.md (\"Raw text through the export "
          "against transformers' pipeline\") or pass another." % (
              name, FLAGS[name].value))
  run = _precision_runner(pairs)
  results = {"date": started.strftime("%Y-%m-%d %H:%M UTC"),
             "platform": platform.platform(), "cpus": os.cpu_count(),
             "load_average_at_start": list(os.getloadavg()),
             "flags": {name: FLAGS[name].value for name in (
                 "export", "bf16_export", "hf_model", "max_seq_length",
                 "batch_sizes", "rounds", "warmup", "isolation", "block",
                 "switch_pause")}}
  results["fp32"] = run(FLAGS.export, False)
  if FLAGS.bf16_export:
    results["bf16"] = run(FLAGS.bf16_export, True)
  results["load_average_at_end"] = list(os.getloadavg())
  path = bench.write_results(FLAGS.out_dir, "serving_latency", started, results)
  print(table(results))
  print("\nWritten to %s" % path)


if __name__ == "__main__":
  app.run(main)
