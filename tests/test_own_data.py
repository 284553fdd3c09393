"""run_classifier.py on your own files: single-label, multi-label and
regression from CSV, TSV and JSON Lines, end to end (train, evaluate,
predict, export, predictor.py), with every figure checked against an
independent path: the exported model's own outputs on the same texts, the
metrics' definitions (tests/test_classifier_metrics.py checks those
against hand-computed values), and the files' rows."""
import csv
import json
import os
import random

import numpy as np
import pytest
import tensorflow as tf

import conftest
import predictor
from tasks import classifier_metrics
from tasks import labeled_files
from test_run_classifier import _write_model_files

TOPICS = {"sport": ("match", "team", "goal", "player"),
          "weather": ("rain", "storm", "wind", "snow"),
          "food": ("bread", "soup", "cheese", "apple")}
FILLER = ("river", "stone", "quiet", "bright", "market", "garden")
ALL_WORDS = tuple(w for words in TOPICS.values() for w in words) + FILLER


def _topic_rows(rng, count):
  """(id, text, labels) of texts naming one or two topics' words."""
  rows = []
  for i in range(count):
    topics = sorted(rng.sample(sorted(TOPICS), rng.randint(1, 2)))
    words = [rng.choice(TOPICS[t]) for t in topics for _ in range(2)]
    words += rng.sample(FILLER, 2)
    rng.shuffle(words)
    rows.append(("q%d" % i, " ".join(words), topics))
  return rows


def _model_files(root):
  """A vocabulary of the test's words and a tiny config."""
  vocab_file, config_file = _write_model_files(root)
  with open(vocab_file, "a") as f:
    f.write("".join(w + "\n" for w in ALL_WORDS
                    if w not in open(vocab_file).read().split()))
  with open(config_file) as f:
    config = json.load(f)
  with open(vocab_file) as f:
    config["vocab_size"] = len(f.read().split())
  with open(config_file, "w") as f:
    json.dump(config, f)
  return vocab_file, config_file


def _args(vocab_file, config_file, out, *extra):
  return ["--vocab_file=" + vocab_file, "--bert_config_file=" + config_file,
          "--output_dir=" + out, "--max_seq_length=16",
          "--train_batch_size=8", "--eval_batch_size=5",
          "--predict_batch_size=3", "--learning_rate=3e-3",
          "--num_train_epochs=4", "--seed=3", "--log_step_count_steps=50"
          ] + list(extra)


def _served(export_dir, texts, vocab_file):
  """The exported signature's outputs on `texts`, one row per text, as a
  client would feed them ([CLS] words [SEP]; every word is in the
  vocabulary)."""
  with open(vocab_file) as f:
    vocab = {token: i for i, token in enumerate(f.read().split())}
  (name,) = os.listdir(export_dir)
  serve = tf.saved_model.load(os.path.join(export_dir, name)).signatures[
      "serving_default"]
  rows = []
  for text in texts:
    ids = [vocab["[CLS]"]] + [vocab[w] for w in text.split()] + [
        vocab["[SEP]"]]
    ids = tf.constant([ids], tf.int32)
    outputs = serve(input_ids=ids, input_mask=tf.ones_like(ids),
                    segment_ids=tf.zeros_like(ids))
    rows.append({key: value.numpy()[0] for key, value in outputs.items()})
  return rows


def _read_jsonl(path):
  with open(path) as f:
    return [json.loads(line) for line in f]


def _eval_results(out):
  with open(os.path.join(out, "eval_results.txt")) as f:
    return {key: float(value) for key, value in
            (line.rstrip("\n").split(" = ") for line in f)}


@pytest.fixture(scope="module")
def multi_label_run(shared_dir, run_script):
  """A multi-label CSV (labels "a,b" in a quoted cell) trained, evaluated
  with --tune_threshold, predicted with ids and exported."""

  def build(root):
    rng = random.Random(5)
    for name, count in (("train", 64), ("dev", 15), ("test", 7)):
      with open(os.path.join(root, name + ".csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text", "label"])
        for example_id, text, labels in _topic_rows(rng, count):
          writer.writerow([example_id, text, ",".join(labels)])
    vocab_file, config_file = _model_files(root)
    conftest.run_logged(run_script, "run_classifier.py", _args(
        vocab_file, config_file, os.path.join(root, "out"),
        "--train_file=" + os.path.join(root, "train.csv"),
        "--dev_file=" + os.path.join(root, "dev.csv"),
        "--predict_file=" + os.path.join(root, "test.csv"),
        "--id_column=id", "--do_train", "--do_eval", "--do_predict",
        "--tune_threshold", "--export_dir=" + os.path.join(root, "export")),
                        os.path.join(root, "run.log"))

  return conftest.build_once(shared_dir, "own_data_multi_label", build)


