# coding=utf-8
"""Speed and peak memory of create_pretraining_data.py, both modes.

Runs the script once per (corpus, mode, and for the scalable mode each
--num_workers), one run at a time, each as
`/usr/bin/time -v python create_pretraining_data.py ...` with Google's
uncased vocabulary, max_seq_length 128, 20 predictions and --dupe_factor,
and reports per run:

  instances/s    instances written / wall time of the whole command
  time -v peak   /usr/bin/time's "Maximum resident set size": the largest
                 peak of any ONE process of the tree (the parent, or the
                 worst worker), not their sum
  tree RSS peak  the peak over time of the summed VmRSS of the process and
                 all its descendants, sampled from /proc every 0.2 s (pages
                 shared by forked workers are counted once per process)
  tree PSS peak  the same with each process's proportional set size
                 (/proc/PID/smaps_rollup), which splits shared pages among
                 the processes sharing them: the tree's real footprint

and checks the targets: the scalable mode's instances/s (at its most
workers) at least --min_speedup times the faithful mode's on every corpus,
and its tree PSS peak on the largest corpus within --max_growth of that on
the smallest; and gives the scalable mode's scaling, its instances/s with
each --num_workers over that with the fewest. A run whose tree RSS passes
--max_rss_gb is killed and reported as such. With --cut_mb, each corpus
is cut to its first documents of at most that many megabytes (a temporary
copy), so one command measures a given size from any built corpus.

    python -m tools.build_pretraining_corpus   # bench/out/pretraining_corpus
    python -m bench.pretraining_data --dupe_factor=5
    python -m bench.pretraining_data --cut_mb=20 \
        --corpora=bench/out/pretraining_corpus/corpus_1x.txt

Results: a Markdown table and JSON under bench/out/ (--output_prefix).
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
from absl import logging

import bench
from bench import process_trees
from userio import units

CORPUS_DIR = os.path.join(bench.REPO_ROOT, "bench", "out",
                          "pretraining_corpus")

FLAGS = flags.FLAGS
flags.DEFINE_list(
    "corpora", [os.path.join(CORPUS_DIR, "corpus_1x.txt"),
                os.path.join(CORPUS_DIR, "corpus_4x.txt")],
    "Corpus files, smallest first (python -m "
    "tools.build_pretraining_corpus).")
flags.DEFINE_multi_enum(
    "modes", ["faithful", "scalable"], ["faithful", "scalable", "beam"],
    "Modes to run: beam is the scalable mode on Apache Beam's DirectRunner "
    "(multi_processing, --direct_num_workers).")
flags.DEFINE_list("num_workers", ["1", "2"],
                  "Workers of the scalable and beam runs, one run each.")
flags.DEFINE_float("cut_mb", None,
                   "Cut each corpus to its first documents of at most this "
                   "many MB (default: whole corpora).")
flags.DEFINE_float("shard_size_mb", None,
                   "--shard_size_mb of the scalable mode (default: the "
                   "script's).")
flags.DEFINE_integer(
    "dupe_factor", 5,
    "--dupe_factor of every run (Google's README example uses 5; its "
    "default 10 makes the faithful runs on big corpora long).")
flags.DEFINE_string(
    "vocab_file",
    os.path.join(os.path.dirname(bench.REPO_ROOT), "shared", "assets",
                 "bert_vocab", "uncased", "vocab.txt"),
    "Vocabulary of every run.")
flags.DEFINE_float("max_rss_gb", 20.0,
                   "Kill a run whose tree RSS passes this many GiB.")
flags.DEFINE_float("min_speedup", 1.8,
                   "Target: scalable / faithful instances per second.")
flags.DEFINE_float("max_growth", 0.2,
                   "Target: growth of the scalable mode's tree PSS peak from "
                   "the first corpus to the last.")
flags.DEFINE_string("output_prefix",
                    os.path.join(bench.REPO_ROOT, "bench", "out",
                                 "pretraining_data"),
                    "Results go to PREFIX.json and PREFIX.md.")

_SAMPLE_SECONDS = 0.2


def cut_corpus(corpus, size_bytes, output_path):
  """Writes the first whole documents of `corpus` that fit in `size_bytes`
  to `output_path` (documents end at an empty line, as
  create_pretraining_data.py reads them); returns the bytes written.

  Raises:
    app.UsageError: not even the first document fits.
  """
  written = 0
  document = []
  with open(corpus, "rb") as source, open(output_path, "wb") as target:
    for line in source:
      document.append(line)
      if line.strip():
        continue
      size = sum(len(part) for part in document)
      if written + size > size_bytes:
        break
      target.writelines(document)
      written += size
      document = []
  if not written:
    raise app.UsageError("--cut_mb=%g: the first document of %s is larger."
                         % (size_bytes / 1e6, corpus))
  return written


def _command(corpus, mode, output, num_workers, vocab_file, dupe_factor,
             shard_size_mb):
  """The argv of one run of create_pretraining_data.py under
  /usr/bin/time -v, writing to `output` (see run_once)."""
  command = ["/usr/bin/time", "-v", sys.executable,
             os.path.join(bench.REPO_ROOT, "create_pretraining_data.py"),
             "--input_file=" + corpus, "--output_file=" + output,
             "--vocab_file=" + vocab_file, "--max_seq_length=128",
             "--max_predictions_per_seq=20",
             "--dupe_factor=%d" % dupe_factor,
             "--mode=" + ("faithful" if mode == "faithful" else "scalable")]
  if mode == "scalable":
    command.append("--num_workers=%d" % num_workers)
  elif mode == "beam":
    command += ["--runner=DirectRunner",
                "--direct_num_workers=%d" % num_workers,
                "--direct_running_mode=multi_processing"]
  if mode != "faithful":
    if shard_size_mb:
      command.append("--shard_size_mb=%g" % shard_size_mb)
  return command


def run_once(corpus, mode, output_dir, num_workers, vocab_file, dupe_factor,
             shard_size_mb, max_rss_gb):
  """One timed run; returns its record.

  Args:
    corpus: the input file.
    mode: "faithful", "scalable" or "beam".
    output_dir: where the run writes (its records are removed after a
      successful run).
    num_workers: workers of the scalable and beam modes (None: faithful).
    vocab_file, dupe_factor: the script's flags of that name.
    shard_size_mb: --shard_size_mb of the scalable and beam modes; None:
      the script's default.
    max_rss_gb: the run is killed when its process tree's RSS passes this
      many GiB.
  """
  command = _command(corpus, mode, os.path.join(output_dir, "records"),
                     num_workers, vocab_file, dupe_factor, shard_size_mb)
  logging.info("Running %s", " ".join(command))
  start = time.time()
  with tempfile.TemporaryFile("w+") as log:
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                            cwd=bench.REPO_ROOT,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    sampler = process_trees.TreePeak(proc.pid, _SAMPLE_SECONDS,
                                     max_rss_gb * units.GIB)
    proc.wait()
    sampler.stop()
    seconds = time.time() - start
    log.seek(0)
    text = log.read()
  record = {"corpus": os.path.basename(corpus),
            "corpus_mb": os.path.getsize(corpus) / 1e6, "mode": mode,
            "num_workers": num_workers,
            "seconds": seconds, "tree_rss_peak": sampler.rss,
            "tree_pss_peak": sampler.pss, "command": command[2:]}
  written = re.findall(r"Wrote (\d+) total instances", text)
  time_peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
  if proc.returncode or sampler.killed or not written:
    record["error"] = ("killed: tree RSS passed %g GiB" % max_rss_gb
                       if sampler.killed else text.strip()[-1000:])
    return record
  record["instances"] = int(written[-1])
  record["instances_per_second"] = record["instances"] / seconds
  record["time_v_peak"] = int(time_peak.group(1)) * 1024
  for name in os.listdir(output_dir):
    if name.startswith("records"):
      os.remove(os.path.join(output_dir, name))
  return record


def targets(records, min_speedup, max_growth):
  """Lines checking the speed-up and memory targets, and the scalable
  mode's scaling over its worker counts.

  Args:
    records: run_once's records.
    min_speedup: the target of the scalable mode's instances/s (at its
      most workers) over the faithful mode's, on every corpus.
    max_growth: the target of the scalable mode's tree PSS peak: at most
      this relative change from the first corpus to the last.
  """
  ok = {}
  for r in records:
    if "error" in r:
      continue
    key = (r["corpus"], r["mode"])
    # The scalable mode at its most workers stands for the mode.
    if key not in ok or (r["num_workers"] or 0) > (ok[key]["num_workers"]
                                                   or 0):
      ok[key] = r
  lines = []
  for corpus in dict.fromkeys(r["corpus"] for r in records):
    faithful, scalable = ok.get((corpus, "faithful")), ok.get(
        (corpus, "scalable"))
    if faithful and scalable:
      speedup = (scalable["instances_per_second"] /
                 faithful["instances_per_second"])
      lines.append("%s speed-up %.2fx (target >= %.2fx): %s" % (
          corpus, speedup, min_speedup,
          "met" if speedup >= min_speedup else "NOT met"))
  lines.extend(scaling(records))
  scalable = [ok[(corpus, "scalable")]
              for corpus in dict.fromkeys(r["corpus"] for r in records)
              if (corpus, "scalable") in ok]
  if len(scalable) >= 2:
    first, last = scalable[0], scalable[-1]
    growth = {key: last[key] / first[key] - 1 for key in (
        "tree_pss_peak", "tree_rss_peak", "time_v_peak")}
    lines.append(
        "scalable peaks %s -> %s: tree PSS %+.0f%% (target within %.0f%%: "
        "%s), tree RSS %+.0f%%, time -v %+.0f%%" % (
            first["corpus"], last["corpus"], 100 * growth["tree_pss_peak"],
            100 * max_growth,
            "met" if abs(growth["tree_pss_peak"]) <= max_growth
            else "NOT met", 100 * growth["tree_rss_peak"],
            100 * growth["time_v_peak"]))
  return lines


def scaling(records):
  """Per corpus and worker mode (scalable, beam): instances/s with each
  worker count over that with the fewest workers; and beam's over the
  scalable mode's at the same count."""
  lines = []
  for corpus in dict.fromkeys(r["corpus"] for r in records):
    by_mode = {}
    for mode in ("scalable", "beam"):
      runs = sorted((r for r in records if r["corpus"] == corpus and
                     r["mode"] == mode and "error" not in r),
                    key=lambda r: r["num_workers"])
      by_mode[mode] = {r["num_workers"]: r for r in runs}
      if len(runs) < 2:
        continue
      base = runs[0]
      lines.append("%s %s scaling: %s" % (corpus, mode, ", ".join(
          "%d -> %d processes %.2fx" % (
              base["num_workers"], r["num_workers"],
              r["instances_per_second"] / base["instances_per_second"])
          for r in runs[1:])))
    for count, beam in sorted(by_mode["beam"].items()):
      local = by_mode["scalable"].get(count)
      if local:
        lines.append("%s beam / scalable at %d workers: %.2fx" % (
            corpus, count, beam["instances_per_second"] /
            local["instances_per_second"]))
  return lines


