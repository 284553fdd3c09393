"""What the commands print: a progress report by default, Google's detailed
log with -v 1, help without TensorFlow, and the settings a run records so
that later commands need not be told again.

The default-output test runs run_classifier.py as a new user does (a fresh
`python` process, TensorFlow's own start-up included, no logging variables
set) on the repository's MRPC sample with a tiny model.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=g-direct-tensorflow-import

import conftest
from engine import graph_keys
import predictor
import script_runner
from reproduction import plan
from runner import model_graphs
from startup import precision as startup_precision
import test_predictor

REPO_ROOT = conftest.REPO_ROOT
TINY_CONFIG = os.path.join(REPO_ROOT, "sample_data", "tiny_bert_config.json")
MRPC_SAMPLE = os.path.join(REPO_ROOT, "sample_data", "mrpc_sample")
# The commands a user types (the repository's root scripts).
COMMANDS = ("run_classifier.py", "run_squad.py", "run_pretraining.py",
            "create_pretraining_data.py", "extract_features.py",
            "predictor.py", "memory_plan.py", "convert_checkpoint.py",
            "reproduce.py", "demo.py", "squad_evaluate.py", "run_ner.py",
            "run_swag.py", "create_vocab.py")


def _vocab_file():
  return os.path.join(conftest.ASSETS_DIR, "bert_vocab", "uncased",
                      "vocab.txt")


def _mrpc_args(output_dir, *actions):
  return ["--task_name=MRPC", "--data_dir=" + MRPC_SAMPLE,
          "--vocab_file=" + _vocab_file(), "--bert_config_file=" + TINY_CONFIG,
          "--output_dir=" + output_dir, "--max_seq_length=48",
          "--train_batch_size=32", "--num_train_epochs=1"] + list(actions)


def _newcomer_env():
  """This process's environment without what the suite adds: the variable
  that quiets TensorFlow and the shared compilation cache (loading from it
  makes TensorFlow log lines a user never sees)."""
  env = dict(conftest.env_without_compilation_cache(), PYTHONPATH=REPO_ROOT)
  env.pop("TF_CPP_MIN_LOG_LEVEL", None)
  return env


def _default_run(root):
  """Runs run_classifier.py as a new user starts it, in `root`; its output
  (both streams, in order) goes to root/run.log."""
  proc = subprocess.run(
      [sys.executable, "run_classifier.py"] + _mrpc_args(
          os.path.join(root, "out"), "--do_train", "--do_eval",
          "--do_predict", "--export_dir=" + os.path.join(root, "export")),
      cwd=REPO_ROOT, env=_newcomer_env(), stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True, timeout=900)
  with open(os.path.join(root, "run.log"), "w") as f:
    f.write(proc.stdout)
  assert proc.returncode == 0, proc.stdout[-3000:]


@pytest.fixture(scope="module")
def default_run(shared_dir):
  """A train/eval/predict/export run of run_classifier.py, made once per
  test session; returns (output lines, output_dir, export_dir)."""
  root = conftest.build_once(shared_dir, "output_default_run", _default_run)
  with open(os.path.join(root, "run.log")) as f:
    lines = f.read().splitlines()
  return lines, os.path.join(root, "out"), os.path.join(root, "export")


@pytest.mark.slow
def test_default_run_is_a_short_progress_report(default_run):
  lines, out, export = default_run
  # Settings, a progress line per phase, results: a few dozen lines (Google's
  # log of the same run has hundreds: every variable three times, the first
  # examples' ids, masks and segments three times).
  assert 15 <= len(lines) <= 50, "\n".join(lines)
  # Each line is the time of day and the message, without absl's prefix
  # (level, date, thread, file and line).
  for line in lines:
    assert re.match(r"\d\d:\d\d:\d\d ", line), line
  assert re.match(r"\d\d:\d\d:\d\d Done in \d+:\d\d:\d\d: outputs in "
                  r"%s, SavedModel in %s/\d+\.$" % (
                      re.escape(out), re.escape(export)), lines[-1]), lines[-1]
  text = "\n".join(lines)
  for phase in ("Running training", "step 6/6 (100.0%)", "Eval results",
                "eval_accuracy = ", "Predicting: 5 batches",
                "Exported "):
    assert phase in text, phase
  for detail in ("Trainable Variables", "*** Example ***", "input_ids:",
                 "*** Features ***", "INFO:tensorflow", "WARNING:tensorflow",
                 "Restoring parameters", "oneDNN", "cuInit", "cuda",
                 "deprecated", "Issue encountered when serializing"):
    assert detail not in text, detail


@pytest.mark.slow
def test_default_run_warns_only_about_the_run(default_run):
  """The one warning is about the user's run (no --init_checkpoint); no
  error, and nothing from TensorFlow's start-up (W0000, E0000, ...)."""
  lines, _, _ = default_run
  warnings = script_runner.warning_lines("\n".join(lines))
  assert len(warnings) == 1, warnings
  assert warnings[0].endswith(" Warning: No --init_checkpoint: training "
                              "starts from random weights, not from a "
                              "pre-trained model."), warnings


