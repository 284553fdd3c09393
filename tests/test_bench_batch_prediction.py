"""bench/batch_prediction.py's corpus, commands, log reading, process-tree
memory and arithmetic, on tiny inputs; no model runs and nothing is timed
against a bound."""

import json
import os
import subprocess
import sys
import time

import pytest

from bench import batch_prediction
from bench import process_trees

# Lines as predictor.py logs them: the one-process command, then the corpus
# job (its progress line, its totals, the file names).
STDOUT_LOG = """\
08:49:12 Predicting with bench/out/sst2_minilm_export/1795942132 (task sst-2).
08:49:40 Predicting /tmp/bp/t.txt: 2616 lines in 1 min 05 s.
"""
CORPUS_LOG = """\
08:49:20 Predicting with /x/1 (task sst-2): 9 shards on 2 local workers.
08:49:50 Predicting: 31.0/62.1 kB (49.9%), 1.0 kB/s, 1,308 inputs/s, 30 s left
08:50:24 Predicting: 62.1 kB in 64 s.
08:50:24 Predicting: 9 shards, 62,123 bytes, 2,616 inputs
08:50:24 Wrote 2616 predictions in 9 shards: /tmp/o/p-*-of-00009.jsonl
"""

def test_corpus_repeats_the_sentences_in_order(tmp_path):
  tsv = tmp_path / "dev.tsv"
  tsv.write_text("sentence\tlabel\nit 's fine . \t1\nbleak \t0\n"
                 "a \"quoted\" one\t1\n", encoding="utf-8")
  sentences = batch_prediction.sst2_sentences(str(tsv))
  assert sentences == ["it 's fine .", "bleak", "a \"quoted\" one"]
  corpus = tmp_path / "corpus.txt"
  batch_prediction.write_corpus(sentences, 7, str(corpus))
  assert corpus.read_text(encoding="utf-8").splitlines() == (
      sentences * 3)[:7]


def test_commands_of_each_configuration():
  commands = {config: batch_prediction.predictor_command(
      config, "/e", "/in.txt", "/o/p", 32, 10)
              for config in batch_prediction.CONFIGS if config !=
              "transformers"}
  assert commands["stdout"][1:] == [
      "predictor.py", "--export_dir=/e", "--input=/in.txt",
      "--input_format=text", "--batch_size=32"]
  for config in ("local1", "local2", "direct1", "direct2"):
    assert commands[config][:len(commands["stdout"])] == commands["stdout"]
    assert "--output_file=/o/p" in commands[config]
    assert "--batches_per_shard=10" in commands[config]
  assert "--num_workers=2" in commands["local2"]
  assert commands["direct1"][-3:] == [
      "--runner=DirectRunner", "--direct_running_mode=multi_processing",
      "--direct_num_workers=1"]
  child = batch_prediction.hf_command("/venv/python", "/hf", "/in.txt",
                                      "/labels", 32, 128)
  assert child[:3] == ["/venv/python", "-m", "bench.batch_prediction"]
  assert "--hf_child=/in.txt" in child and "--max_seq_length=128" in child


def test_logs_give_the_commands_own_clock_and_count():
  assert batch_prediction.predictor_clock(STDOUT_LOG) == {
      "clock_s": 65, "inputs": None}
  assert batch_prediction.predictor_clock(CORPUS_LOG) == {
      "clock_s": 64, "inputs": 2616}
  with pytest.raises(ValueError):
    # The progress line before the end is no final line.
    batch_prediction.predictor_clock(CORPUS_LOG.splitlines()[1])
  assert batch_prediction.parse_seconds("2 h 10 min") == 7800


def test_labels_of_the_shards_in_order(tmp_path):
  prefix = str(tmp_path / "p")
  for index, labels in ((1, ["0"]), (0, ["1", "1"])):
    with open("%s-%05d-of-00002.jsonl" % (prefix, index), "w") as f:
      f.writelines(json.dumps({"file": "a", "line": 1, "label": label}) +
                   "\n" for label in labels)
  paths = batch_prediction.shard_files(prefix)
  assert [os.path.basename(p) for p in paths] == [
      "p-00000-of-00002.jsonl", "p-00001-of-00002.jsonl"]
  assert batch_prediction.output_labels(paths) == ["1", "1", "0"]
  assert batch_prediction.agreement(["1", "0", "0"], ["1", "1", "0"]) == 2


def _run(wall, clock, rss):
  return {"wall_s": wall, "clock_s": clock, "peak_rss_gib": rss,
          "peak_pss_gib": rss / 2}


