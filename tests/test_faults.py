"""Faults that are not bad flags: a full disk, two runs in one folder,
damaged caches and record files.

A full disk is made two ways:
  * rlimit: the script runs with a file-size limit (RLIMIT_FSIZE, SIGXFSZ
    ignored), so a write past it fails with EFBIG as a full disk fails with
    ENOSPC. The script's output reaches its log through a pipe, so the
    limit binds only the files the script writes. For a disk that fills in
    the middle of training, the limit starts after the run's n-th
    checkpoint save.
  * tmpfs: where the tests run as root and can mount, the folder is a tmpfs
    whose size leaves the write too little room; lifting the limit remounts
    it bigger.
Each case checks what a user sees: exit status 1, no traceback, the last
line naming the folder, what was written and about how much space it needs
(against the size of the same file written without a limit), nothing
half-written left, and a run once there is room again that ends as an
uninterrupted run does (the same final checkpoint tensors, the same
predictions).

Two runs into one folder: the second is refused naming the first (a run
of many updates, its pid and command); once the first is killed, a third
takes its stale lock over. reproduce.py's scheduler does not start a cell
whose folder a live run holds. Caches: feature files cut short or with a
byte flipped, a damaged Hugging Face conversion and a changed cell result
are made again (saying why), not trusted. A damaged record file of the
user's and a folder where a file is named end in one line.

The runs use a tiny model (2 layers, hidden 32, a vocabulary of 28 words)
and small MRPC-like files written here.
"""
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import conftest
import pretraining_records
import script_runner
from reproduction import plan
from reproduction import scheduler

REPO_ROOT = conftest.REPO_ROOT
TIMEOUT = 300

WORDS = ("river stone quiet bright market garden window yellow teacher "
         "letter morning travel winter summer island forest silver engine "
         "doctor music paper planet").split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."] + WORDS
TINY_CONFIG = {
    "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1, "hidden_size": 32, "initializer_range": 0.02,
    "intermediate_size": 64, "max_position_embeddings": 64,
    "num_attention_heads": 2, "num_hidden_layers": 2, "type_vocab_size": 2,
    "vocab_size": len(VOCAB)}
MRPC_HEADER = ["\ufeffQuality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
MRPC_TEST_HEADER = ["index", "#1 ID", "#2 ID", "#1 String", "#2 String"]
# 40 training pairs, batch 4, 4 epochs: 40 updates, a checkpoint every 10.
NUM_TRAIN, NUM_TEST, EPOCHS, STEPS = 40, 200, 4, 40
PAGE = 4096  # tmpfs gives each file whole pages

# Runs `python <script> <args>` (argv[3:]) with a file-size limit of argv[1]
# bytes, from the start or from after the argv[2]-th checkpoint save.
LIMITED_RUN = r'''
import os, resource, runpy, signal, sys


def relay(fd):
  """Sends what this process writes to `fd` through a pipe to a child that
  writes it to the original `fd` (the log file), which the limit set below
  does not bind."""
  read_end, write_end = os.pipe()
  pid = os.fork()
  if pid == 0:
    os.close(write_end)
    while True:
      data = os.read(read_end, 1 << 16)
      if not data:
        os._exit(0)
      while data:
        data = data[os.write(fd, data):]
  os.close(read_end)
  saved = os.dup(fd)
  os.dup2(write_end, fd)
  os.close(write_end)
  return pid, saved


limit, after_saves, script = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]


def limit_file_size():
  signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
  resource.setrlimit(resource.RLIMIT_FSIZE, (
      limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


relays = [relay(1), relay(2)]
if after_saves:
  import tensorflow as tf
  saver_class = tf.compat.v1.train.Saver
  original_save = saver_class.save
  saved_paths = []

  def save(self, *args, **kwargs):
    path = original_save(self, *args, **kwargs)
    saved_paths.append(path)
    if len(saved_paths) == after_saves:
      limit_file_size()
    return path

  saver_class.save = save
else:
  limit_file_size()
sys.argv = sys.argv[3:]
try:
  runpy.run_path(script, run_name="__main__")
finally:
  sys.stdout.flush()
  sys.stderr.flush()
  for fd, (_, saved) in zip((1, 2), relays):
    os.dup2(saved, fd)
    os.close(saved)
  for pid, _ in relays:
    os.waitpid(pid, 0)
'''


# ------------------------------------------------------------------ files


def _write_tsv(path, rows):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8", newline="") as f:
    f.write("".join("\t".join(row) + "\n" for row in rows))


def _sentence(rng):
  return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 7))) + "."


