"""Faults injected at points drawn from a seed into every training-type
command; each trial checks that nothing was lost.

The commands: run_classifier.py (also evaluating during training, whose
history and best checkpoint must then come out whole too), run_squad.py,
run_pretraining.py, create_pretraining_data.py (--mode=faithful and
--mode=scalable) and reproduce.py, each on tiny inputs written here (2 layers, hidden 32, a
vocabulary of 28 words, max_seq_length 32, 20 to 40 updates). Each command
first runs once uninterrupted (its reference, made once per session and
shared by every trial and xdist worker); each trial then injects one fault
into a fresh run and checks what the user is promised:

  kill -9   the command is killed at a moment drawn from the seed (after
            the k-th line of its output, or after the k-th file appeared
            in its output folder, then a delay of up to 0.2 s), then run
            again with the same flags. The training scripts resume: the
            final checkpoint (every tensor, optimizer slots included) and
            the output files (eval_results.txt, test_results.tsv,
            predictions.json, nbest_predictions.json, eval_results.json,
            the feature records) equal the reference's exactly, and nothing
            unfinished (*.tmp, TensorFlow's temporary files, run.lock) is
            left. create_pretraining_data.py cannot resume mid-way by
            design (it builds everything in memory, or shard by shard into
            temporary files renamed at the end): what it promises is that a
            killed run leaves no output file half-written (each file there
            holds exactly the reference's records) and that a rerun writes
            the reference's records. reproduce.py is killed with its cells
            (the process group, as a crash or a lost session ends them); the
            rerun skips the finished cells, resumes the interrupted one from
            its checkpoint and reports the reference's scores.
  SIGTERM   sent during training (after the k-th checkpoint, then up to
            0.1 s): the training scripts save a checkpoint of the update
            reached and exit with 143 and one line naming it; the rerun
            ends as the reference. create_pretraining_data.py exits with
            143 and one line at any moment, leaving nothing half-written;
            reproduce.py stops its cells (each saves a checkpoint) and exits
            with 130 and one line, as docs/reproduce.md says (before its
            grid starts: 143 and the line of any command), then resumes;
            none of its cells outlives it.
  full disk the output folder fills at a point drawn from the seed, in both
            of test_faults.Disk's ways: a file-size limit (rlimit, from the
            start or after the k-th checkpoint save) and, where mounting
            works, a tmpfs with that much room. The run ends with status 1
            and one line naming the folder and what did not fit, leaves
            nothing half-written, and once there is room the same command
            ends as the reference.
  damaged   a cache file cut short or with a byte flipped at a drawn offset:
            a run_classifier.py feature file (train.tf_record) between a
            kill and the resume is written again, saying why, and training
            resumes to the reference's weights; run_squad.py writes its
            feature file anew each run, so the resume is the reference's
            again. run_pretraining.py's input records are the user's own
            file, not a cache: a damaged one ends in one line naming it
            (never training silently on fewer records), and with the intact
            file the same command ends as the reference.

Each test is one trial. Its fault kind and command are recorded in the
test's user properties; conftest.py's terminal summary counts them, tried
and survived per kind, after the tests (visible with -q and with xdist).
Every trial asserts that it survived.

The seed is fixed for CI. BERT_CHAOS_SEED=<n> draws other points, and
BERT_CHAOS_TRIALS=<n> runs n trials of each kind and command, for a longer
soak on a workstation:

    BERT_CHAOS_SEED=7 BERT_CHAOS_TRIALS=20 python -m pytest -q -n 2 \\
      tests/test_chaos.py
"""
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import conftest
import pretraining_records
import test_faults
# Fixtures of test_faults: a folder that fills up, by rlimit or tmpfs.
from test_faults import disk  # pylint: disable=unused-import
from test_faults import limited_run_script  # pylint: disable=unused-import

pytestmark = pytest.mark.slow

REPO_ROOT = conftest.REPO_ROOT
TIMEOUT = 300
SEED = int(os.environ.get("BERT_CHAOS_SEED", "20240611"))
TRIALS = int(os.environ.get("BERT_CHAOS_TRIALS", "1"))
VOCAB = test_faults.VOCAB
WORDS = test_faults.WORDS
PAGE = test_faults.PAGE
# The most seconds a fault waits after its trigger (output line or file).
MAX_DELAY = 0.2
CHAOS_PROPERTY = "chaos_trial"


# ------------------------------------------------------------ the inputs


