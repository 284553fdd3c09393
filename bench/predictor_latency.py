# coding=utf-8
"""Latency and throughput of predictor.py against the bare SavedModel call.

    python -m bench.predictor_latency \\
      --mrpc_export=bench/out/mrpc_minilm_export \\
      --squad_export=bench/out/squad_minilm_export

For one MRPC pair and for one SQuAD question, each call timed alone:

  * predictor: `predict(text_a, text_b)` / `predict(question, context)`, raw
    text to answer (tokenization, windows, model, n-best search);
  * bare: the export's serving_default signature
    (`tf.saved_model.load(...).signatures[...]`) called on the same token
    ids, prepared beforehand as tensors, with the same padding (a pair:
    none; a question: its windows as one batch, padded to the longest);
  * session: the same ids through a `tf.compat.v1.Session` callable of the
    SavedModel's graph, the other way to run a TF1 export in Python;
  * text: the export's "text" signature on the raw pair or question, which
    tokenizes and lays it out in the graph (for SQuAD also the windows,
    each padded to max_seq_length, and the answer search).

The rounds cycle through --num_examples examples (MRPC dev pairs; questions
of articles the SQuAD model did not train on), one call of each kind per
round in turn, so that a change of load on the machine hits all three
alike. Latency is reported as p50 and p99 in milliseconds. Throughput is
examples per second of `predict_batch` over batches of --batch_size
examples, and of the bare signature on the same batches (padded to their
longest example).

The exports are MiniLM (../shared/assets) fine-tuned for a few dozen steps:
accuracy does not matter for speed. docs/results.md ("Predictor latency")
has the commands that make them. Writes bench/out/predictor_latency-<date>.json
and prints a markdown table.
"""

import csv
import datetime
import os
import platform
import time

from absl import app
from absl import flags
import numpy as np

from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order
import tensorflow as tf

import bench
from prediction import exported_models
from runner import serving_input

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
ASSETS_DIR = os.path.join(os.path.dirname(bench.REPO_ROOT), "shared", "assets")

FLAGS = flags.FLAGS

flags.DEFINE_string("mrpc_export", os.path.join(BENCH_DIR, "out",
                                                "mrpc_minilm_export"),
                    "Export of a run_classifier.py MRPC model.")
flags.DEFINE_string("squad_export", os.path.join(BENCH_DIR, "out",
                                                 "squad_minilm_export"),
                    "Export of a run_squad.py model; empty: MRPC only.")
flags.DEFINE_string("mrpc_data", os.path.join(ASSETS_DIR, "glue", "MRPC",
                                              "dev.tsv"),
                    "MRPC file whose pairs are predicted.")
flags.DEFINE_string("squad_data", os.path.join(BENCH_DIR, "out",
                                               "squad_split", "eval.json"),
                    "SQuAD file whose questions are answered.")
flags.DEFINE_integer("rounds", 300, "Timed calls of each kind per task.")
flags.DEFINE_integer("warmup", 20, "Untimed calls of each kind first.")
flags.DEFINE_integer("num_examples", 100,
                     "Distinct examples the rounds cycle through.")
flags.DEFINE_integer("batch_size", 32, "Examples per throughput batch.")
flags.DEFINE_integer("batch_rounds", 10, "Timed batches per throughput "
                     "measurement.")
flags.DEFINE_string("out_dir", os.path.join(BENCH_DIR, "out"),
                    "Where predictor_latency-<date>.json goes.")


def mrpc_pairs(path, count):
  """The first `count` (text_a, text_b) pairs of an MRPC file."""
  with open(path, encoding="utf-8-sig", newline="") as f:
    rows = list(csv.reader(f, delimiter="\t", quotechar=None))[1:]
  return [(row[3], row[4]) for row in rows[:count]]


def padded(rows):
  """int32 input_ids, input_mask, segment_ids of (ids, segments) rows,
  padded to the longest."""
  length = max(len(ids) for ids, _ in rows)
  arrays = [np.zeros([len(rows), length], np.int32) for _ in range(3)]
  for i, (ids, segments) in enumerate(rows):
    arrays[0][i, :len(ids)] = ids
    arrays[1][i, :len(ids)] = 1
    arrays[2][i, :len(ids)] = segments
  return arrays


def classifier_rows(model, examples):
  return [model.row(a, b) for a, b in examples]


def squad_rows(model, question, context):
  _, features = model.features(question, context)
  return [(f.input_ids, f.segment_ids) for f in features]


class BareSignature(object):
  """The serving signature, called on prepared tensors."""

  def __init__(self, path):
    self.serve = tf.saved_model.load(path).signatures["serving_default"]

  def prepare(self, arrays):
    return [tf.constant(a) for a in arrays]

  def __call__(self, prepared):
    outputs = self.serve(**dict(zip(serving_input.MODEL_INPUTS, prepared)))
    return {name: value.numpy() for name, value in outputs.items()}


