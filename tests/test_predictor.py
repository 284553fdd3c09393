"""Tests of predictor.py: raw text in, the scripts' own predictions out.

The references are the export's bare signature on the scripts' padded
features, and the files the scripts write for the same examples and the
same weights: run_classifier.py's test_results.tsv, run_squad.py's
predictions.json, nbest_predictions.json and null_odds.json. Each model is a
tiny one (2 layers) fine-tuned for a few steps and exported by the script
(--export_dir), once per test session.
"""
import csv
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from userio import cli
import conftest
import predictor
import run_classifier
from tasks import glue
import tokenization

pytestmark = pytest.mark.slow

REPO_ROOT = conftest.REPO_ROOT
TINY_CONFIG = os.path.join(REPO_ROOT, "sample_data", "tiny_bert_config.json")
MRPC_SAMPLE = os.path.join(REPO_ROOT, "sample_data", "mrpc_sample")
STSB_HEADER = ["index", "genre", "filename", "year", "old_index", "source1",
               "source2", "sentence1", "sentence2"]
SQUAD_FLAGS = ["--max_seq_length=64", "--max_query_length=16",
               "--doc_stride=24", "--n_best_size=5", "--max_answer_length=10"]
SQUAD_OPTIONS = dict(doc_stride=24, max_query_length=16, n_best_size=5,
                     max_answer_length=10)
# One-token words of the uncased vocabulary, for contexts whose windows are
# exactly full (no padding at all in run_squad.py's features).
NUMBER_WORDS = ("one two three four five six seven eight nine ten eleven "
                "twelve thirteen fourteen fifteen sixteen seventeen eighteen "
                "nineteen twenty").split()


def _vocab_file():
  return os.path.join(conftest.ASSETS_DIR, "bert_vocab", "uncased",
                      "vocab.txt")


def _run(run_script, args, log_path):
  """Runs the script args[0] with args[1:]; its output goes to `log_path`."""
  conftest.run_logged(run_script, args[0], args[1:], log_path)


def _only_export(export_dir):
  (name,) = os.listdir(export_dir)
  return os.path.join(export_dir, name)


def _read_rows(path):
  with open(path, encoding="utf-8") as f:
    return [line.rstrip("\n").split("\t") for line in f]


# ------------------------------------------------------------- the runs --


def _classifier_run(run_script, root, task, data_dir, extra):
  _run(run_script, [
      "run_classifier.py", "--task_name=" + task, "--data_dir=" + data_dir,
      "--vocab_file=" + _vocab_file(), "--bert_config_file=" + TINY_CONFIG,
      "--output_dir=" + os.path.join(root, "out"),
      "--export_dir=" + os.path.join(root, "export"), "--do_train",
      "--do_predict", "--max_seq_length=48", "--learning_rate=1e-3",
      "--predict_batch_size=8", "--seed=3"] + extra,
       os.path.join(root, "run.log"))


def _build_mrpc(run_script, root):
  # 200 pairs / batch 32 = 6 updates.
  _classifier_run(run_script, root, "MRPC", MRPC_SAMPLE,
                  ["--train_batch_size=32", "--num_train_epochs=1"])


def _write_stsb(data_dir):
  pairs = [("A man is playing a guitar.", "A man plays the guitar.", "4.8"),
           ("A dog runs in the park.", "The cat sleeps on the sofa.", "0.4"),
           ("Two kids are swimming.", "Children swim in a lake.", "3.6"),
           ("The sun is shining.", "It is raining heavily today.", "0.8"),
           ("She is cutting an onion.", "A woman slices an onion.", "4.4"),
           ("A plane takes off.", "An airplane is taking off.", "5.0"),
           ("He reads a book.", "The man cooks dinner.", "0.2"),
           ("A girl sings on stage.", "A girl is singing.", "3.9")]
  os.makedirs(data_dir)
  for name, with_score in (("train.tsv", True), ("dev.tsv", True),
                           ("test.tsv", False)):
    header = STSB_HEADER + (["score"] if with_score else [])
    rows = [[str(i), "main-captions", "MSRvid", "2012test", "0001", "none",
             "none", a, b] + ([score] if with_score else [])
            for i, (a, b, score) in enumerate(pairs)]
    with open(os.path.join(data_dir, name), "w", encoding="utf-8") as f:
      f.write("".join("\t".join(row) + "\n" for row in [header] + rows))


