"""Evaluation during training in every training script, run as a user runs
it (a child process per command), on tiny models and data.

What each script promises, checked against a run of the same command
without evaluations and against separate --do_eval runs:
  * the final checkpoint is bit for bit the one of the run without
    evaluations (evaluation consumes none of training's data, randomness or
    steps);
  * the evaluations happen after the schedule's updates, one line each;
    eval_history.jsonl holds one entry per evaluation, and the metrics of
    step N equal those of a separate `--do_eval --use_checkpoint=N` in the
    same folder, bit for bit;
  * the best entry of the history, worked out here from the file, is the
    checkpoint kept in best/ and recorded in run_info.json, and prediction
    uses it;
  * TensorBoard's eval/ holds the metrics at their steps.
Then, on run_classifier.py: early stopping, the scoring of a folder's
checkpoints afterwards and beside a running training, and bad input.
"""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import conftest
import pretraining_records
import test_chaos
import test_faults
import test_run_ner
import test_run_swag

pytestmark = pytest.mark.slow

TIMEOUT = 600
# The line of one evaluation during training.
EVAL_LINE = re.compile(
    r"\d\d:\d\d:\d\d Evaluation at step (\d+)/(\d+)( \(epoch [\d.]+\))?: "
    r"(\w+) = (\S+?)(, \w+ = \S+?)*; (the best so far|best \w+ = \S+ at step "
    r"\d+); \d+ s\.$")


def _model_flags(root):
  return ["--vocab_file=%s" % os.path.join(root, "vocab.txt"),
          "--bert_config_file=%s" % os.path.join(root, "bert_config.json")]


class Script(object):
  """A training script on its tiny inputs: how they are written, the
  command line, its headline metric and the evaluation interval."""
  name = script = headline = None
  every = 5
  scale = 1.0  # The headline metric's largest value.

  def write_inputs(self, root):
    raise NotImplementedError

  def args(self, root, out):
    """The command line of training (without an action flag)."""
    raise NotImplementedError

  def eval_flags(self, root):
    """What the command line adds to evaluate."""
    del root  # Unused.
    return []


class Classifier(Script):
  name, script, headline = "classifier", "run_classifier.py", "eval_f1"

  def write_inputs(self, root):
    test_faults._write_model_files(root)  # pylint: disable=protected-access
    test_faults._write_mrpc(os.path.join(root, "mrpc"), 40, 8)  # pylint: disable=protected-access

  def args(self, root, out):
    # 40 pairs, batch 4, 2 epochs: 20 updates, evaluations after 5, 10,
    # 15 and 20.
    return test_faults._classifier_args(  # pylint: disable=protected-access
        root, out, [], epochs=2, data_dir=os.path.join(root, "mrpc"))


class Squad(Script):
  name, script, headline = "squad", "run_squad.py", "f1"
  scale = 100.0  # The official metrics are percentages.

  def write_inputs(self, root):
    test_faults._write_model_files(root)  # pylint: disable=protected-access
    test_chaos._write_squad(os.path.join(root, "train.json"), 24, 1)  # pylint: disable=protected-access
    test_chaos._write_squad(os.path.join(root, "dev.json"), 8, 2)  # pylint: disable=protected-access

  def args(self, root, out):
    return _model_flags(root) + [
        "--train_file=%s" % os.path.join(root, "train.json"),
        "--dev_file=%s" % os.path.join(root, "dev.json"),
        "--predict_file=%s" % os.path.join(root, "dev.json"),
        "--output_dir=%s" % out, "--max_seq_length=32",
        "--max_query_length=8", "--doc_stride=8", "--train_batch_size=4",
        "--num_train_epochs=1", "--learning_rate=1e-3", "--seed=7",
        "--eval_batch_size=8", "--predict_batch_size=8"]


class Ner(Script):
  name, script, headline = "ner", "run_ner.py", "eval_f1"
  every = 4

  def write_inputs(self, root):
    test_run_ner._write_model_files(root)  # pylint: disable=protected-access
    test_run_ner._write_data(os.path.join(root, "data"))  # pylint: disable=protected-access

  def args(self, root, out):
    return test_run_ner._command(  # pylint: disable=protected-access
        root, out, [], ["--num_train_epochs=2", "--eval_batch_size=4"])


