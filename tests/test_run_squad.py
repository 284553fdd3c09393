"""Tests of run_squad.py: reading, windows, predictions, model, end to end.

Expected values are derived by hand in the comments (or with NumPy for the
model head); the real uncased BERT vocabulary tokenizes the texts.
"""
import json
import os
import types

import numpy as np
import pytest
import tensorflow as tf

import modeling
import run_squad
from tasks import squad_examples
from tasks import squad_features
from tasks import squad_metrics
from tasks import squad_model
from tasks import squad_predictions
import tokenization

NUMBERS = ("one two three four five six seven eight nine ten eleven twelve "
           "thirteen fourteen fifteen sixteen seventeen eighteen nineteen "
           "twenty")


@pytest.fixture(scope="module")
def vocab_file(assets_dir):
  return os.path.join(assets_dir, "bert_vocab", "uncased", "vocab.txt")


@pytest.fixture(scope="module")
def tokenizer(vocab_file):
  return tokenization.FullTokenizer(vocab_file, do_lower_case=True)


def _qa(qid, question, answers=None, **extra):
  """A question dict; answers as (text, answer_start) pairs."""
  qa = {"id": qid, "question": question}
  if answers is not None:
    qa["answers"] = [{"text": t, "answer_start": s} for t, s in answers]
  qa.update(extra)
  return qa


def _squad_file(path, paragraphs, version="1.1"):
  """Writes a SQuAD json file of one article: [(context, [qa, ...]), ...]."""
  data = {"version": version, "data": [{"title": "t", "paragraphs": [
      {"context": context, "qas": qas} for context, qas in paragraphs]}]}
  with open(path, "w", encoding="utf-8") as f:
    json.dump(data, f, ensure_ascii=False)
  return str(path)


def _answer(context, text):
  """(text, answer_start) of the first occurrence of `text` in `context`."""
  return text, context.index(text)


def _features(examples, tokenizer, is_training, max_seq_length=24,
              doc_stride=4, max_query_length=8):
  features = []
  run_squad.convert_examples_to_features(
      examples, tokenizer, max_seq_length, doc_stride, max_query_length,
      is_training, features.append)
  return features


def _result(feature, starts, ends, seq_length=24, fill=-10.0):
  """RawResult with logits `fill` except {position: logit} in starts/ends."""
  start_logits = [fill] * seq_length
  end_logits = [fill] * seq_length
  for position, logit in starts.items():
    start_logits[position] = logit
  for position, logit in ends.items():
    end_logits[position] = logit
  return run_squad.RawResult(feature.unique_id, start_logits, end_logits)


def _write_predictions(tmp_path, examples, features, results, n_best_size=3,
                       max_answer_length=5, **kwargs):
  """Runs write_predictions; returns (result, predictions, nbest, odds)."""
  paths = [str(tmp_path / name) for name in
           ("predictions.json", "nbest.json", "null_odds.json")]
  out = run_squad.write_predictions(examples, features, results, n_best_size,
                                    max_answer_length, True, *paths, **kwargs)
  loaded = []
  for path in paths:
    if os.path.exists(path):
      with open(path, encoding="utf-8") as f:
        loaded.append(json.load(f))
    else:
      loaded.append(None)
  return (out,) + tuple(loaded)


# ---------------------------------------------------------------- reading --


def test_split_context_char_to_word_offset():
  context = " Hello\u00a0w\u00f6rld\tfoo\u3000\u6771\u4eac bar "
  doc_tokens, offsets = squad_examples.split_context(context)
  assert doc_tokens == ["Hello", "w\u00f6rld", "foo", "\u6771\u4eac", "bar"]
  # A separator belongs to the word before it; -1 before the first word.
  assert offsets == ([-1] + [0] * 6 + [1] * 6 + [2] * 4 + [3] * 3 + [4] * 4)
  assert len(offsets) == len(context)


def test_read_training_examples(tmp_path, caplog):
  context = "The Broncos beat the Panthers 24\u201310 in Santa Clara."
  path = _squad_file(tmp_path / "train.json", [(context, [
      _qa("q1", "Where?", [_answer(context, "Santa Clara")]),
      _qa("q2", "How many?", [_answer(context, "24")]),
      _qa("q3", "Who lost?", [("Panthers", 0)]),       # wrong answer_start
      _qa("q4", "Who won?", [_answer(context, "Broncos"),
                             ("The Broncos", 0)]),
  ])])
  with caplog.at_level("INFO"):
    examples = run_squad.read_squad_examples(path, is_training=True)
  # Words: The(0) Broncos(1) beat(2) the(3) Panthers(4) 24-10(5) in(6)
  # Santa(7) Clara.(8); "24" lies inside word 5.
  assert [e.qas_id for e in examples] == ["q1", "q2", "q4"]
  assert [(e.start_position, e.end_position) for e in examples] == [
      (7, 8), (5, 5), (1, 1)]
  assert examples[2].orig_answer_text == "Broncos"  # the first of two
  assert not any(e.is_impossible for e in examples)
  text = caplog.text
  assert "q3" in text and "skipped 1 training questions" in text
  assert "1 training questions have several answers" in text


