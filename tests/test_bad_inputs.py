"""Bad input to every command, as a user meets it: the whole output is one line.

Each case (tests/bad_input_cases.py, tests/bad_input_tool_cases.py) runs a
command in a process of its own on real data (sample_data, the
vocabularies, checkpoints and exports of ../shared/assets or made once per
session) with one thing wrong: a flag, a file, a row or cell, a config, a
vocabulary, a checkpoint, an export, a remote path, a runner's option. It
checks all a user sees and all that stays on disk:

  * the exit status is 2 and nothing goes to stdout;
  * stderr is exactly one line, "<script>: error: ...", naming the flag,
    file or line and holding the case's expected parts; no traceback, no
    TensorFlow or Beam line before it;
  * a fault met once the run has started (a full disk) ends with status 1
    and that line after the run's settings lines, each in the project's
    "HH:MM:SS message" form, and leaves no partial file;
  * the case's folder holds exactly what it held before (no output file,
    lock, partial or temporary file), and the run's temporary folder
    ($TMPDIR) is left empty.

The commands run with TF_CPP_MIN_LOG_LEVEL unset, as in a user's shell.
Most runs are forks of one process that imported TensorFlow already
(script_runner.py), which saves seconds per case; `test_a_fresh_process`
runs one case of each command as `python <script>`, import included.
"""
import hashlib
import os
import re
import subprocess
import sys

import pytest

import bad_input_cases
import bad_input_tool_cases
import conftest
import script_runner as script_runner_module

CASES = dict(bad_input_cases.CASES)
CASES.update(bad_input_tool_cases.CASES)
COMMANDS = ("run_classifier.py", "run_squad.py", "run_ner.py", "run_swag.py",
            "run_pretraining.py", "create_pretraining_data.py",
            "create_vocab.py", "extract_features.py", "convert_checkpoint.py",
            "predictor.py", "memory_plan.py", "squad_evaluate.py",
            "reproduce.py")
# A usage error's exit status (absl's and argparse's), and a failure's.
USAGE_STATUS = 2
FAILURE_STATUS = 1
# A line of a run's report (userio/verbosity.ProgressFormatter).
REPORT_LINE = re.compile(r"\d\d:\d\d:\d\d \S")
# TensorFlow writes the code autograph generates to temporary files and
# deletes them at the interpreter's exit, which the forked runs skip
# (os._exit); a user's process removes them.
AUTOGRAPH_PREFIX = "__autograph_generated_file"


def _user_env():
  """The environment of a user's shell: this one's without the variables
  the suite sets to quiet TensorFlow or choose a distribution."""
  env = conftest.env_without_compilation_cache()
  for name in ("TF_CPP_MIN_LOG_LEVEL", "TF_CONFIG"):
    env.pop(name, None)
  return env


@pytest.fixture(scope="module")
def user_runner():
  runner = script_runner_module.ScriptRunner(_user_env())
  yield runner
  runner.close()


@pytest.fixture(scope="session")
def finished_runs(shared_dir, run_script):
  """Finished runs of the tiny model that cases resume from, and what
  the tool cases need (bad_input_tool_cases.build_shared), made once for
  all workers."""
  root = conftest.build_once(
      shared_dir, "bad_input_runs",
      lambda folder: _build_runs(str(folder), run_script))
  return bad_input_tool_cases.shared_paths(str(root))


def _build_runs(root, run_script):
  fill = bad_input_cases.fill
  result = run_script("run_classifier.py", fill(
      bad_input_cases.TRAIN, out=os.path.join(root, "mrpc")))
  assert result.returncode == 0, result.stderr[-3000:]
  bad_input_cases._squad_file(root, data=bad_input_cases._squad_sample())  # pylint: disable=protected-access
  result = run_script("run_squad.py", fill(
      bad_input_cases.SQUAD + ["--do_train", "--train_file={tmp}/squad.json",
                               "--num_train_epochs=1"],
      out=os.path.join(root, "squad"), tmp=root))
  assert result.returncode == 0, result.stderr[-3000:]
  bad_input_tool_cases.build_shared(root, run_script)


