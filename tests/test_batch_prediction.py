"""predictor.py --output_file: a corpus of files predicted as a corpus job,
the same bytes on every runner and worker count, equal to the one-process
output; every task's export; one-line refusals with nothing written.

The exports are the tiny ones other tests make once per session (MRPC,
STS-B and SQuAD of test_predictor.py, the multi-label CSV of
test_own_data.py, NER of test_run_ner.py, SWAG of test_run_swag.py). The
runs that compare runners are fresh `python` processes, as a user starts
them (TF_CPP_MIN_LOG_LEVEL unset), made once and shared; the others go
through the suite's script runner.
"""
import csv
import json
import os
import subprocess
import sys

import pytest
from tensorflow.core.protobuf import saved_model_pb2

import conftest
import processes
from test_beam_output import LINE
from test_beam_output import _fresh_env
from test_own_data import multi_label_run  # pylint: disable=unused-import
from test_predictor import MRPC_SAMPLE
from test_predictor import mrpc_dir  # pylint: disable=unused-import
from test_predictor import squad_dir  # pylint: disable=unused-import
from test_predictor import stsb_dir  # pylint: disable=unused-import
from test_run_ner import ner_run  # pylint: disable=unused-import
from test_run_swag import swag_run  # pylint: disable=unused-import

pytestmark = pytest.mark.slow

PREDICTOR = "predictor.py"
REPO_ROOT = conftest.REPO_ROOT
# 33 inputs in batches of 4, 2 batches a shard: 6 shards over 3 files.
SHARDING = ["--batch_size=4", "--batches_per_shard=2"]
DIRECT = ["--runner=DirectRunner", "--direct_running_mode=multi_processing"]
RUNS = {"local1": ["--num_workers=1"], "local2": ["--num_workers=2"],
        "direct1": DIRECT + ["--direct_num_workers=1"],
        "direct2": DIRECT + ["--direct_num_workers=2"]}


def _mrpc_pairs():
  with open(os.path.join(MRPC_SAMPLE, "test.tsv"), encoding="utf-8") as f:
    return [(row[3], row[4]) for row in
            list(csv.reader(f, delimiter="\t", quotechar=None))[1:]]


def _write_mrpc_inputs(folder):
  """Three files of MRPC pairs: 13 text lines, 11 JSON lines (every other
  one with an id), a CSV of 9 rows with an id column, Windows line ends
  and a line break inside a quoted cell. Returns the --input value."""
  pairs = _mrpc_pairs()
  with open(os.path.join(folder, "a.txt"), "w", encoding="utf-8") as f:
    f.write("".join("%s\t%s\n" % pair for pair in pairs[:13]))
  with open(os.path.join(folder, "b.jsonl"), "w", encoding="utf-8") as f:
    for i, (a, b) in enumerate(pairs[13:24]):
      row = {"text_a": a, "text_b": b}
      f.write(json.dumps(dict(row, id="b%d" % i) if i % 2 else row) + "\n")
  with open(os.path.join(folder, "c.csv"), "w", encoding="utf-8",
            newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["key", "text_a", "text_b"])
    for i, (a, b) in enumerate(pairs[24:33]):
      writer.writerow(["c%d" % i, a, b.replace(" ", "\n", 1) if i == 2 else b])
  return ",".join(os.path.join(folder, name)
                  for name in ("a.txt", "b.jsonl", "c.csv"))


def _run_fresh(args, tmpdir):
  proc = subprocess.run([sys.executable, PREDICTOR] + args, cwd=REPO_ROOT,
                        env=_fresh_env(tmpdir), capture_output=True,
                        text=True, timeout=300, check=False)
  return {"status": proc.returncode, "stdout": proc.stdout,
          "stderr": proc.stderr}


def _shard_files(folder):
  return {name: open(os.path.join(folder, name), "rb").read().decode()
          for name in sorted(os.listdir(folder))}


def _build_runs(mrpc_export, folder):
  """The MRPC inputs predicted to stdout in one process, then by each of
  RUNS into out_<run>/; records status, output and files in runs.json."""
  inputs = _write_mrpc_inputs(folder)
  common = ["--export_dir=" + mrpc_export, "--input=" + inputs,
            "--id_column=key", "--batch_size=4"]
  runs = {"one": _run_fresh(common, folder)}
  for name, extra in RUNS.items():
    out = os.path.join(folder, "out_" + name)
    os.mkdir(out)
    runs[name] = _run_fresh(common + SHARDING + extra + [
        "--output_file=%s/preds" % out], folder)
    runs[name]["files"] = _shard_files(out)
  with open(os.path.join(folder, "runs.json"), "w") as f:
    json.dump(runs, f)


