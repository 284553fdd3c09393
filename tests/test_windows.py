"""Tests for tasks/windows.py: windows over long texts, Google's max-context
rule on worked examples, and the mean of the windows' log-probabilities."""
import itertools
import random

import numpy as np
import pytest

from tasks import windows


def test_windows_start_every_stride_and_the_last_reaches_the_end():
  # 20 tokens, room 10, stride 4: starts 0, 4, 8, 12; the window at 12
  # reaches the end with 8 tokens, so no window starts at 16.
  assert windows.doc_spans(20, 10, 4) == [(0, 10), (4, 10), (8, 10),
                                          (12, 8)]
  # A text that fits is one window; an empty text has none.
  assert windows.doc_spans(7, 10, 4) == [(0, 7)]
  assert windows.doc_spans(0, 10, 4) == []
  # A stride beyond the room makes adjacent windows, never a gap.
  assert windows.doc_spans(25, 10, 30) == [(0, 10), (10, 10), (20, 5)]


@pytest.mark.parametrize("room,stride", [(0, 4), (10, 0)])
def test_windows_refuse_no_room_or_no_stride(room, stride):
  with pytest.raises(ValueError, match="No room for the document.*raise"):
    windows.doc_spans(20, room, stride, fix="raise it")


def test_max_context_worked_example():
  # Windows (0, 10), (4, 10), (8, 10), (12, 8) over 20 tokens. Token 7:
  # window 0 scores min(7, 2) + 0.1 = 2.1, window 1 min(3, 6) + 0.1 = 3.1 ->
  # window 1. Token 12: window 1 min(8, 1) + 0.1 = 1.1, window 2
  # min(4, 5) + 0.1 = 4.1, window 3 min(0, 7) + 0.08 = 0.08 -> window 2.
  # Token 6: window 0 min(6, 3) = 3.1, window 1 min(2, 7) = 2.1 -> window 0.
  spans = windows.doc_spans(20, 10, 4)
  owners = [0] * 7 + [1] * 4 + [2] * 4 + [3] * 5
  assert windows.max_context_owners(spans, 20) == owners
  for position in range(20):
    assert [windows.check_is_max_context(spans, i, position)
            for i in range(4)] == [i == owners[position] for i in range(4)]


def test_max_context_tie_goes_to_the_first_window():
  # Token 5 of windows (0, 8) and (2, 8): min(5, 2) = 2 and min(3, 4) = 3 ->
  # the second. Token 4: min(4, 3) = 3 in both, same length -> the first.
  spans = [windows.DocSpan(0, 8), windows.DocSpan(2, 8)]
  assert windows.check_is_max_context(spans, 1, 5)
  assert windows.check_is_max_context(spans, 0, 4)
  assert not windows.check_is_max_context(spans, 1, 4)
  # Same context, the longer window wins by its 0.01 * length.
  spans = [windows.DocSpan(0, 5), windows.DocSpan(0, 6)]
  assert windows.max_context_owners(spans, 6)[2] == 1


def _owner_by_definition(spans, position):
  """The best window written out from the definition, independently."""
  scored = [(min(position - s.start, s.start + s.length - 1 - position) +
             0.01 * s.length, -i) for i, s in enumerate(spans)
            if s.start <= position < s.start + s.length]
  return -max(scored)[1]


@pytest.mark.parametrize("num_tokens,room,stride", list(itertools.product(
    [1, 9, 31, 64], [1, 5, 16], [1, 3, 7, 20])))
def test_every_token_has_exactly_one_owner(num_tokens, room, stride):
  spans = windows.doc_spans(num_tokens, room, stride)
  covered = sorted(p for s in spans for p in range(s.start,
                                                   s.start + s.length))
  assert sorted(set(covered)) == list(range(num_tokens))
  owners = windows.max_context_owners(spans, num_tokens)
  assert owners == [_owner_by_definition(spans, p) for p in range(num_tokens)]
  for position in range(num_tokens):
    assert sum(windows.check_is_max_context(spans, i, position)
               for i in range(len(spans))) == 1


def test_mean_log_probabilities_worked_example():
  # Windows with probabilities (0.8, 0.2) and (0.4, 0.6): the geometric
  # means are sqrt(0.32) and sqrt(0.12); normalized, class 0 has
  # sqrt(.32) / (sqrt(.32) + sqrt(.12)).
  log_probs = np.log([[0.8, 0.2], [0.4, 0.6]])
  scores = windows.mean_log_probabilities(log_probs)
  want = np.array([np.sqrt(0.32), np.sqrt(0.12)])
  np.testing.assert_allclose(np.exp(scores), want / want.sum(), rtol=1e-12)
  # One window keeps its own probabilities.
  np.testing.assert_allclose(
      windows.mean_log_probabilities(np.log([[0.3, 0.7]])),
      np.log([0.3, 0.7]), rtol=1e-12)