def _write_mrpc(data_dir, num_train, num_test=10, seed=3):
  rng = random.Random(seed)

  def rows(n):
    return [[str(i % 2), str(2 * i), str(2 * i + 1), _sentence(rng),
             _sentence(rng)] for i in range(n)]

  _write_tsv(os.path.join(data_dir, "train.tsv"),
             [MRPC_HEADER] + rows(num_train))
  _write_tsv(os.path.join(data_dir, "dev.tsv"), [MRPC_HEADER] + rows(10))
  _write_tsv(os.path.join(data_dir, "test.tsv"), [MRPC_TEST_HEADER] + [
      [str(i)] + row[1:] for i, row in enumerate(rows(num_test))])


def _write_model_files(folder):
  os.makedirs(folder, exist_ok=True)
  with open(os.path.join(folder, "vocab.txt"), "w") as f:
    f.write("".join(token + "\n" for token in VOCAB))
  with open(os.path.join(folder, "bert_config.json"), "w") as f:
    json.dump(TINY_CONFIG, f)


def _classifier_args(root, output_dir, actions, epochs=EPOCHS,
                     data_dir=None):
  """run_classifier.py's arguments for the tiny model on root's files."""
  return ["--task_name=MRPC", "--data_dir=%s" % (data_dir or os.path.join(
      root, "data")), "--vocab_file=%s" % os.path.join(root, "vocab.txt"),
          "--bert_config_file=%s" % os.path.join(root, "bert_config.json"),
          "--output_dir=%s" % output_dir, "--max_seq_length=32",
          "--train_batch_size=4", "--predict_batch_size=8",
          "--learning_rate=1e-3", "--num_train_epochs=%s" % epochs,
          "--save_checkpoints_steps=10", "--seed=7"] + [
              "--" + action for action in actions]


def _build_reference(run_script, root):
  _write_model_files(root)
  _write_mrpc(os.path.join(root, "data"), NUM_TRAIN, NUM_TEST)
  conftest.run_logged(run_script, "run_classifier.py", _classifier_args(
      root, os.path.join(root, "out"), ["do_train", "do_predict"]),
                      os.path.join(root, "run.log"))


@pytest.fixture(scope="module")
def reference(shared_dir, run_script):
  """The files of the tiny runs and an uninterrupted run of 40 updates
  with predictions (out/), made once for all workers."""
  return conftest.build_once(
      shared_dir, "faults_reference",
      lambda root: _build_reference(run_script, root))


# --------------------------------------------------------------- full disk


@pytest.fixture(scope="module")
def limited_run_script(tmp_path_factory):
  path = tmp_path_factory.mktemp("limited") / "limited_run.py"
  path.write_text(LIMITED_RUN)
  return str(path)


def _mount_tmpfs(folder, size):
  os.makedirs(folder, exist_ok=True)
  done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d" % size,
                         "tmpfs", folder], capture_output=True, text=True,
                        check=False)
  return done.returncode == 0, done.stderr.strip()