def _snapshot(folder):
  """{relative path: sha256, or "/" for a folder} of what is under
  `folder`."""
  found = {}
  for root, dirs, files in os.walk(folder):
    for name in dirs:
      found[os.path.relpath(os.path.join(root, name), folder)] = "/"
    for name in files:
      path = os.path.join(root, name)
      if os.path.islink(path):
        found[os.path.relpath(path, folder)] = "->" + os.readlink(path)
        continue
      with open(path, "rb") as f:
        found[os.path.relpath(path, folder)] = hashlib.sha256(
            f.read()).hexdigest()
  return found


def _prepare(bad, folder, request):
  if bad.prepare is None:
    return
  if bad.prepare.__code__.co_argcount == 2:
    bad.prepare(folder, request.getfixturevalue("finished_runs"))
  else:
    bad.prepare(folder)


def _args(bad, folder, request):
  paths = {"tmp": folder, "out": os.path.join(folder, "out")}
  if any("{runs" in arg for arg in bad.args):
    paths.update(request.getfixturevalue("finished_runs"))
  return bad_input_cases.fill(bad.args, **paths)


def _partial(path):
  """Whether `path` names a file written under a temporary name."""
  return path.endswith((".tmp", ".incomplete"))


def _check(bad, result, before, after, temporary):
  """The assertions of the module docstring."""
  status = FAILURE_STATUS if bad.fault else USAGE_STATUS
  assert result.returncode == status, result.stderr[-3000:]
  assert result.stdout == "", result.stdout[-3000:]
  *settings, line = result.stderr.splitlines() or [""]
  if bad.fault:
    assert settings and all(map(REPORT_LINE.match, settings)), settings
  else:
    assert settings == [], result.stderr[-3000:]
  assert line.startswith(bad.script + ": error: "), line
  for part in bad.expect:
    assert part in line, (part, line)
  if bad.fault:
    # The run had started: its record stays (a rerun resumes from it),
    # but no partial file, and what was there before is unchanged.
    assert not [path for path in after if _partial(path)], after
    assert {path: digest for path, digest in before.items()
            if not _partial(path)}.items() <= after.items()
  else:
    assert after == before, sorted(set(after.items()) ^ set(before.items()))
  left = [name for name in os.listdir(temporary)
          if not name.startswith(AUTOGRAPH_PREFIX)]
  assert left == [], left


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.slow
def test_bad_input(name, tmp_path, request, user_runner):
  _run_case(CASES[name], tmp_path, request,
            lambda bad, args, temporary: user_runner.run(
                bad.script, args, bad_input_cases.TIMEOUT, stdin=bad.stdin,
                tmpdir=temporary))


def _run_case(bad, tmp_path, request, run):
  """Prepares the case's folder, runs it with `run(case, args, $TMPDIR)`
  -> script_runner.Result, and checks what it did."""
  folder = str(tmp_path / "case")
  os.mkdir(folder)
  temporary = tmp_path / "tmp"
  temporary.mkdir()
  _prepare(bad, folder, request)
  before = _snapshot(folder)
  result = run(bad, _args(bad, folder, request), str(temporary))
  _check(bad, result, before, _snapshot(folder), str(temporary))


# One case of each command, run as a new interpreter.
FRESH = sorted({case.script: name for name, case in sorted(
    CASES.items(), reverse=True)}.values())


@pytest.mark.parametrize("name", FRESH)
@pytest.mark.slow
def test_a_fresh_process(name, tmp_path, request):
  """`python <script> ...` from a user's shell: the import of TensorFlow
  (and its native start-up) prints nothing either."""
  _run_case(CASES[name], tmp_path, request, _run_fresh)


def _run_fresh(bad, args, temporary):
  """`python <script> <args>` as a new process from a user's shell."""
  env = dict(_user_env(), PYTHONPATH=conftest.REPO_ROOT, TMPDIR=temporary)
  proc = subprocess.run(
      [sys.executable, bad.script] + args, cwd=conftest.REPO_ROOT, env=env,
      input=bad.stdin or "", capture_output=True, text=True,
      timeout=bad_input_cases.TIMEOUT, check=False)
  return script_runner_module.Result(
      proc.returncode, proc.stdout,
      script_runner_module.without_compilation_cache_noise(proc.stderr))


def test_every_command_has_its_cases():
  """The issue's floor: 150 cases over all thirteen commands."""
  assert len(CASES) >= 150
  counts = {script: 0 for script in COMMANDS}
  for bad in CASES.values():
    counts[bad.script] += 1
  assert set(counts) == set(COMMANDS), counts
  assert min(counts.values()) >= 3, counts
