# coding=utf-8
"""Batch prediction of a text corpus: predictor.py on each runner against
transformers' pipeline, in texts per second and the process tree's peak
memory.

Every configuration predicts the same file of --texts lines (the SST-2 dev
sentences, repeated) with the same classifier, at batch size 32, at most
128 tokens, in float32:

  stdout        predictor.py --input=FILE: one process, JSON lines to stdout
                (the baseline)
  local1/2      predictor.py --output_file --runner=local --num_workers=1/2
  direct1/2     predictor.py --output_file --runner=DirectRunner
                --direct_running_mode=multi_processing --direct_num_workers=1/2
  transformers  transformers.pipeline("text-classification", model=HF_DIR,
                device="cpu", batch_size=32) over the same lines, in
                bench/.venv, with the export's weights in Hugging Face's
                layout (convert_checkpoint.py)

Each run is a new process, measured from outside: its wall time (start-up
included: Python, TensorFlow or PyTorch imports, model loads, Beam's start)
and the peak over time of the summed resident sets (and proportional set
sizes) of it and all its descendants, sampled every 0.1 s. The rate
without start-up comes from the command's own clock: predictor.py's last
progress line ("Predicting ...: N lines in 12 s.", whole seconds), which
starts after the model loads for stdout, but before the workers load it
(local) or before Beam starts (direct); the pipeline's call, timed in the
child, for transformers. The configurations run in turn, --rounds times
(A B C ... A B C); the table gives every run's figure and the median.

    python -m bench.batch_prediction --rounds=2
    python -m bench.batch_prediction --configs=stdout,local2 --texts=872

The embedding configurations (--configs=embeddings, or their names) run
extract_features.py --pooling=mean --layers=-1 the same ways over the same
file, with the pretrained MiniLM (--bert_model, Google's layout):

  embed          one process, one .npz (the baseline)
  embed_local1/2 --runner=local --num_workers=1/2, .npz shards
  embed_direct1/2  DirectRunner multi_processing on 1/2 workers
  embed_transformers  AutoModel of the same weights in Hugging Face's
                 layout (--hf_embed_model), batches of 32 padded to their
                 longest, the mean of the last layer over the attention
                 mask as sentence-transformers pools, in bench/.venv

Their own clock is extract_features.py's last progress line ("Writing
features to P.npz: 2616 examples in 40 s.", which starts before the model
is built; "Extracting features: 62.1 kB in 64 s." for the corpus job), and
the vectors of every run are compared with the one-process run's.

    python -m bench.batch_prediction --configs=embeddings --rounds=2

The export and its Hugging Face copy (the defaults) are made by the
commands in docs/results.md ("Batch prediction"). Prints a markdown table
and a planned, not measured Dataflow estimate; writes
<out_dir>/batch_prediction-<date>.json.
"""

import csv
import datetime
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags

import numpy as np

import bench
from bench import process_trees

ASSETS_DIR = os.path.join(os.path.dirname(bench.REPO_ROOT), "shared",
                          "assets")
OUT_DIR = os.path.join(bench.REPO_ROOT, "bench", "out")
BEAM_DIRECT = ["--runner=DirectRunner",
               "--direct_running_mode=multi_processing"]
# The predictor.py flags of each configuration (None: transformers).
CONFIGS = {
    "stdout": [],
    "local1": ["--runner=local", "--num_workers=1"],
    "local2": ["--runner=local", "--num_workers=2"],
    "direct1": BEAM_DIRECT + ["--direct_num_workers=1"],
    "direct2": BEAM_DIRECT + ["--direct_num_workers=2"],
    "transformers": None,
}
# extract_features.py's flags of each embedding configuration (None:
# transformers).
EMBED_CONFIGS = {
    "embed": [],
    "embed_local1": ["--runner=local", "--num_workers=1"],
    "embed_local2": ["--runner=local", "--num_workers=2"],
    "embed_direct1": BEAM_DIRECT + ["--direct_num_workers=1"],
    "embed_direct2": BEAM_DIRECT + ["--direct_num_workers=2"],
    "embed_transformers": None,
}
# --configs's names of groups.
CONFIG_GROUPS = {"predictions": list(CONFIGS),
                 "embeddings": list(EMBED_CONFIGS)}