class Swag(Script):
  name, script, headline = "swag", "run_swag.py", "eval_accuracy"

  def write_inputs(self, root):
    test_run_swag._write_swag_data(os.path.join(root, "data"))  # pylint: disable=protected-access
    test_run_swag._write_model_files(root)  # pylint: disable=protected-access

  def args(self, root, out):
    return test_run_swag._command(root, out, []) + ["--num_train_epochs=2"]  # pylint: disable=protected-access


class Pretraining(Script):
  name, script, headline = "pretraining", "run_pretraining.py", (
      "masked_lm_accuracy")

  def write_inputs(self, root):
    test_faults._write_model_files(root)  # pylint: disable=protected-access
    pretraining_records.write_records(
        os.path.join(root, "train.tfrecord"),
        pretraining_records.random_examples(60, 32, 5, len(test_faults.VOCAB),
                                            3))
    pretraining_records.write_records(
        os.path.join(root, "held_out.tfrecord"),
        pretraining_records.random_examples(12, 32, 5, len(test_faults.VOCAB),
                                            4))

  def args(self, root, out):
    return _model_flags(root)[1:] + [
        "--input_file=%s" % os.path.join(root, "train.tfrecord"),
        "--output_dir=%s" % out, "--max_seq_length=32",
        "--max_predictions_per_seq=5", "--train_batch_size=4",
        "--num_train_steps=15", "--num_warmup_steps=2",
        "--learning_rate=1e-3", "--eval_batch_size=4", "--max_eval_steps=3",
        "--seed=7"]

  def eval_flags(self, root):
    return ["--eval_input_file=%s" % os.path.join(root, "held_out.tfrecord")]


SCRIPTS = {script.name: script for script in (
    Classifier(), Squad(), Ner(), Swag(), Pretraining())}


def _run(run_script, script, args, log_path):
  return conftest.run_logged(run_script, script, args, log_path, TIMEOUT)


def _build(run_script, script, root):
  """The inputs, a run without evaluations (plain/) and the same run
  evaluating on a schedule and predicting or exporting (evaluated/)."""
  script.write_inputs(root)
  _run(run_script, script.script,
       script.args(root, os.path.join(root, "plain")) + ["--do_train"],
       os.path.join(root, "plain.log"))
  actions = ["--do_train", "--do_eval",
             "--eval_every_steps=%d" % script.every] + script.eval_flags(root)
  if script.name != "pretraining":
    actions.append("--do_predict" if script.name != "ner" else
                   "--export_dir=%s" % os.path.join(root, "export"))
  _run(run_script, script.script,
       script.args(root, os.path.join(root, "evaluated")) + actions,
       os.path.join(root, "evaluated.log"))


@pytest.fixture(scope="module", params=sorted(SCRIPTS))
def built(request, shared_dir, run_script):
  """(Script, the folder of its inputs and its two runs)."""
  script = SCRIPTS[request.param]
  return script, conftest.build_once(
      shared_dir, "training_evaluation_" + script.name,
      lambda root: _build(run_script, script, root))


def _history(folder):
  with open(os.path.join(folder, "eval_history.jsonl")) as f:
    return [json.loads(line) for line in f]


def _steps(folder):
  return sorted(int(path.rsplit("-", 1)[1][:-len(".index")])
                for path in glob.glob(os.path.join(folder, "model.ckpt-*.index")))


def _assert_same_checkpoint(got, want):
  got, want = tf.train.load_checkpoint(got), tf.train.load_checkpoint(want)
  names = sorted(want.get_variable_to_shape_map())
  assert names == sorted(got.get_variable_to_shape_map())
  assert any(name.endswith("/adam_m") for name in names)
  for name in names:
    np.testing.assert_array_equal(got.get_tensor(name), want.get_tensor(name),
                                  err_msg=name)


def _best_by_hand(history, metric):
  """The first entry with the highest value (the metrics here are all
  higher-is-better)."""
  best = None
  for entry in history:
    if best is None or entry[metric] > best[metric]:
      best = entry
  return best


def _eval_results(folder, script):
  """The metrics a separate --do_eval wrote."""
  if script.name == "squad":
    with open(os.path.join(folder, "eval_results.json")) as f:
      return json.load(f)
  with open(os.path.join(folder, "eval_results.txt")) as f:
    return {key: float(value) for key, value in
            (line.rstrip("\n").split(" = ") for line in f)}


