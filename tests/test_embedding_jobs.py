"""extract_features.py as a corpus job (--runner, --num_workers,
--batches_per_shard): shard files that are the same bytes on every runner
and worker count, hold the one-process output, and ids that continue
across files and shards; one-line refusals with nothing written.

Real MiniLM (--max_seq_length=32 --layers=-1) on 29 lines of MRPC dev in
two files. The runs that compare runners are fresh `python` processes, as
a user starts them (TF_CPP_MIN_LOG_LEVEL unset), made once and shared; the
refusals go through the suite's script runner.
"""
import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import conftest
from test_beam_output import LINE
from test_beam_output import _fresh_env

pytestmark = pytest.mark.slow

SCRIPT = "extract_features.py"
# 16 lines (a whole number of batches of 4, so that the one-process run over
# both files makes the same batches) and 13 lines, one of them blank.
FIRST_FILE_LINES = 16
NUM_LINES = 29
# 2 batches of 4 lines a shard: a.txt 8 + 8, b.txt 8 + 5.
SHARDING = ["--batch_size=4", "--batches_per_shard=2"]
SHARD_SIZES = [8, 8, 8, 5]
DIRECT = ["--runner=DirectRunner", "--direct_running_mode=multi_processing"]
HF_MODEL = os.path.join(conftest.ASSETS_DIR, "models", "all-minilm-l6-v2-hf")
RUNS = {"local1": ["--num_workers=1"], "local2": ["--num_workers=2"],
        "direct1": DIRECT + ["--direct_num_workers=1"],
        "direct2": DIRECT + ["--direct_num_workers=2"]}


def _model_flags():
  model = conftest.MINILM_DIR
  return ["--vocab_file=" + os.path.join(model, "vocab.txt"),
          "--bert_config_file=" + os.path.join(model, "bert_config.json"),
          "--init_checkpoint=" + os.path.join(model, "bert_model.ckpt"),
          "--max_seq_length=32", "--layers=-1"]


def _lines():
  """29 input lines of MRPC dev: single sentences, pairs (some longer than
  32 tokens), and a blank line (an empty text, whose id still counts)."""
  path = os.path.join(conftest.ASSETS_DIR, "glue", "MRPC", "dev.tsv")
  with open(path, encoding="utf-8") as f:
    rows = list(csv.reader(f, delimiter="\t", quotechar=None))[1:]
  lines = [row[3] for row in rows[:10]]
  lines += ["%s ||| %s" % (row[3], row[4]) for row in rows[10:20]]
  return lines + [""] + [row[4] for row in rows[20:28]]


def _write_inputs(folder):
  """a.txt, b.txt (the corpus) and all.txt (both, for the one-process
  runs); returns the corpus's --input_file."""
  lines = _lines()
  for name, part in (("a.txt", lines[:FIRST_FILE_LINES]),
                     ("b.txt", lines[FIRST_FILE_LINES:]), ("all.txt", lines)):
    with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
      f.write("".join(line + "\n" for line in part))
  return "%s/a.txt,%s/b.txt" % (folder, folder)


def _run_fresh(args, tmpdir, model_flags=None):
  if model_flags is None:
    model_flags = _model_flags()
  proc = subprocess.run([sys.executable, SCRIPT] + model_flags + args,
                        cwd=conftest.REPO_ROOT, env=_fresh_env(tmpdir),
                        capture_output=True, text=True, timeout=300,
                        check=False)
  return {"status": proc.returncode, "stdout": proc.stdout,
          "stderr": proc.stderr}


def _build_runs(folder):
  """The one-process runs over all.txt (one.npz, one.jsonl), each of RUNS
  pooling into out_<run>/, a local run of per-token JSON into out_json/
  and one from the Hugging Face folder into out_hf/; records status and
  output in runs.json."""
  corpus = _write_inputs(folder)
  one = ["--input_file=%s/all.txt" % folder, "--batch_size=4"]
  runs = {"one_npz": _run_fresh(one + ["--pooling=mean",
                                       "--output_file=%s/one.npz" % folder],
                                folder),
          "one_json": _run_fresh(one + ["--output_file=%s/one.jsonl" % folder],
                                 folder)}
  for name, extra in list(RUNS.items()) + [("json", ["--num_workers=2"])]:
    out = os.path.join(folder, "out_" + name)
    os.mkdir(out)
    pooling = [] if name == "json" else ["--pooling=mean"]
    runs[name] = _run_fresh(["--input_file=" + corpus] + SHARDING + pooling +
                            extra + ["--output_file=%s/v" % out], folder)
  os.mkdir(os.path.join(folder, "out_hf"))
  runs["hf"] = _run_fresh(
      ["--input_file=" + corpus, "--init_checkpoint=" + HF_MODEL,
       "--max_seq_length=32", "--layers=-1", "--pooling=cls",
       "--num_workers=2", "--output_file=%s/out_hf/v.npz" % folder] +
      SHARDING, folder, model_flags=[])
  with open(os.path.join(folder, "runs.json"), "w") as f:
    json.dump(runs, f)