def test_read_prediction_examples_need_no_answers(tmp_path):
  path = _squad_file(tmp_path / "test.json",
                     [("Some text here.", [_qa("q1", "What?")])])
  (example,) = run_squad.read_squad_examples(path, is_training=False)
  assert example.doc_tokens == ["Some", "text", "here."]
  assert example.start_position is None


def test_read_impossible_questions_v2(tmp_path):
  context = "Nothing to see."
  path = _squad_file(tmp_path / "train.json", [(context, [
      _qa("q1", "What?", [], is_impossible=True),
      _qa("q2", "See?", [_answer(context, "see")], is_impossible=False)])],
                     version="v2.0")
  impossible, possible = run_squad.read_squad_examples(
      path, is_training=True, version_2_with_negative=True)
  assert impossible.is_impossible
  assert (impossible.start_position, impossible.end_position) == (-1, -1)
  assert impossible.orig_answer_text == ""
  assert (possible.start_position, possible.end_position) == (2, 2)
  with pytest.raises(ValueError, match="q1.*--version_2_with_negative"):
    run_squad.read_squad_examples(path, is_training=True)


def test_has_answers():
  def data(*qas):
    return [{"paragraphs": [{"context": "c", "qas": list(qas)}]}]
  answered = {"id": "a", "answers": [{"text": "c", "answer_start": 0}]}
  unanswerable = {"id": "b", "answers": []}
  assert squad_examples.has_answers(data(answered), False)
  assert not squad_examples.has_answers(data(answered, unanswerable), False)
  assert squad_examples.has_answers(data(answered, unanswerable), True)
  assert not squad_examples.has_answers(data(answered, {"id": "c"}), True)


# ----------------------------------------------------- feature conversion --


def _numbers_example(question="what number?"):
  return run_squad.SquadExample("n", question, NUMBERS.split())


def test_windows_span_starts_maps_and_max_context(tokenizer):
  # Query [what, number, ?] = 3 tokens, so a window holds 16 - 3 - 3 = 10 of
  # the 20 one-token words; windows start every 4: 0, 4, 8, 12 (the last
  # reaches the end with 8 tokens).
  features = _features([_numbers_example()], tokenizer, False,
                       max_seq_length=16, doc_stride=4)
  assert [f.doc_span_index for f in features] == [0, 1, 2, 3]
  assert [f.unique_id for f in features] == [1000000000 + i for i in range(4)]
  starts, lengths = [0, 4, 8, 12], [10, 10, 10, 8]
  words = NUMBERS.split()
  # Owner of each word = window with the largest min(left, right) context +
  # 0.01 * length, e.g. word 7: window 0 min(7, 2) = 2, window 1 min(3, 6) =
  # 3 -> window 1; word 12: window 1 1.1, window 2 4.1, window 3 0.08.
  owner = [0] * 7 + [1] * 4 + [2] * 4 + [3] * 5
  for f, start, length in zip(features, starts, lengths):
    assert f.tokens == (["[CLS]", "what", "number", "?", "[SEP]"] +
                        words[start:start + length] + ["[SEP]"])
    assert f.token_to_orig_map == {5 + i: start + i for i in range(length)}
    assert f.token_is_max_context == {
        5 + i: owner[start + i] == f.doc_span_index for i in range(length)}
    n = len(f.tokens)
    assert f.input_ids[:5] == [101, 2054, 2193, 1029, 102]
    assert f.input_ids[n:] == [0] * (16 - n)
    assert f.input_mask == [1] * n + [0] * (16 - n)
    assert f.segment_ids == [0] * 5 + [1] * (n - 5) + [0] * (16 - n)


def test_answer_crossing_a_window_border_points_to_cls(tokenizer):
  example = _numbers_example()
  example.orig_answer_text = "ten eleven twelve"
  example.start_position, example.end_position = 9, 11
  features = _features([example], tokenizer, True, max_seq_length=16,
                       doc_stride=4)
  # Answer tokens 9..11. Window 0 (0..9) and window 3 (12..19) cut it: (0, 0).
  # Window 1 (4..13): 9 - 4 + 5 = 10 .. 12; window 2 (8..17): 6 .. 8.
  assert [(f.start_position, f.end_position) for f in features] == [
      (0, 0), (10, 12), (6, 8), (0, 0)]


