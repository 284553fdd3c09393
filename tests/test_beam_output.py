"""What create_pretraining_data.py --mode=scalable and create_vocab.py print
on an Apache Beam runner: a run reads as a local run does (the same lines,
each in the project's format, nothing of Beam's or TensorFlow's own), a
flag Beam cannot take is one line, nothing is left in the temporary
folder, and a worker process that dies ends the run in one line with
nothing written.

The runs are fresh `python` processes, as a user starts them (TensorFlow's
and Beam's start-up included, no logging variables set), with $TMPDIR a
folder of the test's; DirectRunner's multi-processing workers take seconds
to start, so each command's runs are made once and shared
(conftest.build_once).
"""
import json
import os
import re
import subprocess
import sys

import pytest

import conftest
import processes

REPO_ROOT = conftest.REPO_ROOT
MRPC_TRAIN = os.path.join(REPO_ROOT, "sample_data", "mrpc_sample",
                          "train.tsv")
CPD = "create_pretraining_data.py"
VOCAB = "create_vocab.py"
BEAM = ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
        "--direct_num_workers=2"]
# Each line of a report: the time of day and the message
# (userio/verbosity.ProgressFormatter).
LINE = re.compile(r"(\d\d:\d\d:\d\d) (\S.*)$")
# A progress line during a long step (done/total, rates, time left): how many
# a run prints depends on the machine's speed.
PROGRESS = re.compile(r"^[\w ]+: [\d.]+/[\d.]+ \(")
# The last line of a step's progress: the amount and the time it took.
STEP_END = re.compile(r"^([\w ]+: [\d.]+ \w+) in (\d+ min )?\d+ s\.$")
# The long document: 200 lines of 50 bytes, longer than two shards of
# --shard_size_mb=0.004, so the shard starting at byte 0 ends inside it, at
# the first line start from byte 8000 on (docs/pretraining.md's cutting
# rule): byte 8000.
LONG_DOCUMENT = "".join(
    ("Line %03d of a document without an empty line." % i).ljust(49) + "\n"
    for i in range(200))
CUT_AT = 8000


def _fresh_env(tmpdir):
  """This process's environment as a user's shell has it (no variable that
  quiets TensorFlow), with $TMPDIR at `tmpdir`."""
  env = dict(conftest.env_without_compilation_cache(), PYTHONPATH=REPO_ROOT,
             TMPDIR=str(tmpdir))
  env.pop("TF_CPP_MIN_LOG_LEVEL", None)
  return env


def _run_fresh(script, args, tmpdir, timeout=300):
  """`python <script> <args>` in a new process; (status, stdout, stderr)."""
  proc = subprocess.run([sys.executable, script] + args, cwd=REPO_ROOT,
                        env=_fresh_env(tmpdir), capture_output=True,
                        text=True, timeout=timeout, check=False)
  return proc.returncode, proc.stdout, proc.stderr


def _write_corpus(path):
  """The long document, then MRPC's sentences, 1-5 to a document (about
  35 kB)."""
  with open(MRPC_TRAIN, encoding="utf-8") as f:
    sentences = [s for row in f.read().splitlines()[1:]
                 for s in row.split("\t")[3:5]]
  documents, i = [], 0
  while i < len(sentences):
    documents.append(sentences[i:i + 1 + i % 5])
    i += 1 + i % 5
  with open(path, "w", encoding="utf-8") as f:
    f.write(LONG_DOCUMENT + "\n")
    f.write("".join("\n".join(d) + "\n\n" for d in documents))


def _args(script, folder):
  corpus = os.path.join(folder, "corpus.txt")
  out = os.path.join(folder, "out")
  if script == CPD:
    return ["--input_file=" + corpus, "--output_file=%s/data" % out,
            "--vocab_file=" + os.path.join(
                conftest.ASSETS_DIR, "bert_vocab", "uncased", "vocab.txt"),
            "--mode=scalable", "--max_seq_length=64",
            "--max_predictions_per_seq=10", "--dupe_factor=2",
            "--shard_size_mb=0.004"]
  return ["--input_file=" + corpus, "--output_file=%s/vocab.txt" % out,
          "--vocab_size=1400", "--lower_thresh=2", "--shard_size_mb=0.004"]


