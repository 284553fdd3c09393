"""Tests for reproduce.py and its modules (no real training but one tiny run).

The runner is exercised with small fake scripts that the tests write (they
record how often they ran, sleep until killed, fail on purpose); the report
with a results tree written by hand, checked by recomputing its numbers
here; the reference numbers against the published averages.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import zipfile

import numpy as np
import pytest
import tensorflow as tf

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

import reproduce  # pylint: disable=g-import-not-at-top
from reproduction import plan  # pylint: disable=g-import-not-at-top
from reproduction import report  # pylint: disable=g-import-not-at-top
from reproduction import scheduler  # pylint: disable=g-import-not-at-top

TIMEOUT = 600


@pytest.fixture(scope="module")
def references():
  return plan.load_references()


# ---------------------------------------------------------- reference data


def test_published_averages_equal_the_stored_numbers(references):
  # Each stored number is rounded to 0.1 (off by at most 0.05), and so is
  # the published average: they may differ by 0.05 + 0.05.
  assert len(references["averages"]) == 6
  for average in references["averages"]:
    entries = [e for e in references["results"]
               if (e["source"], e["where"], e["model"], e["split"]) ==
               (average["source"], average["where"], average["model"],
                average["split"])]
    grouped = [t for group in average["groups"] for t in group]
    assert sorted({e["task"] for e in entries}) == sorted(grouped)
    scores = [np.mean([e["value"] for e in entries if e["task"] in group])
              for group in average["groups"]]
    assert abs(np.mean(scores) - average["value"]) <= 0.1 + 1e-9, average


def test_paper_table_1_average_by_hand(references):
  base = {e["task"]: e["value"] for e in references["results"]
          if e["model"] == "BERT-Base" and e["where"].startswith("Table 1")}
  # 84.6 + 83.4 + 71.2 + 90.5 + 93.5 + 52.1 + 85.8 + 88.9 + 66.4 = 716.4.
  assert sum(base.values()) == pytest.approx(716.4)
  assert round(716.4 / 9, 1) == 79.6


def test_reference_entries_are_well_formed(references):
  metrics = {m for spec in plan.TASKS.values()
             for m in spec.metrics}
  tasks = set(plan.TASKS) | {"MNLI-m", "MNLI-mm"}
  keys = set()
  for entry in references["results"] + [dict(r, range=True)
                                        for r in references["ranges"]]:
    assert entry["source"] in references["sources"]
    assert entry["split"] in ("dev", "test")
    assert entry["metric"] in metrics and entry["task"] in tasks, entry
    key = (entry["source"], entry["where"], entry["model"], entry["task"],
           entry["split"], entry["metric"], "range" in entry)
    assert key not in keys
    keys.add(key)
  for entry in references["results"]:
    assert entry["statistic"] in ("selected", "mean", "single",
                                  "unspecified")
    assert 0.0 <= entry["value"] <= 100.0


def test_presets_are_the_published_grids(references):
  def grid(task, preset, overrides=plan.NO_GRID):
    return plan.grid_for(task, preset, overrides, references)
  # Paper Section 4.1, Appendix A.3, Google README (smaller models), and
  # Sections 4.2 / 4.3 for SQuAD.
  assert grid("MRPC", "paper") == ((32,), (5e-5, 4e-5, 3e-5, 2e-5), (3.0,))
  assert grid("CoLA", "appendix") == ((16, 32), (5e-5, 3e-5, 2e-5),
                                      (2.0, 3.0, 4.0))
  assert grid("SST-2", "small_models") == ((8, 16, 32, 64, 128),
                                           (3e-4, 1e-4, 5e-5, 3e-5), (4.0,))
  assert grid("SQuAD1.1", "appendix") == ((32,), (5e-5,), (3.0,))
  assert grid("SQuAD2.0", "paper") == ((48,), (5e-5,), (2.0,))
  assert grid("MRPC", "paper", plan.Grid((), (2e-5,), ())) == (
      (32,), (2e-5,), (3.0,))
  assert grid("MRPC", "custom") == ((), (), ())


def test_reference_model_from_config(references):
  assert report.reference_model_for(
      references, {"num_hidden_layers": 12, "hidden_size": 768}) == (
          "BERT-Base")
  assert report.reference_model_for(
      references, {"num_hidden_layers": 4, "hidden_size": 256}) == (
          "BERT-Mini")
  assert report.reference_model_for(
      references, {"num_hidden_layers": 6, "hidden_size": 384}) is None


def test_casing_from_model_folder_names():
  assert reproduce._casing_from_name("/m/uncased_L-12_H-768_A-12") is True
  assert reproduce._casing_from_name("/m/cased_L-12_H-768_A-12/") is False
  assert reproduce._casing_from_name("multi_cased_L-12_H-768_A-12") is False
  assert reproduce._casing_from_name("minilm-l6-h384-uncased") is True
  assert reproduce._casing_from_name("my_model") is None


# ---------------------------------------------------------- selection rule


def _cells(lrs, seeds, task="MRPC"):
  return [plan.Cell(task, 32, lr, 3.0, "shuffled", seed)
          for lr in lrs for seed in seeds]


def test_selection_is_the_best_run_on_dev_and_stats_its_restarts():
  cells = _cells((5e-5, 3e-5, 2e-5), (1, 2, 3))
  f1 = [80.0, 85.0, 82.0, 88.5, 79.0, 84.0, 86.0, 87.0, 86.5]
  accuracy = [70.0, 76.0, 73.0, 81.0, 69.0, 75.0, 78.0, 80.0, 79.0]
  metrics = {c.name: {"f1": f, "accuracy": a}
             for c, f, a in zip(cells, f1, accuracy)}
  summary = report.summarize_task("MRPC", cells, metrics)
  # F1 (the paper's MRPC metric) selects: 88.5 is lr 3e-5, seed 1.
  assert summary["selected_cell"] == "MRPC/bs32_lr3e-05_ep3_shuffled_seed1"
  chosen_f1 = np.array([88.5, 79.0, 84.0])
  chosen_accuracy = np.array([81.0, 69.0, 75.0])
  got = summary["metrics"]
  assert got["f1"]["selected"] == 88.5
  assert got["f1"]["mean"] == pytest.approx(chosen_f1.mean())
  assert got["f1"]["std"] == pytest.approx(chosen_f1.std(ddof=1))
  assert (got["f1"]["min"], got["f1"]["max"]) == (79.0, 88.5)
  assert got["accuracy"]["selected"] == 81.0
  assert got["accuracy"]["std"] == pytest.approx(chosen_accuracy.std(ddof=1))
  by_name = {c["name"]: c for c in summary["configs"]}
  lr2 = by_name["bs32_lr2e-05_ep3_shuffled"]["metrics"]["f1"]
  assert lr2["mean"] == pytest.approx(np.mean([86.0, 87.0, 86.5]))
  # The best mean (lr 2e-5) is not what the paper's rule selects.
  assert lr2["mean"] > got["f1"]["mean"]


def test_selection_ignores_failed_cells_and_breaks_ties_in_grid_order():
  cells = _cells((5e-5, 2e-5), (1,), task="CoLA")
  metrics = {cells[0].name: {"mcc": 40.0}, cells[1].name: {"mcc": 40.0}}
  summary = report.summarize_task("CoLA", cells, metrics)
  assert summary["selected_cell"] == cells[0].name
  assert summary["metrics"]["mcc"]["std"] is None
  del metrics[cells[0].name]
  summary = report.summarize_task("CoLA", cells, metrics)
  assert summary["selected_cell"] == cells[1].name
  assert report.summarize_task("CoLA", cells, {})[
      "selected_cell"] is None


def test_restarts_only_on_small_tasks_by_default():
  small = plan.cells_for(
      "MRPC", plan.Grid((32,), (2e-5, 3e-5), (3.0,)), (1, 2, 3),
      ("shuffled", "file"))
  assert len(small) == 12
  assert len({c.name for c in small}) == 12
  squad = plan.cells_for(
      "SQuAD1.1", plan.Grid((32,), (5e-5,), (3.0,)), (1,),
      ("shuffled", "file"))
  assert [c.order for c in squad] == ["shuffled"]


# ------------------------------------------------------------------ runner

FAKE_SCRIPT = r'''
import os, sys, time
out = sys.argv[1]
name = sys.argv[2]
with open(os.path.join(out, "runs.txt"), "a") as f:
  f.write((os.environ.get("CUDA_VISIBLE_DEVICES") or "cpu") + "\n")
if name.startswith("fail"):
  sys.stderr.write("some log line\nValueError: --flag=bad: fix it\n")
  sys.exit(3)
if name.startswith("hang"):
  resumed = os.path.exists(os.path.join(out, "checkpoint"))
  open(os.path.join(out, "checkpoint"), "w").close()
  if not resumed:
    # Renamed into place: the test reads the pid as soon as the file exists.
    with open(os.path.join(out, "pid.part"), "w") as f:
      f.write(str(os.getpid()))
    os.replace(os.path.join(out, "pid.part"), os.path.join(out, "pid"))
    time.sleep(600)
  open(os.path.join(out, "resumed"), "w").close()
if name.startswith("pair"):
  open(os.path.join(out, "started"), "w").close()
  other = os.path.join(os.path.dirname(out), sys.argv[3], "started")
  deadline = time.time() + 120
  while not os.path.exists(other) and time.time() < deadline:
    time.sleep(0.05)
  if not os.path.exists(other):
    sys.exit(4)
with open(os.path.join(out, "metrics.txt"), "w") as f:
  f.write("ok\n")
'''


@pytest.fixture
def fake(tmp_path):
  """make(name, *extra) -> a Step running FAKE_SCRIPT in tmp/<name>."""
  script = tmp_path / "fake_cell.py"
  script.write_text(FAKE_SCRIPT)

  def make(name, *extra):
    output_dir = str(tmp_path / "cells" / name)
    return plan.Step(name, (str(script), output_dir, name) + extra,
                               output_dir, ("metrics.txt",))
  return make


def _runs(step):
  path = os.path.join(step.output_dir, "runs.txt")
  if not os.path.exists(path):
    return 0
  with open(path) as f:
    return len(f.read().split())


def _wait_for(path, timeout=TIMEOUT):
  deadline = time.time() + timeout
  while not os.path.exists(path):
    assert time.time() < deadline, "timed out waiting for %s" % path
    time.sleep(0.05)


def test_failing_step_does_not_stop_the_others(fake):
  steps = [fake("ok1"), fake("fail1"), fake("ok2")]
  lines = []
  outcomes = scheduler.run_steps(steps, sys.executable, ["cpu"],
                                        log=lines.append)
  assert [outcomes[s.name].status for s in steps] == ["done", "failed",
                                                      "done"]
  failed = outcomes["fail1"]
  assert failed.exit_status == 3
  assert failed.last_stderr_line == "ValueError: --flag=bad: fix it"
  assert any("FAILED fail1 (exit status 3)" in line for line in lines)
  assert "cells 3/3 finished (0 skipped as done, 1 failed, 0 running)" in (
      lines[-1])
  # Run again: the finished steps are skipped, the failed one retried.
  outcomes = scheduler.run_steps(steps, sys.executable, ["cpu"],
                                        log=lines.append)
  assert outcomes["ok1"].status == "skipped"
  assert [_runs(s) for s in steps] == [1, 2, 1]


def test_killed_step_resumes_and_finished_steps_are_skipped(fake):
  steps = [fake("ok1"), fake("hang1"), fake("ok2")]
  results = {}
  thread = threading.Thread(target=lambda: results.update(
      scheduler.run_steps(steps, sys.executable, ["cpu"],
                                 log=lambda line: None)))
  thread.start()
  pid_file = os.path.join(steps[1].output_dir, "pid")
  _wait_for(pid_file)
  with open(pid_file) as f:
    os.kill(int(f.read()), signal.SIGKILL)
  thread.join(TIMEOUT)
  assert results["hang1"].status == "failed"
  assert results["hang1"].exit_status == -signal.SIGKILL
  record = scheduler.read_record(steps[1])
  assert record["attempts"][0]["exit_status"] == -signal.SIGKILL
  outcomes = scheduler.run_steps(steps, sys.executable, ["cpu"],
                                        log=lambda line: None)
  assert outcomes["ok1"].status == outcomes["ok2"].status == "skipped"
  assert outcomes["hang1"].status == "done"
  # The second attempt found the first one's checkpoint in the folder.
  assert os.path.exists(os.path.join(steps[1].output_dir, "resumed"))
  assert [_runs(s) for s in steps] == [1, 2, 1]
  assert len(scheduler.read_record(steps[1])["attempts"]) == 2


def test_changed_command_starts_over_in_an_empty_folder(fake):
  step = fake("ok1")
  scheduler.run_steps([step], sys.executable, ["cpu"],
                             log=lambda line: None)
  changed = plan.Step(step.name, step.args + ("--lr=1",),
                                step.output_dir, step.done_files)
  assert not scheduler.is_done(changed)
  outcomes = scheduler.run_steps([changed], sys.executable, ["cpu"],
                                        log=lambda line: None)
  assert outcomes["ok1"].status == "done"
  assert _runs(changed) == 1  # runs.txt of the first command is gone.
  assert scheduler.read_record(changed)["command"] == list(
      changed.args)


def test_devices_run_steps_at_once_each_on_its_own_gpu(fake):
  # Each "pair" step finishes only once the other has started.
  steps = [fake("pair_a", "pair_b"), fake("pair_b", "pair_a")]
  outcomes = scheduler.run_steps(steps, sys.executable, ["0", "1"],
                                        log=lambda line: None)
  assert {o.status for o in outcomes.values()} == {"done"}
  devices = []
  for step in steps:
    with open(os.path.join(step.output_dir, "runs.txt")) as f:
      devices.append(f.read().strip())
  assert sorted(devices) == ["0", "1"]


def test_progress_line_estimates_time_left_from_finished_cells():
  now = [100.0]
  progress = scheduler.Progress(10, 2, clock=lambda: now[0])
  assert "time left known once one finishes" in progress.line()
  progress.done = 2
  progress.skipped = 2
  progress.timed = [60.0, 180.0]
  now[0] = 340.0
  # 6 cells left x 120 s mean / 2 devices = 360 s.
  assert progress.line() == (
      "cells 4/10 finished (2 skipped as done, 0 failed, 0 running), "
      "4m00s elapsed, about 6m00s left")
  predictions = scheduler.Progress(3, 1, clock=lambda: now[0],
                                          what="test predictions")
  assert predictions.line().startswith(
      "test predictions 0/3 finished (0 skipped as done, 0 failed, "
      "0 running)")


def test_detect_devices():
  assert scheduler.detect_devices({"CUDA_VISIBLE_DEVICES": "2,3"}) == [
      "2", "3"]
  assert scheduler.detect_devices({"CUDA_VISIBLE_DEVICES": ""}) == [
      "cpu"]
  assert scheduler.detect_devices({}, which=lambda name: None) == [
      "cpu"]

  def fake_smi(command, **kwargs):
    del kwargs
    assert command == ["nvidia-smi", "-L"]
    return subprocess.CompletedProcess(command, 0, stdout=(
        "GPU 0: NVIDIA A100 (UUID: GPU-1)\nGPU 1: NVIDIA A100 (UUID: GPU-2)\n"))
  assert scheduler.detect_devices(
      {}, which=lambda name: "/usr/bin/" + name, run=fake_smi) == ["0", "1"]


# -------------------------------------------------------------- data knobs


def test_glue_subset_keeps_header_and_draws_rows_in_file_order(tmp_path):
  source = tmp_path / "MRPC"
  source.mkdir()
  rows = ["\ufeffQuality\t#1\t#2\tA\tB\n"] + [
      "%d\t%d\t%d\ts%d\tt%d\n" % (i % 2, i, i, i, i) for i in range(50)]
  (source / "train.tsv").write_text("".join(rows), encoding="utf-8")
  (source / "dev.tsv").write_text("dev\n")
  target = tmp_path / "subset"
  plan.subset_glue_dir(str(source), str(target), "train.tsv",
                                 True, 10)
  lines = (target / "train.tsv").read_text(encoding="utf-8").splitlines(
      keepends=True)
  assert lines[0] == rows[0]
  kept = [int(line.split("\t")[1]) for line in lines[1:]]
  assert len(kept) == 10 and kept == sorted(kept)
  assert os.path.realpath(str(target / "dev.tsv")) == str(source / "dev.tsv")
  before = os.stat(str(target / "train.tsv")).st_mtime_ns
  time.sleep(0.01)
  plan.subset_glue_dir(str(source), str(target), "train.tsv",
                                 True, 10)
  assert os.stat(str(target / "train.tsv")).st_mtime_ns == before


def test_squad_article_split_and_question_cut():
  def article(title, counts):
    return {"title": title, "paragraphs": [
        {"context": "c", "qas": [{"id": "%s%d%d" % (title, p, q)}
                                 for q in range(n)]}
        for p, n in enumerate(counts)]}
  dataset = {"version": "1.1", "data": [article("a", [2, 3]),
                                        article("b", [4]),
                                        article("c", [1])]}
  train, held_out = plan.split_squad_articles(dataset, 2)
  assert [a["title"] for a in train["data"]] == ["a", "b"]
  assert [a["title"] for a in held_out["data"]] == ["c"]
  assert held_out["version"] == "1.1"
  with pytest.raises(ValueError, match="between 1 and 2"):
    plan.split_squad_articles(dataset, 3)
  cut = plan.first_squad_questions(dataset, 4)
  ids = [q["id"] for a in cut["data"] for p in a["paragraphs"]
         for q in p["qas"]]
  assert ids == ["a00", "a01", "a10", "a11"]
  assert plan.count_squad_questions(dataset) == 10


# -------------------------------------------------------------- submission


def test_submission_zip_holds_the_files_flat_with_glue_headers(tmp_path):
  files = {}
  for name, rows in (("MRPC.tsv", ["0\t1", "1\t0"]),
                     ("STS-B.tsv", ["0\t3.250"])):
    path = tmp_path / "cell" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text("index\tprediction\n" + "\n".join(rows) + "\n")
    files[name] = str(path)
  zip_path = str(tmp_path / "glue_submission.zip")
  report.write_submission_zip(zip_path, files)
  with zipfile.ZipFile(zip_path) as archive:
    assert sorted(archive.namelist()) == ["MRPC.tsv", "STS-B.tsv"]
    text = archive.read("STS-B.tsv").decode("utf-8")
  assert text.splitlines() == ["index\tprediction", "0\t3.250"]
  bad = tmp_path / "CoLA.tsv"
  bad.write_text("id\tlabel\n0\t1\n")
  with pytest.raises(ValueError, match="CoLA.tsv starts with"):
    report.write_submission_zip(zip_path, {"CoLA.tsv": str(bad)})


# ------------------------------------------------ results from a hand tree

MRPC_HEADER = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"


def _mrpc_dir(root):
  data_dir = os.path.join(root, "glue", "MRPC")
  os.makedirs(data_dir)
  rows = "".join("%d\t%d\t%d\tThe cat sat.\tA dog ran.\n" % (i % 2, i, i)
                 for i in range(8))
  for name in ("train.tsv", "dev.tsv"):
    with open(os.path.join(data_dir, name), "w", encoding="utf-8") as f:
      f.write(MRPC_HEADER + rows)
  return data_dir


def _hand_tree(tmp_path, values):
  """Cells with step.json and eval_results.txt written by hand."""
  root = str(tmp_path)
  data_dir = _mrpc_dir(root)
  model = plan.Model(
      os.path.join(REPO_ROOT, "sample_data", "tiny_bert_config.json"),
      os.path.abspath(os.path.join(REPO_ROOT, "..", "shared", "assets",
                                   "bert_vocab", "uncased", "vocab.txt")),
      "", True)
  setup = plan.Setup(REPO_ROOT, model, {"MRPC": data_dir},
                               os.path.join(root, "out"), 128, 384, ())
  for (lr, seed), (accuracy, f1) in values.items():
    cell = plan.Cell("MRPC", 32, lr, 3.0, "shuffled", seed)
    step = plan.cell_step(setup, cell)
    os.makedirs(step.output_dir)
    with open(os.path.join(step.output_dir, "step.json"), "w") as f:
      json.dump({"command": list(step.args), "attempts": [
          {"wall_seconds": 10.0 * seed, "exit_status": 0}]}, f)
    with open(os.path.join(step.output_dir, "eval_results.txt"), "w") as f:
      f.write("eval_accuracy = %r\neval_f1 = %r\neval_loss = 0.5\n"
              "global_step = 343\nloss = 0.5\n" % (accuracy, f1))
  return setup


def _reproduce_args(setup, *extra):
  return ["--bert_config_file=" + setup.model.bert_config_file,
          "--vocab_file=" + setup.model.vocab_file, "--init_checkpoint=",
          "--do_lower_case=true",
          "--glue_dir=" + os.path.dirname(setup.data["MRPC"]),
          "--tasks=MRPC", "--seeds=1,2", "--learning_rates=3e-5,2e-5",
          "--output_dir=" + setup.output_dir] + list(extra)


def _run_reproduce(run_script, args):
  return run_script("reproduce.py", args, TIMEOUT)


def _hparams_sessions(logdir):
  """{trial folder: hparams} parsed back from the event files."""
  # pylint: disable=g-import-not-at-top
  from tensorboard.plugins.hparams import plugin_data_pb2
  # pylint: enable=g-import-not-at-top
  sessions = {}
  for folder, _, names in os.walk(logdir):
    for name in names:
      for event in tf.compat.v1.train.summary_iterator(
          os.path.join(folder, name)):
        for value in event.summary.value:
          if value.metadata.plugin_data.plugin_name != "hparams":
            continue
          data = plugin_data_pb2.HParamsPluginData.FromString(
              value.metadata.plugin_data.content)
          if data.HasField("session_start_info"):
            hparams = data.session_start_info.hparams
            sessions[os.path.relpath(folder, logdir)] = {
                key: hparams[key].number_value if hparams[key].HasField(
                    "number_value") else hparams[key].string_value
                for key in hparams}
  return sessions


def test_results_from_a_hand_made_tree(tmp_path, references, run_script):
  values = {(3e-5, 1): (0.80, 0.86), (3e-5, 2): (0.84, 0.90),
            (2e-5, 1): (0.85, 0.89), (2e-5, 2): (0.83, 0.88)}
  setup = _hand_tree(tmp_path, values)
  result = _run_reproduce(run_script,
                          _reproduce_args(setup, "--noglue_submission"))
  assert result.returncode == 0, result.stderr[-3000:]
  with open(os.path.join(setup.output_dir, "results.json")) as f:
    results = json.load(f)
  assert {c["status"] for c in results["cells"]} == {"skipped"}
  mrpc = results["tasks"]["MRPC"]
  # F1 selects lr 3e-5, seed 2 (0.90); its restarts: F1 86 and 90.
  assert mrpc["selected_cell"] == "MRPC/bs32_lr3e-05_ep3_shuffled_seed2"
  f1 = mrpc["metrics"]["f1"]
  assert f1["selected"] == pytest.approx(90.0)
  assert f1["mean"] == pytest.approx(88.0)
  assert f1["std"] == pytest.approx(np.std([86.0, 90.0], ddof=1))
  accuracy = mrpc["metrics"]["accuracy"]
  assert accuracy["selected"] == pytest.approx(84.0)
  assert accuracy["mean"] == pytest.approx(82.0)
  # Tiny config (L=2, H=64) is no published model: compared with BERT-Base.
  assert results["reference_model"] == "BERT-Base"
  rows = {(r["task"], r["metric"]): r for r in results["comparison"]}
  # MRPC F1: only the paper's test number (Table 1) exists for BERT-Base.
  f1_row = rows[("MRPC", "f1")]
  assert f1_row["difference"]["against"]["value"] == 88.9
  assert f1_row["difference"]["value"] == pytest.approx(90.0 - 88.9)
  # MRPC accuracy: the paper's dev mean of 5 restarts (Table 6) vs our mean.
  accuracy_row = rows[("MRPC", "accuracy")]
  assert accuracy_row["difference"]["against"]["where"].startswith("Table 6")
  assert accuracy_row["difference"]["value"] == pytest.approx(82.0 - 86.7)
  assert [(r["low"], r["high"]) for r in accuracy_row["ranges"]] == [
      (84.0, 88.0)]
  assert sorted(c["wall_seconds"] for c in results["cells"]) == [
      10.0, 10.0, 20.0, 20.0]
  with open(os.path.join(setup.output_dir, "results.md")) as f:
    markdown = f.read()
  assert "| MRPC | f1 | 2 | 88.0 ± 2.8 | 86.0 | 90.0 | 90.0 | 88.9" in (
      markdown)
  assert "+1.1 (our selected − test Table 1)" in markdown
  assert "REDUCED RUN" in markdown and "learning rate {3e-05, 2e-05}" in (
      markdown)
  sessions = _hparams_sessions(os.path.join(setup.output_dir, "tensorboard"))
  assert sorted(sessions) == sorted(
      "MRPC/bs32_lr%g_ep3_shuffled_seed%d" % key for key in values)
  session = sessions["MRPC/bs32_lr2e-05_ep3_shuffled_seed1"]
  assert session["learning_rate"] == pytest.approx(2e-5)
  assert session["seed"] == 1 and session["batch_size"] == 32
  assert session["train_example_order"] == "shuffled"


def test_results_markdown_says_what_the_submission_holds():
  results = {"generated": "now", "command": "reproduce.py", "reduced": [],
            "model": {"description": "tiny"}, "reference_model": None,
            "preset": "paper", "comparison": [], "tasks": {}, "cells": []}
  # SQuAD alone: no GLUE task, no submission section.
  assert "submission" not in report.results_markdown(
      dict(results, submission=None))
  failed = report.results_markdown(dict(results, submission={
      "zip": None, "files": [], "missing": ["CoLA.tsv", "MRPC.tsv"]}))
  assert ("Not written: no test-set prediction finished.\n"
          "Missing for a complete submission: CoLA.tsv, MRPC.tsv.\n") in failed
  written = report.results_markdown(dict(results, submission={
      "zip": "/out/glue_submission.zip", "files": ["MRPC.tsv"],
      "missing": ["CoLA.tsv"]}))
  assert "`/out/glue_submission.zip`: MRPC.tsv.\n" in written


def test_squad_alone_writes_no_glue_submission(tmp_path, run_script):
  squad_dir = tmp_path / "squad"
  squad_dir.mkdir()
  article = {"title": "t", "paragraphs": [{"context": "The cat sat.", "qas": [
      {"id": "q1", "question": "Who sat?",
       "answers": [{"text": "The cat", "answer_start": 0}]}]}]}
  for name in ("train-v1.1.json", "dev-v1.1.json"):
    (squad_dir / name).write_text(json.dumps({"data": [article]}))
  model = _hand_tree(tmp_path, {}).model
  setup = plan.Setup(
      REPO_ROOT, model, {"SQuAD1.1": (str(squad_dir / "train-v1.1.json"),
                                      str(squad_dir / "dev-v1.1.json"))},
      str(tmp_path / "out"), 128, 128, ())
  step = plan.cell_step(
      setup, plan.Cell("SQuAD1.1", 32, 5e-5, 3.0, "shuffled", 1))
  os.makedirs(step.output_dir)
  with open(os.path.join(step.output_dir, "step.json"), "w") as f:
    json.dump({"command": list(step.args), "attempts": [
        {"wall_seconds": 10.0, "exit_status": 0}]}, f)
  with open(os.path.join(step.output_dir, "eval_results.json"), "w") as f:
    json.dump({"exact_match": 50.0, "f1": 60.0}, f)
  result = _run_reproduce(run_script, [
      "--bert_config_file=" + model.bert_config_file,
      "--vocab_file=" + model.vocab_file, "--init_checkpoint=",
      "--do_lower_case=true", "--squad_dir=" + str(squad_dir),
      "--tasks=SQuAD1.1", "--seeds=1", "--squad_max_seq_length=128",
      "--output_dir=" + setup.output_dir])
  assert result.returncode == 0, result.stderr[-3000:]
  with open(os.path.join(setup.output_dir, "results.json")) as f:
    report = json.load(f)
  assert [c["status"] for c in report["cells"]] == ["skipped"]
  assert report["submission"] is None
  assert not os.path.exists(os.path.join(setup.output_dir,
                                         "glue_submission.zip"))
  with open(os.path.join(setup.output_dir, "results.md")) as f:
    assert "submission" not in f.read()


@pytest.mark.slow
def test_bad_flags_end_with_one_line_naming_the_fix(tmp_path, run_script):
  setup = _hand_tree(tmp_path, {})
  result = _run_reproduce(run_script, _reproduce_args(setup, "--tasks=MRCP"))
  assert result.returncode != 0
  last = result.stderr.strip().splitlines()[-1]
  assert "--tasks: unknown task 'MRCP'" in last
  assert "Traceback" not in result.stderr
  result = _run_reproduce(run_script, _reproduce_args(setup, "--seeds=one"))
  assert "--seeds=one: expected numbers" in result.stderr.strip(
  ).splitlines()[-1]


# ------------------------------------------------- one tiny real grid run


@pytest.mark.slow
def test_tiny_real_run_trains_predicts_and_skips_when_run_again(
    tmp_path, run_script):
  glue = tmp_path / "glue"
  glue.mkdir()
  os.symlink(os.path.join(REPO_ROOT, "sample_data", "mrpc_sample"),
             str(glue / "MRPC"))
  output_dir = str(tmp_path / "out")
  args = [
      "--bert_config_file=" + os.path.join(REPO_ROOT, "sample_data",
                                           "tiny_bert_config.json"),
      "--vocab_file=" + os.path.join(REPO_ROOT, "..", "shared", "assets",
                                     "bert_vocab", "uncased", "vocab.txt"),
      "--init_checkpoint=", "--do_lower_case=true", "--glue_dir=" + str(glue),
      "--tasks=MRPC", "--preset=custom", "--batch_sizes=16",
      "--learning_rates=1e-4", "--epochs=1", "--max_train_examples=48",
      "--max_seq_length=64", "--output_dir=" + output_dir]
  result = _run_reproduce(run_script, args)
  assert result.returncode == 0, result.stderr[-3000:]
  with open(os.path.join(output_dir, "results.json")) as f:
    report = json.load(f)
  (cell,) = report["cells"]
  assert cell["status"] == "done"
  cell_dir = os.path.join(output_dir, "cells", cell["name"])
  with open(os.path.join(cell_dir, "eval_results.txt")) as f:
    assert "global_step = 3\n" in f.read()  # 48 examples / 16, 1 epoch.
  assert cell["metrics"]["accuracy"] == pytest.approx(
      report["tasks"]["MRPC"]["metrics"]["accuracy"]["selected"])
  with zipfile.ZipFile(os.path.join(output_dir, "glue_submission.zip")) as z:
    lines = z.read("MRPC.tsv").decode("utf-8").splitlines()
  assert lines[0] == "index\tprediction"
  assert len(lines) == 1 + 40  # sample_data's test.tsv has 40 pairs.
  assert "training sets cut to 48 examples" in " ".join(report["reduced"])
  result = _run_reproduce(run_script, args)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "cells 1/1 finished (1 skipped as done" in result.stdout
  assert "test predictions 1/1 finished (1 skipped as done" in result.stdout
  with open(os.path.join(output_dir, "results.json")) as f:
    assert json.load(f)["cells"][0]["status"] == "skipped"


def test_metric_files_are_read_in_percent(tmp_path):
  (tmp_path / "eval_results.txt").write_text(
      "eval_loss = 0.61\neval_mcc = 0.4321\neval_pearson = 0.8\n"
      "eval_spearman = 0.79\nglobal_step = 10\nloss = 0.61\n")
  assert report.read_classifier_metrics(str(tmp_path)) == {
      "mcc": pytest.approx(43.21), "pearson": pytest.approx(80.0),
      "spearman": pytest.approx(79.0)}
  (tmp_path / "eval_results.json").write_text(json.dumps({
      "exact": 70.0, "f1": 73.0, "total": 10, "best_exact": 72.0,
      "best_exact_thresh": -1.5, "best_f1": 75.5, "best_f1_thresh": -2.0}))
  # SQuAD 2.0: the scores at the no-answer threshold best on dev.
  assert report.read_squad_metrics(str(tmp_path), True) == {
      "f1": 75.5, "exact_match": 72.0, "null_threshold": -2.0}
  (tmp_path / "eval_results.json").write_text(json.dumps({
      "exact_match": 81.0, "f1": 88.0}))
  assert report.read_squad_metrics(str(tmp_path), False) == {
      "f1": 88.0, "exact_match": 81.0}