def _csv_rows(path):
  with open(path, newline="") as f:
    return list(csv.DictReader(f))


@pytest.mark.slow
def test_multi_label_run_records_and_scores_what_the_export_serves(
    multi_label_run):
  root = multi_label_run
  out = os.path.join(root, "out")
  with open(os.path.join(out, "run_info.json")) as f:
    record = json.load(f)
  labels = ["food", "sport", "weather"]
  assert (record["task"], record["problem_type"], record["labels"],
          record["text_pairs"]) == ("file", "multi_label", labels, False)
  threshold = record["threshold"]
  assert threshold in classifier_metrics.THRESHOLDS
  with open(os.path.join(root, "run.log")) as f:
    assert ("Task: multi_label (inferred from %s), 3 labels: food, sport, "
            "weather; threshold tuned on the dev set." % os.path.join(
                root, "train.csv")) in f.read()
  # The metrics are those of the exported model's probabilities on the dev
  # texts at the recorded threshold.
  dev = _csv_rows(os.path.join(root, "dev.csv"))
  served = _served(os.path.join(root, "export"), [r["text"] for r in dev],
                   os.path.join(root, "vocab.txt"))
  truth = [[label in row["label"].split(",") for label in labels]
           for row in dev]
  probabilities = [row["probabilities"] for row in served]
  want = classifier_metrics.multi_label_metrics(truth, probabilities,
                                                threshold, labels)
  got = _eval_results(out)
  for key, value in want.items():
    assert got[key] == pytest.approx(value, abs=1e-5), key
  assert got["eval_threshold"] == threshold
  # The tuned threshold is the best of the candidates on these outputs.
  assert threshold == classifier_metrics.best_threshold(truth, probabilities)
  # The sigmoids are each label's own, not a distribution.
  assert np.abs(np.sum(probabilities, axis=1) - 1).max() > 0.01


@pytest.mark.slow
def test_multi_label_predictions_and_predictor_agree_with_the_export(
    multi_label_run):
  root = multi_label_run
  out = os.path.join(root, "out")
  test = _csv_rows(os.path.join(root, "test.csv"))
  predictions = _read_jsonl(os.path.join(out, "predictions.jsonl"))
  served = _served(os.path.join(root, "export"), [r["text"] for r in test],
                   os.path.join(root, "vocab.txt"))
  with open(os.path.join(out, "run_info.json")) as f:
    threshold = json.load(f)["threshold"]
  labels = ["food", "sport", "weather"]
  assert [p["id"] for p in predictions] == [r["id"] for r in test]
  for prediction, row in zip(predictions, served):
    np.testing.assert_allclose(
        [prediction["probabilities"][label] for label in labels],
        row["probabilities"], atol=1e-5)
    assert prediction["labels"] == [
        label for label, p in zip(labels, row["probabilities"])
        if p > threshold]
  with open(os.path.join(out, "test_results.tsv")) as f:
    rows = [[float(v) for v in line.split("\t")] for line in f]
  np.testing.assert_allclose(
      rows, [[p["probabilities"][label] for label in labels]
             for p in predictions], atol=1e-6)
  model = predictor.load(os.path.join(root, "export"))
  assert model.threshold == threshold
  answers = model.predict_batch([r["text"] for r in test])
  for answer, prediction in zip(answers, predictions):
    assert answer["labels"] == prediction["labels"]
    for label in labels:
      assert answer["probabilities"][label] == pytest.approx(
          prediction["probabilities"][label], abs=1e-5)


@pytest.mark.slow
def test_predictor_command_reads_the_files_column_names(multi_label_run,
                                                       run_script):
  """JSON lines name the text as the training file's header did ("text");
  the command's answers are the Python API's."""
  root = multi_label_run
  texts = [r["text"] for r in _csv_rows(os.path.join(root, "test.csv"))][:2]
  result = run_script("predictor.py", [
      "--export_dir=" + os.path.join(root, "export")],
                      stdin='%s\n{"id": "x", "text": "%s"}\n' % tuple(texts))
  assert result.returncode == 0, result.stderr[-2000:]
  lines = [json.loads(line) for line in result.stdout.splitlines()]
  expected = predictor.load(os.path.join(root, "export")).predict_batch(texts)
  assert [line.get("id") for line in lines] == [None, "x"]
  for line, answer in zip(lines, expected):
    assert line["labels"] == answer["labels"]
  bad = run_script("predictor.py", [
      "--export_dir=" + os.path.join(root, "export")],
                   stdin='{"text_a": "rain"}\n')
  assert bad.returncode == 2
  assert bad.stderr.strip().splitlines()[-1].endswith(
      "stdin:1: unknown field 'text_a'; the fields are text, text_b and an "
      "optional \"id\".")