SAMPLE_SECONDS = 0.1
TIMEOUT_SECONDS = 1800

# predictor.py's last progress line: "Predicting FILE: 3488 lines in 12 s."
# (stdout) or "Predicting: 250.3 kB in 15 s." (--output_file); and
# extract_features.py's: "Writing features to P.npz: 2616 examples in 40 s."
# (one process) or "Extracting features: 62.1 kB in 64 s." (corpus job).
_JOB = r"(?:Predicting|Writing features|Extracting features)"
FINISH_LINE = re.compile(
    r"^(?:\d\d:\d\d:\d\d )?" + _JOB + r"[^:\n]*: [\d.]+ "
    r"(?:lines?|examples?|kB|MB) in (\d+ h \d+ min|\d+ min \d+ s|\d+ s)\.$",
    re.M)
# The corpus job's totals: "Predicting: 11 shards, 250,312 bytes, 3,488
# inputs" (or "Extracting features: ...").
INPUTS_LINE = re.compile(r"^(?:\d\d:\d\d:\d\d )?" + _JOB +
                         r": .*, ([\d,]+) inputs?$", re.M)
_UNIT_SECONDS = {"h": 3600, "min": 60, "s": 1}

FLAGS = flags.FLAGS


def define_flags():
  """The benchmark's flags (from `__main__` only: importing the module
  defines none, so tests and other benchmarks can import it)."""
  flags.DEFINE_string(
      "export_dir", os.path.join(OUT_DIR, "sst2_minilm_export"),
      "run_classifier.py's --export_dir of an SST-2 model.")
  flags.DEFINE_string("hf_model", os.path.join(OUT_DIR, "sst2_minilm_hf"),
                      "The same model in Hugging Face's layout "
                      "(convert_checkpoint.py of its --output_dir).")
  flags.DEFINE_string("bert_model", os.path.join(
      ASSETS_DIR, "models", "minilm-l6-h384-uncased"),
                      "Google-layout model folder of the embedding runs "
                      "(bert_config.json, vocab.txt, bert_model.ckpt).")
  flags.DEFINE_string("hf_embed_model", os.path.join(
      ASSETS_DIR, "models", "all-minilm-l6-v2-hf"),
                      "The same weights in Hugging Face's layout "
                      "(embed_transformers).")
  flags.DEFINE_string("data", os.path.join(ASSETS_DIR, "glue", "SST-2",
                                           "dev.tsv"),
                      "SST-2 file whose sentences are predicted.")
  flags.DEFINE_integer("texts", 2616, "Lines of the corpus (the sentences "
                       "repeated in order).", lower_bound=1)
  flags.DEFINE_list("configs", list(CONFIGS),
                    "Configurations, in the order each round runs them: %s; "
                    "or a group's name (%s)." % (
                        ", ".join(list(CONFIGS) + list(EMBED_CONFIGS)),
                        ", ".join(CONFIG_GROUPS)))
  flags.DEFINE_integer("rounds", 2, "Runs of every configuration.",
                       lower_bound=1)
  flags.DEFINE_integer("batch_size", 32, "Texts per model call, everywhere.",
                       lower_bound=1)
  flags.DEFINE_integer("max_seq_length", 128,
                       "transformers' truncation (the export's is fixed at "
                       "export time).", lower_bound=1)
  flags.DEFINE_integer("batches_per_shard", 10,
                       "predictor.py's --batches_per_shard (--output_file).",
                       lower_bound=1)
  flags.DEFINE_string("repo", bench.REPO_ROOT,
                      "The checkout whose predictor.py runs (e.g. a `git "
                      "worktree` of a commit), with this interpreter.")
  flags.DEFINE_string("peer_python",
                      os.path.join(bench.REPO_ROOT, "bench", ".venv", "bin",
                                   "python"),
                      "Python of bench/.venv (transformers, torch).")
  flags.DEFINE_string("out_dir", OUT_DIR, "Where the JSON and the runs' "
                      "files (batch_prediction/) go.")
  flags.DEFINE_float("vcpu_hour_usd", 0.056, "Assumed Dataflow batch price "
                     "per vCPU-hour (check Google Cloud's Dataflow pricing).")
  flags.DEFINE_float("gb_hour_usd", 0.003557, "Assumed Dataflow batch price "
                     "per GB-hour of worker memory.")
  flags.DEFINE_integer("worker_vcpus", 4, "vCPUs of a Dataflow worker "
                       "(n2-standard-4).", lower_bound=1)
  flags.DEFINE_float("worker_gb", 16.0, "Memory of a Dataflow worker (GB).")
  flags.DEFINE_integer("dataflow_workers", 10, "Workers of the estimate.",
                       lower_bound=1)
  flags.DEFINE_integer("estimate_texts", 10_000_000,
                       "Texts of the estimate.", lower_bound=1)
  flags.DEFINE_string("hf_child", None, "Internal: run transformers' "
                      "pipeline over this file and print a JSON line.")
  flags.DEFINE_string("hf_labels", None, "Internal: where the child writes "
                      "its labels, one a line.")
  flags.DEFINE_string("st_child", None, "Internal: embed this file with "
                      "transformers' AutoModel and print a JSON line.")
  flags.DEFINE_string("st_vectors", None, "Internal: the child's .npy.")