def _sentence(rng, low=3, high=7):
  return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def _write_squad(path, num_questions, seed):
  """A SQuAD 1.1 file of contexts made of the tiny vocabulary's words;
  each question's answer is a word of its context."""
  rng = random.Random(seed)
  paragraphs = []
  for i in range(num_questions):
    words = [rng.choice(WORDS) for _ in range(rng.randint(10, 30))]
    context = " ".join(words) + " ."
    at = rng.randrange(len(words))
    start = len(" ".join(words[:at])) + (1 if at else 0)
    paragraphs.append({"context": context, "qas": [{
        "id": "q%d" % i, "question": "%s %s ?" % (words[at], _sentence(
            rng, 1, 3)),
        "answers": [{"text": words[at], "answer_start": start}]}]})
  with open(path, "w", encoding="utf-8") as f:
    json.dump({"version": "1.1", "data": [{"title": "t",
                                           "paragraphs": paragraphs}]}, f)


def _write_corpus(path, num_documents, seed):
  """Text for create_pretraining_data.py: a sentence per line, an empty
  line between documents."""
  rng = random.Random(seed)
  with open(path, "w", encoding="utf-8") as f:
    for _ in range(num_documents):
      f.write("".join(_sentence(rng) + " .\n"
                      for _ in range(rng.randint(2, 8))) + "\n")


def _build_inputs(root):
  test_faults._write_model_files(root)  # pylint: disable=protected-access
  test_faults._write_mrpc(  # pylint: disable=protected-access
      os.path.join(root, "glue", "MRPC"), test_faults.NUM_TRAIN, 40)
  _write_squad(os.path.join(root, "squad.json"), 40, 1)
  _write_corpus(os.path.join(root, "corpus.txt"), 3000, 2)
  pretraining_records.write_records(
      os.path.join(root, "records.tfrecord"),
      # Fewer records than the 160 examples of 40 updates of 4: training
      # reads the whole file.
      pretraining_records.random_examples(100, 32, 5, len(VOCAB), 3))


@pytest.fixture(scope="module")
def inputs(shared_dir):
  """The folder of the tiny model's files and every command's input."""
  return conftest.build_once(shared_dir, "chaos_inputs", _build_inputs)


# ------------------------------------------------------------ the commands


def _model_flags(inputs_dir):
  return ["--vocab_file=%s" % os.path.join(inputs_dir, "vocab.txt"),
          "--bert_config_file=%s" % os.path.join(inputs_dir,
                                                 "bert_config.json")]


class Command(object):
  """A command of the suite: how it runs on the tiny inputs and what of
  its output folder an uninterrupted run decides.

  Attributes:
    name: as the summary names it.
    script: the script's file.
    results: the files whose bytes must equal the reference's.
    records: the TFRecord files whose examples must equal the reference's.
    slot: a variable the final checkpoint must hold (an optimizer slot);
      None for a command that does not train.
    keeps_best: whether the best checkpoint in best/ and its record in
      run_info.json must be the reference's.
  """
  name = script = slot = None
  results = records = ()
  # Whether evaluations keep a best checkpoint in best/.
  keeps_best = False

  def args(self, inputs_dir, out, records=None):
    """The command line writing into folder `out`."""
    raise NotImplementedError

  def outputs(self, out):
    """The output files of the command in folder `out` (for
    create_pretraining_data.py, what --output_file names)."""
    return [os.path.join(out, name) for name in self.results + self.records]


class Classifier(Command):
  name = "run_classifier"
  script = "run_classifier.py"
  slot = "output_weights/adam_m"
  results = ("eval_results.txt", "test_results.tsv")
  records = ("train.tf_record",)

  def args(self, inputs_dir, out, records=None):
    return test_faults._classifier_args(  # pylint: disable=protected-access
        inputs_dir, out, ["do_train", "do_eval", "do_predict"],
        data_dir=os.path.join(inputs_dir, "glue", "MRPC"))


class EvaluatingClassifier(Classifier):
  """run_classifier.py evaluating after every 5th of its 40 updates
  (between the checkpoints every 10th): its history and its best
  checkpoint must come out as the uninterrupted run's too."""
  name = "run_classifier --eval_every_steps"
  results = Classifier.results + ("eval_history.jsonl",)
  keeps_best = True

  def args(self, inputs_dir, out, records=None):
    return super().args(inputs_dir, out) + ["--eval_every_steps=5"]