def test_evaluations_leave_training_bit_identical(built):
  script, root = built
  plain, evaluated = (os.path.join(root, name)
                      for name in ("plain", "evaluated"))
  last = _steps(plain)[-1]
  assert _steps(evaluated)[-1] == last
  _assert_same_checkpoint(os.path.join(evaluated, "model.ckpt-%d" % last),
                          os.path.join(plain, "model.ckpt-%d" % last))


def test_one_line_and_one_entry_per_scheduled_evaluation(built):
  script, root = built
  evaluated = os.path.join(root, "evaluated")
  last = _steps(os.path.join(root, "plain"))[-1]
  schedule = list(range(script.every, last, script.every)) + [last]
  history = _history(evaluated)
  assert [entry["global_step"] for entry in history] == schedule
  for entry in history:
    assert entry["checkpoint"] == "model.ckpt-%d" % entry["global_step"]
    assert 0.0 <= entry[script.headline] <= script.scale
  with open(os.path.join(root, "evaluated.log")) as f:
    lines = f.read().splitlines()
  found = [EVAL_LINE.match(line) for line in lines]
  found = [match for match in found if match]
  assert [int(match.group(1)) for match in found] == schedule
  for match, entry in zip(found, history):
    assert match.group(4) == script.headline
    assert float(match.group(5)) == pytest.approx(entry[script.headline],
                                                  abs=5e-5)
  # The evaluations' own report lines stay out of the training's log (the
  # lines after training are prediction's).
  training = "\n".join(lines[:next(i for i, line in enumerate(lines)
                                    if "Best checkpoint: " in line)])
  for detail in ("***** Eval results *****", "Evaluating: ",
                 "Running evaluation"):
    assert detail not in training, detail


def test_best_is_kept_recorded_and_used(built):
  script, root = built
  evaluated = os.path.join(root, "evaluated")
  best = _best_by_hand(_history(evaluated), script.headline)
  step = best["global_step"]
  with open(os.path.join(evaluated, "run_info.json")) as f:
    record = json.load(f)["best_checkpoint"]
  assert record == {"checkpoint": "best/model.ckpt-%d" % step,
                    "global_step": step, "metric": script.headline,
                    "value": best[script.headline]}
  assert sorted(os.listdir(os.path.join(evaluated, "best"))) == [
      "model.ckpt-%d.data-00000-of-00001" % step, "model.ckpt-%d.index" % step]
  with open(os.path.join(root, "evaluated.log")) as f:
    text = f.read()
  kept = os.path.join(evaluated, "best", "model.ckpt-%d" % step)
  assert "Best checkpoint: %s = %.4f at step %d, kept as %s;" % (
      script.headline, best[script.headline], step, kept) in text
  if script.name in ("classifier", "squad", "swag"):
    assert "Predicting with %s ..." % kept in text
  if script.name == "ner":
    assert "Exporting %s as a SavedModel" % kept in text


def test_tensorboard_holds_each_evaluation_at_its_step(built):
  script, root = built
  evaluated = os.path.join(root, "evaluated")
  found = {}
  for path in glob.glob(os.path.join(evaluated, "eval", "events.*")):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        if value.tag == script.headline:
          found[event.step] = value.simple_value
  history = _history(evaluated)
  assert sorted(found) == [entry["global_step"] for entry in history]
  for entry in history:
    assert found[entry["global_step"]] == np.float32(entry[script.headline])


def test_in_run_metrics_equal_a_separate_evaluation(built, tmp_path,
                                                    run_script):
  """The second evaluation (not the last: the newest checkpoint would be
  evaluated by default) against --do_eval --use_checkpoint=<its step> on
  a copy of the folder."""
  script, root = built
  copy = str(tmp_path / "copy")
  subprocess.run(["cp", "-r", os.path.join(root, "evaluated"), copy],
                 check=True)
  entry = _history(copy)[1]
  _run(run_script, script.script, script.args(root, copy) + [
      "--do_eval", "--use_checkpoint=%d" % entry["global_step"]] +
       script.eval_flags(root), str(tmp_path / "eval.log"))
  separate = _eval_results(copy, script)
  for key, value in separate.items():
    if key in entry:
      assert entry[key] == value, key
  assert script.headline in separate


# ------------------------------------------------- run_classifier.py alone