def test_rates_are_the_texts_over_each_clock():
  runs = [_run(40.0, 20, 1.0), _run(50.0, 25, 1.2), _run(30.0, 16, 0.8)]
  summary = batch_prediction.summarize(runs, texts=2000)
  assert summary["whole"] == [50.0, 40.0, pytest.approx(66.667, 1e-4)]
  assert summary["clock"] == [100.0, 80.0, 125.0]
  assert summary["whole_median"] == 50.0
  assert summary["clock_median"] == 100.0
  assert summary["wall_median_s"] == 40.0
  assert summary["rss_median_gib"] == 1.0
  assert summary["pss_median_gib"] == 0.5
  # A clock that read "0 s" has no rate.
  zero = batch_prediction.summarize([_run(9.0, 0, 1.0)], texts=100)
  assert zero["clock"] == [None] and zero["clock_median"] is None
  row = batch_prediction.table_row("local2", summary)
  assert row.startswith("| local2 | 50, 40, 67; **50** | 100, 80, 125; "
                        "**100** | 40.0 | 1.00 | 0.50 |")
  head = batch_prediction.TABLE_HEAD.splitlines()[0]
  assert row.count("|") == head.count("|")


PLAN = {"texts": 10_000_000, "workers": 10, "worker_vcpus": 4,
        "worker_gb": 16.0, "vcpu_hour_usd": 0.05, "gb_hour_usd": 0.004}


def test_dataflow_estimate_arithmetic():
  # 10 million texts at 100 texts/s per vCPU: 100,000 vCPU-seconds.
  estimate = batch_prediction.dataflow_estimate(100.0, PLAN)
  assert estimate["vcpu_hours"] == pytest.approx(27.778, 1e-4)
  assert estimate["gb_hours"] == pytest.approx(4 * 27.778, 1e-4)
  assert estimate["hours"] == pytest.approx(27.778 / 40, 1e-4)
  assert estimate["usd"] == pytest.approx(27.778 * (0.05 + 4 * 0.004), 1e-4)


def test_the_plan_takes_predictor_py_s_best_own_clock_rate_per_core():
  """transformers' faster clock is not ours to plan with; a configuration
  whose clock read 0 s has no rate."""
  summaries = {"stdout": {"clock_median": 200.0},
               "local2": {"clock_median": 150.0},
               "direct1": {"clock_median": None},
               "transformers": {"clock_median": 500.0}}
  line, estimate = batch_prediction.planned_dataflow(summaries, 2, PLAN)
  assert estimate["from_config"] == "stdout"
  assert estimate["texts_per_vcpu_s"] == 100.0
  assert estimate["vcpu_hours"] == pytest.approx(27.778, 1e-4)
  assert line.startswith("Planned, not measured: 10000000 texts at 100 "
                         "texts/s per vCPU (stdout's")
  assert batch_prediction.planned_dataflow(
      {"transformers": {"clock_median": 500.0}}, 2, PLAN) == (None, None)


# Holds 128 MiB written page by page; started with an argument, first
# starts itself again (a child); then writes "ready" to the file named by
# the environment and sleeps until killed.
_HOLD = """\
import os, subprocess, sys, time
block = bytearray(128 * 2**20)
for i in range(0, len(block), 4096):
  block[i] = 1
if len(sys.argv) > 1:
  child = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
  while not os.path.exists(os.environ["READY"] + ".child"):
    time.sleep(0.05)
  open(os.environ["READY"], "w").close()
else:
  open(os.environ["READY"] + ".child", "w").close()
time.sleep(60)
"""


def test_tree_memory_sums_the_children(tmp_path, monkeypatch):
  """A parent and its child each hold 128 MiB: the tree's resident set is
  at least both, the parent's alone less than that."""
  ready = tmp_path / "ready"
  monkeypatch.setenv("READY", str(ready))
  parent = subprocess.Popen([sys.executable, "-c", _HOLD, _HOLD])
  try:
    peak = process_trees.TreePeak(parent.pid, interval=0.05)
    while not ready.exists():
      assert parent.poll() is None
      time.sleep(0.05)
    tree = process_trees.process_tree(parent.pid)
    assert len(tree) == 2 and tree[0] == parent.pid
    rss, pss = process_trees.tree_memory(parent.pid)
    alone = process_trees._kib("/proc/%d/status" % parent.pid, "VmRSS")
    assert rss >= 2 * 128 * 2**20 > alone
    assert pss >= 2 * 120 * 2**20
    time.sleep(0.2)
    peak.stop()
    assert peak.rss >= 2 * 128 * 2**20
  finally:
    for pid in reversed(process_trees.process_tree(parent.pid)):
      os.kill(pid, 9)
    parent.wait()