class Squad(Command):
  name = "run_squad"
  script = "run_squad.py"
  slot = "cls/squad/output_weights/adam_m"
  results = ("predictions.json", "nbest_predictions.json",
             "eval_results.json")
  records = ("train.tf_record",)

  def args(self, inputs_dir, out, records=None):
    data = os.path.join(inputs_dir, "squad.json")
    return _model_flags(inputs_dir) + [
        "--train_file=%s" % data, "--predict_file=%s" % data, "--do_train",
        "--do_predict", "--output_dir=%s" % out, "--max_seq_length=32",
        "--max_query_length=8", "--doc_stride=8", "--train_batch_size=4",
        "--num_train_epochs=2", "--learning_rate=1e-3",
        "--save_checkpoints_steps=5", "--seed=7", "--predict_batch_size=8"]


class Pretraining(Command):
  name = "run_pretraining"
  script = "run_pretraining.py"
  slot = "cls/predictions/output_bias/adam_m"
  results = ("eval_results.txt",)

  def args(self, inputs_dir, out, records=None):
    return _model_flags(inputs_dir)[1:] + [
        "--input_file=%s" % (records or os.path.join(inputs_dir,
                                                     "records.tfrecord")),
        "--output_dir=%s" % out, "--max_seq_length=32",
        "--max_predictions_per_seq=5", "--train_batch_size=4",
        "--num_train_steps=40", "--num_warmup_steps=5",
        "--save_checkpoints_steps=10", "--learning_rate=1e-3", "--do_train",
        "--do_eval", "--eval_batch_size=4", "--max_eval_steps=3", "--seed=7"]


class PretrainingData(Command):
  """create_pretraining_data.py in one mode; its output folder holds only
  what --output_file names."""
  script = "create_pretraining_data.py"

  def __init__(self, mode):
    self.mode = mode
    self.name = "create_pretraining_data --mode=%s" % mode
    if mode == "faithful":
      # Two files, each record dealt to one of them in turn.
      self.records = ("records-a.tfrecord", "records-b.tfrecord")
    else:
      # About 11 shards of 50 kB of text.
      self.records = tuple("records.tfrecord-%05d-of-00011" % i
                           for i in range(11))

  def args(self, inputs_dir, out, records=None):
    if self.mode == "faithful":
      output, extra = ",".join(os.path.join(out, name)
                               for name in self.records), []
    else:
      output = os.path.join(out, "records.tfrecord")
      extra = ["--shard_size_mb=0.05", "--num_workers=2"]
    return ["--input_file=%s" % os.path.join(inputs_dir, "corpus.txt"),
            "--output_file=%s" % output,
            "--vocab_file=%s" % os.path.join(inputs_dir, "vocab.txt"),
            "--max_seq_length=32", "--max_predictions_per_seq=5",
            "--dupe_factor=2", "--mode=%s" % self.mode] + extra


class Reproduce(Command):
  """reproduce.py's grid of two MRPC cells (seeds 1 and 2) of
  run_classifier.py, each of 20 updates with a checkpoint every 5."""
  name = "reproduce"
  script = "reproduce.py"
  cells = tuple("cells/MRPC/bs4_lr0.001_ep2_shuffled_seed%d" % seed
                for seed in (1, 2))

  def args(self, inputs_dir, out, records=None):
    return _model_flags(inputs_dir) + [
        "--init_checkpoint=", "--do_lower_case=true",
        "--glue_dir=%s" % os.path.join(inputs_dir, "glue"), "--tasks=MRPC",
        "--preset=custom", "--batch_sizes=4", "--learning_rates=1e-3",
        "--epochs=2", "--seeds=1,2", "--max_seq_length=32",
        "--extra_flags=--save_checkpoints_steps=5", "--devices=cpu",
        "--noglue_submission", "--output_dir=%s" % out]


COMMANDS = {command.name: command for command in (
    Classifier(), Squad(), Pretraining(), EvaluatingClassifier(),
    PretrainingData("faithful"), PretrainingData("scalable"), Reproduce())}
TRAINING = ("run_classifier", "run_squad", "run_pretraining",
            "run_classifier --eval_every_steps")
DATA = ("create_pretraining_data --mode=faithful",
        "create_pretraining_data --mode=scalable")


# ------------------------------------------------------ what a run leaves


def _names(folder):
  """The paths under `folder`, relative to it (files and folders)."""
  found = set()
  for root, dirs, files in os.walk(folder):
    for name in dirs + files:
      found.add(os.path.relpath(os.path.join(root, name), folder))
  return found


def _examples(path):
  return test_faults._examples(path)  # pylint: disable=protected-access


def _steps(folder):
  return test_faults._steps(folder)  # pylint: disable=protected-access


