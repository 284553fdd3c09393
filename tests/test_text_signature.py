"""The raw-text signature of an exported classifier, loaded in a fresh
process where nothing of this project can be imported (tensorflow and
tensorflow_text only): its answers are the scripts' own, the probabilities
of run_classifier.py --do_predict's test_results.tsv and the labels of its
predictions.jsonl, for a text pair task (MRPC), a regression (STS-B) and a
multi-label task from a user's CSV, with a WordPiece vocabulary and a
SentencePiece model; run_swag.py --do_predict's
probabilities for multiple choice; run_ner.py --do_predict's tags for
named entities."""
import csv
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import sentencepiece

import conftest
import predictor
import run_classifier
from tasks import conll
from tasks import glue
from tasks import swag
from test_own_data import multi_label_run  # pylint: disable=unused-import
from test_predictor import MRPC_SAMPLE
from test_predictor import TINY_CONFIG
from test_predictor import mrpc_dir  # pylint: disable=unused-import
from test_predictor import stsb_dir  # pylint: disable=unused-import
from test_run_ner import _spans as _chunks
from test_run_ner import ner_run  # pylint: disable=unused-import
from test_run_swag import swag_run  # pylint: disable=unused-import

pytestmark = pytest.mark.slow

# Run in a folder of its own with no PYTHONPATH: the project is not
# importable there, which the script checks before it loads the model.
SERVE = """
import importlib.util, json, sys
import tensorflow as tf
import tensorflow_text  # Registers the tokenizer's op.
for name in ("tokenization", "modeling", "serving", "tasks"):
  assert importlib.util.find_spec(name) is None, name
request = json.load(sys.stdin)
model = tf.saved_model.load(request.pop("export"))
outputs = model.signatures["text"](
    **{name: tf.constant(texts, tf.string) for name, texts in request.items()})
decode = lambda v: [decode(x) for x in v] if isinstance(v, list) else (
    v.decode() if isinstance(v, bytes) else v)
json.dump({name: decode(value.numpy().tolist())
           for name, value in outputs.items()}, sys.stdout)
"""


