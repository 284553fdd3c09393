"""create_pretraining_data.py --mode=scalable and create_vocab.py on Apache
Beam (corpus/beam_pipeline.py): the same bytes as --runner=local, whatever
the number of Beam workers; a worker's bad input, a missing Beam and the
flags that cannot work end in one line.

The Beam runs use DirectRunner in multi_processing mode, whose workers are
new Python processes (the way a distributed runner's workers are), so each
takes seconds to start: the tests run few of them.
"""

import os
import subprocess
import sys

from absl import flags
import pytest
import tensorflow as tf

from corpus import beam_pipeline
import create_pretraining_data as cpd
import create_vocab
from userio import cli

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MRPC_TRAIN = os.path.join(REPO_ROOT, "sample_data", "mrpc_sample",
                          "train.tsv")


def _beam(num_workers):
  return ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
          "--direct_num_workers=%d" % num_workers]


def _corpus(tmp_path):
  """MRPC's sentences, a document of 1-5 of them at a time, in two files
  (about 30 kB, 8 shards of 4 kB)."""
  with open(MRPC_TRAIN, encoding="utf-8") as f:
    sentences = [s for row in f.read().splitlines()[1:]
                 for s in row.split("\t")[3:5]]
  documents, i = [], 0
  while i < len(sentences):
    size = 1 + i % 5
    documents.append(sentences[i:i + size])
    i += size
  paths = []
  for part in (0, 1):
    path = tmp_path / ("corpus%d.txt" % part)
    path.write_text("".join("\n".join(d) + "\n\n"
                            for d in documents[part::2]), encoding="utf-8")
    paths.append(str(path))
  return ",".join(paths)


def _files(folder):
  return {name: (folder / name).read_bytes()
          for name in sorted(os.listdir(folder))}


def _run_ok(run_script, script, args):
  result = run_script(script, args)
  assert result.returncode == 0, result.stderr[-3000:]
  return result


@pytest.fixture(scope="module")
def uncased_vocab(assets_dir):
  return os.path.join(assets_dir, "bert_vocab", "uncased", "vocab.txt")


@pytest.mark.slow
def test_records_are_the_same_bytes_on_beam(tmp_path, uncased_vocab,
                                            run_script):
  corpus = _corpus(tmp_path)
  common = ["--input_file=" + corpus, "--vocab_file=" + uncased_vocab,
            "--mode=scalable", "--max_seq_length=64",
            "--max_predictions_per_seq=10", "--dupe_factor=2",
            "--shard_size_mb=0.004"]
  outputs, last_lines = {}, {}
  for name, extra in (("local", ["--num_workers=2"]), ("beam1", _beam(1)),
                      ("beam2", _beam(2))):
    folder = tmp_path / name
    folder.mkdir()
    result = _run_ok(run_script, "create_pretraining_data.py",
                     common + ["--output_file=%s" % (folder / "data")] + extra)
    outputs[name] = _files(folder)
    wrote = [line for line in result.stderr.splitlines() if " Wrote " in line]
    last_lines[name] = wrote[-1].split(" Wrote ", 1)[1].replace(name, "")
  names = sorted(outputs["local"])
  assert len(names) == 2 * 8, names   # 8 shards and their sidecars
  assert names[0] == "data-00000-of-00008"
  assert outputs["beam1"] == outputs["local"] == outputs["beam2"]
  # Every runner ends with the same account of what it wrote.
  assert last_lines["beam1"] == last_lines["local"] == last_lines["beam2"]
  assert last_lines["local"].startswith(
      "%d total instances in 8 shards: " % sum(
          1 for name in names if not name.endswith(".json")
          for _ in tf.compat.v1.io.tf_record_iterator(
              str(tmp_path / "local" / name))))
  # The progress of the Beam run, from its counters.
  assert "Building shards: 8 shards, " in result.stderr
  assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_vocabulary_is_the_same_file_on_beam(tmp_path, run_script):
  corpus = _corpus(tmp_path)
  common = ["--input_file=" + corpus, "--vocab_size=1400",
            "--shard_size_mb=0.004", "--lower_thresh=2"]
  outputs = {}
  for name, extra in (("local", ["--num_workers=2"]), ("beam1", _beam(1)),
                      ("beam2", _beam(2))):
    folder = tmp_path / name
    folder.mkdir()
    _run_ok(run_script, "create_vocab.py", common + [
        "--output_file=%s" % (folder / "vocab.txt"),
        "--counts_output=%s" % (folder / "counts.tsv")] + extra)
    outputs[name] = _files(folder)
  assert sorted(outputs["local"]) == ["counts.tsv", "vocab.txt"]
  assert len(outputs["local"]["vocab.txt"].splitlines()) == 1400
  assert outputs["beam1"] == outputs["local"] == outputs["beam2"]