@pytest.fixture(scope="module")
def runs(shared_dir, assets_dir):  # pylint: disable=unused-argument
  folder = conftest.build_once(shared_dir, "embedding_job_runs", _build_runs)
  with open(os.path.join(folder, "runs.json")) as f:
    return folder, json.load(f)


def _files(folder):
  """name -> bytes of each file in `folder`."""
  found = {}
  for name in sorted(os.listdir(folder)):
    with open(os.path.join(folder, name), "rb") as f:
      found[name] = f.read()
  return found


def _arrays(path):
  with np.load(path, allow_pickle=False) as data:
    return {name: data[name] for name in data.files}


def test_runners_and_worker_counts_write_the_same_bytes(runs):
  folder, record = runs
  for name in list(RUNS) + ["json"]:
    assert record[name]["status"] == 0, record[name]["stderr"][-3000:]
    assert record[name]["stdout"] == ""
  files = _files(os.path.join(folder, "out_local1"))
  assert list(files) == ["v-%05d-of-00004.npz" % i for i in range(4)]
  for name in RUNS:
    assert _files(os.path.join(folder, "out_" + name)) == files, name


def test_the_shards_hold_the_one_process_vectors_bit_for_bit(runs):
  """The shards' batches are the one-process run's batches (a.txt is whole
  batches), and each batch's floats depend on its rows alone: the vectors
  are equal, not merely close."""
  folder, record = runs
  assert record["one_npz"]["status"] == 0, record["one_npz"]["stderr"]
  one = _arrays(os.path.join(folder, "one.npz"))
  out = os.path.join(folder, "out_direct2")
  shards = [_arrays(os.path.join(out, name)) for name in sorted(
      os.listdir(out))]
  assert [len(s["ids"]) for s in shards] == SHARD_SIZES
  embeddings = np.concatenate([s["embeddings"] for s in shards])
  assert embeddings.dtype == np.float32 and embeddings.shape == (NUM_LINES,
                                                                 384)
  np.testing.assert_array_equal(embeddings, one["embeddings"])
  for shard in shards:
    assert shard["layers"].tolist() == [-1]


def test_ids_continue_across_files_and_shards(runs):
  folder, _ = runs
  out = os.path.join(folder, "out_local2")
  ids = [_arrays(os.path.join(out, name))["ids"].tolist()
         for name in sorted(os.listdir(out))]
  starts = np.cumsum([0] + SHARD_SIZES)
  assert ids == [list(range(start, start + size))
                 for start, size in zip(starts, SHARD_SIZES)]
  assert _arrays(os.path.join(folder, "one.npz"))["ids"].tolist() == list(
      range(NUM_LINES))


def test_json_shards_are_the_one_process_lines(runs):
  folder, record = runs
  assert record["one_json"]["status"] == 0, record["one_json"]["stderr"]
  files = _files(os.path.join(folder, "out_json"))
  assert list(files) == ["v-%05d-of-00004.jsonl" % i for i in range(4)]
  with open(os.path.join(folder, "one.jsonl"), "rb") as f:
    assert b"".join(files.values()) == f.read()
  first = json.loads(files["v-00002-of-00004.jsonl"].splitlines()[0])
  assert first["linex_index"] == FIRST_FILE_LINES


