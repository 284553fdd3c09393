"""Tests for userio/cli.py (how scripts end), userio/quiet_tensorflow.py (start-up noise),
userio/progress.py (progress lines) and userio/output_files.py (no half-written file;
outputs checked and their folders locked)."""
import codecs
import errno
import json
import os
import pickle
import subprocess
import sys

from absl import app
import pytest
import tensorflow as tf

from userio import cli
from userio import output_files
from userio import progress
from userio import utf8
from userio import quiet_tensorflow

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _raise(error):
  raise error


@pytest.mark.parametrize("error", [
    cli.UserError("--x=1 must be\n  at least 2."),
    app.UsageError("bad usage")])
def test_user_errors_end_with_one_line_and_status_2(error, capsys,
                                                    monkeypatch):
  monkeypatch.setattr(sys, "argv", ["run_x.py"])
  with pytest.raises(SystemExit) as stop:
    cli.call(_raise, error)
  assert stop.value.code == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1
  assert err.startswith("run_x.py: error: ")
  assert "Traceback" not in err


def test_a_bug_shows_its_traceback_and_says_so(capsys, monkeypatch):
  monkeypatch.setattr(sys, "argv", ["run_x.py"])
  with pytest.raises(SystemExit) as stop:
    cli.call(_raise, KeyError("internal"))
  assert stop.value.code == 1
  err = capsys.readouterr().err
  assert err.startswith("Traceback (most recent call last):")
  assert "KeyError: 'internal'" in err
  last = err.strip().splitlines()[-1]
  assert last.startswith("run_x.py: internal error:") and "bug" in last


def test_full_disk_is_one_line(capsys, monkeypatch, tmp_path):
  monkeypatch.setattr(sys, "argv", ["run_x.py"])
  full = OSError(errno.ENOSPC, "No space left on device",
                 str(tmp_path / "train.tf_record"))
  with pytest.raises(SystemExit) as stop:
    cli.call(_raise, full)
  assert stop.value.code == 1
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "Traceback" not in err
  assert "No space left on device writing %s" % (
      tmp_path / "train.tf_record") in err


def test_user_error_is_a_value_error():
  assert issubclass(cli.UserError, ValueError)
  assert cli.call(lambda x: x + 1, 1) == 2


def test_user_error_keeps_its_finding_apart_from_its_fix():
  error = cli.UserError("a.tsv:3: found 2 columns, expected 5",
                        fix="Repair that line.")
  assert str(error) == "a.tsv:3: found 2 columns, expected 5. Repair that line."
  assert error.finding == "a.tsv:3: found 2 columns, expected 5"
  assert error.fix == "Repair that line."
  plain = cli.UserError("--x=1 must be at least 2.")
  assert (str(plain), plain.finding, plain.fix) == (
      "--x=1 must be at least 2.", "--x=1 must be at least 2.", None)


def test_user_error_crosses_processes_with_both_parts():
  error = pickle.loads(pickle.dumps(cli.UserError("finding", fix="Fix.")))
  assert (type(error), str(error), error.finding, error.fix) == (
      cli.UserError, "finding. Fix.", "finding", "Fix.")


def test_help_lists_the_shared_flags_not_the_module_text(run_script):
  result = run_script("run_classifier.py", ["--help"], 300)
  assert result.returncode == 0, result.stderr
  out = result.stdout
  assert out.startswith("BERT finetuning runner for sentence (pair) "
                        "classification")
  for flag in ("--task_name", "--data_dir", "--vocab_file", "--output_dir",
               "--init_checkpoint", "--train_batch_size", "--learning_rate",
               "--num_train_epochs", "--max_seq_length", "--[no]do_lower_case",
               "--[no]do_train", "--micro_batch_size", "--precision",
               "--export_dir"):
    assert flag in out, flag
  # absl's own flags (logging, ...) only under --helpfull.
  assert "--verbosity" not in out and "--helpfull" in out
  plan = run_script("memory_plan.py", ["--help"], 300)
  assert plan.returncode == 0
  assert "--gpu_memory_gb" in plan.stdout
  # The module text (the term model) is not repeated by --help.
  assert "Per-example activations" not in plan.stdout