@pytest.fixture(scope="module")
def classifier(shared_dir, run_script):
  """The classifier's inputs and runs, and a third run keeping a checkpoint
  of every 5th update without evaluating (every/)."""
  script = SCRIPTS["classifier"]

  def build(root):
    _build(run_script, script, root)
    _run(run_script, script.script, script.args(
        root, os.path.join(root, "every")) + [
            "--do_train", "--save_checkpoints_steps=5",
            "--keep_checkpoint_max=0"], os.path.join(root, "every.log"))

  return script, conftest.build_once(shared_dir,
                                     "training_evaluation_classifier_every",
                                     build)


def test_early_stopping_ends_training_and_a_rerun_stays_stopped(
    classifier, tmp_path, run_script):
  """Patience 2 with a minimum gain of 2 (no F1 can gain that much): the
  first evaluation sets the best, the next two count, and training ends
  after update 15 with the weights the uninterrupted schedule has there."""
  script, root = classifier
  out = str(tmp_path / "out")
  args = script.args(root, out) + [
      "--do_train", "--do_eval", "--eval_every_steps=5",
      "--early_stopping_patience=2", "--early_stopping_min_delta=2"]
  log = _run(run_script, script.script, args, str(tmp_path / "run.log"))
  stop_line = ("Early stopping: eval_f1 has not improved by more than 2 for "
               "2 evaluations (--early_stopping_patience=2); training ends "
               "at step 15 of 20.")
  assert stop_line in log
  assert _steps(out)[-1] == 15
  assert [entry["global_step"] for entry in _history(out)] == [5, 10, 15]
  _assert_same_checkpoint(os.path.join(out, "model.ckpt-15"),
                          os.path.join(root, "every", "model.ckpt-15"))
  log = _run(run_script, script.script, args, str(tmp_path / "rerun.log"))
  assert stop_line in log
  assert "Training from step" not in log
  assert _steps(out)[-1] == 15


def test_scoring_the_checkpoints_afterwards_gives_the_same_history(
    classifier, tmp_path, run_script):
  """--eval_all_checkpoints on a folder that kept every 5th update: the
  in-run history's lines, byte for byte (and one more for the starting
  point, step 0), and the same best checkpoint."""
  script, root = classifier
  folder = str(tmp_path / "every")
  subprocess.run(["cp", "-r", os.path.join(root, "every"), folder],
                 check=True)
  log = _run(run_script, script.script, script.args(root, folder) + [
      "--do_eval", "--eval_all_checkpoints"], str(tmp_path / "score.log"))
  with open(os.path.join(folder, "eval_history.jsonl")) as f:
    scored = f.read().splitlines()
  with open(os.path.join(root, "evaluated", "eval_history.jsonl")) as f:
    in_run = f.read().splitlines()
  assert json.loads(scored[0])["global_step"] == 0
  assert scored[1:] == in_run
  with open(os.path.join(folder, "run_info.json")) as f:
    got = json.load(f)["best_checkpoint"]
  with open(os.path.join(root, "evaluated", "run_info.json")) as f:
    want = json.load(f)["best_checkpoint"]
  if json.loads(scored[0])["eval_f1"] < want["value"]:
    assert got == want
  assert "Scored 5 checkpoints; 5 in eval_history.jsonl.\n" in log, log
  assert "Best checkpoint: eval_f1 = %.4f at step %d, kept as %s;" % (
      got["value"], got["global_step"], os.path.join(
          folder, got["checkpoint"])) in log, log
  # Scored already: a second run scores nothing.
  log = _run(run_script, script.script, script.args(root, folder) + [
      "--do_eval", "--eval_all_checkpoints"], str(tmp_path / "again.log"))
  assert "Scored 0 checkpoints; 5 in eval_history.jsonl" in log