def _serve(tmp_path, export_dir, **texts):
  """The text signature's outputs on `texts` (name -> list of str)."""
  (version,) = os.listdir(export_dir)
  folder = tmp_path / "client"
  folder.mkdir(exist_ok=True)
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  result = subprocess.run(
      [sys.executable, "-c", SERVE], cwd=str(folder), env=env, text=True,
      input=json.dumps(dict(texts, export=os.path.join(export_dir, version))),
      capture_output=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  return json.loads(result.stdout)


# saved_model_cli with TensorFlow Text's ops registered first (the command
# has no option to load them), as docs/serving.md shows it.
SAVED_MODEL_CLI = ("import tensorflow_text; "
                   "from tensorflow.python.tools import saved_model_cli; "
                   "saved_model_cli.main()")


def _saved_model_cli(tmp_path, export_dir, **texts):
  """The text signature's outputs on `texts` by `saved_model_cli run`, in a
  folder where the project is not importable: name -> numpy array."""
  (version,) = os.listdir(export_dir)
  folder = tmp_path / "cli"
  folder.mkdir(exist_ok=True)
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  result = subprocess.run(
      [sys.executable, "-c", SAVED_MODEL_CLI, "run", "--dir",
       os.path.join(export_dir, version), "--tag_set", "serve",
       "--signature_def", "text", "--outdir", str(folder / "out"),
       "--input_exprs", ";".join("%s=%s" % (name, json.dumps(values))
                                 for name, values in texts.items())],
      cwd=str(folder), env=env, text=True, capture_output=True, timeout=300,
      check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  return {name[:-len(".npy")]: np.load(str(folder / "out" / name),
                                       allow_pickle=True)
          for name in os.listdir(str(folder / "out"))}


def _test_results(path):
  with open(path, encoding="utf-8") as f:
    return np.array([line.rstrip("\n").split("\t") for line in f], float)


def _serve_mrpc_sample(tmp_path, export_dir):
  """The text signature's outputs on the MRPC sample's test pairs."""
  examples = run_classifier.MrpcProcessor().get_test_examples(MRPC_SAMPLE)
  return _serve(tmp_path, export_dir, text_a=[e.text_a for e in examples],
                text_b=[e.text_b for e in examples])


def test_pair_classifier_serves_the_scripts_answers(mrpc_dir, tmp_path):
  examples = run_classifier.MrpcProcessor().get_test_examples(MRPC_SAMPLE)
  want = _test_results(os.path.join(mrpc_dir, "out", "test_results.tsv"))
  got = _serve_mrpc_sample(tmp_path, os.path.join(mrpc_dir, "export"))
  np.testing.assert_allclose(got["probabilities"], want, atol=1e-5)
  assert got["label"] == ["01"[i] for i in want.argmax(axis=1)]
  assert got["label_names"] == [["0", "1"]] * len(examples)
  cli = _saved_model_cli(tmp_path, os.path.join(mrpc_dir, "export"),
                         text_a=[e.text_a for e in examples[:5]],
                         text_b=[e.text_b for e in examples[:5]])
  np.testing.assert_allclose(cli["probabilities"], want[:5], atol=1e-5)
  assert [label.decode() for label in cli["label"]] == got["label"][:5]


def test_regression_serves_the_scripts_scores(stsb_dir, tmp_path):
  examples = glue.StsbProcessor().get_test_examples(
      os.path.join(stsb_dir, "data"))
  want = _test_results(os.path.join(stsb_dir, "out", "test_results.tsv"))
  got = _serve(tmp_path, os.path.join(stsb_dir, "export"),
               text_a=[e.text_a for e in examples],
               text_b=[e.text_b for e in examples])
  np.testing.assert_allclose(got["score"], want[:, 0], atol=1e-5)


def test_multi_label_serves_the_scripts_labels(multi_label_run, tmp_path):
  root = multi_label_run
  with open(os.path.join(root, "test.csv"), newline="") as f:
    texts = [row["text"] for row in csv.DictReader(f)]
  with open(os.path.join(root, "out", "predictions.jsonl")) as f:
    want = [json.loads(line) for line in f]
  got = _serve(tmp_path, os.path.join(root, "export"), text_a=texts)
  labels = ["food", "sport", "weather"]
  for prediction, probabilities, predicted, names in zip(
      want, got["probabilities"], got["predicted"], got["label_names"]):
    assert names == labels
    np.testing.assert_allclose(
        probabilities, [prediction["probabilities"][l] for l in labels],
        atol=1e-5)
    assert [l for l, p in zip(labels, predicted) if p] == prediction["labels"]


def test_multiple_choice_serves_the_scripts_probabilities(swag_run,
                                                          tmp_path):
  with open(os.path.join(swag_run, "out", "test_results.tsv")) as f:
    want = np.array([line.split("\t") for line in f], np.float64)
  examples = swag.read_examples(os.path.join(swag_run, "data", "test.csv"),
                                "test", False)
  got = _serve(tmp_path, os.path.join(swag_run, "export"),
               sentence=[e.context for e in examples],
               endings=[e.continuations() for e in examples])
  np.testing.assert_allclose(got["probabilities"], want, atol=1e-5)
  assert got["choice"] == list(want.argmax(axis=1))
  assert got["ending"] == [e.continuations()[c]
                           for e, c in zip(examples, got["choice"])]


def test_export_without_tensorflow_text_stops_before_training(tmp_path):
  # The package made unimportable in the script's process: the run ends in
  # one line before it reads the data or trains, and writes no checkpoint.
  code = ("import runpy, sys; sys.modules['tensorflow_text'] = None; "
          "sys.argv = sys.argv[1:]; "
          "runpy.run_path('run_classifier.py', run_name='__main__')")
  out = tmp_path / "out"
  result = subprocess.run(
      [sys.executable, "-c", code, "run_classifier.py", "--task_name=MRPC",
       "--data_dir=" + MRPC_SAMPLE, "--vocab_file=" + os.path.join(
           conftest.ASSETS_DIR, "bert_vocab", "uncased", "vocab.txt"),
       "--bert_config_file=" + os.path.join(
           conftest.REPO_ROOT, "sample_data", "tiny_bert_config.json"),
       "--do_train", "--output_dir=%s" % out,
       "--export_dir=%s" % (tmp_path / "export")],
      cwd=conftest.REPO_ROOT, text=True, capture_output=True, timeout=300,
      check=False)
  assert result.returncode != 0
  assert "Traceback" not in result.stderr
  (line,) = [l for l in result.stderr.splitlines() if "tensorflow-text" in l]
  assert "pip install -r requirements-text.txt" in line
  assert not out.exists() or not [
      name for name in os.listdir(out) if name.startswith("model")]


def test_ner_serves_the_scripts_tags_with_offsets(ner_run, tmp_path):
  """Each test document as one raw text (sentences joined by a newline,
  words by one or two spaces): the served tags are those of run_ner.py
  --do_predict's test_predictions.txt (document context, the same
  windows), the offsets point at the words, and predictor.py's entities
  are the served tags' chunks."""
  documents, _ = conll.read_file(os.path.join(ner_run, "data", "test.txt"),
                                 "iob1")
  with open(os.path.join(ner_run, "out", "test_predictions.txt")) as f:
    predicted = [line.split(" ")[2] for line in f.read().splitlines()
                 if line]
  texts, want = [], []
  for number, document in enumerate(documents):
    gap = "  " if number % 2 else " "
    texts.append("\n".join(gap.join(word.text for word in sentence)
                           for sentence in document))
    count = sum(len(sentence) for sentence in document)
    want.append(predicted[:count])
    predicted = predicted[count:]
  assert not predicted and max(len(tags) for tags in want) > 22  # windows
  got = _serve(tmp_path, os.path.join(ner_run, "export"), text=texts)
  exported = predictor.load(os.path.join(ner_run, "export"))
  for row, (text, tags) in enumerate(zip(texts, want)):
    count = len(tags)
    assert got["tags"][row][:count] == tags
    assert set(got["tags"][row][count:]) <= {""}
    words = text.split()
    assert got["words"][row][:count] == words
    assert [text[start:end] for start, end in zip(
        got["start"][row][:count], got["end"][row][:count])] == words
    probabilities = got["tag_probability"][row][:count]
    assert all(0 < p <= 1 for p in probabilities)
    entities = exported.predict(text)["entities"]
    assert [(e["type"], e["start"], e["end"]) for e in entities] == [
        (kind, got["start"][row][start], got["end"][row][end - 1])
        for kind, start, end in sorted(_chunks(tags), key=lambda c: c[1])]
    for entity in entities:
      start = got["start"][row].index(entity["start"])
      end = got["end"][row].index(entity["end"]) + 1
      assert entity["score"] == pytest.approx(
          np.mean(probabilities[start:end]), abs=1e-5)
  # A text of no words has none; a batch of only such texts, no windows.
  for batch in ([" ", texts[0]], ["", "\t"]):
    got = _serve(tmp_path, os.path.join(ner_run, "export"), text=batch)
    assert got["tags"][0] == [""] * len(got["tags"][0])
    assert got["start"][0] == [-1] * len(got["start"][0])


def _build_spm_mrpc(run_script, root):
  """MRPC's sample fine-tuned with a SentencePiece model of 400 pieces
  trained on MRPC's sentences (uncased: the text is lowercased first)."""
  with open(os.path.join(conftest.ASSETS_DIR, "glue", "MRPC", "train.tsv"),
            encoding="utf-8-sig") as f:
    sentences = [line.split("\t")[3] for line in f.read().splitlines()[1:]]
  os.makedirs(root, exist_ok=True)
  corpus = os.path.join(root, "corpus.txt")
  with open(corpus, "w", encoding="utf-8") as f:
    f.write("\n".join(sentence.lower() for sentence in sentences))
  sentencepiece.SentencePieceTrainer.train(
      input=corpus, model_prefix=os.path.join(root, "spm"), vocab_size=400,
      user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"], pad_id=0,
      unk_id=1, bos_id=-1, eos_id=-1, pad_piece="[PAD]", unk_piece="[UNK]",
      minloglevel=2)
  conftest.run_logged(run_script, "run_classifier.py", [
      "--task_name=MRPC", "--data_dir=" + MRPC_SAMPLE,
      "--spm_model_file=" + os.path.join(root, "spm.model"),
      "--bert_config_file=" + TINY_CONFIG,
      "--output_dir=" + os.path.join(root, "out"),
      "--export_dir=" + os.path.join(root, "export"), "--do_train",
      "--do_predict", "--max_seq_length=48", "--learning_rate=1e-3",
      "--train_batch_size=32", "--num_train_epochs=1", "--seed=3"],
                      os.path.join(root, "run.log"))


@pytest.fixture(scope="module")
def spm_mrpc(shared_dir, run_script):
  return conftest.build_once(shared_dir, "text_signature_spm_mrpc",
                             lambda root: _build_spm_mrpc(run_script, root))


def test_sentencepiece_classifier_serves_the_scripts_answers(spm_mrpc,
                                                             tmp_path):
  want = _test_results(os.path.join(spm_mrpc, "out", "test_results.tsv"))
  got = _serve_mrpc_sample(tmp_path, os.path.join(spm_mrpc, "export"))
  np.testing.assert_allclose(got["probabilities"], want, atol=1e-5)


def test_bf16_export_fills_its_weight_copies_when_loaded(mrpc_dir, tmp_path,
                                                          run_script):
  """Exported with --precision=bf16, the model's weights are bf16 copies
  (engine/weight_casts.py) that the SavedModel fills as it loads: served
  in a fresh process it answers as --do_predict in bf16 does, within bf16
  rounding (the two pad differently)."""
  out = tmp_path / "out"
  shutil.copytree(os.path.join(mrpc_dir, "out"), str(out))
  conftest.run_logged(run_script, "run_classifier.py", [
      "--task_name=MRPC", "--data_dir=" + MRPC_SAMPLE,
      "--vocab_file=" + os.path.join(conftest.ASSETS_DIR, "bert_vocab",
                                     "uncased", "vocab.txt"),
      "--bert_config_file=" + TINY_CONFIG, "--output_dir=" + str(out),
      "--export_dir=" + str(tmp_path / "export"), "--do_predict",
      "--max_seq_length=48", "--precision=bf16"], str(tmp_path / "run.log"))
  want = _test_results(str(out / "test_results.tsv"))
  got = _serve_mrpc_sample(tmp_path, str(tmp_path / "export"))
  np.testing.assert_allclose(got["probabilities"], want, atol=2e-2)
  fp32 = _test_results(os.path.join(mrpc_dir, "out", "test_results.tsv"))
  assert np.abs(want - fp32).max() > 0  # bf16 did change the numbers