@pytest.fixture(scope="module")
def runs(shared_dir, mrpc_dir):  # pylint: disable=redefined-outer-name
  folder = conftest.build_once(
      shared_dir, "batch_prediction_runs",
      lambda f: _build_runs(os.path.join(mrpc_dir, "export"), f))
  with open(os.path.join(folder, "runs.json")) as f:
    return folder, json.load(f)


def _without_place(lines):
  """JSON lines without the "file" and "line" keys, as one-process
  predictor.py prints them."""
  return "".join(json.dumps({k: v for k, v in json.loads(line).items()
                             if k not in ("file", "line")},
                            ensure_ascii=False) + "\n"
                 for line in lines.splitlines())


def test_runners_and_worker_counts_write_the_same_bytes(runs):
  _, record = runs
  for name in RUNS:
    assert record[name]["status"] == 0, record[name]["stderr"][-3000:]
    assert record[name]["stdout"] == ""
  files = record["local1"]["files"]
  assert sorted(files) == ["preds-%05d-of-00006.jsonl" % i for i in range(6)]
  for name in RUNS:
    assert record[name]["files"] == files, name


def test_the_shards_hold_the_one_process_output(runs):
  _, record = runs
  assert record["one"]["status"] == 0, record["one"]["stderr"][-3000:]
  joined = "".join(record["local2"]["files"].values())
  assert len(joined.splitlines()) == 33
  assert _without_place(joined) == record["one"]["stdout"]


def test_each_output_names_its_input(runs):
  folder, record = runs
  lines = [json.loads(line) for text in record["local1"]["files"].values()
           for line in text.splitlines()]
  assert [(r.get("id"), r.get("file"), r.get("line")) for r in lines] == (
      [(None, os.path.join(folder, "a.txt"), n) for n in range(1, 14)] +
      [("b%d" % i, None, None) if i % 2 else
       (None, os.path.join(folder, "b.jsonl"), i + 1) for i in range(11)] +
      [("c%d" % i, None, None) for i in range(9)])
  assert all(list(r)[-2:] == ["label", "probabilities"] for r in lines)


def test_every_line_of_a_run_is_in_the_project_format(runs):
  folder, record = runs
  for name in ["one"] + list(RUNS):
    assert record[name]["stderr"], name
    for line in record[name]["stderr"].splitlines():
      assert LINE.match(line), "%s: %r" % (name, line)
  last = record["direct2"]["stderr"].splitlines()[-1]
  assert LINE.match(last).group(2) == (
      "Wrote 33 predictions in 6 shards: %s/out_direct2/preds-*-of-00006"
      ".jsonl" % folder)


# ---------------------------------------------------------------------------
# Every task's export.
# ---------------------------------------------------------------------------


def _write(path, lines):
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join(line + "\n" for line in lines))
  return str(path)


def _squad_csv(path, squad_folder):
  with open(os.path.join(squad_folder, "squad.json"), encoding="utf-8") as f:
    paragraphs = json.load(f)["data"][0]["paragraphs"]
  with open(path, "w", encoding="utf-8", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["qid", "question", "context"])
    for paragraph in paragraphs[:2]:
      for qa in paragraph["qas"]:
        writer.writerow([qa["id"], qa["question"], paragraph["context"]])
  return str(path)


def _swag_lines(path, swag_folder):
  with open(os.path.join(swag_folder, "data", "test.csv"),
            encoding="utf-8") as f:
    rows = list(csv.DictReader(f))[:5]
  lines = []
  for i, row in enumerate(rows):
    endings = [row["sent2"] + " " + row["ending%d" % k] for k in range(4)]
    lines.append(json.dumps({"id": i, "sentence": row["sent1"],
                             "endings": endings}) if i % 2 else
                 "\t".join([row["sent1"]] + endings))
  return _write(path, lines)