# ---------------------------------------------------------------------------
# The corpus and the commands.
# ---------------------------------------------------------------------------


def sst2_sentences(path):
  """The sentences of an SST-2 file (header `sentence<TAB>label`)."""
  with open(path, encoding="utf-8", newline="") as f:
    rows = list(csv.reader(f, delimiter="\t", quotechar=None))[1:]
  return [row[0].strip() for row in rows]


def write_corpus(sentences, count, path):
  """Writes `count` lines to `path`: `sentences` in order, repeated."""
  lines = [sentences[i % len(sentences)] for i in range(count)]
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join(line + "\n" for line in lines))


def predictor_command(config, export_dir, input_path, output_prefix,
                      batch_size, batches_per_shard):
  """predictor.py's argv (from its checkout's root) for `config`."""
  command = [sys.executable, "predictor.py", "--export_dir=" + export_dir,
             "--input=" + input_path, "--input_format=text",
             "--batch_size=%d" % batch_size]
  if config != "stdout":
    command += ["--output_file=" + output_prefix,
                "--batches_per_shard=%d" % batches_per_shard]
  return command + CONFIGS[config]


def embed_command(config, model_dir, input_path, output_path, settings):
  """extract_features.py's argv (from its checkout's root) for the
  embedding `config`; `settings` as measure's (batch_size, max_seq_length,
  batches_per_shard)."""
  command = [sys.executable, "extract_features.py",
             "--input_file=" + input_path, "--output_file=" + output_path,
             "--pooling=mean", "--layers=-1",
             "--init_checkpoint=" + os.path.join(model_dir, "bert_model.ckpt"),
             "--vocab_file=" + os.path.join(model_dir, "vocab.txt"),
             "--bert_config_file=" + os.path.join(model_dir,
                                                  "bert_config.json"),
             "--do_lower_case=True",
             "--max_seq_length=%d" % settings["max_seq_length"],
             "--batch_size=%d" % settings["batch_size"]]
  if config != "embed":
    command.append("--batches_per_shard=%d" % settings["batches_per_shard"])
  return command + EMBED_CONFIGS[config]


def st_command(peer_python, hf_model, input_path, vectors_path, batch_size,
               max_seq_length):
  """The argv of the transformers embedding child (bench/.venv)."""
  return bench.child_command("batch_prediction", [
      "--st_child=" + input_path, "--st_vectors=" + vectors_path,
      "--hf_embed_model=" + hf_model, "--batch_size=%d" % batch_size,
      "--max_seq_length=%d" % max_seq_length], python=peer_python)


def hf_command(peer_python, hf_model, input_path, labels_path, batch_size,
               max_seq_length):
  """The argv of the transformers child (this module in bench/.venv)."""
  return bench.child_command("batch_prediction", [
      "--hf_child=" + input_path, "--hf_labels=" + labels_path,
      "--hf_model=" + hf_model, "--batch_size=%d" % batch_size,
      "--max_seq_length=%d" % max_seq_length], python=peer_python)