def test_a_run_reports_its_wall_time_and_log_or_fails_in_one_line(tmp_path):
  ok = batch_prediction.run_measured(
      [sys.executable, "-c", "import sys; print(1); sys.stderr.write('b')"],
      str(tmp_path), str(tmp_path / "out"), str(tmp_path / "log"))
  assert ok["log"] == "b" and (tmp_path / "out").read_text() == "1\n"
  assert ok["wall_s"] > 0 and ok["peak_rss_gib"] > 0
  with pytest.raises(SystemExit, match=r"ended 1: no model$"):
    batch_prediction.run_measured(
        [sys.executable, "-c", "import sys; sys.exit('no model')"],
        str(tmp_path), str(tmp_path / "out"), str(tmp_path / "log"))


# A stand-in for predictor.py: one label per input line (the last
# DROP_LINES left out), to stdout or to one shard, and the final progress
# lines the real command logs.
FAKE_PREDICTOR = """\
import json, os, sys
args = dict(a.split("=", 1) for a in sys.argv[1:])
with open(args["--input"]) as f:
  lines = f.read().splitlines()
kept = lines[:len(lines) - int(os.environ.get("DROP_LINES", "0"))]
out = ("".join(json.dumps({"label": str(len(l) % 2)}) + "\\n" for l in kept))
if "--output_file" in args:
  with open(args["--output_file"] + "-00000-of-00001.jsonl", "w") as f:
    f.write(out)
  sys.stderr.write("09:00:01 Predicting: 1.5 kB in 2 s.\\n"
                   "09:00:01 Predicting: 1 shard, 1,500 bytes, %d inputs\\n"
                   % len(kept))
else:
  sys.stdout.write(out)
  sys.stderr.write("09:00:01 Predicting %s: %d lines in 2 s.\\n"
                   % (args["--input"], len(kept)))
"""


def test_a_configuration_is_measured_and_its_count_checked(tmp_path,
                                                           monkeypatch):
  repo = tmp_path / "repo"
  repo.mkdir()
  (repo / "predictor.py").write_text(FAKE_PREDICTOR)
  corpus = str(tmp_path / "corpus.txt")
  batch_prediction.write_corpus(["a", "bb", "ccc"], 5, corpus)
  settings = {"export_dir": "/e", "repo": str(repo), "batch_size": 2,
              "batches_per_shard": 1}
  for config in ("stdout", "local2"):
    run = batch_prediction.measure(config, 5, corpus, str(tmp_path),
                                   settings)
    assert run["labels"] == ["1", "0", "1", "1", "0"]
    assert run["clock_s"] == 2 and run["wall_s"] > 0
    assert set(run) == {"wall_s", "clock_s", "peak_rss_gib", "peak_pss_gib",
                        "labels"}
  monkeypatch.setenv("DROP_LINES", "1")
  for config in ("stdout", "local2"):
    with pytest.raises(SystemExit, match="wrote 4 outputs for 5 lines"):
      batch_prediction.measure(config, 5, corpus, str(tmp_path), settings)


def test_rounds_take_the_configurations_in_turn(tmp_path, monkeypatch):
  order = []

  def fake_measure(config, texts, corpus, work_dir, settings):
    del corpus, work_dir, settings
    order.append(config)
    return {"wall_s": 1.0, "clock_s": 1, "peak_rss_gib": 0.1,
            "peak_pss_gib": 0.1, "labels": [config] * texts}

  monkeypatch.setattr(batch_prediction, "measure", fake_measure)
  runs, labels = batch_prediction.run_rounds(["stdout", "local2"], 2, 3,
                                             "c", str(tmp_path), {})
  assert order == ["stdout", "local2", "stdout", "local2"]
  assert [len(v) for v in runs.values()] == [2, 2]
  assert "labels" not in runs["stdout"][0]
  assert labels == {"stdout": ["stdout"] * 3, "local2": ["local2"] * 3}