def _mode_label(record):
  if record["mode"] == "scalable":
    return "scalable, num_workers=%d" % record["num_workers"]
  if record["mode"] == "beam":
    return "scalable on DirectRunner, %d workers" % record["num_workers"]
  return record["mode"]


def markdown(records, min_speedup, max_growth):
  """The records as a Markdown table, followed by targets' lines."""
  rows = ["| corpus | MB | mode | instances | seconds | instances/s | "
          "time -v peak (GiB) | tree RSS peak (GiB) | tree PSS peak (GiB) |",
          "|---|---|---|---|---|---|---|---|---|"]
  for r in records:
    if "error" in r:
      rows.append("| %s | %.0f | %s | %s |" % (r["corpus"], r["corpus_mb"],
                                               _mode_label(r),
                                               r["error"][:200]))
      continue
    rows.append("| %s | %.0f | %s | %d | %.0f | %.0f | %.2f | %.2f | %.2f |" %
                (r["corpus"], r["corpus_mb"], _mode_label(r), r["instances"],
                 r["seconds"], r["instances_per_second"],
                 r["time_v_peak"] / units.GIB, r["tree_rss_peak"] / units.GIB,
                 r["tree_pss_peak"] / units.GIB))
  rows += [""] + targets(records, min_speedup, max_growth)
  return "\n".join(rows) + "\n"