@pytest.fixture
def task_inputs(tmp_path, mrpc_dir, stsb_dir, squad_dir, multi_label_run,
                ner_run, swag_run):  # pylint: disable=redefined-outer-name
  """task -> (export folder, --input, extra flags, the result's keys)."""
  pairs = ["%s\t%s" % pair for pair in _mrpc_pairs()[:5]]
  return {
      "pair": (mrpc_dir, _write(tmp_path / "pairs.txt", pairs), [],
               ["label", "probabilities"]),
      "regression": (stsb_dir, _write(tmp_path / "stsb.txt", pairs), [],
                     ["score"]),
      "multi_label": (multi_label_run,
                      os.path.join(multi_label_run, "test.csv"),
                      ["--id_column=id"], ["labels", "probabilities"]),
      "ner": (ner_run, _write(tmp_path / "ner.txt", [
          "boris lima river quiet", "Anna river quiet  Paris stone Boris",
          "lima"]), [], ["entities"]),
      "swag": (swag_run, _swag_lines(tmp_path / "swag.txt", swag_run), [],
               ["choice", "ending", "probabilities"]),
      "squad": (squad_dir, _squad_csv(tmp_path / "squad.csv", squad_dir),
                ["--id_column=qid", "--max_query_length=16",
                 "--doc_stride=24", "--n_best_size=5",
                 "--max_answer_length=10"], ["answer", "nbest"]),
  }


@pytest.mark.parametrize("task", ["pair", "regression", "multi_label", "ner",
                                  "swag", "squad"])
def test_each_tasks_export(task, task_inputs, tmp_path, run_script):
  # pylint: disable=redefined-outer-name
  folder, inputs, extra, keys = task_inputs[task]
  common = ["--export_dir=" + os.path.join(folder, "export"),
            "--input=" + inputs, "--batch_size=2"] + extra
  one = run_script(PREDICTOR, common)
  assert one.returncode == 0, one.stderr[-3000:]
  (tmp_path / "out").mkdir()
  batch = run_script(PREDICTOR, common + [
      "--batches_per_shard=1", "--num_workers=1",
      "--output_file=%s/out/preds" % tmp_path])
  assert batch.returncode == 0, batch.stderr[-3000:]
  files = _shard_files(str(tmp_path / "out"))
  joined = "".join(files.values())
  assert _without_place(joined) == one.stdout
  for line in joined.splitlines():
    result = json.loads(line)
    assert [k for k in result if k not in ("id", "file", "line")][:len(
        keys)] == keys


# ---------------------------------------------------------------------------
# Bad input: one line, exit status 2, nothing written.
# ---------------------------------------------------------------------------


def _without_text_signature(export_dir, folder):
  """A copy of the export whose saved_model.pb lacks the text signature."""
  (version,) = os.listdir(export_dir)
  copy = os.path.join(folder, "old_export")
  subprocess.run(["cp", "-r", os.path.join(export_dir, version), copy],
                 check=True)
  path = os.path.join(copy, "saved_model.pb")
  saved_model = saved_model_pb2.SavedModel()
  with open(path, "rb") as f:
    saved_model.ParseFromString(f.read())
  for graph in saved_model.meta_graphs:
    del graph.signature_def["text"]
  with open(path, "wb") as f:
    f.write(saved_model.SerializeToString())
  return copy


def _bad_cases(tmp, mrpc_export, swag_export):
  pairs = _write(os.path.join(tmp, "pairs.txt"), ["A b.\tC d."])
  table = _write(os.path.join(tmp, "t.csv"), ["text_a,text_b", "A b.,C d."])
  squad = _write(os.path.join(tmp, "q.jsonl"), [
      '{"question": "Who?", "context": "Me."}'])
  return {
      "no_text_signature": (
          ["--export_dir=" + _without_text_signature(mrpc_export, tmp),
           "--input=" + pairs],
          "--export_dir: %s/old_export has no text signature (it has "
          "serving_default). Export the model again with this project's "
          "fine-tuning script (--export_dir, from its --output_dir; no "
          "training needed)." % tmp),
      "missing_column": (
          ["--input=" + table, "--text_a_column=sentence"],
          "--text_a_column=sentence: %s:1: the header has no such column "
          "(it has 'text_a', 'text_b'). Pass --text_a_column with one of "
          "them." % table),
      "empty_glob": (["--input=%s/*.none" % tmp],
                     "--input: %s/*.none matches no file." % tmp),
      "task_mismatch": (
          ["--input=" + squad],
          "%s:1: unknown field 'context'; the fields are text_a, text_b "
          "and an optional \"id\"." % squad),
      "table_for_multiple_choice": (
          ["--export_dir=" + swag_export, "--input=" + table,
           "--input_format=csv"],
          "--input_format=csv: a multiple-choice export reads JSON lines "
          "({\"sentence\": ..., \"endings\": [...]}) or text lines (the "
          "sentence, then each ending, separated by tabs)."),
      "beam_option_with_local_runner": (
          ["--input=" + pairs, "--direct_num_workers=2"],
          "--direct_num_workers=2: not a flag of this script (see --help); "
          "Apache Beam's options apply with a Beam --runner only."),
  }