def test_evaluator_beside_a_running_training(classifier, tmp_path,
                                             script_runner):
  """An evaluator started while the training runs (its own process, its
  own lock) scores the checkpoints as they come and ends once the
  training's last one is scored; its history is the in-run one."""
  script, root = classifier
  out = str(tmp_path / "out")
  training = script_runner.start(
      script.script, script.args(root, out) + [
          "--do_train", "--save_checkpoints_steps=5",
          "--keep_checkpoint_max=0"], TIMEOUT,
      output_path=str(tmp_path / "train.log"))
  deadline = time.monotonic() + TIMEOUT
  while not os.path.exists(os.path.join(out, "run_info.json")):
    assert training.alive() and time.monotonic() < deadline
    time.sleep(0.05)
  env = dict(os.environ, PYTHONPATH=conftest.REPO_ROOT)
  evaluator = subprocess.run(
      [sys.executable, script.script] + script.args(root, out) + [
          "--do_eval", "--eval_all_checkpoints", "--wait_for_checkpoints"],
      cwd=conftest.REPO_ROOT, env=env, capture_output=True, text=True,
      timeout=TIMEOUT)
  assert training.wait().returncode == 0
  assert evaluator.returncode == 0, evaluator.stderr[-3000:]
  assert ("Stopped waiting for checkpoints: the training's last checkpoint "
          "(step 20) is scored." in evaluator.stderr), evaluator.stderr
  with open(os.path.join(out, "eval_history.jsonl")) as f:
    scored = [json.loads(line) for line in f]
  in_run = _history(os.path.join(root, "evaluated"))
  assert [e for e in scored if e["global_step"] > 0] == in_run


BAD = [
    (["--do_train", "--eval_every_steps=5"],
     "--eval_every_steps evaluates on the dev set during training; add "
     "--do_eval (and the dev data it reads)."),
    (["--do_train", "--do_eval", "--eval_every_epochs=1",
      "--best_metric=eval_mcc"],
     "--best_metric=eval_mcc is not a metric this task's evaluation reports; "
     "pass one of eval_accuracy, eval_f1, eval_loss, loss."),
    (["--do_train", "--do_eval", "--early_stopping_patience=2"],
     "--early_stopping_patience counts evaluations during training; add "
     "--do_train --do_eval and --eval_every_steps or --eval_every_epochs."),
    (["--do_eval", "--wait_for_checkpoints"],
     "--wait_for_checkpoints waits to score new checkpoints; add "
     "--eval_all_checkpoints."),
    (["--do_train", "--do_eval", "--eval_all_checkpoints"],
     "--eval_all_checkpoints scores the checkpoints of a folder, beside or "
     "after its training; to evaluate while this run trains, use "
     "--eval_every_steps or --eval_every_epochs instead."),
    (["--do_eval", "--eval_all_checkpoints"],
     "--output_dir={out} holds no checkpoint to score. Point --output_dir "
     "at a training run's folder, or add --wait_for_checkpoints to wait for "
     "a training that is starting."),
    (["--do_eval", "--eval_all_checkpoints", "--wait_for_checkpoints"],
     "--output_dir={out} holds no checkpoint to score and no training is "
     "running there. Point --output_dir at a training run's folder."),
    (["--do_predict", "--use_checkpoint=7"],
     "--use_checkpoint=7 names no checkpoint; --output_dir={out} holds "
     "model.ckpt-0, model.ckpt-5, model.ckpt-10, model.ckpt-15, "
     "model.ckpt-20. Pass best, latest, a step or a checkpoint prefix."),
    (["--do_eval", "--use_checkpoint=best"],
     "--use_checkpoint=best: --output_dir={out} records no best checkpoint "
     "(only training that evaluates on a schedule, or "
     "--eval_all_checkpoints, chooses one). Pass --use_checkpoint=latest or "
     "a step."),
]


def _listing(folder):
  return sorted((os.path.relpath(os.path.join(dirpath, name), folder),
                 os.path.getsize(os.path.join(dirpath, name)))
                for dirpath, _, names in os.walk(folder) for name in names)


@pytest.mark.parametrize("flags, message", BAD)
def test_bad_evaluation_flags_end_in_one_line(flags, message, tmp_path,
                                              run_script, classifier):
  """Each ends in one line before anything is written: in an empty folder,
  or (for the flags that name a checkpoint) in a copy of a trained one."""
  script, root = classifier
  out = str(tmp_path / "out")
  if any(flag.startswith("--use_checkpoint") for flag in flags):
    subprocess.run(["cp", "-r", os.path.join(root, "every"), out],
                   check=True)
  else:
    os.makedirs(out)
  before = _listing(out)
  result = run_script(script.script, script.args(root, out) + flags)
  lines = (result.stdout + result.stderr).splitlines()
  assert result.returncode == 2, lines
  assert lines == ["%s: error: %s" % (script.script,
                                      message.format(out=out))], lines
  assert _listing(out) == before