def _files(folder):
  return {name: open(os.path.join(folder, name), "rb").read()
          for name in sorted(os.listdir(folder))}


def _build_runs(script, folder):
  """The command on the corpus with --runner=local (2 workers), then the
  same output paths with DirectRunner's 2 worker processes; records each
  run's status, output and files in runs.json."""
  _write_corpus(os.path.join(folder, "corpus.txt"))
  runs = {}
  out = os.path.join(folder, "out")
  for runner, extra in (("local", ["--num_workers=2"]), ("beam", BEAM)):
    tmp = os.path.join(folder, "tmp_" + runner)
    os.mkdir(out)
    os.mkdir(tmp)
    status, stdout, stderr = _run_fresh(script, _args(script, folder) + extra,
                                        tmp)
    runs[runner] = {"status": status, "stdout": stdout, "stderr": stderr,
                    "files": {k: v.hex() for k, v in _files(out).items()},
                    "tmp": sorted(os.listdir(tmp))}
    # The next run writes the same paths, so that its lines name them too.
    os.rename(out, os.path.join(folder, "out_" + runner))
  with open(os.path.join(folder, "runs.json"), "w") as f:
    json.dump(runs, f)


@pytest.fixture(scope="module", params=[CPD, VOCAB])
def runs(request, shared_dir):
  """(script, its local run, its DirectRunner run): dicts of status,
  stdout, stderr, files (name -> hex bytes) and tmp (what $TMPDIR held
  after it)."""
  script = request.param
  folder = conftest.build_once(shared_dir, "beam_output_" + script[:-3],
                               lambda f: _build_runs(script, f))
  with open(os.path.join(folder, "runs.json")) as f:
    record = json.load(f)
  return script, record["local"], record["beam"], folder


def _messages(text):
  """The messages of a report, each line checked to be in the project's
  format; progress lines left out and a step's time replaced by N."""
  messages = []
  for line in text.splitlines():
    found = LINE.match(line)
    assert found, "not in the project's format: %r" % line
    message = found.group(2)
    if not PROGRESS.match(message):
      messages.append(STEP_END.sub(r"\1 in N s.", message))
  return messages


def _corpus_size(folder):
  return os.path.getsize(os.path.join(folder, "corpus.txt"))


def _long_document_warning(folder):
  return ("Warning: %s/corpus.txt: a document longer than a shard (0.004 MB, "
          "--shard_size_mb) ends at byte %d (is an empty line missing between "
          "documents?); it is cut there." % (folder, CUT_AT))