@pytest.mark.slow
def test_a_bad_line_found_by_a_worker_is_one_line(tmp_path, uncased_vocab,
                                                  run_script):
  corpus = _corpus(tmp_path)
  bad = tmp_path / "bad.txt"
  with open(corpus.split(",")[0], "rb") as f:
    good = f.read()
  lines = good.count(b"\n")
  bad.write_bytes(good + b"Fine.\nnot \xe9 UTF-8\n")
  out = tmp_path / "out"
  out.mkdir()
  result = run_script("create_pretraining_data.py", [
      "--input_file=%s" % bad, "--vocab_file=" + uncased_vocab,
      "--output_file=%s" % (out / "data"), "--mode=scalable",
      "--shard_size_mb=0.004", "--max_seq_length=64",
      "--max_predictions_per_seq=10"] + _beam(2))
  assert result.returncode == 2, result.stderr[-3000:]
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  assert result.stderr.strip().splitlines()[-1] == (
      "create_pretraining_data.py: error: %s:%d: byte 0xe9 at column 5 is "
      "not UTF-8. Convert the file to UTF-8." % (bad, lines + 2))
  assert not os.listdir(out)


_WITHOUT_BEAM = """
import runpy, sys
sys.modules["apache_beam"] = None  # import apache_beam raises ImportError
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.slow
def test_a_missing_beam_is_one_line_naming_the_requirements(tmp_path):
  out = tmp_path / "vocab.txt"
  result = subprocess.run(
      [sys.executable, "-c", _WITHOUT_BEAM, "create_vocab.py",
       "--input_file=" + MRPC_TRAIN, "--output_file=%s" % out,
       "--runner=DirectRunner", "--direct_num_workers=2"],
      cwd=REPO_ROOT, env=dict(os.environ, PYTHONPATH=REPO_ROOT),
      capture_output=True, text=True, timeout=300, check=False)
  assert result.returncode == 2, result.stderr[-3000:]
  assert result.stderr.strip().splitlines()[-1] == (
      "create_vocab.py: error: --runner=DirectRunner needs Apache Beam, which "
      "is not installed: pip install -r requirements-beam.txt (it pins "
      "apache-beam), or pass --runner=local.")
  assert not out.exists()


def _cpd_flags(*args):
  fv = flags.FlagValues()
  cpd.define_flags(fv)
  fv(["create_pretraining_data.py"] + list(args), known_only=True)
  return fv


@pytest.mark.parametrize("extra,beam_args,message", [
    (["--runner=DirectRunner"], [], "--runner=DirectRunner: --mode=faithful "
     "runs in this one process (Google's records need the whole corpus in "
     "one place); pass --mode=scalable to run on a runner."),
    (["--mode=scalable"], ["--project=p"], "--project=p: not a flag of this "
     "script (see --help); Apache Beam's options apply with a Beam --runner "
     "only."),
    (["--mode=scalable", "--runner=DirectRunner"], ["--no_such_option=1"],
     "--no_such_option=1: neither a flag of this script (see --help) nor an "
     "option of Apache Beam's PipelineOptions."),
])
def test_flags_that_cannot_work_with_the_runner(tmp_path, uncased_vocab,
                                               extra, beam_args, message):
  corpus = _corpus(tmp_path)
  with pytest.raises(cli.UserError) as raised:
    cpd.run(_cpd_flags("--input_file=" + corpus,
                       "--vocab_file=" + uncased_vocab,
                       "--output_file=%s" % (tmp_path / "o"), *extra),
            beam_args)
  assert str(raised.value) == message
  assert sorted(os.listdir(tmp_path)) == ["corpus0.txt", "corpus1.txt"]


def test_counts_input_runs_here(tmp_path):
  fv = flags.FlagValues()
  create_vocab.define_flags(fv)
  fv(["create_vocab.py", "--counts_input=%s" % (tmp_path / "c.tsv"),
      "--output_file=%s" % (tmp_path / "v.txt"), "--runner=DirectRunner"])
  with pytest.raises(cli.UserError, match=r"^--runner=DirectRunner: "
                     r"learning from --counts_input runs in this process"):
    create_vocab.run(fv)


def test_beam_options_pass_through():
  """Beam's own flags reach its PipelineOptions, with --runner and
  --num_workers (Beam's option of that name too)."""
  options = beam_pipeline.pipeline_options(
      "DirectRunner", ["--direct_num_workers=2",
                       "--direct_running_mode=multi_processing",
                       "--project", "my-project"], num_workers=3)
  values = options.get_all_options()
  assert (values["runner"], values["direct_num_workers"],
          values["direct_running_mode"], values["project"],
          values["num_workers"]) == (
              "DirectRunner", 2, "multi_processing", "my-project", 3)