# A stand-in for extract_features.py --pooling=mean: a vector per input line
# (its length, twice), in one .npz or in shards of --batch_size lines, ids
# reversed when SWAP_IDS is set, and the final progress lines the real
# command logs.
FAKE_EXTRACTOR = """\
import os, sys
import numpy as np
args = dict(a.split("=", 1) for a in sys.argv[1:])
with open(args["--input_file"]) as f:
  lines = f.read().splitlines()
ids = np.arange(len(lines))
if os.environ.get("SWAP_IDS"):
  ids = ids[::-1]
vectors = np.array([[len(l), len(l)] for l in lines], np.float32)
out = args["--output_file"]
if "--batches_per_shard" in args:
  step = int(args["--batch_size"])
  count = (len(lines) + step - 1) // step
  for k in range(count):
    np.savez(out[:-4] + "-%05d-of-%05d.npz" % (k, count),
             ids=ids[k * step:(k + 1) * step],
             embeddings=vectors[k * step:(k + 1) * step])
  sys.stderr.write("09:00:01 Extracting features: 1.5 kB in 3 s.\\n"
                   "09:00:01 Extracting features: %d shards, 1,500 bytes, "
                   "%d inputs\\n" % (count, len(lines)))
else:
  np.savez(out, ids=ids, embeddings=vectors)
  sys.stderr.write("09:00:01 Writing features to %s: %d examples in 3 s.\\n"
                   % (out, len(lines)))
"""


def test_embedding_configurations_commands_runs_and_vectors(tmp_path,
                                                            monkeypatch):
  settings = {"bert_model": "/m", "repo": "", "batch_size": 2,
              "max_seq_length": 128, "batches_per_shard": 1}
  one = batch_prediction.embed_command("embed", "/m", "/in.txt", "/o/v.npz",
                                       settings)
  assert one[1:7] == ["extract_features.py", "--input_file=/in.txt",
                      "--output_file=/o/v.npz", "--pooling=mean",
                      "--layers=-1", "--init_checkpoint=/m/bert_model.ckpt"]
  assert "--max_seq_length=128" in one and "--batch_size=2" in one
  assert not any(a.startswith(("--runner", "--batches")) for a in one)
  direct2 = batch_prediction.embed_command("embed_direct2", "/m", "/in.txt",
                                           "/o/v.npz", settings)
  assert direct2[:len(one)] == one and direct2[-4:] == [
      "--batches_per_shard=1", "--runner=DirectRunner",
      "--direct_running_mode=multi_processing", "--direct_num_workers=2"]
  child = batch_prediction.st_command("/venv/python", "/hf", "/in.txt",
                                      "/v.npy", 32, 128)
  assert "--st_child=/in.txt" in child and "--hf_embed_model=/hf" in child
  assert batch_prediction.expand_configs(["stdout", "embeddings"]) == [
      "stdout"] + list(batch_prediction.EMBED_CONFIGS)
  with pytest.raises(batch_prediction.app.UsageError):
    batch_prediction.expand_configs(["embed_local3"])

  repo = tmp_path / "repo"
  repo.mkdir()
  (repo / "extract_features.py").write_text(FAKE_EXTRACTOR)
  settings["repo"] = str(repo)
  corpus = str(tmp_path / "corpus.txt")
  batch_prediction.write_corpus(["a", "bb", "ccc"], 5, corpus)
  runs = {config: batch_prediction.measure(config, 5, corpus, str(tmp_path),
                                           settings)
          for config in ("embed", "embed_local2")}
  for run in runs.values():
    assert run["clock_s"] == 3 and run["wall_s"] > 0
    assert run["vectors"][:, 0].tolist() == [1, 2, 3, 1, 2]
  # Three shards of two lines, read back in order.
  assert len(os.listdir(tmp_path / "embed_local2")) == 3
  same = batch_prediction.vector_agreement(runs["embed_local2"]["vectors"],
                                           runs["embed"]["vectors"])
  assert same == {"rows": 5, "bit_equal_rows": 5, "max_abs_diff": 0.0,
                  "min_cosine": pytest.approx(1.0, abs=1e-12)}
  nudged = runs["embed"]["vectors"].copy()
  nudged[4] = [2.0, 2.5]
  near = batch_prediction.vector_agreement(nudged, runs["embed"]["vectors"])
  assert near["bit_equal_rows"] == 4 and near["max_abs_diff"] == 0.5
  assert near["min_cosine"] == pytest.approx(9 / (8 * 10.25) ** 0.5)
  with pytest.raises(ValueError):
    batch_prediction.vector_agreement(nudged[:4], nudged)
  monkeypatch.setenv("SWAP_IDS", "1")
  with pytest.raises(SystemExit, match="ids out of order"):
    batch_prediction.measure("embed", 5, corpus, str(tmp_path), settings)
  # Embedding clocks do not feed predictor.py's Dataflow plan.
  summary = batch_prediction.summarize([dict(runs["embed"], clock_s=1)], 5)
  assert batch_prediction.planned_dataflow({"embed": summary}, 2, PLAN) == (
      None, None)