def test_cpu_start_up_noise_is_filtered_and_other_lines_kept():
  noise = [
      "WARNING: All log messages before absl::InitializeLog() is called are "
      "written to STDERR\n",
      "I0000 00:00:1795591880.904692   11556 cudart_stub.cc:31] Could not "
      "find cuda drivers on your machine, GPU will not be used.\n",
      "E0000 00:00:1795591925.607895   12072 cuda_platform.cc:52] failed "
      "call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN "
      "ERROR (303)\n"]
  real = "E0000 00:00:1.0  1 some_kernel.cc:12] A real problem.\n"
  assert quiet_tensorflow.kept_lines(noise + [real]) == [real]
  # With a driver (no cudart_stub line), a failing cuInit is real.
  assert quiet_tensorflow.kept_lines(noise[2:]) == noise[2:]


@pytest.mark.parametrize("value", ["5.6G", "0", "", "-1", "\u00b2", "1e9"])
def test_a_cpu_allocator_cap_tensorflow_cannot_read_is_one_line(value):
  with pytest.raises(cli.UserError) as error:
    cli.check_cpu_allocator_cap({"TF_MKL_ALLOC_MAX_BYTES": value})
  assert str(error.value) == (
      "TF_MKL_ALLOC_MAX_BYTES=%s must be a positive whole number of bytes "
      "(e.g. 6012954214 for 5.6 GiB), or unset: TensorFlow aborts on any "
      "other value." % value)
  cli.check_cpu_allocator_cap({"TF_MKL_ALLOC_MAX_BYTES": "6012954214"})
  cli.check_cpu_allocator_cap({})


def test_a_script_refuses_a_bad_cpu_allocator_cap_before_tensorflow_aborts(
    tmp_path):
  # TensorFlow itself ends such a process with SIGABRT and a C++ stack
  # trace once its CPU allocator starts.
  env = dict(os.environ, TF_MKL_ALLOC_MAX_BYTES="5.6G")
  result = subprocess.run(
      [sys.executable, "extract_features.py",
       "--input_file=%s" % (tmp_path / "in.txt"),
       "--output_file=%s" % (tmp_path / "out.jsonl"),
       "--init_checkpoint=%s" % (tmp_path / "model.ckpt")],
      cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
      check=False)
  assert result.returncode == cli.USAGE_STATUS, result.stderr
  assert result.stderr.strip().splitlines()[-1] == (
      "extract_features.py: error: TF_MKL_ALLOC_MAX_BYTES=5.6G must be a "
      "positive whole number of bytes (e.g. 6012954214 for 5.6 GiB), or "
      "unset: TensorFlow aborts on any other value.")
  assert "Traceback" not in result.stderr
  assert "Check failed" not in result.stderr


def test_scripts_start_without_cuda_noise():
  env = dict(os.environ)
  env.pop("TF_CPP_MIN_LOG_LEVEL", None)
  result = subprocess.run(
      [sys.executable, "-c", "from userio import quiet_tensorflow; import tensorflow as tf; "
       "print(tf.constant(2).numpy() * 3)"], cwd=REPO_ROOT, env=env,
      capture_output=True, text=True, timeout=300, check=False)
  assert result.stdout == "6\n"
  if not tf.config.list_physical_devices("GPU"):
    for line in ("cudart_stub", "cuInit", "cpu_feature_guard",
                 "absl::InitializeLog"):
      assert line not in result.stderr, result.stderr


def test_progress_line_counts_rate_and_time_left():
  now = [100.0]
  lines = []
  meter = progress.Progress("Writing features to x", 400, interval=10,
                            clock=lambda: now[0],
                            log=lambda fmt, *args: lines.append(fmt % args))
  now[0] = 105.0
  meter.advance(50)  # 5 s: no line yet.
  assert not lines
  now[0] = 110.0
  meter.advance(50)  # 100 of 400 in 10 s: 10/s, 300 left = 30 s.
  assert lines == ["Writing features to x: 100/400 (25.0%), 10.0 examples/s, "
                   "30 s left"]
  now[0] = 150.0
  meter.advance(300)
  meter.finish()
  assert lines[-1] == "Writing features to x: 400 examples in 50 s."
  assert progress.format_seconds(185) == "3 min 05 s"
  assert progress.format_seconds(7800) == "2 h 10 min"