def run_measured(command, cwd, stdout_path, log_path,
                 timeout=TIMEOUT_SECONDS):
  """Runs `command` in `cwd`, stdout into `stdout_path`, stderr into
  `log_path`.

  Returns:
    {"wall_s", "peak_rss_gib", "peak_pss_gib", "log"} (the log's text).

  Raises:
    SystemExit, one line, when the command fails or outlasts `timeout`.
  """
  start = time.monotonic()
  with open(stdout_path, "w") as out, open(log_path, "w") as log:
    child = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=log)
    peak = process_trees.TreePeak(child.pid, SAMPLE_SECONDS)
    try:
      child.wait(timeout)
    except subprocess.TimeoutExpired:
      for pid in process_trees.process_tree(child.pid):
        os.kill(pid, 9)
      child.wait()
    finally:
      peak.stop()
  wall = time.monotonic() - start
  with open(log_path) as f:
    text = f.read()
  if child.returncode:
    lines = text.strip().splitlines() or ["(no output)"]
    raise SystemExit("bench.batch_prediction: %s ended %d: %s" % (
        " ".join(command[:4]), child.returncode, lines[-1]))
  return {"wall_s": wall, "peak_rss_gib": peak.rss / 2**30,
          "peak_pss_gib": peak.pss / 2**30, "log": text}


# ---------------------------------------------------------------------------
# What a run printed.
# ---------------------------------------------------------------------------


def parse_seconds(text):
  """Seconds of "42 s", "3 min 05 s" or "2 h 10 min" (userio/progress's
  format_seconds)."""
  parts = text.split()
  return sum(int(value) * _UNIT_SECONDS[unit]
             for value, unit in zip(parts[::2], parts[1::2]))


def predictor_clock(log):
  """{"clock_s": the seconds of predictor.py's last progress line, "inputs":
  the corpus job's count of inputs (None without --output_file)}.

  Raises:
    ValueError: the log has no such progress line.
  """
  finish = FINISH_LINE.findall(log)
  if not finish:
    raise ValueError("no final progress line in the log")
  inputs = INPUTS_LINE.findall(log)
  return {"clock_s": parse_seconds(finish[-1]),
          "inputs": int(inputs[-1].replace(",", "")) if inputs else None}


def output_labels(paths):
  """The "label" of every JSON line of `paths`, in order."""
  labels = []
  for path in paths:
    with open(path, encoding="utf-8") as f:
      labels += [json.loads(line)["label"] for line in f if line.strip()]
  return labels


def shard_files(output_prefix, extension=".jsonl"):
  """The --output_file shards of `output_prefix`, in order."""
  return sorted(glob.glob(output_prefix + "-*-of-*" + extension))


def npz_vectors(paths):
  """(ids, embeddings) of extract_features.py's .npz files put end to
  end."""
  ids, vectors = [], []
  for path in paths:
    with np.load(path) as data:
      ids.append(data["ids"])
      vectors.append(data["embeddings"])
  return np.concatenate(ids), np.concatenate(vectors)


def vector_agreement(vectors, reference):
  """How `vectors` ([n, d]) compare with `reference`'s, row by row.

  Returns:
    {"rows", "bit_equal_rows", "max_abs_diff", "min_cosine"}.
  """
  vectors = np.asarray(vectors, np.float64)
  reference = np.asarray(reference, np.float64)
  if vectors.shape != reference.shape:
    raise ValueError("shapes %s and %s" % (vectors.shape, reference.shape))
  cosine = (vectors * reference).sum(1) / (
      np.linalg.norm(vectors, axis=1) * np.linalg.norm(reference, axis=1))
  return {"rows": len(vectors),
          "bit_equal_rows": int((vectors == reference).all(1).sum()),
          "max_abs_diff": float(np.abs(vectors - reference).max()),
          "min_cosine": float(cosine.min())}