def test_subword_maps_and_improved_answer_span(tokenizer):
  assert tokenizer.tokenize("embeddings") == ["em", "##bed", "##ding", "##s"]
  context = "Word embeddings (1895\u20131943) help."
  example = run_squad.SquadExample("e", "why?", context.split(),
                                   orig_answer_text="1895", start_position=2,
                                   end_position=2)
  (feature,) = _features([example], tokenizer, True)
  # Tokens: [CLS] why ? [SEP] word em ##bed ##ding ##s ( 1895 - 1943 ) help .
  assert feature.tokens[4:] == ["word", "em", "##bed", "##ding", "##s", "(",
                                "1895", "\u2013", "1943", ")", "help", ".",
                                "[SEP]"]
  assert feature.token_to_orig_map == {4: 0, 5: 1, 6: 1, 7: 1, 8: 1, 9: 2,
                                       10: 2, 11: 2, 12: 2, 13: 2, 14: 3,
                                       15: 3}
  # The answer word "(1895-1943)" is narrowed to the token "1895".
  assert (feature.start_position, feature.end_position) == (10, 10)


def test_impossible_question_points_to_cls_in_every_window(tokenizer):
  example = run_squad.SquadExample("x", "what number?", NUMBERS.split(),
                                   orig_answer_text="", start_position=-1,
                                   end_position=-1, is_impossible=True)
  features = _features([example], tokenizer, True, max_seq_length=16,
                       doc_stride=4)
  assert len(features) == 4
  assert all((f.start_position, f.end_position, f.is_impossible) ==
             (0, 0, True) for f in features)


def test_query_is_truncated(tokenizer):
  (feature,) = _features([run_squad.SquadExample(
      "q", "one two three four five six", ["seven"])], tokenizer, False,
                         max_query_length=4)
  assert feature.tokens == ["[CLS]", "one", "two", "three", "four", "[SEP]",
                            "seven", "[SEP]"]


def test_no_room_for_the_document_is_an_error(tokenizer):
  # [CLS] + 3 query tokens + [SEP] + [SEP] leaves 6 - 6 = 0 positions.
  with pytest.raises(ValueError, match="No room for the document"):
    _features([_numbers_example()], tokenizer, False, max_seq_length=6)


# ------------------------------------------------------ unicode contexts --


def _predict_span(tmp_path, tokenizer, context, question, start, end,
                  **kwargs):
  """Predicted text when the logits pick tokens start..end (1 window)."""
  doc_tokens, _ = squad_examples.split_context(context)
  example = run_squad.SquadExample("u", question, doc_tokens)
  (feature,) = _features([example], tokenizer, False)
  result = _result(feature, {start: 5.0}, {end: 5.0})
  _, predictions, _, _ = _write_predictions(tmp_path, [example], [feature],
                                            [result], **kwargs)
  return feature, predictions["u"]


def test_no_break_space_separates_words(tmp_path, tokenizer):
  context = "Price:\u00a0100\u00a0dollars"
  path = _squad_file(tmp_path / "train.json", [(context, [
      _qa("q", "how much?", [_answer(context, "100")])])])
  (example,) = run_squad.read_squad_examples(path, is_training=True)
  assert example.doc_tokens == ["Price:", "100", "dollars"]
  assert (example.start_position, example.end_position) == (1, 1)
  (feature,) = _features([example], tokenizer, True)
  # [CLS] how much ? [SEP] price : 100 dollars [SEP]
  assert (feature.start_position, feature.end_position) == (7, 7)
  _, text = _predict_span(tmp_path, tokenizer, context, "how much?", 7, 7)
  assert text == "100"


def test_cjk_context_is_split_per_character(tmp_path, tokenizer):
  context = "\u6771\u4eac\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3059\u3002"
  path = _squad_file(tmp_path / "train.json", [(context, [
      _qa("q", "capital?", [_answer(context, "\u65e5\u672c")])])])
  (example,) = run_squad.read_squad_examples(path, is_training=True)
  assert example.doc_tokens == [context]  # no whitespace: one word
  (feature,) = _features([example], tokenizer, True)
  # [CLS] capital ? [SEP] then one token per ideograph: 東 京 は 日 本 ...
  assert feature.tokens[4:9] == ["\u6771", "\u4eac", "\u306f", "\u65e5",
                                 "\u672c"]
  assert set(feature.token_to_orig_map.values()) == {0}
  assert (feature.start_position, feature.end_position) == (7, 8)
  _, text = _predict_span(tmp_path, tokenizer, context, "capital?", 7, 8)
  assert text == "\u65e5\u672c"