_BAD_CASES = ["no_text_signature", "missing_column", "empty_glob",
              "task_mismatch", "table_for_multiple_choice",
              "beam_option_with_local_runner"]


@pytest.mark.parametrize("case", _BAD_CASES)
def test_bad_input_is_one_line_with_nothing_written(case, tmp_path, mrpc_dir,
                                                    swag_run, run_script):
  # pylint: disable=redefined-outer-name
  mrpc_export = os.path.join(mrpc_dir, "export")
  args, message = _bad_cases(str(tmp_path), mrpc_export,
                             os.path.join(swag_run, "export"))[case]
  if not any(arg.startswith("--export_dir=") for arg in args):
    args = ["--export_dir=" + mrpc_export] + args
  (tmp_path / "out").mkdir()
  result = run_script(PREDICTOR, args + ["--output_file=%s/out/p" % tmp_path])
  assert (result.returncode, result.stdout) == (2, "")
  assert result.stderr == "predictor.py: error: %s\n" % message
  assert os.listdir(tmp_path / "out") == []


@pytest.mark.parametrize("package,runner", [("apache_beam", "DirectRunner"),
                                            ("tensorflow_text", "local")])
def test_a_missing_package_is_one_line(package, runner, tmp_path, mrpc_dir):
  # pylint: disable=redefined-outer-name
  code = ("import runpy, sys; sys.modules[%r] = None; "
          "sys.argv = sys.argv[1:]; "
          "runpy.run_path(%r, run_name='__main__')" % (package, PREDICTOR))
  (tmp_path / "out").mkdir()
  proc = subprocess.run(
      [sys.executable, "-c", code, PREDICTOR,
       "--export_dir=" + os.path.join(mrpc_dir, "export"),
       "--input=" + _write(tmp_path / "in.txt", ["A b.\tC d."]),
       "--output_file=%s/out/p" % tmp_path, "--runner=" + runner],
      cwd=REPO_ROOT, env=_fresh_env(tmp_path), capture_output=True,
      text=True, timeout=300, check=False)
  assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr[-3000:]
  (line,) = proc.stderr.splitlines()
  assert line.startswith("predictor.py: error: ")
  assert ("requirements-beam.txt" if package == "apache_beam" else
          "requirements-text.txt") in line
  assert os.listdir(tmp_path / "out") == []


def test_a_killed_worker_ends_the_run_in_one_line_with_nothing_written(
    tmp_path, mrpc_dir):  # pylint: disable=redefined-outer-name
  """kill -9 of one of DirectRunner's two workers once the first shard's
  file is written (200 shards of one line): one line, exit status 2, no
  output file, nothing in $TMPDIR, no process of the run left."""
  pairs = _mrpc_pairs()
  inputs = _write(tmp_path / "in.txt",
                  ["%s\t%s" % pairs[i % len(pairs)] for i in range(200)])
  out, tmp = tmp_path / "out", tmp_path / "tmp"
  out.mkdir()
  tmp.mkdir()
  args = ["--export_dir=" + os.path.join(mrpc_dir, "export"),
          "--input=" + inputs, "--batch_size=1", "--batches_per_shard=1",
          "--output_file=%s/p" % out] + DIRECT + ["--direct_num_workers=2"]
  status, stdout, stderr = processes.run_killing_a_beam_worker(
      [sys.executable, PREDICTOR] + args, _fresh_env(tmp),
      lambda: any(n.startswith("p-") for n in os.listdir(out)))
  assert (status, stdout) == (2, ""), stderr[-3000:]
  *settings, last = stderr.splitlines()
  assert all(LINE.match(line) for line in settings), settings
  assert last == (
      "predictor.py: error: A worker process of DirectRunner was killed "
      "(SIGKILL), and DirectRunner does not run a lost worker's shards "
      "again; nothing was written. Run the command again (with a lower "
      "--batches_per_shard or --direct_num_workers if memory ran out).")
  assert os.listdir(out) == []
  assert os.listdir(tmp) == []