def test_every_printed_line_is_in_the_project_format(runs):
  folder, record = runs
  for name in ["one_npz", "one_json"] + list(RUNS) + ["json"]:
    assert record[name]["stderr"], name
    for line in record[name]["stderr"].splitlines():
      assert LINE.match(line), "%s: %r" % (name, line)
  messages = [LINE.match(line).group(2)
              for line in record["local2"]["stderr"].splitlines()]
  assert messages[0] == (
      "Extracting features of 29 lines in 4 shards on 2 local workers.")
  assert messages[-1] == (
      "Wrote 29 embeddings in 4 shards: %s/out_local2/v-*-of-00004.npz" %
      folder)
  last = LINE.match(record["direct2"]["stderr"].splitlines()[-1]).group(2)
  assert last == ("Wrote 29 embeddings in 4 shards: %s/out_direct2/"
                  "v-*-of-00004.npz" % folder)
  last = LINE.match(record["json"]["stderr"].splitlines()[-1]).group(2)
  assert last == ("Wrote 29 examples' features in 4 shards: %s/out_json/"
                  "v-*-of-00004.jsonl" % folder)


def test_a_hugging_face_folder_is_converted_before_the_workers_fork(runs):
  """The conversion runs TensorFlow; workers forked after it in the same
  process would hang, so it runs in a child of its own."""
  folder, record = runs
  assert record["hf"]["status"] == 0, record["hf"]["stderr"][-3000:]
  out = os.path.join(folder, "out_hf")
  names = sorted(os.listdir(out))
  assert [n for n in names if n.startswith("v-")] == [
      "v-%05d-of-00004.npz" % i for i in range(4)]
  assert [n for n in names if not n.startswith("v-")][0].startswith("hf-")
  shards = [_arrays(os.path.join(out, "v-%05d-of-00004.npz" % i))
            for i in range(4)]
  assert np.concatenate([s["ids"] for s in shards]).tolist() == list(
      range(NUM_LINES))


# ---------------------------------------------------------------------------
# Bad input: one line, exit status 2, nothing written.
# ---------------------------------------------------------------------------


def _bad_cases(tmp):
  """case -> (args, the whole error message)."""
  good, bad = "%s/good.txt" % tmp, "%s/bad.txt" % tmp
  return {
      "beam_option_with_local_runner": (
          ["--input_file=" + good, "--num_workers=1",
           "--direct_num_workers=2"],
          "--direct_num_workers=2: not a flag of this script (see --help); "
          "Apache Beam's options apply with a Beam --runner only."),
      "empty_glob": (["--input_file=%s/*.none" % tmp, "--num_workers=1"],
                     "--input_file: %s/*.none matches no file." % tmp),
      "missing_file": (
          ["--input_file=%s,%s/missing.txt" % (good, tmp),
           "--batches_per_shard=1"],
          "--input_file=%s/missing.txt is not a file." % tmp),
      "not_utf8": (
          ["--input_file=%s,%s" % (good, bad), "--runner=local"],
          "%s:2: byte 0xe9 at column 4 is not UTF-8. Save the file as UTF-8 "
          "or repair that line." % bad),
      "empty_files": (
          ["--input_file=%s/empty*.txt" % tmp, "--num_workers=1"],
          "--input_file=%s/empty*.txt holds no text; write one example per "
          "line (\"text_a\" or \"text_a ||| text_b\")." % tmp),
      "pooling_into_json_lines": (
          ["--input_file=" + good, "--num_workers=1", "--pooling=mean"],
          "--pooling=mean writes a NumPy file; name --output_file ending in "
          ".npz (it was %s/out/v.jsonl)." % tmp),
      "no_workers": (["--input_file=" + good, "--num_workers=0"],
                     "--num_workers=0: must be at least 1."),
  }


@pytest.mark.parametrize("case", sorted(_bad_cases("")))
def test_bad_input_is_one_line_with_nothing_written(case, tmp_path,
                                                    assets_dir, run_script):
  # pylint: disable=unused-argument
  (tmp_path / "good.txt").write_text("Hello.\nWorld ||| again.\n")
  (tmp_path / "bad.txt").write_bytes(b"Hello.\ncaf\xe9\n")
  (tmp_path / "empty1.txt").write_text("")
  (tmp_path / "empty2.txt").write_text("")
  (tmp_path / "out").mkdir()
  args, message = _bad_cases(str(tmp_path))[case]
  output = "v.jsonl" if case == "pooling_into_json_lines" else "v"
  result = run_script(SCRIPT, _model_flags() + args + [
      "--output_file=%s/out/%s" % (tmp_path, output)])
  assert (result.returncode, result.stdout) == (2, ""), result.stderr
  assert result.stderr == "%s: error: %s\n" % (SCRIPT, message)
  assert os.listdir(tmp_path / "out") == []