@pytest.mark.slow
def test_a_run_that_only_predicts_takes_the_trained_runs_labels(
    multi_label_run, tmp_path, run_script):
  """--predict_file alone, with the trained run's --init_checkpoint: the
  labels, problem type and threshold come from its run_info.json."""
  root = multi_label_run
  out = os.path.join(root, "out")
  checkpoint = tf.train.latest_checkpoint(out)
  new_out = str(tmp_path / "predict_only")
  conftest.run_logged(run_script, "run_classifier.py", _args(
      os.path.join(root, "vocab.txt"), os.path.join(root, "bert_config.json"),
      new_out, "--predict_file=" + os.path.join(root, "test.csv"),
      "--id_column=id", "--do_predict", "--init_checkpoint=" + checkpoint),
                      str(tmp_path / "run.log"))
  assert _read_jsonl(os.path.join(new_out, "predictions.jsonl")) == (
      _read_jsonl(os.path.join(out, "predictions.jsonl")))


@pytest.mark.slow
def test_regression_tsv_and_single_label_json_lines_end_to_end(
    tmp_path, run_script):
  """A TSV of pairs with fractional scores is a regression; a JSON Lines
  file of integer labels is single-label classification with labels in
  numeric order. Each run's predictions.jsonl holds what its export serves
  and its dev metrics are those of the same outputs."""
  root = str(tmp_path)
  vocab_file, config_file = _model_files(root)
  rng = random.Random(9)
  with open(os.path.join(root, "train.tsv"), "w") as f:
    f.write("first\tsecond\tscore\n")
    for _ in range(24):
      a, b = (" ".join(rng.sample(ALL_WORDS, 3)) for _ in range(2))
      f.write("%s\t%s\t%.2f\n" % (a, b, rng.uniform(0, 5)))
  conftest.run_logged(run_script, "run_classifier.py", _args(
      vocab_file, config_file, os.path.join(root, "regression"),
      "--train_file=" + os.path.join(root, "train.tsv"),
      "--predict_file=" + os.path.join(root, "train.tsv"),
      "--text_a_column=first", "--text_b_column=second",
      "--label_column=score", "--do_train", "--do_predict",
      "--export_dir=" + os.path.join(root, "regression_export")),
                      os.path.join(root, "regression.log"))
  with open(os.path.join(root, "regression", "run_info.json")) as f:
    record = json.load(f)
  assert (record["problem_type"], record["labels"], record["text_pairs"],
          record["text_columns"]) == ("regression", [None], True,
                                      ["first", "second"])
  served = run_script("predictor.py", [
      "--export_dir=" + os.path.join(root, "regression_export")],
                      stdin='{"first": "rain goal", "second": "soup"}\n'
                      'rain goal\tsoup\n')
  assert served.returncode == 0, served.stderr[-2000:]
  first, second = [json.loads(line) for line in served.stdout.splitlines()]
  assert first == second and set(first) == {"score"}
  bad = run_script("predictor.py", [
      "--export_dir=" + os.path.join(root, "regression_export")],
                   stdin='{"first": "rain"}\n')
  assert bad.stderr.strip().splitlines()[-1].endswith(
      "stdin:1: second is missing: this model reads first and second (in a "
      "text line: two texts separated by a tab).")
  scores = _read_jsonl(os.path.join(root, "regression", "predictions.jsonl"))
  assert len(scores) == 24 and all(set(s) == {"id", "score"} for s in scores)
  assert [s["id"] for s in scores] == [str(i) for i in range(2, 26)]

  for name, count in (("train", 40), ("dev", 10)):
    with open(os.path.join(root, name + ".jsonl"), "w") as f:
      for _, text, topics in _topic_rows(rng, count):
        label = {"food": 2, "sport": 10, "weather": 1}[topics[0]]
        f.write(json.dumps({"text": text, "label": label}) + "\n")
  out = os.path.join(root, "single")
  conftest.run_logged(run_script, "run_classifier.py", _args(
      vocab_file, config_file, out,
      "--train_file=" + os.path.join(root, "train.jsonl"),
      "--dev_file=" + os.path.join(root, "dev.jsonl"),
      "--predict_file=" + os.path.join(root, "dev.jsonl"),
      "--do_train", "--do_eval", "--do_predict",
      "--export_dir=" + os.path.join(root, "export")),
                      os.path.join(root, "single.log"))
  with open(os.path.join(out, "run_info.json")) as f:
    assert json.load(f)["labels"] == ["1", "2", "10"]
  dev = _read_jsonl(os.path.join(root, "dev.jsonl"))
  served = _served(os.path.join(root, "export"), [r["text"] for r in dev],
                   vocab_file)
  predictions = _read_jsonl(os.path.join(out, "predictions.jsonl"))
  for prediction, row in zip(predictions, served):
    probabilities = row["probabilities"]
    assert prediction["label"] == ["1", "2", "10"][int(np.argmax(
        probabilities))]
  labels = np.array([["1", "2", "10"].index(str(r["label"])) for r in dev])
  probabilities = np.array([row["probabilities"] for row in served])
  got = _eval_results(out)
  assert got["eval_accuracy"] == pytest.approx(classifier_metrics.accuracy(
      labels, probabilities.argmax(axis=1)))
  assert got["eval_loss"] == pytest.approx(-np.mean(np.log(
      probabilities[np.arange(len(labels)), labels])), rel=1e-4)