@pytest.mark.slow
def test_a_beam_run_prints_what_a_local_run_prints(runs):
  """Every line of the DirectRunner run is in the project's format, and
  its messages are the local run's: all of them for
  create_pretraining_data.py (but the runner's name), for create_vocab.py
  those the launching process prints (the vocabulary is learned on a
  worker), the worker's warning of the long document included. Both write
  the same bytes."""
  script, local, beam, folder = runs
  for run in (local, beam):
    assert run["status"] == 0, run["stderr"][-3000:]
    assert run["stdout"] == ""
  assert beam["files"] == local["files"] and beam["files"]
  local_messages = _messages(local["stderr"])
  beam_messages = _messages(beam["stderr"])
  warning = _long_document_warning(folder)
  assert local_messages.count(warning) == 1, local_messages
  if script == CPD:
    assert [m.replace(" on DirectRunner.", " on 2 local workers.")
            for m in beam_messages] == local_messages
    assert beam_messages[1].startswith(
        "Scalable mode: %d shards of 0.004 MB on DirectRunner." %
        -(-_corpus_size(folder) // 4000))
  else:
    totals = [m for m in local_messages if m.startswith("Counting words: ")]
    assert beam_messages == [warning] + totals + [
        "Wrote %s/out/vocab.txt" % folder]
  assert beam_messages[-3].endswith(
      ": %.1f kB in N s." % (_corpus_size(folder) / 1e3)), beam_messages


@pytest.mark.slow
def test_a_beam_run_leaves_nothing_in_the_temporary_folder(runs):
  _, _, beam, _ = runs
  assert beam["status"] == 0, beam["stderr"][-3000:]
  assert beam["tmp"] == []


_ONE_LINE_CASES = {
    "unknown_flag": (
        CPD, ["--no_such_option=1"],
        "--no_such_option=1: neither a flag of this script (see --help) nor "
        "an option of Apache Beam's PipelineOptions."),
    "not_a_number": (
        VOCAB, ["--direct_num_workers=two"],
        "Apache Beam's option --direct_num_workers: invalid int value: "
        "'two'; pass a whole number."),
    "not_a_choice": (
        CPD, ["--direct_running_mode=many"],
        "Apache Beam's option --direct_running_mode: invalid choice: 'many'; "
        "choose from 'in_memory', 'multi_threading', 'multi_processing'."),
    "no_value": (
        VOCAB, ["--direct_num_workers"],
        "Apache Beam's option --direct_num_workers: expected one argument; "
        "give it a value (--direct_num_workers=VALUE)."),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(_ONE_LINE_CASES))
def test_a_flag_beam_cannot_take_is_one_line(case, tmp_path, run_script):
  script, extra, message = _ONE_LINE_CASES[case]
  _write_corpus(str(tmp_path / "corpus.txt"))
  (tmp_path / "out").mkdir()
  result = run_script(script, _args(script, str(tmp_path)) + [
      "--runner=DirectRunner"] + extra)
  assert result.returncode == 2
  assert result.stdout == ""
  assert result.stderr == "%s: error: %s\n" % (script, message)
  assert os.listdir(tmp_path / "out") == []


# ---------------------------------------------------------------------------
# A worker process killed mid-run.
# ---------------------------------------------------------------------------


@pytest.mark.slow
def test_a_killed_worker_ends_the_run_in_one_line_with_nothing_written(
    tmp_path):
  """kill -9 of one of DirectRunner's two worker processes once the first
  of 36 shards is being built: DirectRunner does not retry a lost worker's
  bundle, so after its settings the run ends with one line naming what
  happened, exit status 2, no shard file and nothing in $TMPDIR, and no
  process of the run left."""
  with open(tmp_path / "corpus.txt", "w", encoding="utf-8") as f:
    for _ in range(4):
      _write_corpus(str(tmp_path / "part.txt"))
      f.write(open(tmp_path / "part.txt", encoding="utf-8").read())
  os.remove(tmp_path / "part.txt")
  out, tmp = tmp_path / "out", tmp_path / "tmp"
  out.mkdir()
  tmp.mkdir()
  args = _args(CPD, str(tmp_path)) + ["--dupe_factor=5"] + BEAM
  # A shard's file (not the probe of --output_file's folder, data.tmp).
  status, stdout, stderr = processes.run_killing_a_beam_worker(
      [sys.executable, CPD] + args, _fresh_env(tmp),
      lambda: any(n.startswith("data-") for n in os.listdir(out)))
  assert (status, stdout) == (2, ""), stderr[-3000:]
  *settings, last = stderr.splitlines()
  reading, planned = _messages("\n".join(settings))
  assert reading == "Reading from %s" % (tmp_path / "corpus.txt")
  assert planned.startswith("Scalable mode: %d shards of 0.004 MB on "
                            "DirectRunner." % -(-_corpus_size(tmp_path) //
                                                4000))
  assert last == (
      "%s: error: A worker process of DirectRunner was killed (SIGKILL), "
      "and DirectRunner does not run a lost worker's shards again; nothing "
      "was written. Run the command again (with a lower --shard_size_mb or "
      "--direct_num_workers if memory ran out)." % CPD)
  assert os.listdir(out) == []
  assert os.listdir(tmp) == []