def _measure_transformers(corpus, work_dir, settings):
  """run_measured's dict of the transformers child, with its clock and
  labels."""
  labels_path = os.path.join(work_dir, "transformers.labels")
  stdout_path = os.path.join(work_dir, "transformers.stdout")
  run = run_measured(hf_command(
      settings["peer_python"], settings["hf_model"], corpus, labels_path,
      settings["batch_size"], settings["max_seq_length"]), bench.REPO_ROOT,
                     stdout_path, os.path.join(work_dir, "transformers.log"))
  with open(stdout_path) as f:
    run["clock_s"] = json.loads(f.read().strip().splitlines()[-1])[
        "predict_s"]
  with open(labels_path, encoding="utf-8") as f:
    run["labels"] = f.read().splitlines()
  return run


def _measure_predictor(config, corpus, work_dir, settings):
  """run_measured's dict of predictor.py in `config`, with its clock, its
  count of inputs and its labels."""
  stdout_path = os.path.join(work_dir, config + ".stdout")
  prefix = os.path.join(work_dir, config, "predictions")
  os.makedirs(os.path.dirname(prefix), exist_ok=True)
  for path in shard_files(prefix):
    os.remove(path)
  run = run_measured(predictor_command(
      config, settings["export_dir"], corpus, prefix, settings["batch_size"],
      settings["batches_per_shard"]), settings["repo"], stdout_path,
                     os.path.join(work_dir, config + ".log"))
  run.update(predictor_clock(run["log"]))
  run["labels"] = output_labels(
      [stdout_path] if config == "stdout" else shard_files(prefix))
  return run


def _measure_st(corpus, work_dir, settings):
  """run_measured's dict of the transformers embedding child, with its
  clock and vectors."""
  vectors_path = os.path.join(work_dir, "embed_transformers.npy")
  stdout_path = os.path.join(work_dir, "embed_transformers.stdout")
  run = run_measured(st_command(
      settings["peer_python"], settings["hf_embed_model"], corpus,
      vectors_path, settings["batch_size"], settings["max_seq_length"]),
                     bench.REPO_ROOT, stdout_path,
                     os.path.join(work_dir, "embed_transformers.log"))
  with open(stdout_path) as f:
    run["clock_s"] = json.loads(f.read().strip().splitlines()[-1])[
        "predict_s"]
  run["vectors"] = np.load(vectors_path)
  return run


def _measure_embedding(config, corpus, work_dir, settings):
  """run_measured's dict of extract_features.py in `config`, with its clock,
  its count of inputs and its vectors in line order."""
  folder = os.path.join(work_dir, config)
  os.makedirs(folder, exist_ok=True)
  for name in os.listdir(folder):
    os.remove(os.path.join(folder, name))
  output = os.path.join(folder, "vectors.npz")
  run = run_measured(
      embed_command(config, settings["bert_model"], corpus, output, settings),
      settings["repo"], os.path.join(work_dir, config + ".stdout"),
      os.path.join(work_dir, config + ".log"))
  run.update(predictor_clock(run["log"]))
  ids, run["vectors"] = npz_vectors(
      [output] if config == "embed" else
      shard_files(os.path.join(folder, "vectors"), ".npz"))
  if not np.array_equal(ids, np.arange(len(ids))):
    raise SystemExit("bench.batch_prediction: %s wrote ids out of order."
                     % config)
  return run


def measure(config, texts, corpus, work_dir, settings):
  """One run of `config` over `corpus` (`texts` lines).

  Args:
    settings: dict of export_dir, hf_model, peer_python, repo, batch_size,
      max_seq_length, batches_per_shard (and bert_model, hf_embed_model for
      the embedding configurations).

  Returns:
    {"wall_s", "peak_rss_gib", "peak_pss_gib", "clock_s", "labels" or
    "vectors"}: the clock is the command's own (module docstring); labels
    are the predictions in input order, vectors an [texts, d] array.

  Raises:
    SystemExit: the run failed or did not predict every line once.
  """
  if config == "transformers":
    run = _measure_transformers(corpus, work_dir, settings)
  elif config == "embed_transformers":
    run = _measure_st(corpus, work_dir, settings)
  elif config in EMBED_CONFIGS:
    run = _measure_embedding(config, corpus, work_dir, settings)
  else:
    run = _measure_predictor(config, corpus, work_dir, settings)
  counted = run.pop("inputs", None)
  written = len(run["labels"] if "labels" in run else run["vectors"])
  if counted not in (None, texts) or written != texts:
    raise SystemExit("bench.batch_prediction: %s counted %s inputs and "
                     "wrote %d outputs for %d lines." % (
                         config, counted, written, texts))
  del run["log"]
  return run