def test_tabs_ideographic_space_and_accents(tmp_path, tokenizer):
  context = "Zo\u00eb's\tcaf\u00e9\u3000opened (in 1895)."
  doc_tokens, _ = squad_examples.split_context(context)
  assert doc_tokens == ["Zo\u00eb's", "caf\u00e9", "opened", "(in", "1895)."]
  # [CLS] where ? [SEP] zoe ' s cafe opened ( in 1895 ) . [SEP]
  feature, text = _predict_span(tmp_path, tokenizer, context, "where?", 4, 7)
  assert feature.tokens[4:8] == ["zoe", "'", "s", "cafe"]
  assert text == "Zo\u00eb's caf\u00e9"  # the words, joined by a space
  _, text = _predict_span(tmp_path, tokenizer, context, "where?", 11, 11)
  assert text == "1895"


# ------------------------------------------------------------ predictions --


@pytest.mark.parametrize("pred,orig,lower,expected", [
    ("steve smith", "Steve Smith's", True, "Steve Smith"),
    ("1895", "(1895\u20131943)", True, "1895"),
    ("cafe", "Caf\u00e9,", True, "Caf\u00e9"),
    ("Smith", "Smith's", False, "Smith"),
    ("smith", "Smith's", False, "Smith's"),   # cased text: not found
    ("xyz", "abc def", True, "abc def"),
])
def test_get_final_text(pred, orig, lower, expected):
  assert run_squad.get_final_text(pred, orig, lower) == expected


def _broncos(tokenizer):
  context = "Denver Broncos beat Carolina Panthers in Santa Clara."
  example = run_squad.SquadExample("b", "who won?", context.split())
  (feature,) = _features([example], tokenizer, False)
  # [CLS] who won ? [SEP] denver(5) broncos(6) beat(7) carolina(8)
  # panthers(9) in(10) santa(11) clara(12) .(13) [SEP](14)
  assert feature.tokens[5:15] == ["denver", "broncos", "beat", "carolina",
                                  "panthers", "in", "santa", "clara", ".",
                                  "[SEP]"]
  return example, feature


_STARTS = {5: 3.0, 8: 2.0, 11: 1.0}
_ENDS = {6: 3.0, 9: 2.5, 13: 0.5}


def test_nbest_order_probabilities_and_max_answer_length(tmp_path, tokenizer):
  example, feature = _broncos(tokenizer)
  result = _result(feature, _STARTS, _ENDS)
  _, predictions, nbest, odds = _write_predictions(
      tmp_path, [example], [feature], [result])
  # Candidates (start, end, score): (5,6) 6.0, (5,9) 5.5 [5 tokens], (8,9)
  # 4.5, (11,13) 1.5; (5,13) and (8,13) are longer than 5 tokens, (8,6),
  # (11,6), (11,9) end before they start. n_best_size 3 keeps three.
  assert predictions == {"b": "Denver Broncos"}
  assert [e["text"] for e in nbest["b"]] == [
      "Denver Broncos", "Denver Broncos beat Carolina Panthers",
      "Carolina Panthers"]
  assert [(e["start_logit"], e["end_logit"]) for e in nbest["b"]] == [
      (3.0, 3.0), (3.0, 2.5), (2.0, 2.5)]
  scores = np.array([6.0, 5.5, 4.5])
  expected = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
  np.testing.assert_allclose([e["probability"] for e in nbest["b"]],
                             expected, rtol=1e-12)
  assert odds is None  # v1.1 writes no null odds
  # max_answer_length 2 leaves (5,6) and (8,9).
  _, _, nbest, _ = _write_predictions(tmp_path, [example], [feature], [result],
                                      n_best_size=3, max_answer_length=2)
  assert [e["text"] for e in nbest["b"]] == ["Denver Broncos",
                                             "Carolina Panthers"]


def test_span_keeps_original_casing_and_punctuation(tmp_path, tokenizer):
  _, text = _predict_span(tmp_path, tokenizer, "Santa Clara, California.",
                          "where?", 4, 6)
  # Tokens 4..6 are santa clara , -> the original words "Santa Clara,".
  assert text == "Santa Clara,"