def test_conversion_of_the_folder_takes_its_best_checkpoint(classifier,
                                                            tmp_path,
                                                            run_script):
  from safetensors import numpy as safetensors_numpy  # pylint: disable=import-outside-toplevel
  script, root = classifier
  evaluated = os.path.join(root, "evaluated")
  with open(os.path.join(evaluated, "run_info.json")) as f:
    best = json.load(f)["best_checkpoint"]
  out = str(tmp_path / "hf")
  result = run_script("convert_checkpoint.py", ["--input=" + evaluated,
                                                "--output_dir=" + out])
  assert result.returncode == 0, result.stderr[-3000:]
  assert "Converting %s, the best checkpoint that run_info.json records." % (
      os.path.join(evaluated, best["checkpoint"])) in result.stderr
  weights = safetensors_numpy.load_file(os.path.join(out,
                                                     "model.safetensors"))
  reader = tf.train.load_checkpoint(os.path.join(evaluated,
                                                 best["checkpoint"]))
  np.testing.assert_array_equal(weights["classifier.weight"],
                                reader.get_tensor("output_weights"))
  del script  # The folder is the evaluated run's.


def _write_own_csv(root, folder):
  """The classifier's MRPC pairs (root's) as files of one's own (CSV,
  columns by name) in `folder`, for --train_file / --dev_file."""
  import csv  # pylint: disable=import-outside-toplevel
  for name, source in (("train.csv", "train.tsv"), ("dev.csv", "dev.tsv")):
    with open(os.path.join(root, "mrpc", source), encoding="utf-8-sig") as f:
      rows = list(csv.reader(f, delimiter="\t", quotechar=None))[1:]
    with open(os.path.join(folder, name), "w", newline="") as f:
      writer = csv.writer(f)
      writer.writerow(["label", "text", "pair"])
      writer.writerows([row[0], row[3], row[4]] for row in rows)


# Training options with evaluations: each run with and without them must
# end with the same weights.
OPTIONS = {
    "accumulation": ["--num_accumulation_steps=2"],
    "checkpointing": ["--gradient_checkpointing"],
    "bf16": ["--precision=bf16"],
    "xla": ["--use_xla"],
    "mirrored": ["--distribution=mirrored", "--devices=/cpu:0,/cpu:1"],
    "own_files": None,  # --train_file / --dev_file instead of GLUE's files
}


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_evaluations_leave_every_kind_of_training_bit_identical(
    option, classifier, tmp_path, run_script):
  script, root = classifier
  runs = {}
  for name, extra in (("plain", ["--do_train"]),
                      ("evaluated", ["--do_train", "--do_eval",
                                     "--eval_every_steps=5"])):
    out = str(tmp_path / name)
    args = script.args(root, out)
    if OPTIONS[option] is None:
      _write_own_csv(root, str(tmp_path))
      args = [arg for arg in args if not arg.startswith(("--task_name",
                                                         "--data_dir"))] + [
          "--train_file=%s" % (tmp_path / "train.csv"),
          "--dev_file=%s" % (tmp_path / "dev.csv"),
          "--text_a_column=text", "--text_b_column=pair"]
    else:
      args += OPTIONS[option]
    _run(run_script, script.script, args + extra,
         str(tmp_path / (name + ".log")))
    runs[name] = out
  assert _steps(runs["evaluated"])[-1] == _steps(runs["plain"])[-1] == 20
  _assert_same_checkpoint(os.path.join(runs["evaluated"], "model.ckpt-20"),
                          os.path.join(runs["plain"], "model.ckpt-20"))
  history = _history(runs["evaluated"])
  assert [entry["global_step"] for entry in history] == [5, 10, 15, 20]
  assert os.listdir(os.path.join(runs["evaluated"], "best"))