def _build_stsb(run_script, root):
  data_dir = os.path.join(root, "data")
  _write_stsb(data_dir)
  # 8 pairs / batch 4 = 2 updates.
  _classifier_run(run_script, root, "STS-B", data_dir,
                  ["--train_batch_size=4", "--num_train_epochs=1"])


def _squad_data(path, tokenizer):
  """A SQuAD file: real SQuAD paragraphs (windows of any length) and
  contexts of one-token words whose windows are all exactly full.

  Returns:
    the ids of the questions whose windows are all full.
  """
  with open(os.path.join(conftest.ASSETS_DIR, "squad", "v1.1",
                         "dev-v1.1.json"), encoding="utf-8") as f:
    article = json.load(f)["data"][0]
  paragraphs = [dict(context=p["context"], qas=p["qas"][:3])
                for p in article["paragraphs"][:3]]
  question = "which number is it?"
  # Document room of a window: 64 - question tokens - [CLS], [SEP], [SEP].
  room = 64 - len(tokenizer.tokenize(question)) - 3
  assert all(len(tokenizer.tokenize(word)) == 1 for word in NUMBER_WORDS)
  full = []
  for num_windows in (1, 2, 3):
    # Windows start every 24 tokens; the last one ends with the context.
    words = [NUMBER_WORDS[(i * 7 + num_windows) % len(NUMBER_WORDS)]
             for i in range(room + 24 * (num_windows - 1))]
    context = " ".join(words)
    qid = "full%d" % num_windows
    answer = words[5 + num_windows]
    paragraphs.append(dict(context=context, qas=[{
        "id": qid, "question": question,
        "answers": [{"text": answer,
                     "answer_start": context.index(" %s " % answer) + 1}]}]))
    full.append(qid)
  with open(path, "w", encoding="utf-8") as f:
    json.dump({"version": "1.1", "data": [
        {"title": "t", "paragraphs": paragraphs}]}, f)
  return full


# Between the null score diffs of this run's questions (-0.69 to -0.22), so
# that some are answered and some are not.
V2_THRESHOLD = -0.45


def _build_squad(run_script, root):
  tokenizer = tokenization.FullTokenizer(_vocab_file(), do_lower_case=True)
  data = os.path.join(root, "squad.json")
  full = _squad_data(data, tokenizer)
  with open(os.path.join(root, "full_windows.json"), "w") as f:
    json.dump(full, f)
  out = os.path.join(root, "out")
  common = ["run_squad.py", "--vocab_file=" + _vocab_file(),
            "--bert_config_file=" + TINY_CONFIG, "--output_dir=" + out,
            "--predict_file=" + data, "--do_predict",
            "--predict_batch_size=8"] + SQUAD_FLAGS
  _run(run_script, common + [
      "--do_train", "--train_file=" + data, "--train_batch_size=4",
      "--num_train_epochs=1", "--learning_rate=1e-3", "--seed=3",
      "--export_dir=" + os.path.join(root, "export")],
       os.path.join(root, "train.log"))
  for name in ("predictions.json", "nbest_predictions.json"):
    shutil.move(os.path.join(out, name), os.path.join(root, "v1_" + name))
  # SQuAD 2.0 predictions of the same weights, with a threshold that
  # leaves some questions unanswered and answers others.
  _run(run_script, common + [
      "--version_2_with_negative",
      "--null_score_diff_threshold=%s" % V2_THRESHOLD],
       os.path.join(root, "predict_v2.log"))


@pytest.fixture(scope="module")
def mrpc_dir(shared_dir, run_script):
  return conftest.build_once(shared_dir, "predictor_mrpc",
                             lambda root: _build_mrpc(run_script, root))