def test_start_outside_max_context_is_skipped(tmp_path, tokenizer):
  example = _numbers_example()
  features = _features([example], tokenizer, False, max_seq_length=16,
                       doc_stride=4)
  # Word 8 ("nine") belongs to window 1 (position 5 + 8 - 4 = 9); in window
  # 0 (position 13) its high logits do not count.
  results = [_result(features[0], {13: 10.0, 6: 1.0}, {13: 10.0, 6: 1.0},
                     seq_length=16),
             _result(features[1], {9: 3.0}, {9: 3.0}, seq_length=16),
             _result(features[2], {}, {}, seq_length=16),
             _result(features[3], {}, {}, seq_length=16)]
  _, predictions, nbest, _ = _write_predictions(
      tmp_path, [example], features, results, n_best_size=2)
  assert predictions == {"n": "nine"}
  assert [(e["text"], e["start_logit"] + e["end_logit"])
          for e in nbest["n"]] == [("nine", 6.0), ("two", 2.0)]


def test_v2_null_score_and_threshold(tmp_path, tokenizer):
  example, feature = _broncos(tokenizer)
  # score_null = 4 + 3 = 7, best non-null 6 -> odds 1.
  result = _result(feature, {**_STARTS, 0: 4.0}, {**_ENDS, 0: 3.0})
  out, predictions, nbest, odds = _write_predictions(
      tmp_path, [example], [feature], [result],
      version_2_with_negative=True)
  assert odds == {"b": pytest.approx(1.0)}
  assert predictions == {"b": ""}
  assert nbest["b"][0]["text"] == ""  # the null competes in the n-best
  assert out.best_non_null == {"b": "Denver Broncos"}
  _, predictions, _, _ = _write_predictions(
      tmp_path, [example], [feature], [result],
      version_2_with_negative=True, null_score_diff_threshold=1.5)
  assert predictions == {"b": "Denver Broncos"}
  assert squad_predictions.predictions_at_threshold(
      out.null_odds, out.best_non_null, 0.5) == {"b": ""}
  assert squad_predictions.predictions_at_threshold(
      out.null_odds, out.best_non_null, 1.0) == {"b": "Denver Broncos"}


def test_v2_score_null_is_the_minimum_over_windows(tmp_path, tokenizer):
  example = _numbers_example()
  features = _features([example], tokenizer, False, max_seq_length=16,
                       doc_stride=4)
  cls_sums = [(3.0, 2.0), (1.0, 1.0), (4.0, 3.0), (2.0, 1.0)]
  results = [_result(f, {0: s, 9: 3.0}, {0: e, 9: 3.0}, seq_length=16)
             for f, (s, e) in zip(features, cls_sums)]
  _, _, nbest, odds = _write_predictions(
      tmp_path, [example], features, results, n_best_size=2,
      version_2_with_negative=True)
  # Best non-null: "nine" in window 1 (position 9) with 3 + 3 = 6. The
  # lowest null is window 1's 1 + 1 = 2, so odds = 2 - 6 = -4.
  assert odds == {"n": pytest.approx(-4.0)}
  null = [e for e in nbest["n"] if e["text"] == ""]
  assert [(e["start_logit"], e["end_logit"]) for e in null] == [(1.0, 1.0)]


def test_no_non_empty_answer(tmp_path, tokenizer):
  example, feature = _broncos(tokenizer)
  # The best start and end are both [CLS]: with n_best_size 1 no span is
  # valid, only the null.
  result = _result(feature, {0: 2.0}, {0: 1.0})
  _, predictions, nbest, odds = _write_predictions(
      tmp_path, [example], [feature], [result], n_best_size=1,
      version_2_with_negative=True, null_score_diff_threshold=1e9)
  assert predictions == {"b": ""}
  assert [e["text"] for e in nbest["b"]] == ["", "empty"]
  assert odds == {"b": pytest.approx(3.0)}  # 2 + 1 minus the placeholder's 0
  _, predictions, nbest, _ = _write_predictions(
      tmp_path, [example], [feature], [result], n_best_size=1)
  assert predictions == {"b": "empty"}  # v1.1 keeps Google's placeholder
  assert nbest["b"] == [{"text": "empty", "probability": 1.0,
                         "start_logit": 0.0, "end_logit": 0.0}]


# ----------------------------------------------------- files and streaming --


def _records(path):
  return [tf.train.Example.FromString(r.numpy())
          for r in tf.data.TFRecordDataset(path)]


def _ints(example, name):
  return list(example.features.feature[name].int64_list.value)