def _assert_same_checkpoint(got_prefix, want_prefix, slot):
  """Every tensor of checkpoint `got_prefix` equals `want_prefix`'s, bit
  for bit (a resumed run repeats the reference's arithmetic)."""
  got = tf.train.load_checkpoint(got_prefix)
  want = tf.train.load_checkpoint(want_prefix)
  names = sorted(want.get_variable_to_shape_map())
  assert names == sorted(got.get_variable_to_shape_map())
  assert slot in names, names
  for name in names:
    np.testing.assert_array_equal(got.get_tensor(name),
                                  want.get_tensor(name), err_msg=name)


def _assert_same_results(command, got, want):
  """The folder `got` holds what the reference folder `want` holds: the
  final checkpoint, the result files' bytes, the records' examples."""
  if command.slot:
    steps = _steps(want)
    assert _steps(got)[-1] == steps[-1], (_steps(got), steps)
    _assert_same_checkpoint(
        os.path.join(got, "model.ckpt-%d" % steps[-1]),
        os.path.join(want, "model.ckpt-%d" % steps[-1]), command.slot)
  for name in command.results:
    with open(os.path.join(got, name), "rb") as a, open(
        os.path.join(want, name), "rb") as b:
      assert a.read() == b.read(), name
  for name in command.records:
    assert _examples(os.path.join(got, name)) == _examples(
        os.path.join(want, name)), name
  if command.keeps_best:
    _assert_same_best(got, want, command.slot)


def _assert_same_best(got, want, slot):
  """The best checkpoint kept in `got` is the reference's, recorded the
  same way."""
  records = []
  for folder in (got, want):
    with open(os.path.join(folder, "run_info.json")) as f:
      records.append(json.load(f)["best_checkpoint"])
  assert records[0] == records[1]
  assert sorted(os.listdir(os.path.join(got, "best"))) == sorted(
      os.listdir(os.path.join(want, "best")))
  _assert_same_checkpoint(os.path.join(got, records[0]["checkpoint"]),
                          os.path.join(want, records[1]["checkpoint"]), slot)


def _assert_nothing_unfinished(folder):
  left = test_faults._leftovers(folder)  # pylint: disable=protected-access
  assert not left, left


def _assert_whole_or_absent(command, got, want):
  """Each output file in `got` holds exactly the reference's records (a
  file is there whole or not at all)."""
  for name in command.records:
    path = os.path.join(got, name)
    if os.path.exists(path):
      assert _examples(path) == _examples(os.path.join(want, name)), name


def _last_line(text):
  lines = text.strip().splitlines()
  return lines[-1] if lines else ""


def _stopped_early(landed, status, log, reference):
  """Whether a signal that `landed` stopped the run before its end. A run
  that had printed all of the reference run's lines and exits with 0, or
  by the signal's default action, was already ending: the SIGTERM found it
  past its handler, with its outputs whole."""
  ended = (status in (0, -signal.SIGTERM) and
           len(log.strip().splitlines()) >= reference["lines"])
  return landed and not ended


# ------------------------------------------------------------ references


def _build_reference(run_script, command, inputs_dir, root):
  out = os.path.join(root, "out")
  os.makedirs(out)
  log = conftest.run_logged(run_script, command.script,
                            command.args(inputs_dir, out),
                            os.path.join(root, "run.log"), TIMEOUT)
  sizes = {name: os.path.getsize(os.path.join(out, name))
           for name in _names(out) if os.path.isfile(os.path.join(out, name))}
  with open(os.path.join(root, "facts.json"), "w") as f:
    json.dump({"lines": len(log.splitlines()), "names": len(sizes),
               "sizes": sizes, "steps": _steps(out)}, f)


def reference_of(shared_dir, run_script, inputs_dir, name):
  """The folder of `name`'s uninterrupted run: out/ and facts.json (its
  output's line count, files, sizes and checkpoint steps)."""
  command = COMMANDS[name]
  root = conftest.build_once(
      shared_dir, "chaos_reference_" + re.sub(r"\W+", "_", name),
      lambda root: _build_reference(run_script, command, inputs_dir, root))
  with open(os.path.join(root, "facts.json")) as f:
    facts = json.load(f)
  facts["out"] = os.path.join(root, "out")
  return facts