# ---------------------------------------------------------------------------
# Figures.
# ---------------------------------------------------------------------------


def rates(run, texts):
  """(texts/s over the whole command, texts/s on the command's own clock;
  None when that clock reads 0 s)."""
  return (texts / run["wall_s"],
          texts / run["clock_s"] if run["clock_s"] else None)


def summarize(runs, texts):
  """A configuration's figures from its runs (each measure's dict).

  Returns:
    {"whole": [texts/s per run], "clock": [...], "whole_median",
     "clock_median" (None if any clock read 0 s), "wall_median_s",
     "rss_median_gib", "pss_median_gib"}.
  """
  whole, clock = zip(*(rates(run, texts) for run in runs))
  return {"whole": list(whole), "clock": list(clock),
          "whole_median": statistics.median(whole),
          "clock_median": (None if None in clock
                           else statistics.median(clock)),
          "wall_median_s": statistics.median(r["wall_s"] for r in runs),
          "rss_median_gib": statistics.median(r["peak_rss_gib"]
                                              for r in runs),
          "pss_median_gib": statistics.median(r["peak_pss_gib"]
                                              for r in runs)}


def agreement(labels, reference):
  """How many of `labels` equal `reference`'s, position by position."""
  return sum(a == b for a, b in zip(labels, reference))


TABLE_HEAD = ("| configuration | texts/s, whole command (runs; median) | "
              "texts/s, own clock (runs; median) | wall s (median) | "
              "peak tree RSS GiB | peak tree PSS GiB |\n"
              "|---|---:|---:|---:|---:|---:|")


def _figures(values):
  return "%s; **%.0f**" % (", ".join("%.0f" % v for v in values),
                           statistics.median(values))


def table_row(config, summary):
  clock = ("-" if summary["clock_median"] is None
           else _figures(summary["clock"]))
  return "| %s | %s | %s | %.1f | %.2f | %.2f |" % (
      config, _figures(summary["whole"]), clock, summary["wall_median_s"],
      summary["rss_median_gib"], summary["pss_median_gib"])


def dataflow_estimate(texts_per_core_s, plan):
  """A planned (not measured) Dataflow run at `texts_per_core_s` per vCPU.

  Args:
    plan: dict of "texts", "workers" (machines), "worker_vcpus",
      "worker_gb" (each machine's), "vcpu_hour_usd", "gb_hour_usd" (the
      assumed prices); the machines are billed for the work's time only
      (start-up and shutdown not included).

  Returns:
    {"vcpu_hours", "gb_hours", "hours" (on the workers), "usd"}.
  """
  vcpu_hours = plan["texts"] / texts_per_core_s / 3600.0
  gb_hours = vcpu_hours * plan["worker_gb"] / plan["worker_vcpus"]
  return {"vcpu_hours": vcpu_hours, "gb_hours": gb_hours,
          "hours": vcpu_hours / (plan["workers"] * plan["worker_vcpus"]),
          "usd": (vcpu_hours * plan["vcpu_hour_usd"] +
                  gb_hours * plan["gb_hour_usd"])}


# ---------------------------------------------------------------------------
# The transformers child (bench/.venv).
# ---------------------------------------------------------------------------