def test_feature_writer_training_records(tmp_path, tokenizer):
  example = _numbers_example()
  example.orig_answer_text = "ten eleven twelve"
  example.start_position, example.end_position = 9, 11
  impossible = run_squad.SquadExample("x", "what?", ["nothing"],
                                      orig_answer_text="", start_position=-1,
                                      end_position=-1, is_impossible=True)
  features = _features([example, impossible], tokenizer, True,
                       max_seq_length=16, doc_stride=4)
  writer = run_squad.FeatureWriter(str(tmp_path / "train.tf_record"), True)
  for f in features:
    writer.process_feature(f)
  writer.close()
  records = _records(writer.filename)
  assert writer.num_features == len(records) == 5
  assert [_ints(r, "start_positions") for r in records] == [
      [0], [10], [6], [0], [0]]
  assert [_ints(r, "end_positions") for r in records] == [
      [0], [12], [8], [0], [0]]
  assert [_ints(r, "is_impossible") for r in records] == [[0]] * 4 + [[1]]
  assert _ints(records[4], "input_ids")[:5] == [101, 2054, 1029, 102, 2498]


def test_write_eval_features_streams_metadata_only(tmp_path, tokenizer):
  words = NUMBERS.split()
  examples = [run_squad.SquadExample("q%d" % i, "what number?",
                                     words[i % 5:] + words[:i % 5])
              for i in range(40)]
  path = str(tmp_path / "eval.tf_record")
  metadata = squad_features.write_eval_features(examples, tokenizer, path,
                                                 16, 4, 8)
  records = _records(path)
  assert len(metadata) == len(records) == 40 * 4
  for meta, record in zip(metadata, records):
    assert isinstance(meta, squad_features.FeatureMetadata)
    assert not hasattr(meta, "input_ids") and not hasattr(meta, "input_mask")
    assert _ints(record, "unique_ids") == [meta.unique_id]
    ids = tokenizer.convert_tokens_to_ids(meta.tokens)
    assert _ints(record, "input_ids") == ids + [0] * (16 - len(ids))
    assert set(record.features.feature) == {"unique_ids", "input_ids",
                                            "input_mask", "segment_ids"}


def test_input_fn_reads_int32_batches(tmp_path, tokenizer):
  path = str(tmp_path / "eval.tf_record")
  metadata = squad_features.write_eval_features(
      [_numbers_example()], tokenizer, path, 16, 4, 8)
  input_fn = run_squad.input_fn_builder(path, 16, is_training=False,
                                        drop_remainder=False)
  batches = list(input_fn({"batch_size": 3}))
  assert [b["input_ids"].shape.as_list() for b in batches] == [[3, 16],
                                                              [1, 16]]
  assert all(t.dtype == tf.int32 for b in batches for t in b.values())
  assert [int(u) for b in batches for u in b["unique_ids"]] == [
      m.unique_id for m in metadata]


# -------------------------------------------------------------- bad input --


def _write_text(path, text):
  path.write_text(text, encoding="utf-8")
  return str(path)


def test_malformed_json_names_file_and_position(tmp_path):
  path = _write_text(tmp_path / "bad.json", '{"data": [\n  {"paragraphs": }]}')
  with pytest.raises(ValueError, match=r"bad\.json.*line 2 column 18"):
    run_squad.read_squad_examples(path, is_training=False)


@pytest.mark.parametrize("paragraph,is_training,pattern", [
    ({"qas": []}, False, r"article 0, paragraph 0 has no \"context\""),
    ({"context": "x"}, False, r"paragraph 0 has no \"qas\""),
    ({"context": "x", "qas": [{"question": "q?"}]}, False, r"has no \"id\""),
    ({"context": "x", "qas": [{"id": "abc"}]}, False,
     r"question id 'abc'.*has no \"question\""),
    ({"context": "x", "qas": [{"id": "abc", "question": "q?"}]}, True,
     r"question id 'abc'.*has no \"answers\""),
    ({"context": "x", "qas": [{"id": "abc", "question": "q?",
                               "answers": [{"text": "x"}]}]}, True,
     r"question id 'abc'.*has no \"answer_start\""),
    ({"context": "x", "qas": [{"id": "abc", "question": "q?"},
                              {"id": "abc", "question": "q?"}]}, False,
     r"question id 'abc'.*appears twice"),
])
def test_missing_fields_name_file_and_question(tmp_path, paragraph,
                                               is_training, pattern):
  path = tmp_path / "in.json"
  path.write_text(json.dumps({"data": [{"paragraphs": [paragraph]}]}))
  with pytest.raises(ValueError, match=r"in\.json: .*" + pattern):
    run_squad.read_squad_examples(str(path), is_training=is_training)