# A child that runs run_classifier.py as `python run_classifier.py` does,
# with one of its steps sending the process a signal at update 10: in the
# middle of the evaluation (before the task's evaluation runs) or between
# the history's write and the best checkpoint's.
_SIGNAL_AT = r'''
import os, runpy, signal, sys
sys.path.insert(0, os.getcwd())
from driver import eval_history
from tasks import classification

where, signum = sys.argv[1], int(sys.argv[2])

def signalled(function, after):
  def wrapper(self, *args, **kwargs):
    step = eval_history.STEP
    at_ten = (args[0].get(step) if after else
              int(kwargs["checkpoint_path"].rsplit("-", 1)[1])) == 10
    if at_ten and not after:
      os.kill(os.getpid(), signum)
    result = function(self, *args, **kwargs)
    if at_ten and after:
      os.kill(os.getpid(), signum)
    return result
  return wrapper

if where == "evaluating":
  classification.ClassificationTask.evaluate = signalled(
      classification.ClassificationTask.evaluate, after=False)
else:
  eval_history.EvalHistory.add = signalled(eval_history.EvalHistory.add,
                                           after=True)
sys.argv = ["run_classifier.py"] + sys.argv[3:]
runpy.run_path("run_classifier.py", run_name="__main__")
'''


@pytest.mark.parametrize("where", ["evaluating", "recording"])
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_stopped_in_an_evaluation_resumes_to_the_same_history_and_best(
    classifier, where, signum, tmp_path, run_script):
  """Killed (or SIGTERM) while evaluating update 10, or after its history
  entry and before the best checkpoint's: the run ends (SIGTERM: at once,
  one line), and the same command again ends with the history, best
  checkpoint and weights of the uninterrupted run."""
  script, root = classifier
  out = str(tmp_path / "out")
  args = script.args(root, out) + ["--do_train", "--do_eval",
                                   "--eval_every_steps=5", "--do_predict"]
  child = tmp_path / "signal_at.py"
  child.write_text(_SIGNAL_AT)
  env = dict(os.environ, PYTHONPATH=conftest.REPO_ROOT)
  stopped = subprocess.run(
      [sys.executable, str(child), where, str(int(signum))] + args,
      cwd=conftest.REPO_ROOT, env=env, capture_output=True, text=True,
      timeout=TIMEOUT)
  if signum == signal.SIGKILL:
    assert stopped.returncode == -signal.SIGKILL, stopped.stderr[-3000:]
  else:
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-3000:]
    assert stopped.stderr.splitlines()[-1] == (
        "run_classifier.py: Training stopped by SIGTERM at step 10/20; "
        "checkpoint %s holds it. Run the same command again to resume." %
        os.path.join(out, "model.ckpt-10")), stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr
  assert _steps(out)[-1] == 10
  steps = [entry["global_step"] for entry in _history(out)]
  assert steps == ([5] if where == "evaluating" else [5, 10])
  log = _run(run_script, script.script, args, str(tmp_path / "rerun.log"))
  assert "Resuming from %s" % os.path.join(out, "model.ckpt-10") in log
  reference = os.path.join(root, "evaluated")
  for name in ("eval_history.jsonl", "test_results.tsv"):
    with open(os.path.join(out, name), "rb") as a, open(
        os.path.join(reference, name), "rb") as b:
      assert a.read() == b.read(), name
  with open(os.path.join(out, "run_info.json")) as a, open(
      os.path.join(reference, "run_info.json")) as b:
    assert json.load(a)["best_checkpoint"] == json.load(b)[
        "best_checkpoint"]
  assert sorted(os.listdir(os.path.join(out, "best"))) == sorted(
      os.listdir(os.path.join(reference, "best")))
  _assert_same_checkpoint(os.path.join(out, "model.ckpt-20"),
                          os.path.join(reference, "model.ckpt-20"))
  assert not test_faults._leftovers(out)  # pylint: disable=protected-access


def test_an_interval_without_dev_data_ends_in_one_line(classifier, tmp_path,
                                                       run_script):
  """Your own training file, an evaluation interval and no --dev_file."""
  script, root = classifier
  _write_own_csv(root, str(tmp_path))
  out = str(tmp_path / "out")
  args = [arg for arg in script.args(root, out)
          if not arg.startswith(("--task_name", "--data_dir"))] + [
              "--train_file=%s" % (tmp_path / "train.csv"),
              "--text_a_column=text", "--text_b_column=pair", "--do_train",
              "--do_eval", "--eval_every_epochs=1"]
  result = run_script(script.script, args)
  assert result.returncode == 2
  assert (result.stdout + result.stderr).splitlines() == [
      "run_classifier.py: error: --do_eval needs --dev_file (a CSV, TSV or "
      "JSON Lines file)."]
  assert not os.path.exists(out)