# ------------------------------------------- run_classifier --long_text


import glob  # pylint: disable=g-import-not-at-top,wrong-import-position
import json  # pylint: disable=g-import-not-at-top,wrong-import-position
import os  # pylint: disable=g-import-not-at-top,wrong-import-position

import tensorflow as tf  # pylint: disable=g-import-not-at-top

import conftest  # pylint: disable=g-import-not-at-top
import run_classifier  # pylint: disable=g-import-not-at-top
from tasks import classification_features
from tasks import classification_predictions
import predictor  # pylint: disable=g-import-not-at-top
import tokenization  # pylint: disable=g-import-not-at-top

WORDS = ("one two three four five six seven eight nine ten apple pear "
         "cat dog").split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
  path.write_text("".join(token + "\n" for token in VOCAB))
  return str(path)


def _example(text_a, text_b=None, label="1"):
  return run_classifier.InputExample("dev-1", text_a, text_b, label)


def test_classifier_windows_of_one_long_text(vocab_file):
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  words = WORDS[:10]
  # max_seq_length 6: 4 tokens of room, windows every 2 tokens:
  # [0, 4), [2, 6), [4, 8), [6, 10).
  parts = classification_features.example_windows(
      _example(" ".join(words)), 6, tokenizer)
  assert [p.tokens for p in parts] == [
      ["[CLS]"] + words[start:start + 4] + ["[SEP]"] for start in (0, 2, 4, 6)]
  assert all(p.segment_ids == [0] * 6 and p.label == "1" for p in parts)
  # The features of a window are its tokens, whatever the max length.
  feature = run_classifier.convert_single_example(0, parts[1], ["0", "1"], 6,
                                                  tokenizer)
  assert feature.input_ids == [2] + [VOCAB.index(w) for w in words[2:6]] + [3]


def test_classifier_windows_of_a_long_pair(vocab_file):
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  # max_seq_length 10: 7 tokens of room; the second text (5 tokens) is cut
  # to 7 // 2 = 3, leaving 4 for windows of the first text (6 tokens),
  # stride 3: [0, 4) and [3, 6).
  parts = classification_features.example_windows(
      _example(" ".join(WORDS[:6]), "apple pear cat dog one"), 10, tokenizer,
      doc_stride=3)
  assert [p.tokens for p in parts] == [
      ["[CLS]"] + WORDS[start:end] + ["[SEP]", "apple", "pear", "cat",
                                      "[SEP]"] for start, end in ((0, 4),
                                                                  (3, 6))]
  assert parts[0].segment_ids == [0] * 6 + [1] * 4


def test_classifier_example_that_fits_is_laid_out_as_google_does(vocab_file):
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  example = _example("one two three", "apple pear")
  (part,) = classification_features.example_windows(example, 16, tokenizer)
  assert (part.tokens, part.segment_ids) == (
      classification_features.example_tokens(example, 16, tokenizer))


def test_classifier_combination_is_the_mean_of_log_probabilities():
  # Example 1 has windows (0.9, 0.1) and (0.5, 0.5); example 2 one window.
  combined = classification_predictions.combine_windows(
      [np.array([0.9, 0.1]), np.array([0.5, 0.5]), np.array([0.2, 0.8])],
      [2, 1], is_regression=False)
  geometric = np.array([np.sqrt(0.45), np.sqrt(0.05)])
  np.testing.assert_allclose(combined[0], geometric / geometric.sum())
  np.testing.assert_allclose(combined[1], [0.2, 0.8])
  assert classification_predictions.combine_windows(
      [1.0, 2.0, 4.5], [2, 1], True) == [1.5, 4.5]


def test_multi_label_combination_is_each_labels_highest_probability():
  # A label of a long text shows in some window of it: its probability is
  # the highest over the windows, label by label (not a distribution).
  combined = classification_predictions.combine_windows(
      [np.array([0.1, 0.8, 0.3]), np.array([0.6, 0.2, 0.4]),
       np.array([0.5, 0.5, 0.5])], [2, 1], is_regression=False,
      multi_label=True)
  np.testing.assert_allclose(combined[0], [0.6, 0.8, 0.4])
  np.testing.assert_allclose(combined[1], [0.5, 0.5, 0.5])


def _write(path, rows):
  with open(path, "w") as f:
    f.write("".join("\t".join(row) + "\n" for row in rows))