def _flags(**overrides):
  values = dict(do_lower_case=True, init_checkpoint=None, do_train=True,
                bert_config_file="bert_config.json",
                do_predict=False, train_file="t.json", predict_file=None,
                max_seq_length=384, max_query_length=64, doc_stride=128,
                n_best_size=20, max_answer_length=30, export_dir=None)
  values.update(overrides)
  return types.SimpleNamespace(**values)


def test_validate_flags(tmp_path):
  config = modeling.BertConfig(vocab_size=100, max_position_embeddings=384)
  run_squad.validate_flags_or_throw(config, _flags())
  with pytest.raises(ValueError, match="max_seq_length=512.*"
                     "max_position_embeddings=384"):
    run_squad.validate_flags_or_throw(config, _flags(max_seq_length=512))
  # Room for the document: 64 - 16 - 3 = 45.
  with pytest.raises(ValueError, match="--doc_stride=45.*--max_query_length"):
    run_squad.validate_flags_or_throw(
        config, _flags(max_seq_length=64, max_query_length=16, doc_stride=45))
  run_squad.validate_flags_or_throw(
      config, _flags(max_seq_length=64, max_query_length=16, doc_stride=44))
  with pytest.raises(ValueError, match="--predict_file"):
    run_squad.validate_flags_or_throw(config, _flags(do_predict=True))


# ------------------------------------------------------------------ model --


def _tiny_config():
  return modeling.BertConfig(vocab_size=50, hidden_size=32,
                             num_hidden_layers=2, num_attention_heads=2,
                             intermediate_size=64, max_position_embeddings=32)


def test_create_model_head_matches_numpy():
  rng = np.random.RandomState(0)
  config = _tiny_config()
  with tf.Graph().as_default():
    ids = tf.constant(rng.randint(1, 50, size=(2, 8)).astype(np.int32))
    mask = tf.constant([[1] * 8, [1] * 5 + [0] * 3])
    tf.compat.v1.set_random_seed(1)
    start, end = run_squad.create_model(config, False, ids, mask,
                                        tf.zeros_like(ids), False)
    variables = {v.op.name: v for v in tf.compat.v1.global_variables()}
    w = variables["cls/squad/output_weights"]
    b = variables["cls/squad/output_bias"]
    assert w.shape.as_list() == [2, 32] and b.shape.as_list() == [2]
    # The same BERT variables again give the hidden states the head saw.
    with tf.compat.v1.variable_scope("", reuse=True):
      hidden = modeling.BertModel(config, False, ids, mask, tf.zeros_like(ids),
                                  scope="bert").get_sequence_output()
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      sess.run(b.assign([0.5, -0.25]))
      start_v, end_v, w_v, hidden_v = sess.run([start, end, w, hidden])
  assert start_v.dtype == np.float32 and start_v.shape == (2, 8)
  # Truncated normal with stddev 0.02 stays within two deviations.
  assert 0 < np.abs(w_v).max() <= 0.04 + 1e-7
  np.testing.assert_allclose(start_v, hidden_v @ w_v[0] + 0.5, rtol=1e-5,
                             atol=1e-5)
  np.testing.assert_allclose(end_v, hidden_v @ w_v[1] - 0.25, rtol=1e-5,
                             atol=1e-5)


def test_position_loss_matches_numpy():
  logits = np.array([[1.0, 2.0, 0.5, -1.0], [0.0, 0.0, 3.0, 1.0]], np.float32)
  positions = np.array([1, 3], np.int32)
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  expected = -np.mean(log_probs[np.arange(2), positions])
  with tf.Graph().as_default():
    loss = squad_model._position_loss(tf.constant(logits),
                                      tf.constant(positions), 4)
    with tf.compat.v1.Session() as sess:
      assert sess.run(loss) == pytest.approx(expected, rel=1e-6)


# ------------------------------------------------------------- end to end --