@pytest.mark.slow
def test_export_leaves_the_dropout_registry_out(default_run):
  """The exported MetaGraph has no collection for the dropout sites' Python
  registry, which it cannot hold (TensorFlow warned about it)."""
  _, _, export_dir = default_run
  (path,) = glob.glob(os.path.join(export_dir, "*", "saved_model.pb"))
  saved_model = saved_model_pb2.SavedModel()
  with open(path, "rb") as f:
    saved_model.ParseFromString(f.read())
  (meta_graph,) = saved_model.meta_graphs
  assert graph_keys.DROPOUT_SITES not in meta_graph.collection_def
  assert "serving_default" in meta_graph.signature_def
  signature = meta_graph.signature_def["serving_default"]
  assert signature.method_name == "tensorflow/serving/predict"
  assert sorted(signature.inputs) == ["input_ids", "input_mask",
                                      "segment_ids"]
  assert sorted(signature.outputs) == ["probabilities"]


@pytest.mark.slow
def test_verbose_flag_logs_googles_details(default_run, tmp_path, run_script):
  """-v 1 brings back the variable listing (loaded ones marked), the input
  shapes and the first examples' features, in Google's words."""
  _, trained_dir, _ = default_run
  result = run_script("run_classifier.py", _mrpc_args(
      str(tmp_path / "out"), "--do_eval", "-v", "1",
      "--init_checkpoint=" + os.path.join(trained_dir, "model.ckpt-6")),
                      timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  text = result.stderr
  assert "**** Trainable Variables ****" in text
  assert ("name = bert/embeddings/word_embeddings:0, shape = (30522, 64), "
          "*INIT_FROM_CKPT*") in text
  assert "*** Features ***" in text
  assert "name = input_ids, shape = (8, 48)" in text
  assert text.count("*** Example ***") == 5
  assert "guid: dev-1\n" in text
  assert "input_ids: 101 " in text  # [CLS] first


@pytest.mark.slow
def test_predicting_from_init_checkpoint_names_its_weights(
    default_run, tmp_path, run_script):
  """A run that only predicts, from --init_checkpoint, says it predicts
  with those weights, without a warning that it has no checkpoint."""
  _, trained_dir, _ = default_run
  init = os.path.join(trained_dir, "model.ckpt-6")
  result = run_script("run_classifier.py", _mrpc_args(
      str(tmp_path / "out"), "--do_predict", "--init_checkpoint=" + init),
                      timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "Predicting with the weights of %s ..." % init in result.stderr
  assert "Warning" not in result.stderr, result.stderr


def _event_steps(folder, tag):
  steps = []
  for path in glob.glob(os.path.join(folder, "events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(path):
      if any(value.tag == tag for value in event.summary.value):
        steps.append(event.step)
  return sorted(steps)


@pytest.mark.slow
def test_save_summary_steps_sets_the_scalar_steps(tmp_path, run_script):
  """200 examples in batches of 32 for 2 epochs: 12 updates; scalars every
  5 updates and at the end. (The default, 100, gives the end only.)"""
  out = str(tmp_path / "out")
  args = _mrpc_args(out, "--do_train", "--save_summary_steps=5")
  args[args.index("--num_train_epochs=1")] = "--num_train_epochs=2"
  result = run_script("run_classifier.py", args, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  assert _event_steps(out, "loss") == [5, 10, 12]


def test_runner_input_does_not_autotune():
  """tf.data's autotuning model thread made closing a session wait for its
  sleep (up to a minute); the runner's datasets turn it off."""
  dataset = model_graphs.call_input_fn(
      lambda params: tf.data.Dataset.range(10).batch(params["batch_size"]),
      {"batch_size": 2}, skip_batches=1)
  assert dataset.options().autotune.enabled is False
  assert [list(batch) for batch in dataset.as_numpy_iterator()] == [
      [2, 3], [4, 5], [6, 7], [8, 9]]


# ------------------------------------------------------------------ help


def _help_in_subprocess(script, arg):
  """(exit status, stdout, whether TensorFlow was imported) of `python
  <script> <arg>`, run in a fresh process that reports sys.modules."""
  code = ("import runpy, sys\n"
          "sys.argv = [%r, %r]\n"
          "try:\n"
          "  runpy.run_path(%r, run_name='__main__')\n"
          "  status = 0\n"
          "except SystemExit as e:\n"
          "  status = e.code or 0\n"
          "sys.stderr.write('\\nTENSORFLOW=%%s STATUS=%%s\\n' %% (\n"
          "    'tensorflow' in sys.modules, status))\n") % (
              script, arg, os.path.join(REPO_ROOT, script))
  proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT,
                        env=dict(os.environ, PYTHONPATH=REPO_ROOT),
                        stdin=subprocess.DEVNULL, capture_output=True,
                        text=True, timeout=300)
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("TENSORFLOW="), proc.stderr[-3000:]
  loaded, status = last.split()
  return int(status.split("=")[1]), proc.stdout, loaded == "TENSORFLOW=True"


@pytest.mark.parametrize("script", COMMANDS)
def test_help_exits_0_without_loading_tensorflow(script):
  status, out, loaded = _help_in_subprocess(script, "--help")
  assert status == 0
  assert not loaded
  assert "usage" in out.lower()


def test_help_lists_the_script_flags_and_the_verbose_flag():
  status, out, loaded = _help_in_subprocess("run_classifier.py", "--help")
  assert (status, loaded) == (0, False)
  for flag in ("--task_name", "--save_summary_steps", "--precision"):
    assert flag in out
  assert "-v 1" in out
  status, out, loaded = _help_in_subprocess("run_squad.py", "--helpfull")
  assert (status, loaded) == (0, False)
  assert "--verbosity" in out and "--doc_stride" in out


@pytest.mark.parametrize("script, inputs, outputs", [
    ("run_classifier.py", "[batch, length]", "returns probabilities [batch, "
     "labels] (for a regression task, predictions [batch])"),
    ("run_squad.py", "[batch, length]",
     "returns start_logits and end_logits [batch, length]. Its \"text\" "
     "signature takes question and context [batch]"),
    ("run_ner.py", "[batch, length]", "returns tag_ids [batch, length]"),
    ("run_swag.py", "[batch, choices, length]",
     "returns probabilities [batch, choices]")])
def test_export_help_describes_the_scripts_own_signature(script, inputs,
                                                         outputs):
  """Each script's --export_dir help names what its export takes and
  returns (the signatures runner/serving_input.py and the task heads
  make), not another script's."""
  status, out, _ = _help_in_subprocess(script, "--help")
  assert status == 0
  start = out.index("--export_dir")
  text = " ".join(out[start:out.index("\n  --", start)].split())
  assert "segment_ids %s" % inputs in text, text
  assert outputs in text, text


# ------------------------------------------------------- precision note


AVX2_ONLY = {"fpu", "sse4_2", "avx", "avx2", "fma"}


@pytest.mark.parametrize("precision,features,faster", [
    ("bf16", AVX2_ONLY, "fp32"),
    ("bf16", set(), "fp32"),
    ("bf16", AVX2_ONLY | {"avx512f", "avx512_bf16"}, None),
    ("bf16", AVX2_ONLY | {"amx_tile", "amx_bf16"}, None),
    ("fp32", AVX2_ONLY, None),
    ("fp32", AVX2_ONLY | {"avx512_bf16"}, None),
])
def test_precision_note(precision, features, faster):
  note = startup_precision.precision_note(precision, features)
  if faster is None:
    assert note is None
  else:
    assert "\n" not in note
    assert "--precision=bf16" in note
    assert "--precision=%s, which would be faster" % faster in note


# ------------------------------------------------------- SQuAD windows


@pytest.fixture(scope="module")
def squad_dir(shared_dir, run_script):
  """test_predictor's SQuAD run: trained with --max_seq_length=64
  --max_query_length=16 --doc_stride=24 and exported."""
  return conftest.build_once(
      shared_dir, "predictor_squad",
      lambda root: test_predictor._build_squad(run_script, root))  # pylint: disable=protected-access


@pytest.mark.slow
def test_squad_export_and_predictor_reuse_the_window_flags(squad_dir,
                                                           tmp_path,
                                                           run_script):
  """Exported again and served without --doc_stride / --max_query_length
  (the defaults, 128 and 64, do not fit a 64-token window), the model
  answers exactly as with the training run's values given."""
  with open(os.path.join(squad_dir, "out", "run_info.json")) as f:
    record = json.load(f)
  assert (record["doc_stride"], record["max_query_length"]) == (24, 16)
  export_dir = str(tmp_path / "export")
  result = run_script("run_squad.py", [
      "--vocab_file=" + _vocab_file(), "--bert_config_file=" + TINY_CONFIG,
      "--output_dir=" + os.path.join(squad_dir, "out"),
      "--max_seq_length=64", "--export_dir=" + export_dir], timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "--doc_stride=24, the training run's" in result.stderr

  questions = test_predictor._squad_questions(squad_dir)  # pylint: disable=protected-access
  lines = "".join("%s\t%s\n" % pair for pair in questions.values())
  without = run_script("predictor.py", ["--export_dir=" + export_dir],
                       timeout=600, stdin=lines)
  given = run_script("predictor.py", [
      "--export_dir=" + os.path.join(squad_dir, "export"),
      "--doc_stride=24", "--max_query_length=16"], timeout=600, stdin=lines)
  assert without.returncode == 0, without.stderr[-3000:]
  assert given.returncode == 0, given.stderr[-3000:]
  answers = [json.loads(line) for line in without.stdout.splitlines()]
  assert len(answers) == len(questions)
  assert answers == [json.loads(line) for line in given.stdout.splitlines()]
  model = predictor.load(export_dir)
  assert (model.doc_stride, model.max_query_length) == (24, 16)


# ------------------------------------------------------- SQuAD slices


def _squad(num_articles):
  return {"version": "1.1", "data": [
      {"title": "a%d" % i, "paragraphs": [{"context": "c", "qas": []}]}
      for i in range(num_articles)]}


def test_split_squad_takes_a_small_eval_slice():
  train, evaluation = plan.split_squad_articles(_squad(6), 2,
                                                num_eval_articles=1)
  assert [a["title"] for a in train["data"]] == ["a0", "a1"]
  assert [a["title"] for a in evaluation["data"]] == ["a2"]
  _, rest = plan.split_squad_articles(_squad(6), 2)
  assert [a["title"] for a in rest["data"]] == ["a2", "a3", "a4", "a5"]
  for bad in (0, 5):
    with pytest.raises(ValueError, match="pick a number between 1 and 4"):
      plan.split_squad_articles(_squad(6), 2, num_eval_articles=bad)


@pytest.mark.slow
def test_resume_prints_no_deprecation_notice(default_run, tmp_path,
                                             run_script):
  """Resuming (the Saver's bookkeeping of the folder's checkpoints) and
  deleting checkpoints beyond --keep_checkpoint_max call functions
  TensorFlow marks deprecated; their notices are not printed."""
  _, trained_dir, _ = default_run
  out = str(tmp_path / "out")
  shutil.copytree(trained_dir, out)
  args = _mrpc_args(out, "--do_train", "--keep_checkpoint_max=1")
  args[args.index("--num_train_epochs=1")] = "--num_train_epochs=2"
  result = run_script("run_classifier.py", args, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "Resuming from " in result.stderr
  assert "deprecated" not in result.stderr
  assert not glob.glob(os.path.join(out, "model.ckpt-0.*"))


def test_reproduce_dry_run_prints_no_tensorflow_notices(tmp_path):
  """reproduce.py loads TensorFlow to check the model's casing; a new
  user's dry run prints its own lines only (no CUDA or oneDNN notices)."""
  proc = subprocess.run(
      [sys.executable, "reproduce.py", "--bert_dir=" + conftest.MINILM_DIR,
       "--do_lower_case=true",
       "--glue_dir=" + os.path.join(conftest.ASSETS_DIR, "glue"),
       "--tasks=MRPC", "--seeds=1", "--dry_run",
       "--output_dir=" + str(tmp_path / "out")],
      cwd=REPO_ROOT, env=_newcomer_env(), stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-3000:]
  lines = proc.stdout.splitlines()
  assert lines[0].startswith("reproduce: ") and " cells on " in lines[0]
  commands = lines[1:]
  assert commands and all(line.startswith(sys.executable + " ")
                          for line in commands), lines
