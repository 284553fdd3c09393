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

The two alternate request by request, so that load changes hit both alike,
each going first in every other round;
p50 and p99 in milliseconds after --warmup untimed requests. The first
requests' probabilities are compared (their largest difference is
printed: both sides compute the same model). Writes
bench/out/serving_latency-<date>.json and prints a markdown table.
"""

import datetime
import os
import platform
import time

from absl import app
from absl import flags
import numpy as np

from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order
import tensorflow as tf
import tensorflow_text  # pylint: disable=unused-import  (the export's ops)

import bench
from prediction import exported_models

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


class Ours(object):
  """The export's text signature on raw pairs."""

  def __init__(self, export):
    self.serve = tf.saved_model.load(
        exported_models.find_saved_model(export)).signatures["text"]

  def __call__(self, pairs):
    outputs = self.serve(text_a=tf.constant([q for q, _ in pairs]),
                         text_b=tf.constant([c for _, c in pairs]))
    return outputs["probabilities"].numpy().astype(np.float64)


class HuggingFace(object):
  """transformers' text-classification pipeline on raw pairs."""

  def __init__(self, model_dir, bf16):
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    self.pipe = transformers.pipeline(
        "text-classification", model=model_dir, device="cpu",
        torch_dtype=torch.bfloat16 if bf16 else torch.float32)

  def __call__(self, pairs):
    results = self.pipe([{"text": q, "text_pair": c} for q, c in pairs],
                        batch_size=len(pairs), truncation=True,
                        max_length=FLAGS.max_seq_length, top_k=None)
    return np.array([[r["score"] for r in sorted(
        row, key=lambda r: int(r["label"].rsplit("_", 1)[-1]))]
                     for row in results], np.float64)


def percentiles(seconds):
  values = np.array(seconds) * 1000.0
  return {"p50_ms": float(np.percentile(values, 50)),
          "p99_ms": float(np.percentile(values, 99))}


def measure(calls, pairs, batch_size):
  """{kind: percentiles} of interleaved requests of `batch_size` rows."""
  requests = [pairs[i:i + batch_size]
              for i in range(0, len(pairs) - batch_size + 1, batch_size)]
  times = {kind: [] for kind in calls}
  kinds = list(calls)
  for index in range(FLAGS.warmup + FLAGS.rounds):
    request = requests[index % len(requests)]
    # Each side goes first in every other round: neither always follows
    # the other's work.
    for kind in kinds[index % 2:] + kinds[:index % 2]:
      call = calls[kind]
      start = time.perf_counter()
      call(request)
      if index >= FLAGS.warmup:
        times[kind].append(time.perf_counter() - start)
  return {kind: percentiles(values) for kind, values in times.items()}


def run_precision(export, bf16, pairs):
  calls = {"ours": Ours(export), "hf": HuggingFace(FLAGS.hf_model, bf16)}
  check = pairs[:8]
  difference = float(np.abs(calls["ours"](check) - calls["hf"](check)).max())
  result = {"max_probability_difference": difference}
  for batch_size in (int(b) for b in FLAGS.batch_sizes):
    result["batch_%d" % batch_size] = measure(calls, pairs, batch_size)
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


def main(_):
  started = datetime.datetime.now(datetime.timezone.utc)
  largest = max(int(b) for b in FLAGS.batch_sizes)
  pairs = bench.squad_questions(FLAGS.squad_data, max(64, 4 * largest))
  results = {"date": started.strftime("%Y-%m-%d %H:%M UTC"),
             "platform": platform.platform(), "cpus": os.cpu_count(),
             "load_average_at_start": list(os.getloadavg()),
             "flags": {name: FLAGS[name].value for name in (
                 "export", "bf16_export", "hf_model", "max_seq_length",
                 "batch_sizes", "rounds", "warmup")}}
  results["fp32"] = run_precision(FLAGS.export, False, pairs)
  if FLAGS.bf16_export:
    results["bf16"] = run_precision(FLAGS.bf16_export, True, pairs)
  results["load_average_at_end"] = list(os.getloadavg())
  path = bench.write_results(FLAGS.out_dir, "serving_latency", started, results)
  print(table(results))
  print("\nWritten to %s" % path)


if __name__ == "__main__":
  app.run(main)