def st_child(model_dir, input_path, vectors_path, batch_size,
             max_seq_length):
  """Embeds the lines of `input_path` as sentence-transformers'
  all-MiniLM-L6-v2 does without its normalization: AutoModel's last layer,
  averaged over the attention mask, batches of `batch_size` in order, each
  padded to its longest. Saves the float32 [n, d] array to `vectors_path`
  and prints a JSON line of the load's and the embedding's seconds."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  with open(input_path, encoding="utf-8") as f:
    texts = f.read().splitlines()
  start = time.perf_counter()
  tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
  model = transformers.AutoModel.from_pretrained(model_dir).eval()
  loaded = time.perf_counter()
  vectors = []
  with torch.inference_mode():
    for first in range(0, len(texts), batch_size):
      batch = tokenizer(texts[first:first + batch_size], padding=True,
                        truncation=True, max_length=max_seq_length,
                        return_tensors="pt")
      hidden = model(**batch).last_hidden_state
      mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
      vectors.append(((hidden * mask).sum(1) /
                      mask.sum(1).clamp(min=1e-9)).numpy())
  done = time.perf_counter()
  np.save(vectors_path, np.concatenate(vectors).astype(np.float32))
  print(json.dumps({"texts": len(texts), "load_s": loaded - start,
                    "predict_s": done - loaded}))


def hf_child(model_dir, input_path, labels_path, batch_size, max_seq_length):
  """Predicts the lines of `input_path` with transformers' pipeline; writes
  the labels to `labels_path` and prints a JSON line of the seconds the
  load and the prediction took."""
  import transformers  # pylint: disable=g-import-not-at-top
  with open(input_path, encoding="utf-8") as f:
    texts = f.read().splitlines()
  start = time.perf_counter()
  pipe = transformers.pipeline("text-classification", model=model_dir,
                               device="cpu", batch_size=batch_size)
  loaded = time.perf_counter()
  results = pipe(texts, truncation=True, max_length=max_seq_length)
  done = time.perf_counter()
  with open(labels_path, "w", encoding="utf-8") as f:
    f.write("".join(r["label"] + "\n" for r in results))
  print(json.dumps({"texts": len(results), "load_s": loaded - start,
                    "predict_s": done - loaded}))


# ---------------------------------------------------------------------------
# Main.
# ---------------------------------------------------------------------------


def cpu_model():
  """The "model name" of /proc/cpuinfo."""
  with open("/proc/cpuinfo") as f:
    match = re.search(r"^model name\s*:\s*(.*)$", f.read(), re.M)
  return match.group(1) if match else "unknown"


def expand_configs(configs):
  """--configs's names with each group's name replaced by its members.

  Raises:
    app.UsageError: an unknown name, or none.
  """
  known = dict(CONFIGS, **EMBED_CONFIGS)
  expanded = []
  for name in configs:
    expanded += CONFIG_GROUPS.get(name, [name])
  if not expanded or set(expanded) - set(known):
    raise app.UsageError("--configs=%s: give a comma list of %s, or %s" % (
        ",".join(configs), ", ".join(known), " or ".join(CONFIG_GROUPS)))
  return expanded


def planned_dataflow(summaries, cores, plan):
  """(a line, the estimate) of dataflow_estimate at the best own-clock rate
  of predictor.py (`summaries` by configuration) over `cores` cores;
  (None, None) when no clock gave a rate."""
  measured = {c: s["clock_median"] for c, s in summaries.items()
              if c in CONFIGS and c != "transformers" and s["clock_median"]}
  if not measured:
    return None, None
  best = max(measured, key=measured.get)
  per_core = measured[best] / cores
  estimate = dataflow_estimate(per_core, plan)
  line = ("Planned, not measured: %d texts at %.0f texts/s per vCPU (%s's "
          "own-clock median over %d cores): %.1f vCPU-hours, %.0f GB-hours, "
          "%.1f h on %d workers of %d vCPUs, about $%.2f at the assumed "
          "$%g per vCPU-hour and $%g per GB-hour." % (
              plan["texts"], per_core, best, cores, estimate["vcpu_hours"],
              estimate["gb_hours"], estimate["hours"], plan["workers"],
              plan["worker_vcpus"], estimate["usd"], plan["vcpu_hour_usd"],
              plan["gb_hour_usd"]))
  return line, dict(estimate, texts_per_vcpu_s=per_core, from_config=best)


def run_rounds(configs, rounds, texts, corpus, work_dir, settings):
  """`rounds` runs of each of `configs` in turn (measure's arguments).

  Returns:
    ({config: [measure's dicts without labels or vectors]}, {config: the
    last run's labels or vectors}).
  """
  runs = {config: [] for config in configs}
  labels = {}
  for round_index in range(rounds):
    for config in configs:
      run = measure(config, texts, corpus, work_dir, settings)
      labels[config] = run.pop("labels" if "labels" in run else "vectors")
      runs[config].append(run)
      print("round %d %s: %.1f s, clock %.1f s, peak RSS %.2f GiB" % (
          round_index + 1, config, run["wall_s"], run["clock_s"],
          run["peak_rss_gib"]), file=sys.stderr, flush=True)
  return runs, labels


def main(argv):
  if FLAGS.hf_child:
    hf_child(FLAGS.hf_model, FLAGS.hf_child, FLAGS.hf_labels,
             FLAGS.batch_size, FLAGS.max_seq_length)
    return
  if FLAGS.st_child:
    st_child(FLAGS.hf_embed_model, FLAGS.st_child, FLAGS.st_vectors,
             FLAGS.batch_size, FLAGS.max_seq_length)
    return
  configs = expand_configs(FLAGS.configs)
  started = datetime.datetime.now(datetime.timezone.utc)
  load_at_start = list(os.getloadavg())
  work_dir = os.path.join(os.path.abspath(FLAGS.out_dir), "batch_prediction")
  os.makedirs(work_dir, exist_ok=True)
  corpus = os.path.join(work_dir, "sst2_dev_x.txt")
  write_corpus(sst2_sentences(FLAGS.data), FLAGS.texts, corpus)
  settings = {name: FLAGS[name].value for name in (
      "export_dir", "hf_model", "peer_python", "repo", "batch_size",
      "max_seq_length", "batches_per_shard", "bert_model",
      "hf_embed_model")}
  runs, labels = run_rounds(configs, FLAGS.rounds, FLAGS.texts,
                            corpus, work_dir, settings)
  summaries = {c: summarize(r, FLAGS.texts) for c, r in runs.items()}
  print(TABLE_HEAD)
  for config, summary in summaries.items():
    print(table_row(config, summary))
  agreeing = {}
  if "stdout" in labels:
    agreeing = {c: agreement(l, labels["stdout"]) for c, l in labels.items()
                if c in CONFIGS}
    print("\nLabels equal to stdout's: " + ", ".join(
        "%s %d/%d" % (c, n, FLAGS.texts) for c, n in agreeing.items()))
  vectors = {}
  if "embed" in labels:
    vectors = {c: vector_agreement(v, labels["embed"])
               for c, v in labels.items() if c in EMBED_CONFIGS}
    print("\nVectors against embed's: " + "; ".join(
        "%s %d/%d bit-equal, max abs diff %.3g, min cosine %.7f" % (
            c, a["bit_equal_rows"], a["rows"], a["max_abs_diff"],
            a["min_cosine"]) for c, a in vectors.items()))
  plan = {"texts": FLAGS.estimate_texts, "workers": FLAGS.dataflow_workers,
          "worker_vcpus": FLAGS.worker_vcpus, "worker_gb": FLAGS.worker_gb,
          "vcpu_hour_usd": FLAGS.vcpu_hour_usd,
          "gb_hour_usd": FLAGS.gb_hour_usd}
  line, estimate = planned_dataflow(summaries, len(os.sched_getaffinity(0)),
                                    plan)
  print(line or "No own-clock rate: no Dataflow estimate.")
  results = {"date": started.strftime("%Y-%m-%d %H:%M UTC"),
             "command": bench.typed_command("batch_prediction", argv[1:]),
             "settings": settings, "texts": FLAGS.texts,
             "cpu": cpu_model(), "cores": len(os.sched_getaffinity(0)),
             "load_average_at_start": load_at_start,
             "load_average_at_end": list(os.getloadavg()),
             "runs": runs, "summaries": summaries,
             "labels_equal_to_stdout": agreeing,
             "vectors_against_embed": vectors, "dataflow_plan": plan,
             "dataflow_estimate": estimate}
  path = bench.write_results(FLAGS.out_dir, "batch_prediction", started,
                             results)
  print("\nWritten to %s" % path)


if __name__ == "__main__":
  define_flags()
  app.run(main)