def test_progress_line_scaled_with_other_rates():
  now = [0.0]
  lines = []
  meter = progress.Progress("Reading corpus.txt", 200e6, unit="MB",
                            interval=10, clock=lambda: now[0],
                            log=lambda fmt, *args: lines.append(fmt % args),
                            scale=1e6)
  now[0] = 20.0
  # 50 MB of 200 in 20 s: 2.5 MB/s, 150 MB left = 60 s; 400 documents and
  # 1000 instances so far: 20 and 50 per second.
  meter.advance(50e6, documents=400, instances=1000,
                sizes={"distinct words": 12345})
  assert lines == ["Reading corpus.txt: 50.0/200.0 (25.0%), 2.5 MB/s, "
                   "20.0 documents/s, 50.0 instances/s, 12,345 distinct "
                   "words, 1 min 00 s left"]
  now[0] = 80.0
  meter.advance(150e6)
  meter.finish()
  assert lines[-1] == "Reading corpus.txt: 200.0 MB in 1 min 20 s."


def test_replacing_leaves_the_whole_file_or_none(tmp_path):
  path = str(tmp_path / "out.txt")
  output_files.write_text(path, "first\n")
  with pytest.raises(RuntimeError):
    with output_files.replacing(path) as temporary:
      with open(temporary, "w") as f:
        f.write("half")
      raise RuntimeError("killed half-way")
  assert os.listdir(tmp_path) == ["out.txt"]
  with open(path) as f:
    assert f.read() == "first\n"
  output_files.copy(path, str(tmp_path / "copy.txt"))
  assert sorted(os.listdir(tmp_path)) == ["copy.txt", "out.txt"]


def test_claim_refuses_what_cannot_be_written_in_one_line_and_leaves_nothing(
    tmp_path):
  (tmp_path / "in.txt").write_text("text\n")
  (tmp_path / "sub").mkdir()
  # A folder where the probe of b.txt would write.
  (tmp_path / "b.txt.tmp").mkdir()
  out = str(tmp_path / "a.txt")
  cases = [
      ([("--output_file", str(tmp_path / "no" / "a.txt"))],
       "--output_file=%s: folder %s does not exist." % (
           tmp_path / "no" / "a.txt", tmp_path / "no")),
      ([("--output_file", str(tmp_path / "sub"))],
       "--output_file=%s is a folder; name a file in it." % (
           tmp_path / "sub")),
      ([("--output_file", str(tmp_path / "in.txt"))],
       "--output_file=%s is also an input file." % (tmp_path / "in.txt")),
      ([("--output_file", out), ("--output_file", out)],
       "--output_file names a file twice."),
      ([("--output_file", out),
        ("--counts_output", str(tmp_path / "sub" / ".." / "a.txt"))],
       "--counts_output=%s is also the file of --output_file; give each "
       "its own file." % (tmp_path / "sub" / ".." / "a.txt")),
      ([("--output_file", out), ("--counts_output", "/sys/a.txt")],
       "--counts_output=/sys/a.txt: cannot write there ("),
      ([("--output_file", out), ("--counts_output", str(tmp_path / "b.txt"))],
       "--counts_output=%s: cannot write there (" % (tmp_path / "b.txt")),
  ]
  before = sorted(os.listdir(tmp_path))
  for outputs, message in cases:
    with pytest.raises(cli.UserError) as raised:
      output_files.claim(outputs, [str(tmp_path / "in.txt")])
    assert str(raised.value).startswith(message), str(raised.value)
    assert str(raised.value).endswith(".") and "\n" not in str(raised.value)
    assert sorted(os.listdir(tmp_path)) == before