class TextSignature(object):
  """The export's "text" signature, called on raw texts: tokenization,
  layout (and for SQuAD the answer search) in the graph."""

  def __init__(self, path, names):
    """`names`: the signature's inputs, one per column of the examples."""
    self.serve = tf.saved_model.load(path).signatures[
        serving_input.TEXT_SIGNATURE]
    self.names = names

  def prepare(self, examples):
    """The inputs of a list of examples (tuples of texts)."""
    return {name: tf.constant(list(column))
            for name, column in zip(self.names, zip(*examples))}

  def __call__(self, prepared):
    return {name: value.numpy()
            for name, value in self.serve(**prepared).items()}


class SessionCallable(object):
  """The SavedModel's graph in a tf.compat.v1 Session, run by a callable."""

  def __init__(self, path):
    graph = tf.Graph()
    self.session = tf.compat.v1.Session(graph=graph)
    with graph.as_default():
      meta_graph = tf.compat.v1.saved_model.loader.load(
          self.session, [tf.compat.v1.saved_model.SERVING], path)
    signature = meta_graph.signature_def["serving_default"]
    self.names = sorted(signature.outputs)
    self.run = self.session.make_callable(
        [signature.outputs[name].name for name in self.names],
        [signature.inputs[name].name for name in serving_input.MODEL_INPUTS])

  def prepare(self, arrays):
    return arrays

  def __call__(self, prepared):
    return dict(zip(self.names, self.run(*prepared)))


def latency(calls, num_cases, warmup, rounds):
  """{kind: percentiles} of interleaved single calls.

  Args:
    calls: dict kind -> callable(case index), one call of one example.
    num_cases: how many distinct cases the rounds cycle through.
    warmup: untimed rounds first.
    rounds: timed rounds (one call of each kind each).
  """
  times = {kind: [] for kind in calls}
  for round_index in range(warmup + rounds):
    for kind, call in calls.items():
      start = time.perf_counter()
      call(round_index % num_cases)
      if round_index >= warmup:
        times[kind].append(time.perf_counter() - start)
  return {kind: bench.percentiles(values) for kind, values in times.items()}


def throughput(calls, num_batches, batch_size, batch_rounds):
  """{kind: examples/s} of interleaved calls (callable(batch index)) of
  `batch_size` examples, `batch_rounds` timed calls of each kind after 2
  untimed ones."""
  times = {kind: [] for kind in calls}
  for round_index in range(2 + batch_rounds):
    for kind, call in calls.items():
      start = time.perf_counter()
      call(round_index % num_batches)
      if round_index >= 2:
        times[kind].append(time.perf_counter() - start)
  return {kind: batch_size / float(np.median(values))
          for kind, values in times.items()}


def bench_mrpc(export, data, num_examples, batch_size, warmup, rounds,
               batch_rounds):
  """Latency and throughput of the MRPC `export` on the pairs of `data`:
  the rounds cycle through `num_examples` pairs (latency's `warmup` and
  `rounds`; throughput's `batch_size` and `batch_rounds`)."""
  model = exported_models.load(export)
  pairs = mrpc_pairs(data, max(num_examples, 4 * batch_size))
  bare = BareSignature(model.model.path)
  session = SessionCallable(model.model.path)
  text = TextSignature(model.model.path, ["text_a", "text_b"])
  singles = pairs[:num_examples]
  rows = classifier_rows(model, singles)
  bare_in = [bare.prepare(padded([row])) for row in rows]
  session_in = [session.prepare(padded([row])) for row in rows]
  text_in = [text.prepare([pair]) for pair in singles]
  result = {"tokens_per_pair_mean": float(np.mean([len(r[0]) for r in rows])),
            "latency": latency({
                "predictor": lambda i: model.predict(*singles[i]),
                "text": lambda i: text(text_in[i]),
                "bare": lambda i: bare(bare_in[i]),
                "session": lambda i: session(session_in[i])}, len(singles),
                warmup, rounds)}
  groups = bench.batches(pairs, batch_size)
  # The bare call gets each batch sorted by length, as the predictor
  # batches it, padded to its longest pair.
  group_in = [bare.prepare(padded(sorted(classifier_rows(model, group),
                                         key=lambda r: len(r[0]))))
              for group in groups]
  text_groups = [text.prepare(group) for group in groups]
  result["throughput_examples_per_s"] = throughput({
      "predictor": lambda i: model.predict_batch(groups[i]),
      "text": lambda i: text(text_groups[i]),
      "bare": lambda i: bare(group_in[i])}, len(groups), batch_size,
      batch_rounds)
  return result