# The README's "Your own data" command, with MiniLM as $BERT.
def _readme_command(train, dev, out, *extra):
  minilm = conftest.MINILM_DIR
  return ["--train_file=%s" % train, "--dev_file=%s" % dev,
          "--id_column=id", "--vocab_file=%s/vocab.txt" % minilm,
          "--bert_config_file=%s/bert_config.json" % minilm,
          "--init_checkpoint=%s/bert_model.ckpt" % minilm, "--do_train",
          "--do_eval", "--tune_threshold", "--output_dir=%s" % out,
          "--export_dir=%s" % os.path.join(os.path.dirname(out),
                                           "export")] + list(extra)


def _edited_tickets(folder, name, edit):
  """sample_data/tickets' files copied into `folder`, `edit(rows)` applied
  to the rows (header first) of file `name`."""
  for file_name in ("train.csv", "dev.csv"):
    with open(os.path.join(conftest.REPO_ROOT, "sample_data", "tickets",
                           file_name), newline="") as f:
      rows = list(csv.reader(f))
    if file_name == name:
      edit(rows)
    with open(os.path.join(folder, file_name), "w", newline="") as f:
      csv.writer(f).writerows(rows)
  return [os.path.join(folder, n) for n in ("train.csv", "dev.csv")]


def _set(row, column, value):
  def edit(rows):
    rows[row][column] = value
  return edit


@pytest.mark.parametrize("name, edit, extra, message", [
    ("dev.csv", _set(2, 2, "refund"), (),
     "{dev}:3: label 'refund' is not one of the model's labels (account, "
     "billing, bug, shipping). Train with a file that has it, or add it to "
     "--labels."),
    ("dev.csv", _set(4, 1, " "), (),
     "{dev}:5: text_a 'text' is empty. Fill in the text or delete that "
     "row."),
    ("dev.csv", lambda rows: rows[3].pop(), (),
     "{dev}:4: found 2 fields, expected 3 as in the header. Repair that "
     "line (a separator inside an unquoted field?)."),
    ("train.csv", _set(5, 2, "refund"), (
        "--problem_type=multi_label", "--labels=account,billing,bug,shipping"),
     "{train}:6: label 'refund' is not one of the model's labels"),
    ("dev.csv", _set(2, 2, "[billing, bug]"), (),
     "{dev}:3: the label cell [billing, bug] is in brackets but not a JSON "
     "list (Expecting value). Write several labels as a JSON list"),
])
def test_a_bad_row_of_your_own_files_is_the_only_line(
    name, edit, extra, message, tmp_path, run_script):
  """The README's command on sample_data/tickets with one cell wrong: the
  error alone (no settings line before it), exit 2, nothing written."""
  train, dev = _edited_tickets(str(tmp_path), name, edit)
  out = str(tmp_path / "out")
  result = run_script("run_classifier.py",
                      _readme_command(train, dev, out, *extra))
  lines = (result.stdout + result.stderr).splitlines()
  assert result.returncode == 2, lines
  assert len(lines) == 1, lines
  assert lines[0].startswith("run_classifier.py: error: " + message.format(
      train=train, dev=dev)), lines
  assert not os.path.exists(out)


def test_a_json_list_in_a_csv_cell_is_one_label_each(tmp_path):
  """A multi-label cell written as a JSON list in a CSV file (quotes
  doubled) is the list's labels, not pieces of it cut at the commas."""
  def as_json_lists(rows):
    for row in rows[1:]:
      row[2] = json.dumps(row[2].split(","))
  train, _ = _edited_tickets(str(tmp_path), "train.csv", as_json_lists)
  with open(train) as f:
    assert '"[""billing"", ""account""]"' in f.read()
  cells = [row.label for row in labeled_files.read_rows(
      train, labeled_files.Columns("text", None, "label", "id"))]
  assert cells[1] == ["billing", "account"]
  assert labeled_files.problem_type_of(cells, ",") == "multi_label"
  assert labeled_files.label_list(cells, "multi_label", ",") == [
      "account", "billing", "bug", "shipping"]