def _e2e_data(tmp_path):
  contexts = [
      "The Denver Broncos won Super Bowl 50 in Santa Clara, California.",
      "Marie Curie discovered polonium and radium with Pierre Curie in Paris.",
      "The Amazon river flows through Brazil into the Atlantic Ocean.",
  ]
  questions = [("Who won Super Bowl 50?", "Denver Broncos"),
               ("Where was the game played?", "Santa Clara"),
               ("What did Curie discover?", "polonium"),
               ("Where did Curie work?", "Paris"),
               ("Which river flows through Brazil?", "Amazon"),
               ("Into which ocean does it flow?", "Atlantic Ocean")]
  paragraphs = []
  for i, context in enumerate(contexts):
    qas = [_qa("q%d" % j, q, [_answer(context, a)])
           for j, (q, a) in enumerate(questions) if j // 2 == i]
    paragraphs.append((context, qas))
  return _squad_file(tmp_path / "squad.json", paragraphs)


def _run_squad(run_script, args):
  proc = run_script("run_squad.py", args)
  assert proc.returncode == 0, proc.stderr[-3000:]


def _check_exported_logits(export_dir, bert_config, checkpoint):
  """The SavedModel's logits equal create_model's with the checkpoint's
  weights, for a padded batch."""
  (model_dir,) = os.listdir(export_dir)
  serve = tf.saved_model.load(
      str(export_dir / model_dir)).signatures["serving_default"]
  rng = np.random.RandomState(0)
  inputs = {"input_ids": rng.randint(1000, 30522, (3, 32)).astype(np.int32),
            "input_mask": np.ones((3, 32), np.int32),
            "segment_ids": np.zeros((3, 32), np.int32)}
  inputs["input_mask"][1:, 20:] = 0
  inputs["segment_ids"][:, 10:20] = 1
  served = serve(**{k: tf.constant(v) for k, v in inputs.items()})
  # The model_fn's "unique_ids" would serve the receiver's zeros.
  assert sorted(served) == ["end_logits", "start_logits"]
  with tf.Graph().as_default():
    start, end = run_squad.create_model(
        bert_config, False, tf.constant(inputs["input_ids"]),
        tf.constant(inputs["input_mask"]), tf.constant(inputs["segment_ids"]),
        False)
    with tf.compat.v1.Session() as sess:
      tf.compat.v1.train.Saver(tf.compat.v1.trainable_variables()).restore(
          sess, checkpoint)
      want_start, want_end = sess.run((start, end))
  np.testing.assert_allclose(served["start_logits"].numpy(), want_start,
                             atol=1e-5)
  np.testing.assert_allclose(served["end_logits"].numpy(), want_end,
                             atol=1e-5)


@pytest.mark.slow
def test_end_to_end_train_predict_evaluate(tmp_path, vocab_file, run_script):
  config = modeling.BertConfig(
      vocab_size=30522, hidden_size=32, num_hidden_layers=2,
      num_attention_heads=2, intermediate_size=64,
      max_position_embeddings=64, type_vocab_size=2)
  config_file = tmp_path / "bert_config.json"
  config_file.write_text(config.to_json_string())
  data = _e2e_data(tmp_path)
  out = tmp_path / "out"
  common = ["--vocab_file=%s" % vocab_file,
            "--bert_config_file=%s" % config_file, "--output_dir=%s" % out,
            "--max_seq_length=32", "--max_query_length=12", "--doc_stride=8",
            "--predict_batch_size=4", "--n_best_size=5"]
  # 6 examples / batch 2 * 1 epoch = 3 updates.
  _run_squad(run_script, [
      "--do_train", "--do_predict", "--train_file=%s" % data,
      "--predict_file=%s" % data, "--train_batch_size=2",
      "--num_train_epochs=1", "--learning_rate=1e-3"] + common)
  assert tf.train.latest_checkpoint(str(out)).endswith("model.ckpt-3")
  with open(out / "predictions.json") as f:
    predictions = json.load(f)
  with open(out / "nbest_predictions.json") as f:
    nbest = json.load(f)
  with open(out / "eval_results.json") as f:
    results = json.load(f)
  assert sorted(predictions) == ["q%d" % i for i in range(6)]
  assert all(predictions[q] == nbest[q][0]["text"] for q in predictions)
  with open(data) as f:
    dataset = json.load(f)["data"]
  assert results == pytest.approx(squad_metrics.evaluate(dataset,
                                                          predictions))
  # Predicting again as SQuAD 2.0 from the trained checkpoint, and exporting.
  export = tmp_path / "export"
  _run_squad(run_script, ["--do_predict", "--version_2_with_negative",
                          "--predict_file=%s" % data,
                          "--export_dir=%s" % export] + common)
  _check_exported_logits(export, config,
                         tf.train.latest_checkpoint(str(out)))
  with open(out / "null_odds.json") as f:
    odds = json.load(f)
  with open(out / "eval_results.json") as f:
    results = json.load(f)
  with open(out / "predictions_best_threshold.json") as f:
    best = json.load(f)
  assert sorted(odds) == sorted(best) == ["q%d" % i for i in range(6)]
  assert "best_f1_thresh" in results and results["HasAns_total"] == 6
  with open(out / "nbest_predictions.json") as f:
    nbest = json.load(f)
  for q, diff in odds.items():
    non_null = next((e["text"] for e in nbest[q] if e["text"]), "")
    expected = "" if diff > results["best_f1_thresh"] else non_null
    assert best[q] == expected