@pytest.mark.slow
def test_classifier_long_texts_end_to_end(tmp_path, run_script, vocab_file):
  """SST-2 files of 12-word sentences read in windows of 6 tokens: one
  test_results.tsv line per sentence, equal to the combination of the
  exported model's outputs on its windows, and to its text signature's;
  the eval metrics are those of the combined probabilities."""
  rng = random.Random(0)
  sentences = []
  for i in range(48):
    words = [rng.choice(WORDS[:10]) for _ in range(12)]
    if i % 2:
      words[rng.randrange(12)] = "apple"
    sentences.append((" ".join(words), str(i % 2)))
  data_dir = str(tmp_path / "data")
  os.makedirs(data_dir)
  _write(os.path.join(data_dir, "train.tsv"),
         [["sentence", "label"]] + [list(s) for s in sentences[:40]])
  dev = sentences[40:]
  _write(os.path.join(data_dir, "dev.tsv"),
         [["sentence", "label"]] + [list(s) for s in dev])
  _write(os.path.join(data_dir, "test.tsv"), [["index", "sentence"]] + [
      [str(i), text] for i, (text, _) in enumerate(dev)])
  config_file = str(tmp_path / "bert_config.json")
  with open(config_file, "w") as f:
    json.dump({"hidden_size": 16, "intermediate_size": 32,
               "num_attention_heads": 2, "num_hidden_layers": 2,
               "max_position_embeddings": 16, "type_vocab_size": 2,
               "vocab_size": len(VOCAB), "hidden_act": "gelu",
               "hidden_dropout_prob": 0.1,
               "attention_probs_dropout_prob": 0.1,
               "initializer_range": 0.02}, f)
  out = str(tmp_path / "out")
  conftest.run_logged(run_script, "run_classifier.py", [
      "--task_name=SST-2", "--data_dir=" + data_dir,
      "--vocab_file=" + vocab_file, "--bert_config_file=" + config_file,
      "--output_dir=" + out, "--export_dir=" + str(tmp_path / "export"),
      "--max_seq_length=6", "--long_text=windows", "--doc_stride=2",
      "--do_train", "--do_eval", "--do_predict", "--train_batch_size=8",
      "--eval_batch_size=3", "--predict_batch_size=5",
      "--learning_rate=1e-3", "--num_train_epochs=1", "--seed=2"],
                      str(tmp_path / "run.log"))
  with open(os.path.join(out, "test_results.tsv")) as f:
    probabilities = np.array([line.split("\t") for line in f], np.float64)
  assert probabilities.shape == (8, 2)
  # Every 12-word sentence has windows starting at 0, 2, 4, 6, 8.
  (name,) = os.listdir(str(tmp_path / "export"))
  serve = tf.saved_model.load(os.path.join(str(tmp_path / "export"), name)
                              ).signatures["serving_default"]
  for row, (text, _) in enumerate(dev):
    ids = [VOCAB.index(w) for w in text.split()]
    windows_ids = np.array([[2] + ids[start:start + 4] + [3]
                            for start in (0, 2, 4, 6, 8)], np.int32)
    served = serve(input_ids=tf.constant(windows_ids),
                   input_mask=tf.ones_like(windows_ids),
                   segment_ids=tf.zeros_like(windows_ids))
    window_probs = served["probabilities"].numpy().astype(np.float64)
    geometric = np.exp(np.log(window_probs).mean(axis=0))
    np.testing.assert_allclose(probabilities[row],
                               geometric / geometric.sum(), atol=1e-5)
  # The text signature reads the same windows in the graph.
  text = tf.saved_model.load(os.path.join(str(tmp_path / "export"), name)
                             ).signatures["text"]
  np.testing.assert_allclose(
      text(text_a=tf.constant([t for t, _ in dev]))["probabilities"],
      probabilities, atol=1e-5)
  # predictor.py reads the export's run_info.json and windows alike.
  served = predictor.load(str(tmp_path / "export"))
  assert served.windows
  np.testing.assert_allclose(
      [[r["probabilities"]["0"], r["probabilities"]["1"]]
       for r in served.predict_batch([text for text, _ in dev])],
      probabilities, atol=1e-5)
  labels = np.array([int(label) for _, label in dev])
  with open(os.path.join(out, "eval_results.txt")) as f:
    results = dict(line.rstrip("\n").split(" = ") for line in f)
  assert float(results["eval_accuracy"]) == pytest.approx(
      np.mean(probabilities.argmax(axis=1) == labels))
  assert float(results["eval_loss"]) == pytest.approx(
      -np.mean(np.log(probabilities[np.arange(8), labels])), rel=1e-4)
  # The metrics reach TensorBoard (output_dir/eval) at the trained step, as
  # the runner's own evaluation writes them.
  events = [event for path in glob.glob(os.path.join(out, "eval", "events.*"))
            for event in tf.compat.v1.train.summary_iterator(path)
            if event.summary.value]
  assert [event.step for event in events] == [int(results["global_step"])]
  assert {value.tag: value.simple_value
          for value in events[0].summary.value}["eval_accuracy"] == (
              pytest.approx(float(results["eval_accuracy"])))