class Disk(object):
  """A folder where a run finds too little room: `run` with room=N bytes
  runs a script so that its writes fail past N (rlimit: each file may have
  N bytes; tmpfs: the file system has N bytes free), room=None without a
  limit."""

  def __init__(self, kind, folder, run_script, limited_script):
    self.kind = kind
    self.folder = folder
    self._run_script = run_script
    self._limited_script = limited_script

  def _remount(self, size):
    subprocess.run(["mount", "-o", "remount,size=%d" % size, self.folder],
                   check=True, capture_output=True)

  def run(self, script, args, room=None, after_saves=0):
    if room is None or self.kind == "tmpfs":
      if room is not None:
        stat = os.statvfs(self.folder)
        used = (stat.f_blocks - stat.f_bfree) * stat.f_frsize
        self._remount(used + -(-room // PAGE) * PAGE)
      try:
        return self._run_script(script, args, TIMEOUT)
      finally:
        if room is not None:
          self._remount(64 << 20)
    # A fresh process without the suite's shared XLA compilation cache:
    # under the file-size limit its cache entries would be cut short, and
    # every later process of the suite would print that it cannot parse
    # them.
    env = dict(conftest.env_without_compilation_cache(), PYTHONPATH=REPO_ROOT)
    done = subprocess.run(
        [sys.executable, self._limited_script, str(room), str(after_saves),
         os.path.join(REPO_ROOT, script)] + list(args), cwd=REPO_ROOT,
        env=env, capture_output=True, text=True, timeout=TIMEOUT,
        check=False)
    return script_runner.Result(done.returncode, done.stdout, done.stderr)


@pytest.fixture(params=["rlimit", "tmpfs"])
def disk(request, tmp_path, run_script, limited_run_script):
  folder = str(tmp_path / "disk")
  if request.param == "tmpfs":
    mounted, why = _mount_tmpfs(folder, 64 << 20)
    if not mounted:
      pytest.skip("cannot mount a tmpfs here (needs root with "
                  "CAP_SYS_ADMIN); the rlimit variant covers this case: %s"
                  % why)
    yield Disk("tmpfs", folder, run_script, limited_run_script)
    subprocess.run(["umount", folder], check=True)
  else:
    os.makedirs(folder)
    yield Disk("rlimit", folder, run_script, limited_run_script)


def _failed_in_one_line(result, script, *parts):
  """The last line of a run that must have failed for want of space."""
  assert result.returncode == 1, result.stderr[-3000:]
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith(script + ": error: "), last
  assert ("No space left on device" in last or "File too large" in last), last
  assert "memory" not in last.lower(), last  # no out-of-memory advice
  for part in parts:
    assert part in last, (part, last)
  return last


_UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def _needed(line):
  """The bytes a line says the write needs ("it needs about 23.4 MiB")."""
  found = re.search(r"it needs about ([0-9.]+) (bytes|KiB|MiB|GiB)", line)
  assert found, line
  return float(found.group(1)) * _UNITS[found.group(2)]


def _leftovers(folder):
  """Unfinished files under `folder`: TensorFlow's temporary files, this
  project's *.tmp and *.incomplete, and lock files."""
  found = []
  for root, dirs, files in os.walk(folder):
    for name in files + dirs:
      if (re.search(r"\.tempstate|\.tmp|\.incomplete$|\.lock$", name) or
          name == "run.lock"):
        found.append(os.path.join(root, name))
  return found


def _checkpoint_bytes(prefix):
  """The bytes of the tensors of checkpoint `prefix`."""
  reader = tf.train.load_checkpoint(prefix)
  dtypes = reader.get_variable_to_dtype_map()
  return sum(int(np.prod(shape)) * dtypes[name].size
             for name, shape in reader.get_variable_to_shape_map().items())


def _files_bytes(folder, prefix):
  """Allocated bytes (whole pages) of the files of checkpoint `prefix`."""
  return sum(-(-os.path.getsize(os.path.join(folder, name)) // PAGE) * PAGE
             for name in os.listdir(folder) if name.startswith(prefix + "."))


def _assert_same_checkpoints(got_prefix, want_prefix):
  got = tf.train.load_checkpoint(got_prefix)
  want = tf.train.load_checkpoint(want_prefix)
  names = sorted(want.get_variable_to_shape_map())
  assert names == sorted(got.get_variable_to_shape_map())
  assert "output_weights/adam_m" in names
  for name in names:
    np.testing.assert_allclose(got.get_tensor(name), want.get_tensor(name),
                               rtol=1e-6, atol=1e-7, err_msg=name)


def _steps(folder):
  return sorted(int(m.group(1)) for m in (
      re.match(r"model\.ckpt-(\d+)\.index$", name)
      for name in os.listdir(folder)) if m)


@pytest.mark.slow
def test_full_disk_at_the_first_checkpoint_then_a_rerun(reference,
                                                        tmp_path, run_script,
                                                        limited_run_script):
  """The issue's case: the first checkpoint does not fit."""
  disk = Disk("rlimit", str(tmp_path), run_script, limited_run_script)
  out = str(tmp_path / "out")
  args = _classifier_args(reference, out, ["do_train"])
  result = disk.run("run_classifier.py", args, room=64 << 10)

  last = _failed_in_one_line(result, "run_classifier.py",
                             "checkpoint model.ckpt-0", "into %s " % out,
                             "--output_dir", "starts over")
  want = _checkpoint_bytes(os.path.join(reference, "out", "model.ckpt-0"))
  assert abs(_needed(last) - want) < 0.05 * want, (last, want)
  assert not _leftovers(out), _leftovers(out)
  assert _steps(out) == []

  conftest.run_logged(run_script, "run_classifier.py", args,
                      str(tmp_path / "rerun.log"))
  _assert_same_checkpoints(
      os.path.join(out, "model.ckpt-%d" % STEPS),
      os.path.join(reference, "out", "model.ckpt-%d" % STEPS))


@pytest.mark.slow
def test_disk_full_in_mid_training_resumes_from_the_last_checkpoint(
    disk, reference, tmp_path):
  """Checkpoints 0 and 10 fit; 20 does not. The rerun resumes from 10."""
  out = os.path.join(disk.folder, "out")
  args = _classifier_args(reference, out, ["do_train"])
  if disk.kind == "tmpfs":
    folder = os.path.join(reference, "out")
    one = _files_bytes(folder, "model.ckpt-0")
    # Two checkpoints and the small files fit, a third does not.
    result = disk.run("run_classifier.py", args, room=5 * one // 2 + 10 * PAGE)
  else:
    result = disk.run("run_classifier.py", args, room=64 << 10,
                      after_saves=2)

  _failed_in_one_line(result, "run_classifier.py", "checkpoint model.ckpt-20",
                      "into %s " % out, "it resumes from model.ckpt-10")
  assert not _leftovers(out), _leftovers(out)
  assert _steps(out) == [0, 10]
  _assert_same_checkpoints(os.path.join(out, "model.ckpt-10"),
                           os.path.join(reference, "out", "model.ckpt-10"))

  rerun = disk.run("run_classifier.py", args)
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  assert "Resuming from %s" % os.path.join(out, "model.ckpt-10") in (
      rerun.stderr)
  _assert_same_checkpoints(
      os.path.join(out, "model.ckpt-%d" % STEPS),
      os.path.join(reference, "out", "model.ckpt-%d" % STEPS))


@pytest.mark.slow
def test_full_disk_while_writing_features(disk, reference, tmp_path):
  data = str(tmp_path / "big_data")
  _write_mrpc(data, num_train=400)
  out = os.path.join(disk.folder, "out")
  # 400 pairs: a file of about 68 KiB; one update is enough afterwards.
  args = _classifier_args(reference, out, ["do_train"], epochs=0.04,
                          data_dir=data)
  room = 16 << 10 if disk.kind == "rlimit" else 12 * PAGE
  result = disk.run("run_classifier.py", args, room=room)

  last = _failed_in_one_line(result, "run_classifier.py",
                             "features train.tf_record", "into %s " % out,
                             "--output_dir")
  assert not _leftovers(out), _leftovers(out)
  assert not os.path.exists(os.path.join(out, "train.tf_record"))

  rerun = disk.run("run_classifier.py", args)
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  records = os.path.join(out, "train.tf_record")
  assert sum(1 for _ in tf.compat.v1.io.tf_record_iterator(records)) == 400
  size = os.path.getsize(records)
  assert abs(_needed(last) - size) < 0.2 * size, (last, size)


@pytest.mark.slow
def test_full_disk_while_writing_predictions(disk, reference):
  out = os.path.join(disk.folder, "out")
  shutil.copytree(os.path.join(reference, "out"), out)
  os.remove(os.path.join(out, "test_results.tsv"))
  args = _classifier_args(reference, out, ["do_predict"])
  want = os.path.getsize(os.path.join(reference, "out", "test_results.tsv"))
  # The predictions (200 lines) do not fit; the lock file does.
  room = want // 2 if disk.kind == "rlimit" else 2 * PAGE
  result = disk.run("run_classifier.py", args, room=room)

  last = _failed_in_one_line(result, "run_classifier.py",
                             "test_results.tsv into %s " % out)
  assert abs(_needed(last) - want) < 0.05 * want, (last, want)
  assert not _leftovers(out), _leftovers(out)
  assert not os.path.exists(os.path.join(out, "test_results.tsv"))

  rerun = disk.run("run_classifier.py", args)
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  with open(os.path.join(out, "test_results.tsv")) as got, open(
      os.path.join(reference, "out", "test_results.tsv")) as expected:
    assert got.read() == expected.read()


@pytest.mark.slow
def test_full_disk_while_exporting(disk, reference, tmp_path):
  out = str(tmp_path / "out")
  shutil.copytree(os.path.join(reference, "out"), out)
  export_dir = os.path.join(disk.folder, "export")
  args = _classifier_args(reference, out, ["export_dir=%s" % export_dir])
  result = disk.run("run_classifier.py", args, room=64 << 10)

  last = _failed_in_one_line(result, "run_classifier.py", "the SavedModel",
                             "into %s " % export_dir, "--export_dir")
  assert not _leftovers(disk.folder), _leftovers(disk.folder)
  assert not os.path.isdir(export_dir) or not os.listdir(export_dir)

  rerun = disk.run("run_classifier.py", args)
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  (model,) = os.listdir(export_dir)
  assert tf.saved_model.contains_saved_model(os.path.join(export_dir, model))
  # About the size of the SavedModel written once there was room (the
  # estimate counts the graph before the export adds its saver's ops).
  want = sum(os.path.getsize(os.path.join(root, name))
             for root, _, names in os.walk(export_dir) for name in names)
  assert abs(_needed(last) - want) < 0.25 * want, (last, want)


@pytest.mark.slow
def test_full_disk_while_converting(disk, reference):
  out = os.path.join(disk.folder, "hf")
  args = ["--input=%s" % os.path.join(reference, "out"),
          "--output_dir=%s" % out]
  result = disk.run("convert_checkpoint.py", args, room=16 << 10)

  last = _failed_in_one_line(result, "convert_checkpoint.py",
                             "the converted model hf",
                             "into %s " % disk.folder, "--output_dir")
  # The model's weights without the optimizer's slots.
  want = _checkpoint_bytes(os.path.join(reference, "out",
                                        "model.ckpt-%d" % STEPS)) / 3
  assert abs(_needed(last) - want) < 0.1 * want, (last, want)
  assert os.listdir(disk.folder) == [], os.listdir(disk.folder)

  rerun = disk.run("convert_checkpoint.py", args)
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  assert sorted(os.listdir(disk.folder)) == ["hf"]
  assert "model.safetensors" in os.listdir(out)


# ------------------------------------------------------ one run per folder


def _script_env():
  env = dict(os.environ, PYTHONPATH=REPO_ROOT)
  env.pop("TF_CONFIG", None)
  return env


@pytest.mark.slow
def test_second_run_is_refused_and_a_killed_runs_lock_taken_over(
    reference, tmp_path, run_script):
  out = str(tmp_path / "out")
  lock = os.path.join(out, "run.lock")
  # A run of 10000 updates: it holds the folder until it is killed.
  with open(str(tmp_path / "first.log"), "w") as log:
    first = subprocess.Popen(
        [sys.executable, "run_classifier.py"] + _classifier_args(
            reference, out, ["do_train"], epochs=1000),
        cwd=REPO_ROOT, env=_script_env(), stdout=log, stderr=log)
  try:
    owner = {}
    deadline = time.monotonic() + TIMEOUT
    while owner.get("pid") != first.pid:
      assert first.poll() is None and time.monotonic() < deadline, open(
          str(tmp_path / "first.log")).read()[-3000:]
      time.sleep(0.05)
      try:
        with open(lock) as f:
          owner = json.load(f)
      except (OSError, ValueError):
        pass
    second = run_script("run_classifier.py", _classifier_args(
        reference, out, ["do_train"]), TIMEOUT)
  finally:
    first.kill()
    first.wait()

  assert second.returncode == 2, second.stderr[-3000:]
  assert "Traceback" not in second.stderr
  last = second.stderr.strip().splitlines()[-1]
  assert last.startswith("run_classifier.py: error: --output_dir=%s is in "
                         "use by another run (pid %d on " % (out, first.pid)
                         ), last
  assert "run_classifier.py --task_name=MRPC" in last and "epochs=1000" in (
      last)

  # The killed run's lock file stays, but nobody holds its flock.
  assert os.path.exists(lock)
  third = run_script("run_classifier.py", _classifier_args(
      reference, out, ["do_train"], epochs=1), TIMEOUT)
  assert third.returncode == 0, third.stderr[-3000:]
  taken = [line for line in third.stderr.splitlines()
           if "Taking over the lock of %s" % out in line]
  assert taken and "pid %d on" % first.pid in taken[0], third.stderr[-3000:]
  assert not os.path.exists(lock)  # released when the run ended


FAKE_CELL = r'''
import os, sys
out = sys.argv[1]
with open(os.path.join(out, "runs.txt"), "a") as f:
  f.write("run\n")
with open(os.path.join(out, "metrics.txt"), "w") as f:
  f.write("accuracy = 0.75\n")
'''


@pytest.fixture
def fake_cell(tmp_path):
  script = tmp_path / "fake_cell.py"
  script.write_text(FAKE_CELL)
  output_dir = str(tmp_path / "cells" / "cell")
  return plan.Step("cell", (str(script), output_dir), output_dir,
                   ("metrics.txt",))


def _runs(step):
  with open(os.path.join(step.output_dir, "runs.txt")) as f:
    return len(f.read().split())


def test_scheduler_does_not_start_a_cell_whose_folder_is_locked(fake_cell):
  os.makedirs(fake_cell.output_dir)
  holder = subprocess.Popen(
      [sys.executable, "-c", "import sys, time\n"
       "from userio import folder_lock\n"
       "lock = folder_lock.hold(sys.argv[1])\n"
       "print('held', flush=True)\n"
       "time.sleep(600)\n", fake_cell.output_dir],
      cwd=REPO_ROOT, env=_script_env(), stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline() == "held\n"
    lines = []
    outcome = scheduler.run_steps([fake_cell], sys.executable, ["cpu"],
                                  log=lines.append)["cell"]
  finally:
    holder.kill()
    holder.wait()
  assert outcome.status == "failed"
  assert outcome.last_stderr_line.startswith(
      "not started: %s is in use by another run (pid %d on " % (
          fake_cell.output_dir, holder.pid)), outcome.last_stderr_line
  assert any("FAILED cell" in line and "pid %d" % holder.pid in line
             for line in lines), lines
  assert os.listdir(fake_cell.output_dir) == ["run.lock"]  # untouched

  # The holder is gone: its lock is stale and the cell runs.
  outcome = scheduler.run_steps([fake_cell], sys.executable, ["cpu"],
                                log=lambda line: None)["cell"]
  assert outcome.status == "done"


# ------------------------------------------------------- verified caches


def test_scheduler_runs_again_a_cell_whose_result_changed(fake_cell):
  assert scheduler.run_steps([fake_cell], sys.executable, ["cpu"],
                             log=lambda line: None)["cell"].status == "done"
  lines = []
  assert scheduler.run_steps([fake_cell], sys.executable, ["cpu"],
                             log=lines.append)["cell"].status == "skipped"
  metrics = os.path.join(fake_cell.output_dir, "metrics.txt")
  with open(metrics, "r+b") as f:
    f.truncate(5)  # as a full disk or an interrupted copy leaves it
  outcome = scheduler.run_steps([fake_cell], sys.executable, ["cpu"],
                                log=lines.append)["cell"]
  assert outcome.status == "done" and _runs(fake_cell) == 2
  assert any(line == "run cell again: metrics.txt: it has 5 bytes where 16 "
             "were written (cut short or changed)" for line in lines), lines
  with open(metrics, "r+b") as f:
    f.write(b"A")  # the same size, another byte
  lines = []
  scheduler.run_steps([fake_cell], sys.executable, ["cpu"], log=lines.append)
  assert _runs(fake_cell) == 3
  assert any("metrics.txt: its bytes differ" in line for line in lines)


def _damage(path, how):
  with open(path, "r+b") as f:
    if how == "truncated":
      f.truncate(os.path.getsize(path) // 2)
    else:
      f.seek(os.path.getsize(path) // 2)
      byte = f.read(1)
      f.seek(-1, os.SEEK_CUR)
      f.write(bytes([byte[0] ^ 0xFF]))


def _sha256(path):
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["truncated", "byte_flipped"])
def test_damaged_feature_cache_is_written_again(reference, tmp_path,
                                                run_script, how):
  out = str(tmp_path / "out")
  shutil.copytree(os.path.join(reference, "out"), out)
  records = os.path.join(out, "train.tf_record")
  _damage(records, how)
  reason = ("it has %d bytes where" % os.path.getsize(records)
            if how == "truncated" else "its bytes differ from those written")

  # Training is done already: the run rewrites the features and stops.
  result = run_script("run_classifier.py", _classifier_args(
      reference, out, ["do_train"]), TIMEOUT)
  assert result.returncode == 0, result.stderr[-3000:]
  said = [line for line in result.stderr.splitlines()
          if "Writing features to %s again: " % records in line]
  assert said and reason in said[0], result.stderr[-3000:]
  assert "Reusing features" not in result.stderr
  assert _examples(records) == _examples(
      os.path.join(reference, "out", "train.tf_record"))


def _examples(path):
  """The tf.train.Examples of a record file (their bytes may differ from
  process to process: protobuf writes a map's entries in any order)."""
  return [tf.train.Example.FromString(record)
          for record in tf.compat.v1.io.tf_record_iterator(path)]


def test_damaged_conversion_cache_is_converted_again(reference, tmp_path,
                                                     caplog):
  from checkpoints import conversion  # pylint: disable=import-outside-toplevel
  hf = str(tmp_path / "hf")
  conversion.convert(os.path.join(reference, "out"), hf)
  work = str(tmp_path / "work")
  prefix = conversion.resolve_init_checkpoint(hf, work)
  data = prefix + ".data-00000-of-00001"
  intact = _sha256(data)
  _damage(data, "byte_flipped")
  caplog.set_level("INFO")
  assert conversion.resolve_init_checkpoint(hf, work) == prefix
  assert any("converting it again" in r.getMessage() and
             "its bytes differ" in r.getMessage() for r in caplog.records)
  assert _sha256(data) == intact
  caplog.clear()
  assert conversion.resolve_init_checkpoint(hf, work) == prefix
  assert not any("converting it again" in r.getMessage()
                 for r in caplog.records)


# ------------------------------------------------- bad files in one line


@pytest.mark.slow
def test_damaged_user_record_file_is_named_in_one_line(reference, tmp_path,
                                                       run_script):
  records = str(tmp_path / "records.tfrecord")
  pretraining_records.write_records(records, pretraining_records.random_examples(
      64, 32, 5, len(VOCAB), 0))
  _damage(records, "byte_flipped")  # a record in the middle; the first is intact
  result = run_script("run_pretraining.py", [
      "--input_file=%s" % records,
      "--bert_config_file=%s" % os.path.join(reference, "bert_config.json"),
      "--max_seq_length=32", "--max_predictions_per_seq=5",
      "--train_batch_size=4", "--num_train_steps=5", "--num_warmup_steps=0",
      "--output_dir=%s" % str(tmp_path / "out"), "--do_train"], TIMEOUT)
  assert result.returncode == 2, result.stderr[-3000:]
  assert "Traceback" not in result.stderr
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith("run_pretraining.py: error: %s: a record is cut "
                         "short or damaged (TensorFlow said: corrupted "
                         "record at " % records), last
  assert "Make or copy that file again." in last


def _replaced(args, **values):
  """`args` with the flags of `values` set to them."""
  return ["--%s=%s" % (arg[2:].split("=")[0], values[arg[2:].split("=")[0]])
          if arg[2:].split("=")[0] in values else arg for arg in args]


def _folder_cases(root, tmp):
  """(script, args, the line) of a folder given where a file is named."""
  classifier = _classifier_args(root, os.path.join(tmp, "out"), ["do_train"])
  model_flags = ["--vocab_file=%s" % os.path.join(root, "vocab.txt"),
                 "--bert_config_file=%s" % os.path.join(root,
                                                        "bert_config.json")]
  data = os.path.join(tmp, "data")
  shutil.copytree(os.path.join(root, "data"), data)
  os.remove(os.path.join(data, "train.tsv"))
  os.makedirs(os.path.join(data, "train.tsv"))
  return {
      "vocab_file": ("run_classifier.py", _replaced(classifier,
                                                    vocab_file=root),
                     "--vocab_file=%s is a folder; pass the file itself (e.g. "
                     "--vocab_file=%s)." % (root, os.path.join(
                         root, "vocab.txt"))),
      "bert_config_file": (
          "run_classifier.py", _replaced(classifier, bert_config_file=root),
          "--bert_config_file=%s is a folder; pass the file itself (e.g. "
          "--bert_config_file=%s)." % (root, os.path.join(
              root, "bert_config.json"))),
      "init_checkpoint": (
          "run_classifier.py", classifier + ["--init_checkpoint=%s" % tmp],
          "--init_checkpoint=%s: %s.index not found." % (tmp, tmp)),
      "data_dir_file": (
          "run_classifier.py", _replaced(classifier, data_dir=data),
          "Data file %s is a folder, not a file." % os.path.join(
              data, "train.tsv")),
      "squad_train_file": (
          "run_squad.py", model_flags + [
              "--train_file=%s" % tmp, "--do_train",
              "--output_dir=%s" % os.path.join(tmp, "out"),
              "--max_seq_length=32", "--max_query_length=8",
              "--doc_stride=8"],
          "SQuAD file %s is a folder;" % tmp),
      "pretraining_input_file": (
          "run_pretraining.py", [
              "--input_file=%s" % tmp, "--do_train",
              "--bert_config_file=%s" % os.path.join(root,
                                                     "bert_config.json"),
              "--output_dir=%s" % os.path.join(tmp, "out"),
              "--max_seq_length=32", "--max_predictions_per_seq=5",
              "--num_train_steps=2", "--num_warmup_steps=0"],
          "--input_file: %s is a folder;" % tmp),
      "extract_input_file": (
          "extract_features.py", model_flags + [
              "--input_file=%s" % tmp,
              "--output_file=%s" % os.path.join(tmp, "out.jsonl"),
              "--init_checkpoint=%s" % os.path.join(
                  root, "out", "model.ckpt-%d" % STEPS),
              "--max_seq_length=16", "--layers=-1,-2"],
          "--input_file=%s is a folder;" % tmp),
  }


@pytest.mark.parametrize("case", [
    "vocab_file", "bert_config_file", "init_checkpoint", "data_dir_file",
    "squad_train_file", "pretraining_input_file", "extract_input_file"])
def test_folder_given_as_a_file_is_one_line(reference, tmp_path, run_script,
                                            case):
  script, args, expected = _folder_cases(reference, str(tmp_path))[case]
  result = run_script(script, args, TIMEOUT)
  assert result.returncode == 2, result.stderr[-3000:]
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith("%s: error: %s" % (script, expected)), last


# ------------------------------------------------------------ the pieces


def test_writing_removes_what_the_failed_write_left_and_nothing_else(
    tmp_path):
  from userio import disk_space  # pylint: disable=import-outside-toplevel
  folder = str(tmp_path)
  for name in ("model.ckpt-10.index", "old.tmp"):
    (tmp_path / name).write_text("kept")

  with pytest.raises(disk_space.WriteFailed) as failed:
    with disk_space.writing(folder, "checkpoint model.ckpt-20", size=3 << 20,
                            flag="--output_dir",
                            then=lambda: "it resumes from model.ckpt-10"):
      for name in ("model.ckpt-20.data-00000-of-00001.tempstate123",
                   "checkpoint.tmp9f3a", "model.ckpt-20.index"):
        (tmp_path / name).write_text("partial")
      raise OSError(28, "No space left on device")  # ENOSPC

  # The new temporary files go; what was there before and what is not
  # temporary stays (a checkpoint's own files are the caller's to name).
  assert sorted(os.listdir(folder)) == ["model.ckpt-10.index",
                                        "model.ckpt-20.index", "old.tmp"]
  message = str(failed.value)
  assert message.startswith(
      "No space left on device writing checkpoint model.ckpt-20 into %s "
      "(it needs about 3.0 MiB; " % folder), message
  assert message.endswith(" free there). Free space there or pass another "
                          "--output_dir, then run the same command again: "
                          "it resumes from model.ckpt-10."), message


def test_writing_passes_other_errors_and_knows_tensorflows_words(tmp_path):
  from userio import disk_space  # pylint: disable=import-outside-toplevel
  with pytest.raises(KeyError):
    with disk_space.writing(str(tmp_path), "x"):
      raise KeyError("not a disk")
  # A save op's error: ResourceExhaustedError, with the C library's words.
  error = tf.errors.ResourceExhaustedError(
      None, None, "/x/model.ckpt-0.data-00000-of-00001.tempstate1; No space "
      "left on device\n\t [[{{node save/SaveV2}}]]")
  assert disk_space.problem(error) == (disk_space.FULL,
                                       "No space left on device")
  line = str(disk_space.failure_of(error))
  assert line.startswith("No space left on device writing "
                         "/x/model.ckpt-0.data-00000-of-00001.tempstate1 ("
                         ), line
  out_of_memory = tf.errors.ResourceExhaustedError(
      None, None, "OOM when allocating tensor with shape[64,128]")
  assert disk_space.problem(out_of_memory) is None


def test_folder_lock_refuses_a_live_holder_and_takes_over_a_dead_one(
    tmp_path):
  from userio import cli  # pylint: disable=import-outside-toplevel
  from userio import folder_lock  # pylint: disable=import-outside-toplevel
  folder = str(tmp_path)
  holder = subprocess.Popen(
      [sys.executable, "-c", "import sys, time\n"
       "from userio import folder_lock\n"
       "lock = folder_lock.hold(sys.argv[1])\n"
       "print('held', flush=True)\n"
       "time.sleep(600)\n", folder],
      cwd=REPO_ROOT, env=_script_env(), stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline() == "held\n"
    assert folder_lock.held_by(folder)["pid"] == holder.pid
    with pytest.raises(cli.UserError) as refused:
      folder_lock.hold(folder)
  finally:
    holder.kill()
    holder.wait()
  assert str(refused.value).startswith(
      "--output_dir=%s is in use by another run (pid %d on " % (
          folder, holder.pid))
  assert folder_lock.held_by(folder) is None  # the flock died with it
  lock = folder_lock.hold(folder)
  try:
    with open(os.path.join(folder, "run.lock")) as f:
      assert json.load(f)["pid"] == os.getpid()
    assert folder_lock.hold(folder) is lock  # one process is one run
  finally:
    lock.release()
  assert not os.path.exists(os.path.join(folder, "run.lock"))
  # A lock nothing refers to any more (a run's main returned) is released.
  folder_lock.hold(folder)
  assert folder_lock.held_by(folder) is None
  assert not os.path.exists(os.path.join(folder, "run.lock"))