@pytest.fixture
def trial(request, shared_dir, run_script, inputs):
  """The test's command, its reference and the random draws of its trial;
  records the trial for the summary."""
  fault, name, number = request.param

  class Trial(object):
    pass

  this = Trial()
  this.fault, this.command, this.number = fault, COMMANDS.get(name), number
  this.rng = random.Random("%d/%s/%s/%d" % (SEED, fault, name, number))
  this.inputs = inputs
  if this.command is not None:
    this.reference = reference_of(shared_dir, run_script, inputs, name)
  # The test may name the fault more closely (e.g. the kind of full disk).
  this.record = {"fault": fault, "command": name, "trial": number}
  request.node.user_properties.append((CHAOS_PROPERTY, this.record))
  return this


def _trials(fault, names):
  return [pytest.param((fault, name, number),
                       id="%s-%s-%d" % (fault, name, number))
          for name in names for number in range(TRIALS)]


# ------------------------------------------------------- injecting faults


class Trigger(object):
  """When a fault strikes: once the run's output has `lines` lines and its
  folder has shown `files` paths, `delay` seconds later."""

  def __init__(self, lines=0, files=0, delay=0.0, checkpoints=0):
    self.lines, self.files, self.delay = lines, files, delay
    self.checkpoints = checkpoints

  def __repr__(self):
    return "after %d lines, %d paths, %d checkpoints, +%.3f s" % (
        self.lines, self.files, self.checkpoints, self.delay)


def _random_trigger(rng, facts):
  """A moment drawn from the whole run: after a line of its output or a
  file of its folder (of those the reference made), plus up to MAX_DELAY
  seconds."""
  delay = rng.uniform(0.0, MAX_DELAY)
  if rng.random() < 0.5:
    return Trigger(lines=rng.randint(1, max(1, facts["lines"] - 1)),
                   delay=delay)
  return Trigger(files=rng.randint(1, max(1, facts["names"] - 1)),
                 delay=delay)


def _line_count(path):
  try:
    with open(path, "rb") as f:
      return f.read().count(b"\n")
  except OSError:
    return 0


def _signal_at(running, trigger, log_path, folder, signum, group=False):
  """Sends `signum` to the run (its process group with `group`) once
  `trigger` is met; returns whether the run was still alive then."""
  seen = set()
  deadline = time.monotonic() + TIMEOUT
  while time.monotonic() < deadline:
    if not running.alive():
      return False
    if os.path.isdir(folder):
      seen |= _names(folder)
    if (_line_count(log_path) >= trigger.lines and
        len(seen) >= trigger.files and
        len(_steps(folder) if os.path.isdir(folder) else []) >=
        trigger.checkpoints):
      break
    time.sleep(0.005)
  time.sleep(trigger.delay)
  alive = running.alive()
  if group:
    os.killpg(running.pid, signum)
  else:
    running.signal(signum)
  return alive


def _interrupted_run(script_runner, command, args, out, log_path, trigger,
                     signum):
  """Runs `command` with `args` until `trigger`, then sends `signum`.

  Returns:
    (Result, whether the signal reached a running process).
  """
  running = script_runner.start(command.script, args, TIMEOUT,
                                output_path=log_path)
  landed = _signal_at(running, trigger, log_path, out, signum)
  return running.wait(), landed


def _read(path):
  with open(path, encoding="utf-8", errors="replace") as f:
    return f.read()


def _rerun(run_script, command, args):
  """The same command again, to its end; returns its output."""
  result = run_script(command.script, args, TIMEOUT)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  return result.stderr


# --------------------------------------------------------------- kill -9


@pytest.mark.parametrize("trial", _trials("kill -9", TRAINING + DATA),
                         indirect=True)
def test_killed_run_resumes_to_the_uninterrupted_result(
    trial, tmp_path, script_runner, run_script):
  command, reference = trial.command, trial.reference
  out = str(tmp_path / "out")
  os.makedirs(out)
  args = command.args(trial.inputs, out)
  trigger = _random_trigger(trial.rng, reference)
  killed, landed = _interrupted_run(script_runner, command, args, out,
                                    str(tmp_path / "killed.log"), trigger,
                                    signal.SIGKILL)
  assert killed.returncode == (-signal.SIGKILL if landed else 0), (
      trigger, _read(str(tmp_path / "killed.log"))[-3000:])
  _assert_whole_or_absent(command, out, reference["out"])

  _rerun(run_script, command, args)
  _assert_same_results(command, out, reference["out"])
  _assert_nothing_unfinished(out)


# --------------------------------------------------------------- SIGTERM


@pytest.mark.parametrize("trial", _trials("SIGTERM", TRAINING),
                         indirect=True)