@pytest.fixture(scope="module")
def stsb_dir(shared_dir, run_script):
  return conftest.build_once(shared_dir, "predictor_stsb",
                             lambda root: _build_stsb(run_script, root))


@pytest.fixture(scope="module")
def squad_dir(shared_dir, run_script):
  return conftest.build_once(shared_dir, "predictor_squad",
                             lambda root: _build_squad(run_script, root))


@pytest.fixture(scope="module")
def mrpc_model(mrpc_dir):
  return predictor.load(os.path.join(mrpc_dir, "export"))


@pytest.fixture(scope="module")
def squad_model(squad_dir):
  return predictor.ExportedModel(os.path.join(squad_dir, "export"))


def _json(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


# ------------------------------------------------------- classification --


def test_mrpc_probabilities_equal_test_results(mrpc_dir, mrpc_model):
  examples = run_classifier.MrpcProcessor().get_test_examples(MRPC_SAMPLE)
  expected = np.array(_read_rows(os.path.join(mrpc_dir, "out",
                                              "test_results.tsv")), float)
  assert expected.shape == (40, 2)
  results = mrpc_model.predict_batch([(e.text_a, e.text_b)
                                      for e in examples])
  got = np.array([[r["probabilities"]["0"], r["probabilities"]["1"]]
                  for r in results])
  # The script padded every pair to 48 tokens; here each batch of 32 is
  # padded to its longest pair, and a single pair not at all.
  np.testing.assert_allclose(got, expected, atol=1e-5)
  assert [r["label"] for r in results] == [
      "01"[i] for i in expected.argmax(axis=1)]
  one = mrpc_model.predict(examples[7].text_a, examples[7].text_b)
  np.testing.assert_allclose([one["probabilities"]["0"],
                              one["probabilities"]["1"]], expected[7],
                             atol=1e-5)


def test_mrpc_equals_the_signature_on_the_scripts_features(mrpc_dir,
                                                           mrpc_model):
  """The bare SavedModel signature, fed convert_single_example's padded
  features of raw text outside the data set, gives the predictor's
  probabilities."""
  pairs = [("The committee met on Tuesday.", "On Tuesday the panel met."),
           ("Prices rose sharply", "Nobody expected the storm to end.")]
  tokenizer = tokenization.FullTokenizer(_vocab_file(), do_lower_case=True)
  features = [run_classifier.convert_single_example(
      i, run_classifier.InputExample(guid=None, text_a=a, text_b=b,
                                     label="0"),
      ["0", "1"], 48, tokenizer) for i, (a, b) in enumerate(pairs)]
  serve = tf.saved_model.load(_only_export(os.path.join(
      mrpc_dir, "export"))).signatures["serving_default"]
  want = serve(**{name: tf.constant([getattr(f, name) for f in features],
                                    tf.int32)
                  for name in ("input_ids", "input_mask", "segment_ids")}
               )["probabilities"].numpy()
  got = [mrpc_model.predict(a, b)["probabilities"] for a, b in pairs]
  np.testing.assert_allclose([[p["0"], p["1"]] for p in got], want,
                             atol=1e-5)


def test_stsb_scores_equal_test_results(stsb_dir):
  model = predictor.load(os.path.join(stsb_dir, "export"), batch_size=3)
  examples = glue.StsbProcessor().get_test_examples(
      os.path.join(stsb_dir, "data"))
  expected = [float(row[0]) for row in _read_rows(
      os.path.join(stsb_dir, "out", "test_results.tsv"))]
  results = model.predict_batch([(e.text_a, e.text_b) for e in examples])
  assert all(sorted(r) == ["score"] for r in results)
  np.testing.assert_allclose([r["score"] for r in results], expected,
                             atol=1e-5 * max(1.0, np.abs(expected).max()))


def test_pair_task_checks_its_texts(mrpc_model):
  with pytest.raises(cli.UserError, match="text_b is missing.*MRPC"):
    mrpc_model.predict("Only one sentence.")
  with pytest.raises(cli.UserError, match="text_a must be a non-empty"):
    mrpc_model.predict("  ", "Two.")
  with pytest.raises(cli.UserError, match="the SST-2 model classifies single texts: give text_a alone"):
    predictor.check_example("sst-2", ("Fine.", "Extra."))
  predictor.check_example("my-own-task", ("One.", None))
  predictor.check_example("my-own-task", ("One.", "Two."))


# ---------------------------------------------------------------- SQuAD --


def _squad_questions(squad_dir):
  """{id: (question, context)} of the run's predict file."""
  questions = {}
  for article in _json(os.path.join(squad_dir, "squad.json"))["data"]:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        questions[qa["id"]] = (qa["question"], paragraph["context"])
  return questions


def _assert_same_nbest(got, want):
  assert [e["text"] for e in got] == [e["text"] for e in want]
  for key in ("probability", "start_logit", "end_logit"):
    np.testing.assert_allclose([e[key] for e in got], [e[key] for e in want],
                               atol=1e-4)


def test_squad_padded_like_the_script_equals_its_predictions(squad_dir,
                                                             squad_model):
  model = predictor.SquadPredictor(squad_model, pad_to_max_seq_length=True,
                                   batch_size=5, **SQUAD_OPTIONS)
  questions = _squad_questions(squad_dir)
  answers = model.predict_batch(list(questions.values()))
  predictions = _json(os.path.join(squad_dir, "v1_predictions.json"))
  nbest = _json(os.path.join(squad_dir, "v1_nbest_predictions.json"))
  assert len(answers) == len(predictions) == 12
  for qid, answer in zip(questions, answers):
    assert answer["answer"] == predictions[qid], qid
    _assert_same_nbest(answer["nbest"], nbest[qid])
    assert "null_score_diff" not in answer


def test_squad_full_windows_equal_predictions_without_padding(squad_dir,
                                                              squad_model):
  """Windows with no padding in the script's features: the default
  predictor (no padding either) finds the script's answers, alone and in
  a batch with shorter windows (padded to these)."""
  model = predictor.SquadPredictor(squad_model, **SQUAD_OPTIONS)
  questions = _squad_questions(squad_dir)
  full = _json(os.path.join(squad_dir, "full_windows.json"))
  predictions = _json(os.path.join(squad_dir, "v1_predictions.json"))
  nbest = _json(os.path.join(squad_dir, "v1_nbest_predictions.json"))
  batch = model.predict_batch(list(questions.values()))
  for qid in full:
    one = model.predict(*questions[qid])
    in_batch = batch[list(questions).index(qid)]
    for answer in (one, in_batch):
      assert answer["answer"] == predictions[qid], qid
      _assert_same_nbest(answer["nbest"], nbest[qid])


def test_squad_v2_null_odds_and_threshold(squad_dir, squad_model):
  model = predictor.SquadPredictor(
      squad_model, pad_to_max_seq_length=True,
      version_2_with_negative=True, null_score_diff_threshold=V2_THRESHOLD,
      **SQUAD_OPTIONS)
  questions = _squad_questions(squad_dir)
  answers = model.predict_batch(list(questions.values()))
  out = os.path.join(squad_dir, "out")
  predictions = _json(os.path.join(out, "predictions.json"))
  odds = _json(os.path.join(out, "null_odds.json"))
  nbest = _json(os.path.join(out, "nbest_predictions.json"))
  for qid, answer in zip(questions, answers):
    assert answer["null_score_diff"] == pytest.approx(odds[qid], abs=1e-4)
    assert answer["answer"] == predictions[qid], qid
    _assert_same_nbest(answer["nbest"], nbest[qid])
  # The threshold's both sides are exercised.
  assert {a["answer"] == "" for a in answers} == {True, False}


def test_rows_are_padded_to_the_longest_of_their_batch(squad_model):
  rows = [([101, 2054, 102, 2009, 102], [0, 0, 0, 1, 1]),
          ([101, 2054, 2003, 2009, 102, 2009, 2003, 2204, 102],
           [0] * 5 + [1] * 4)]
  apart = squad_model.run_rows(rows, batch_size=1)
  together = squad_model.run_rows(rows, batch_size=2)
  assert [len(o["start_logits"]) for o in apart] == [5, 9]
  assert [len(o["start_logits"]) for o in together] == [9, 9]
  # The padding changes nothing at the real positions.
  np.testing.assert_allclose(together[0]["start_logits"][:5],
                             apart[0]["start_logits"], atol=1e-5)
  padded = squad_model.run_rows(rows, batch_size=2, pad_to=64)
  assert [len(o["end_logits"]) for o in padded] == [64, 64]


def test_squad_checks_settings_against_the_export(squad_model):
  with pytest.raises(cli.UserError,
                     match=r"--doc_stride=60 .*max_seq_length is the export"):
    predictor.SquadPredictor(squad_model, doc_stride=60, max_query_length=16)
  model = predictor.SquadPredictor(squad_model, **SQUAD_OPTIONS)
  with pytest.raises(cli.UserError, match="context must be a non-empty"):
    model.predict("Who?", "")


# --------------------------------------------------- loading and assets --


def test_export_folder_or_its_newest_model(mrpc_dir, tmp_path):
  export = os.path.join(mrpc_dir, "export")
  model_dir = _only_export(export)
  assert predictor.find_saved_model(export) == model_dir
  assert predictor.find_saved_model(model_dir) == model_dir
  base = tmp_path / "exports"
  base.mkdir()
  for name in ("1700000000", "1800000000"):
    os.symlink(model_dir, str(base / name))
  (base / "1900000000.incomplete").mkdir()
  assert predictor.find_saved_model(str(base)) == str(base / "1800000000")
  with pytest.raises(cli.UserError) as error:
    predictor.find_saved_model(str(tmp_path))
  assert str(error.value) == (
      "%s holds no saved_model.pb, nor a <unix time> folder with one; pass "
      "the folder that a fine-tuning script's --export_dir wrote." % tmp_path)
  with pytest.raises(cli.UserError, match="is not a folder"):
    predictor.find_saved_model(str(tmp_path / "nowhere"))


@pytest.mark.parametrize("remove,message", [
    ("vocab.txt", r"has no assets.extra/vocab.txt"),
    ("run_info.json", r"has no assets.extra/run_info.json"),
])
def test_missing_assets_are_named(mrpc_dir, tmp_path, remove, message):
  copy = str(tmp_path / "model")
  shutil.copytree(_only_export(os.path.join(mrpc_dir, "export")), copy)
  os.remove(os.path.join(copy, "assets.extra", remove))
  with pytest.raises(cli.UserError, match=copy + " " + message):
    predictor.load(copy)


def test_record_without_a_field_is_named(mrpc_dir, tmp_path):
  copy = str(tmp_path / "model")
  shutil.copytree(_only_export(os.path.join(mrpc_dir, "export")), copy)
  path = os.path.join(copy, "assets.extra", "run_info.json")
  record = _json(path)
  del record["max_seq_length"]
  with open(path, "w") as f:
    json.dump(record, f)
  with pytest.raises(cli.UserError, match="run_info.json lacks "
                     "max_seq_length"):
    predictor.read_record(copy)


# -------------------------------------------------------------- command --


@pytest.mark.parametrize("text,fields,expected", [
    ("A cat.", ("text_a", "text_b"), (None, ["A cat.", None])),
    ("A cat.\tThe cat.", ("text_a", "text_b"),
     (None, ["A cat.", "The cat."])),
    ('{"text_a": "A.", "id": 7}', ("text_a", "text_b"), (7, ["A.", None])),
    ('{"question": "Q?", "context": "C."}', ("question", "context"),
     (None, ["Q?", "C."])),
])
def test_parse_line(text, fields, expected):
  assert predictor.parse_line(text, fields, "auto") == expected


@pytest.mark.parametrize("text,input_format,message", [
    ("", "auto", "empty"),
    ("a\tb\tc", "auto", "3 tab-separated fields"),
    ('{"text_a": "A.",', "auto", "not valid JSON"),
    ('["A."]', "json", "expected a JSON object"),
    ('{"texta": "A."}', "auto", "unknown field 'texta'"),
])
def test_parse_line_errors(text, input_format, message):
  with pytest.raises(ValueError, match=message):
    predictor.parse_line(text, ("text_a", "text_b"), input_format)


def _command(run_script, args, stdin=None):
  return run_script("predictor.py", args, 600, stdin)


def test_command_file_of_text_and_json_lines(mrpc_dir, tmp_path,
                                             run_script):
  with open(os.path.join(MRPC_SAMPLE, "test.tsv"), encoding="utf-8") as f:
    rows = list(csv.reader(f, delimiter="\t", quotechar=None))[1:4]
  expected = np.array(_read_rows(os.path.join(mrpc_dir, "out",
                                              "test_results.tsv"))[:3], float)
  lines = ["%s\t%s" % (rows[0][3], rows[0][4]),
           json.dumps({"id": "b", "text_a": rows[1][3],
                       "text_b": rows[1][4]}),
           json.dumps({"text_a": rows[2][3], "text_b": rows[2][4]})]
  path = tmp_path / "in.txt"
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  proc = _command(run_script,
                  ["--export_dir=" + os.path.join(mrpc_dir, "export"),
                   "--input=" + str(path), "--batch_size=2"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = [json.loads(line) for line in proc.stdout.splitlines()]
  assert len(results) == 3
  assert [r.get("id") for r in results] == [None, "b", None]
  np.testing.assert_allclose(
      [[r["probabilities"]["0"], r["probabilities"]["1"]] for r in results],
      expected, atol=1e-5)


def test_command_bad_line_is_named_before_any_output(mrpc_dir, tmp_path,
                                                     run_script):
  path = tmp_path / "in.txt"
  path.write_text("A cat.\tThe cat.\n{\"text_a\": \"Alone.\"}\n",
                  encoding="utf-8")
  proc = _command(run_script,
                  ["--export_dir=" + os.path.join(mrpc_dir, "export"),
                   "--input=" + str(path)])
  assert proc.returncode == 2 and proc.stdout == ""
  assert proc.stderr.splitlines()[-1] == (
      "predictor.py: error: %s:2: text_b is missing: the MRPC model reads "
      "text_a and text_b (in a text line: two texts separated by a tab)."
      % path)


def test_command_squad_from_stdin(squad_dir, squad_model, run_script):
  question, context = _squad_questions(squad_dir)["full2"]
  proc = _command(run_script,
                  ["--export_dir=" + os.path.join(squad_dir, "export"),
                   "--max_query_length=16", "--doc_stride=24",
                   "--n_best_size=5", "--max_answer_length=10"],
                  stdin="%s\t%s\n" % (question, context))
  assert proc.returncode == 0, proc.stderr[-3000:]
  (line,) = proc.stdout.splitlines()
  want = predictor.SquadPredictor(squad_model, **SQUAD_OPTIONS).predict(
      question, context)
  got = json.loads(line)
  assert got["answer"] == want["answer"]
  _assert_same_nbest(got["nbest"], want["nbest"])


def test_input_line_not_utf8_names_line_byte_and_column(tmp_path):
  path = tmp_path / "in.txt"
  path.write_bytes(b"A cat.\tThe cat.\nCaf\xe9.\tA caf\xc3\xa9.\n")
  with pytest.raises(predictor.LineError) as raised:
    predictor.LineSource(str(path), "MRPC", "auto", 2)
  # Line 2 is "Caf\xe9..."; 0xe9 is its 4th byte.
  assert str(raised.value) == (
      "%s:2: byte 0xe9 at column 4 is not UTF-8; save the input as UTF-8."
      % path)