def test_claim_holds_the_folders_locks_until_the_run_ends(tmp_path):
  (tmp_path / "sub").mkdir()
  with output_files.claim([("--output_file", str(tmp_path / "a.txt")),
                           ("--counts_output", str(tmp_path / "sub" / "c"))],
                          []):
    for folder in (tmp_path, tmp_path / "sub"):
      with open(str(folder / "run.lock")) as f:
        assert json.load(f)["pid"] == os.getpid()
    assert sorted(os.listdir(tmp_path)) == ["run.lock", "sub"]
  assert os.listdir(tmp_path) == ["sub"]
  assert not os.listdir(tmp_path / "sub")


_SIGTERM_IN_A_FORK_HOOK = r"""
import os, signal, sys, time
from userio import cli

def main():
  # SIGTERM arrives while os.fork runs its hooks in the parent, where Python
  # reports an exception to sys.unraisablehook and carries on.
  os.register_at_fork(
      after_in_parent=lambda: os.kill(os.getpid(), signal.SIGTERM))
  child = os.fork()
  if child == 0:
    os._exit(0)
  os.waitpid(child, 0)
  deadline = time.monotonic() + 20
  while time.monotonic() < deadline:  # Work that the stop must interrupt.
    time.sleep(0.01)
  print("finished")

cli.call(main)
"""


def test_sigterm_during_a_fork_still_stops_the_command():
  """The Terminated swallowed inside os.fork's hook is raised again soon
  after, outside it: status 143 and the one line, never the work's end."""
  result = subprocess.run(
      [sys.executable, "-c", _SIGTERM_IN_A_FORK_HOOK], cwd=REPO_ROOT,
      env=dict(os.environ, PYTHONPATH=REPO_ROOT), capture_output=True,
      text=True, timeout=60, check=False)
  assert result.returncode == 128 + 15, (result.stdout, result.stderr)
  assert "finished" not in result.stdout
  assert result.stderr.strip().splitlines() == ["-c: stopped by SIGTERM."]


_NATIVE_LOG_AT_EXIT = r"""
import atexit, os
from userio import cli

# As native code does while the process ends: straight to descriptor 2.
atexit.register(os.write, 2, b"E0000 agent.cc] Failed to disconnect\n:UNKNOWN:\n")

def main():
  raise cli.UserError("--x=1 must be at least 2.")

cli.call(main)
"""


def test_the_error_line_is_the_last_thing_printed():
  """What native code writes to stderr as the process ends (a cluster's
  coordination agent after a peer died) does not follow the line."""
  result = subprocess.run(
      [sys.executable, "-c", _NATIVE_LOG_AT_EXIT], cwd=REPO_ROOT,
      env=dict(os.environ, PYTHONPATH=REPO_ROOT), capture_output=True,
      text=True, timeout=60, check=False)
  assert (result.returncode, result.stdout) == (2, "")
  assert result.stderr == "-c: error: --x=1 must be at least 2.\n"


def test_utf8_names_line_byte_and_column_past_a_byte_order_mark():
  # Counted by hand: line 3 is "ab\xffc"; the bad byte is its 3rd.
  data = codecs.BOM_UTF8 + b"first\nsecond\nab\xffc\n"
  with pytest.raises(cli.UserError) as raised:
    utf8.decode(data, "in.tsv", fix="Save it as UTF-8.")
  assert str(raised.value) == ("in.tsv:3: byte 0xff at column 3 is not "
                               "UTF-8. Save it as UTF-8.")
  # The mark is not counted in the first line's columns (editors hide it).
  with pytest.raises(cli.UserError, match=r"x:1: byte 0xe9 at column 4 "):
    utf8.decode(codecs.BOM_UTF8 + b"abc\xe9", "x", fix="F.")
  assert utf8.decode(codecs.BOM_UTF8 + "caf\u00e9\n".encode(), "x",
                     fix="F.") == "caf\u00e9\n"
  # A line read alone keeps its number in the file.
  assert utf8.finding("f", b"\xc3(", 0, first_line=41) == (
      "f:41: byte 0xc3 at column 1 is not UTF-8")