def test_sigterm_saves_a_checkpoint_stops_in_one_line_and_resumes(
    trial, tmp_path, script_runner, run_script):
  command, reference = trial.command, trial.reference
  out = str(tmp_path / "out")
  os.makedirs(out)
  args = command.args(trial.inputs, out)
  # During training: after one of the checkpoints before the last.
  trigger = Trigger(checkpoints=trial.rng.randint(
      1, len(reference["steps"]) - 2), delay=trial.rng.uniform(0.0, 0.1))
  log_path = str(tmp_path / "stopped.log")
  stopped, landed = _interrupted_run(script_runner, command, args, out,
                                     log_path, trigger, signal.SIGTERM)
  log = _read(log_path)
  assert landed and stopped.returncode == 128 + signal.SIGTERM, (
      trigger, log[-3000:])
  assert "Traceback" not in log, log[-3000:]
  last = _last_line(log)
  found = re.match(r"%s: Training stopped by SIGTERM at step (\d+)/%d; "
                   r"checkpoint (\S+) holds it\. Run the same command "
                   r"again to resume\.$" % (
                       re.escape(command.script), reference["steps"][-1]),
                   last)
  if found:
    step = int(found.group(1))
    assert found.group(2) == os.path.join(out, "model.ckpt-%d" % step)
  else:
    # A tiny run on a loaded machine can end its training before the
    # signal lands; the phase after it then stops with the plain line, and
    # its training must be whole.
    assert last == "%s: stopped by SIGTERM." % command.script, last
    step = reference["steps"][-1]
  # A tiny run can reach its last update within the drawn delay; the stop
  # then holds the last step, and the rerun only has the rest to do.
  assert _steps(out)[-1] == step <= reference["steps"][-1]
  _assert_nothing_unfinished(out)

  log = _rerun(run_script, command, args)
  checkpoint = os.path.join(out, "model.ckpt-%d" % step)
  if step < reference["steps"][-1]:
    assert "Resuming from %s" % checkpoint in log
  else:
    assert "Skipping training: %s is already at step %d" % (
        checkpoint, step) in log
  _assert_same_results(command, out, reference["out"])
  _assert_nothing_unfinished(out)


@pytest.mark.parametrize("trial", _trials("SIGTERM", DATA), indirect=True)
def test_sigterm_stops_create_pretraining_data_in_one_line(
    trial, tmp_path, script_runner, run_script):
  """No checkpoint to save: the run stops at once, removes its temporary
  files and exits with 143 and one line; a rerun writes the records."""
  command, reference = trial.command, trial.reference
  out = str(tmp_path / "out")
  os.makedirs(out)
  args = command.args(trial.inputs, out)
  trigger = _random_trigger(trial.rng, reference)
  log_path = str(tmp_path / "stopped.log")
  stopped, landed = _interrupted_run(script_runner, command, args, out,
                                     log_path, trigger, signal.SIGTERM)
  log = _read(log_path)
  assert "Traceback" not in log, log[-3000:]
  if _stopped_early(landed, stopped.returncode, log, reference):
    assert stopped.returncode == 128 + signal.SIGTERM, (trigger, log[-3000:])
    assert _last_line(log) == "%s: stopped by SIGTERM." % command.script
  _assert_whole_or_absent(command, out, reference["out"])
  _assert_nothing_unfinished(out)

  _rerun(run_script, command, args)
  _assert_same_results(command, out, reference["out"])
  _assert_nothing_unfinished(out)


# ------------------------------------------------------------- full disk


