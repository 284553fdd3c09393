"""A cluster of two workers started as docs/distributed.md says: the same
run_classifier.py command on each, with TF_CONFIG on localhost and the
same --output_dir. Each worker is a process of its own, in the
environment a user has (TensorFlow's own logging variable unset).

  * Both train to the end; the chief alone writes into --output_dir (the
    other worker's feature file goes into a folder of its own, removed at
    the end), and every line of both is in the project's format.
  * kill -9 of a worker mid-training ends the other in one line, with the
    last checkpoint whole; the same two commands again resume and end
    with the uninterrupted run's weights, bit for bit.
  * SIGTERM to a worker (a preemption) stops both after the same update,
    each with one line, the chief with a checkpoint of that update; the
    relaunch ends as the uninterrupted run, bit for bit.
  * A worker whose peer never starts ends after --worker_wait_secs with
    one line, having written nothing.
  * run_squad.py, run_ner.py, run_swag.py and run_pretraining.py start
    and train as clusters the same way.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import conftest
import test_training_evaluation

pytestmark = pytest.mark.slow

TIMEOUT = 300
MRPC_SAMPLE = os.path.join(conftest.REPO_ROOT, "sample_data", "mrpc_sample")
TINY_CONFIG = os.path.join(conftest.REPO_ROOT, "sample_data",
                           "tiny_bert_config.json")
# 200 training pairs, batch 8 over the two workers: 25 updates.
LAST_STEP = 25
FORMAT = re.compile(r"\d\d:\d\d:\d\d ")


def _free_ports(count):
  sockets = [socket.socket() for _ in range(count)]
  for s in sockets:
    s.bind(("127.0.0.1", 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


def _args(out, *extra):
  vocab = os.path.join(conftest.ASSETS_DIR, "bert_vocab", "uncased",
                       "vocab.txt")
  return ["run_classifier.py", "--task_name=MRPC", "--data_dir=" + MRPC_SAMPLE,
          "--vocab_file=" + vocab, "--bert_config_file=" + TINY_CONFIG,
          "--max_seq_length=32", "--train_batch_size=8",
          "--learning_rate=1e-3", "--num_train_epochs=1",
          "--save_checkpoints_steps=5", "--do_train",
          "--distribution=multi_worker", "--output_dir=" + out] + list(extra)


class Cluster(object):
  """Two workers of one run, started on free ports of localhost: by
  default run_classifier.py's command here (`_args`), or `command` (the
  script and its arguments, multi_worker added)."""

  def __init__(self, root, out, *extra, workers=(0, 1), command=None):
    self.root = root
    self.command = command
    self.ports = _free_ports(2)
    self.temp = os.path.join(root, "tmp")
    os.makedirs(self.temp, exist_ok=True)
    self.logs = {}
    self.processes = {}
    for index in workers:
      self.logs[index] = os.path.join(root, "worker%d-%d.log" % (
          index, len(os.listdir(root))))
      self.processes[index] = self._start(index, out, extra)

  def _start(self, index, out, extra):
    # A user's environment: no shared compilation cache (tests/conftest.py),
    # whose loads TensorFlow logs as errors.
    env = dict(conftest.env_without_compilation_cache(),
               PYTHONPATH=conftest.REPO_ROOT, TMPDIR=self.temp,
               TF_CONFIG=json.dumps({
                   "cluster": {"worker": ["127.0.0.1:%d" % port
                                          for port in self.ports]},
                   "task": {"type": "worker", "index": index}}))
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    command = _args(out, *extra) if self.command is None else (
        self.command + ["--distribution=multi_worker"] + list(extra))
    with open(self.logs[index], "w") as log:
      return subprocess.Popen([sys.executable] + command,
                              cwd=conftest.REPO_ROOT, env=env, stdout=log,
                              stderr=subprocess.STDOUT)

  def wait(self):
    """{index: (exit status, output lines)}; kills what outlives TIMEOUT."""
    results = {}
    deadline = time.monotonic() + TIMEOUT
    for index, process in self.processes.items():
      try:
        process.wait(timeout=max(1.0, deadline - time.monotonic()))
      finally:
        if process.poll() is None:
          process.kill()
      with open(self.logs[index]) as f:
        results[index] = (process.returncode, f.read().splitlines())
    return results


def _steps(out):
  return sorted(int(name.split("-")[1].split(".")[0])
                for name in os.listdir(out)
                if re.fullmatch(r"model\.ckpt-\d+\.index", name))


def _weights(prefix):
  reader = tf.train.load_checkpoint(prefix)
  return {name: reader.get_tensor(name)
          for name in reader.get_variable_to_shape_map()}


def _assert_same_weights(got, want):
  assert sorted(got) == sorted(want)
  assert any(name.endswith("adam_m") for name in want)
  for name in want:
    np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def _uninterrupted(root):
  out = os.path.join(root, "out")
  results = Cluster(root, out).wait()
  with open(os.path.join(root, "results.json"), "w") as f:
    json.dump({str(k): v for k, v in results.items()}, f)


@pytest.fixture(scope="module")
def reference(shared_dir):
  """An uninterrupted run of the cluster: (its folder, each worker's exit
  status and lines)."""
  root = conftest.build_once(shared_dir, "cluster_reference", _uninterrupted)
  with open(os.path.join(root, "results.json")) as f:
    results = {int(k): v for k, v in json.load(f).items()}
  return root, results


def test_two_workers_train_as_the_docs_start_them(reference):
  root, results = reference
  out = os.path.join(root, "out")
  for index, (status, lines) in results.items():
    assert status == 0, lines[-30:]
    odd = [line for line in lines if not FORMAT.match(line)]
    assert not odd, (index, odd)
  assert results[1][1][-1].endswith(
      "This worker's training is done; the chief writes the other outputs.")
  assert _steps(out)[-1] == LAST_STEP
  # The features once, in the chief's folder; the other worker's own
  # folder is gone.
  assert os.path.exists(os.path.join(out, "train.tf_record"))
  assert os.listdir(os.path.join(root, "tmp")) == []


def _start_and_wait_for_a_checkpoint(root, out):
  cluster = Cluster(root, out)
  deadline = time.monotonic() + TIMEOUT
  while not (os.path.isdir(out) and [s for s in _steps(out) if s >= 5]):
    assert time.monotonic() < deadline, "no checkpoint past step 0"
    assert all(p.poll() is None for p in cluster.processes.values()), (
        "a worker ended before its first checkpoint")
    time.sleep(0.05)
  return cluster


@pytest.mark.parametrize("victim", [0, 1])
def test_a_killed_worker_ends_the_other_in_one_line_and_a_relaunch_resumes(
    victim, reference, tmp_path):
  ref_root, _ = reference
  out = str(tmp_path / "out")
  cluster = _start_and_wait_for_a_checkpoint(str(tmp_path), out)
  cluster.processes[victim].kill()
  results = cluster.wait()
  survivor = 1 - victim
  status, lines = results[survivor]
  if status != 0:  # The run may have ended before the kill landed.
    assert status == 1, lines[-30:]
    assert re.fullmatch(
        r"Training stopped\. A worker of the cluster in TF_CONFIG stopped "
        r"or is unreachable \((TensorFlow said: .*|\S+ no longer answers)"
        r"\)\. Restart all workers "
        r"with the same flags; they resume from the chief's last "
        r"checkpoint \(.*\)\.", lines[-1]), lines[-30:]
    assert not [line for line in lines if "Traceback" in line]
  relaunched = Cluster(str(tmp_path), out).wait()
  for index, (status, lines) in relaunched.items():
    assert status == 0, (index, lines[-30:])
  _assert_same_weights(
      _weights(os.path.join(out, "model.ckpt-%d" % LAST_STEP)),
      _weights(os.path.join(ref_root, "out", "model.ckpt-%d" % LAST_STEP)))


def test_sigterm_to_a_worker_stops_both_after_the_same_update(reference,
                                                             tmp_path):
  ref_root, _ = reference
  out = str(tmp_path / "out")
  cluster = _start_and_wait_for_a_checkpoint(str(tmp_path), out)
  cluster.processes[1].send_signal(signal.SIGTERM)
  results = cluster.wait()
  if results[1][0] != 0:  # The run may have ended before the signal.
    (status, lines), (chief_status, chief_lines) = results[1], results[0]
    assert status == 128 + signal.SIGTERM, lines[-30:]
    found = re.fullmatch(
        r"run_classifier\.py: Training stopped by SIGTERM at step (\d+)/%d; "
        r"checkpoint %s holds it\. Run the same command again to resume\." %
        (LAST_STEP, re.escape(os.path.join(out, "model.ckpt-")) + r"\d+"),
        lines[-1])
    assert found, lines[-30:]
    step = int(found.group(1))
    assert chief_status == 128 + signal.SIGTERM, chief_lines[-30:]
    assert chief_lines[-1] == (
        "run_classifier.py: Training stopped at step %d/%d: another worker "
        "of the cluster was stopped by a signal, and every worker stops "
        "with it; the chief's checkpoint of this update holds it. Run the "
        "same command again on every worker to resume." % (step, LAST_STEP))
    assert _steps(out)[-1] == step
  relaunched = Cluster(str(tmp_path), out).wait()
  for index, (status, lines) in relaunched.items():
    assert status == 0, (index, lines[-30:])
  _assert_same_weights(
      _weights(os.path.join(out, "model.ckpt-%d" % LAST_STEP)),
      _weights(os.path.join(ref_root, "out", "model.ckpt-%d" % LAST_STEP)))


def test_a_worker_alone_ends_after_its_wait_in_one_line(tmp_path):
  out = str(tmp_path / "out")
  cluster = Cluster(str(tmp_path), out, "--worker_wait_secs=3", workers=(1,))
  (status, lines), = cluster.wait().values()
  assert status == 2, lines
  assert lines == [
      "run_classifier.py: error: --distribution=multi_worker: 127.0.0.1:%d "
      "did not answer within --worker_wait_secs=3. Start the same command "
      "on every worker of TF_CONFIG (each with its own task index), or "
      "raise --worker_wait_secs." % cluster.ports[0]], lines
  assert not os.path.exists(out)
  assert os.listdir(os.path.join(str(tmp_path), "tmp")) == []


@pytest.mark.parametrize("name", ["squad", "ner", "swag", "pretraining"])
def test_every_training_script_starts_as_a_cluster(name, tmp_path,
                                                   shared_dir):
  """The other training scripts on their tiny inputs
  (tests/test_training_evaluation.py's), two workers: both end well, every
  line in the project's format, the other worker's folder gone."""
  script = test_training_evaluation.SCRIPTS[name]
  root = conftest.build_once(shared_dir, "cluster_inputs_" + name,
                             script.write_inputs)
  out = str(tmp_path / "out")
  cluster = Cluster(str(tmp_path), out, "--do_train", command=[
      script.script] + script.args(root, out))
  for index, (status, lines) in cluster.wait().items():
    assert status == 0, (index, lines[-30:])
    assert not [line for line in lines if not FORMAT.match(line)], lines
  assert _steps(out)
  assert os.listdir(os.path.join(str(tmp_path), "tmp")) == []