def bench_squad(export, data, num_examples, batch_size, warmup, rounds,
                batch_rounds):
  """bench_mrpc's measurements of the SQuAD `export` on the questions of
  `data`."""
  model = exported_models.load(export)
  questions = bench.squad_questions(data, max(num_examples, 4 * batch_size))
  bare = BareSignature(model.model.path)
  session = SessionCallable(model.model.path)
  text = TextSignature(model.model.path, ["question", "context"])
  singles = questions[:num_examples]
  rows = [squad_rows(model, q, c) for q, c in singles]
  bare_in = [bare.prepare(padded(r)) for r in rows]
  session_in = [session.prepare(padded(r)) for r in rows]
  text_in = [text.prepare([question]) for question in singles]
  result = {
      "windows_per_question_mean": float(np.mean([len(r) for r in rows])),
      "tokens_per_window_mean": float(np.mean(
          [len(ids) for r in rows for ids, _ in r])),
      "latency": latency({
          "predictor": lambda i: model.predict(*singles[i]),
          "text": lambda i: text(text_in[i]),
          "bare": lambda i: bare(bare_in[i]),
          "session": lambda i: session(session_in[i])}, len(singles),
          warmup, rounds)}
  groups = bench.batches(questions, batch_size)
  text_groups = [text.prepare(group) for group in groups]
  group_in = []
  for group in groups:
    windows = [w for q, c in group for w in squad_rows(model, q, c)]
    windows.sort(key=lambda w: len(w[0]))
    group_in.append([bare.prepare(padded(windows[i:i + batch_size]))
                     for i in range(0, len(windows), batch_size)])
  result["throughput_examples_per_s"] = throughput({
      "predictor": lambda i: model.predict_batch(groups[i]),
      "text": lambda i: text(text_groups[i]),
      "bare": lambda i: [bare(b) for b in group_in[i]]}, len(groups),
      batch_size, batch_rounds)
  return result


def machine():
  return {"platform": platform.platform(), "cpus": os.cpu_count(),
          "python": platform.python_version(),
          "tensorflow": tf.__version__,
          "load_average_1_5_15": list(os.getloadavg())}


def table(results, batch_size):
  """The results as markdown tables (throughput at `batch_size`) and the
  ratios of the latencies."""
  tasks = [task for task in ("mrpc", "squad") if task in results]
  lines = ["| task | kind | p50 ms | p99 ms |", "|---|---|---|---|"]
  for task in tasks:
    for kind, values in results[task]["latency"].items():
      lines.append("| %s | %s | %.2f | %.2f |" % (
          task, kind, values["p50_ms"], values["p99_ms"]))
  lines.append("")
  lines.append("| task | kind | examples/s at batch %d |" % batch_size)
  lines.append("|---|---|---|")
  for task in tasks:
    for kind, value in results[task]["throughput_examples_per_s"].items():
      lines.append("| %s | %s | %.1f |" % (task, kind, value))
  for task in tasks:
    p50 = results[task]["latency"]
    lines.append("\n%s: predictor p50 / bare p50 = %.2f, / session p50 = "
                 "%.2f" % (task, p50["predictor"]["p50_ms"] /
                           p50["bare"]["p50_ms"],
                           p50["predictor"]["p50_ms"] /
                           p50["session"]["p50_ms"]))
  for task in tasks:
    p50 = results[task]["latency"]
    lines.append("%s: text signature p50 / bare p50 = %.2f" % (
        task, p50["text"]["p50_ms"] / p50["bare"]["p50_ms"]))
  return "\n".join(lines)


def main(_):
  started = datetime.datetime.now(datetime.timezone.utc)
  results = {"date": started.strftime("%Y-%m-%d %H:%M UTC"),
             "machine_at_start": machine(),
             "flags": {name: FLAGS[name].value for name in (
                 "mrpc_export", "squad_export", "rounds", "warmup",
                 "num_examples", "batch_size", "batch_rounds")}}
  timing = {name: FLAGS[name].value for name in (
      "num_examples", "batch_size", "warmup", "rounds", "batch_rounds")}
  results["mrpc"] = bench_mrpc(FLAGS.mrpc_export, FLAGS.mrpc_data, **timing)
  if FLAGS.squad_export:
    results["squad"] = bench_squad(FLAGS.squad_export, FLAGS.squad_data,
                                   **timing)
  results["load_average_at_end"] = list(os.getloadavg())
  path = bench.write_results(FLAGS.out_dir, "predictor_latency", started, results)
  print(table(results, FLAGS.batch_size))
  print("\nWritten to %s" % path)


if __name__ == "__main__":
  app.run(main)