def main(argv):
  del argv
  for corpus in FLAGS.corpora:
    if not os.path.exists(corpus):
      raise app.UsageError("%s not found; build it with python -m "
                           "tools.build_pretraining_corpus." % corpus)
  os.makedirs(os.path.dirname(FLAGS.output_prefix), exist_ok=True)
  workers = sorted(int(n) for n in FLAGS.num_workers)
  records = []
  with tempfile.TemporaryDirectory(dir=os.path.dirname(
      FLAGS.output_prefix)) as output_dir:
    for corpus in FLAGS.corpora:
      if FLAGS.cut_mb:
        cut = os.path.join(output_dir, "%gMB_%s" % (
            FLAGS.cut_mb, os.path.basename(corpus)))
        cut_corpus(corpus, FLAGS.cut_mb * 1e6, cut)
        corpus = cut
      for mode in FLAGS.modes:
        for num_workers in (workers if mode != "faithful" else [None]):
          records.append(run_once(
              corpus, mode, output_dir, num_workers,
              vocab_file=FLAGS.vocab_file, dupe_factor=FLAGS.dupe_factor,
              shard_size_mb=FLAGS.shard_size_mb,
              max_rss_gb=FLAGS.max_rss_gb))
          logging.info("%s", json.dumps(records[-1]))
  machine = {"cpus": os.cpu_count(), "load_average": os.getloadavg(),
             "date": time.strftime("%Y-%m-%d %H:%M:%S")}
  with open(FLAGS.output_prefix + ".json", "w") as f:
    json.dump({"machine": machine, "runs": records}, f, indent=2)
  table = markdown(records, FLAGS.min_speedup, FLAGS.max_growth)
  with open(FLAGS.output_prefix + ".md", "w") as f:
    f.write(table)
  print(table)


if __name__ == "__main__":
  app.run(main)