def _page_bytes(sizes):
  return sum(-(-size // PAGE) * PAGE for size in sizes)


def _disk_limit(kind, rng, command, facts):
  """(room, after_saves) of a full disk at a point drawn from the run.

  rlimit: no file may grow past `room` bytes, from the start or after the
  `after_saves`-th checkpoint save; `room` is less than the largest file
  of the reference, so some write fails. tmpfs: the folder has `room`
  bytes, less than the reference's files take.
  """
  sizes = facts["sizes"]
  if kind == "tmpfs":
    return rng.randint(1, _page_bytes(sizes.values()) // PAGE - 1) * PAGE, 0
  after_saves = rng.randint(0, len(facts["steps"]) - 1) if command.slot else 0
  return rng.randint(1024, max(sizes.values()) - 1), after_saves


@pytest.mark.parametrize("trial", _trials("full disk", TRAINING + DATA),
                         indirect=True)
def test_full_disk_ends_in_one_line_and_a_rerun_with_room_finishes(
    trial, disk, run_script):  # pylint: disable=redefined-outer-name
  command, reference = trial.command, trial.reference
  trial.record["fault"] = "full disk (%s)" % disk.kind
  out = os.path.join(disk.folder, "out")
  os.makedirs(out)
  args = command.args(trial.inputs, out)
  room, after_saves = _disk_limit(disk.kind, trial.rng, command, reference)
  full = disk.run(command.script, args, room=room, after_saves=after_saves)

  test_faults._failed_in_one_line(  # pylint: disable=protected-access
      full, command.script, out)
  _assert_nothing_unfinished(out)
  _assert_whole_or_absent(command, out, reference["out"])

  _rerun(run_script, command, args)
  _assert_same_results(command, out, reference["out"])
  _assert_nothing_unfinished(out)


# ---------------------------------------------------------- damaged files


def _record_spans(path):
  """(start, end) byte offsets of each record of a TFRecord file: an
  8-byte length, its 4-byte checksum, the data, the data's checksum."""
  spans = []
  with open(path, "rb") as f:
    data = f.read()
  start = 0
  while start < len(data):
    end = start + 16 + int.from_bytes(data[start:start + 8], "little")
    spans.append((start, end))
    start = end
  assert start == len(data), path
  return spans


def _damage(path, how, rng):
  """Cuts the file inside a record (a cut between two records leaves a
  valid, shorter file that nothing can tell from one written so) or
  flips one byte, at an offset drawn from `rng`. Returns the offset."""
  start, end = rng.choice(_record_spans(path))
  if how == "truncated":
    offset = rng.randint(start + 1, end - 1)
    with open(path, "r+b") as f:
      f.truncate(offset)
  else:
    offset = rng.randrange(os.path.getsize(path))
    with open(path, "r+b") as f:
      f.seek(offset)
      byte = f.read(1)
      f.seek(offset)
      f.write(bytes([byte[0] ^ (1 << rng.randrange(8))]))
  return offset


DAMAGES = ("truncated", "byte flipped")


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("trial", _trials("damaged cache", TRAINING[:2]),
                         indirect=True)
def test_damaged_feature_file_between_a_kill_and_the_resume(
    trial, how, tmp_path, script_runner, run_script):
  """Killed after a checkpoint, the run's train.tf_record is damaged; the
  resumed run must not train on it as it is."""
  command, reference = trial.command, trial.reference
  trial.record["fault"] = "damaged cache (%s)" % how
  out = str(tmp_path / "out")
  os.makedirs(out)
  args = command.args(trial.inputs, out)
  trigger = Trigger(checkpoints=trial.rng.randint(
      1, len(reference["steps"]) - 2), delay=trial.rng.uniform(0.0, 0.1))
  killed, landed = _interrupted_run(script_runner, command, args, out,
                                    str(tmp_path / "killed.log"), trigger,
                                    signal.SIGKILL)
  assert landed and killed.returncode == -signal.SIGKILL, trigger
  records = os.path.join(out, "train.tf_record")
  _damage(records, how, trial.rng)

  log = _rerun(run_script, command, args)
  if command.name == "run_classifier":  # It reuses a verified file.
    said = [line for line in log.splitlines()
            if "Writing features to %s again: " % records in line]
    assert said, log[-3000:]
  _assert_same_results(command, out, reference["out"])
  _assert_nothing_unfinished(out)


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("trial", _trials("damaged cache",
                                          ["run_pretraining"]),
                         indirect=True)
def test_damaged_pretraining_records_end_in_one_line_naming_them(
    trial, how, tmp_path, run_script):
  command, reference = trial.command, trial.reference
  trial.record["fault"] = "damaged cache (%s)" % how
  records = str(tmp_path / "records.tfrecord")
  shutil.copy(os.path.join(trial.inputs, "records.tfrecord"), records)
  _damage(records, how, trial.rng)
  out = str(tmp_path / "out")
  args = command.args(trial.inputs, out, records=records)
  result = run_script(command.script, args, TIMEOUT)

  assert result.returncode == 2, result.stderr[-3000:]
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  last = _last_line(result.stderr)
  assert last.startswith("%s: error: %s: a record is cut short or damaged "
                         "(TensorFlow said: " % (command.script, records)
                         ), last
  assert last.endswith("Make or copy that file again."), last
  _assert_nothing_unfinished(out)

  shutil.copy(os.path.join(trial.inputs, "records.tfrecord"), records)
  _rerun(run_script, command, args)
  _assert_same_results(command, out, reference["out"])
  _assert_nothing_unfinished(out)


# ------------------------------------------------------------ reproduce.py


class _Process(object):
  """reproduce.py in a session of its own, so that its cells can be
  killed with it (the Running interface of tests/script_runner.py)."""

  def __init__(self, args, log_path):
    with open(log_path, "w") as log:
      self._process = subprocess.Popen(
          [sys.executable, "reproduce.py"] + args, cwd=REPO_ROOT,
          env=dict(os.environ, PYTHONPATH=REPO_ROOT), stdout=log,
          stderr=subprocess.STDOUT, start_new_session=True)
    self.pid = self._process.pid

  def alive(self):
    return self._process.poll() is None

  def signal(self, signum):
    if self.alive():
      self._process.send_signal(signum)

  def wait(self):
    return self._process.wait(TIMEOUT)


def _group_gone(pid, timeout=60):
  """Whether no process of group `pid` is left within `timeout` seconds
  (the time the kernel takes to reap killed ones)."""
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    try:
      os.killpg(pid, 0)
    except ProcessLookupError:
      return True
    time.sleep(0.05)
  return False


def _group(pid):
  """The processes of group `pid`, as ps lists them."""
  return subprocess.run(["ps", "-o", "pid,stat,etimes,args", "-g", str(pid)],
                        capture_output=True, text=True, check=False).stdout


def _assert_same_grid(got, want):
  """The grid in folder `got` has the reference's cells (final
  checkpoints and eval_results.txt) and scores."""
  for cell in Reproduce.cells:
    _assert_same_results(_CellResults(), os.path.join(got, cell),
                         os.path.join(want, cell))
  with open(os.path.join(got, "results.json")) as a, open(
      os.path.join(want, "results.json")) as b:
    got_results, want_results = json.load(a), json.load(b)
  assert got_results["tasks"] == want_results["tasks"]
  assert [c["metrics"] for c in got_results["cells"]] == [
      c["metrics"] for c in want_results["cells"]]
  assert {c["status"] for c in got_results["cells"]} <= {"done", "skipped"}


class _CellResults(Command):
  """What a cell of the grid keeps: run_classifier.py's weights and
  eval_results.txt."""
  slot = Classifier.slot
  results = ("eval_results.txt",)


@pytest.mark.parametrize("trial", _trials("kill -9", ["reproduce"]),
                         indirect=True)
def test_killed_grid_resumes_its_cells(trial, tmp_path, run_script):
  command, reference = trial.command, trial.reference
  out = str(tmp_path / "out")
  args = command.args(trial.inputs, out)
  log_path = str(tmp_path / "killed.log")
  running = _Process(args, log_path)
  trigger = _random_trigger(trial.rng, reference)
  landed = _signal_at(running, trigger, log_path, out, signal.SIGKILL,
                      group=True)
  assert running.wait() == (-signal.SIGKILL if landed else 0), trigger
  assert _group_gone(running.pid), _group(running.pid)

  result = run_script(command.script, args, TIMEOUT)
  assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
  _assert_same_grid(out, reference["out"])
  _assert_nothing_unfinished(out)


@pytest.mark.parametrize("trial", _trials("SIGTERM", ["reproduce"]),
                         indirect=True)
def test_sigterm_stops_the_grid_in_one_line_and_it_resumes(
    trial, tmp_path, run_script):
  """reproduce.py stops its running cell (which saves a checkpoint when it
  is training) and exits with 130 and one line (docs/reproduce.md)."""
  command, reference = trial.command, trial.reference
  out = str(tmp_path / "out")
  args = command.args(trial.inputs, out)
  log_path = str(tmp_path / "stopped.log")
  running = _Process(args, log_path)
  trigger = _random_trigger(trial.rng, reference)
  landed = _signal_at(running, trigger, log_path, out, signal.SIGTERM)
  status = running.wait()
  log = _read(log_path)
  assert "Traceback" not in log, log[-3000:]
  if _stopped_early(landed, status, log, reference):
    # Once the grid has started (its cells may have), reproduce.py's own
    # ending; before, any command's.
    assert (status, _last_line(log)) in (
        (130, "reproduce: interrupted; the running cells were stopped. Run "
         "the same command again to resume."),
        (128 + signal.SIGTERM, "reproduce.py: stopped by SIGTERM.")), (
            trigger, status, log[-3000:])
  assert _group_gone(running.pid), _group(running.pid)  # No cell outlives it.

  result = run_script(command.script, args, TIMEOUT)
  assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
  _assert_same_grid(out, reference["out"])
  _assert_nothing_unfinished(out)
