"""Tests of squad_evaluate.py against hand-computed official SQuAD metrics."""
import json
import os
import subprocess
import sys

import pytest

import squad_evaluate as se
from tasks import squad_metrics

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _dataset(questions):
  """A SQuAD "data" list: one paragraph holding (qid, [answer texts])."""
  qas = [{"id": qid, "question": "q?",
          "answers": [{"text": t, "answer_start": 0} for t in answers]}
         for qid, answers in questions]
  return [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]


def _write(path, value):
  with open(path, "w", encoding="utf-8") as f:
    json.dump(value, f)
  return str(path)


# ------------------------------------------------------------ normalizing --


@pytest.mark.parametrize("text,expected", [
    ("Denver BRONCOS", "denver broncos"),            # case
    ("Hello, world!", "hello world"),                # punctuation
    ("\"Super\"-Bowl's (50)", "superbowls 50"),      # punctuation inside words
    ("The cat", "cat"),                              # article "the"
    ("a dog and an owl", "dog and owl"),             # articles "a", "an"
    ("another theory", "another theory"),            # "an" inside a word
    ("thesis at Athens", "thesis at athens"),        # "the" inside words
    ("banana", "banana"),                            # "a"/"an" inside a word
    ("  lots \t of\n space ", "lots of space"),      # whitespace
    ("A.n", ""),             # punctuation goes first, then "an" is an article
    ("caf\u00e9\u2014bar", "caf\u00e9\u2014bar"),    # non-ASCII kept
])
def test_normalize_answer(text, expected):
  assert squad_metrics.normalize_answer(text) == expected


def test_exact_match_and_f1_hand_computed():
  assert squad_metrics.exact_match_score("The Denver Broncos.", "denver broncos")
  assert not squad_metrics.exact_match_score("Denver", "Denver Broncos")
  # pred tokens [quick, brown, fox], gold [quick, red, fox, jumps]:
  # common 2, precision 2/3, recall 2/4, F1 = 2*(2/3)(1/2)/(2/3+1/2) = 4/7.
  assert squad_metrics.f1_score("the quick brown fox", "a quick red fox jumps") == (
      pytest.approx(4 / 7))
  # Bags of tokens: pred [new, new, york] vs gold [new, york]: common 2,
  # precision 2/3, recall 1, F1 = 2*(2/3)/(5/3) = 4/5.
  assert squad_metrics.f1_score("new new york", "New York") == pytest.approx(0.8)
  assert squad_metrics.f1_score("Paris", "London") == 0.0


def test_several_ground_truths_take_the_max():
  truths = ["Denver Broncos", "the Broncos", "Broncos team of Denver"]
  assert squad_metrics.metric_max_over_ground_truths(squad_metrics.exact_match_score, "Broncos",
                                          truths)
  # "denver" vs "denver broncos": P 1, R 1/2 -> 2/3; vs "broncos": 0;
  # vs "broncos team of denver": P 1, R 1/4 -> 2/5. Max 2/3.
  assert squad_metrics.metric_max_over_ground_truths(squad_metrics.f1_score, "Denver", truths) == (
      pytest.approx(2 / 3))


def test_empty_answers_v1_versus_v2():
  assert squad_metrics.f1_score("", "") == 0.0          # v1.1: no tokens, no overlap
  assert squad_metrics.compute_f1("", "") == 1.0        # v2.0: both say "no answer"
  assert squad_metrics.compute_f1("", "Paris") == 0.0
  assert squad_metrics.compute_f1("Paris", "") == 0.0
  assert squad_metrics.compute_f1("the", "") == 1.0     # normalizes to no tokens
  assert squad_metrics.compute_exact("", "") == 1


# ------------------------------------------------------------------ v1.1 --


def test_evaluate_v1_counts_unanswered_as_zero(capsys):
  data = _dataset([("q1", ["Denver Broncos"]),
                   ("q2", ["a quick red fox jumps"]),
                   ("q3", ["Santa Clara"])])
  preds = {"q1": "the denver broncos", "q2": "the quick brown fox"}
  result = squad_metrics.evaluate(data, preds)
  # q1 exact (1, 1), q2 partial (0, 4/7), q3 missing (0, 0).
  assert result["exact_match"] == pytest.approx(100.0 / 3)
  assert result["f1"] == pytest.approx(100.0 * (1 + 4 / 7) / 3)
  assert "q3" in capsys.readouterr().err


def test_evaluate_v1_refuses_question_without_answers():
  data = _dataset([("q1", [])])
  with pytest.raises(ValueError, match="q1.*2.0"):
    squad_metrics.evaluate(data, {"q1": ""})


# ------------------------------------------------------------------ v2.0 --

_V2_QUESTIONS = [("q1", ["Paris"]), ("q2", ["blue whale"]), ("q3", []),
                 ("q4", [])]
_V2_PREDS = {"q1": "Paris", "q2": "whale", "q3": "", "q4": "dog"}
_V2_NA = {"q1": 0.1, "q2": 0.2, "q3": 0.9, "q4": 0.3}


def test_evaluate_v2_splits_and_best_thresholds():
  result = squad_metrics.evaluate_v2(_dataset(_V2_QUESTIONS), _V2_PREDS, _V2_NA)
  # Raw (no na_prob above 1.0): exact q1 1, q2 0, q3 1, q4 0;
  # f1 q1 1, q2 2/3 (P 1, R 1/2), q3 1 (both empty), q4 0.
  assert list(result) == [
      "exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total",
      "NoAns_exact", "NoAns_f1", "NoAns_total", "best_exact",
      "best_exact_thresh", "best_f1", "best_f1_thresh"]
  assert result["exact"] == pytest.approx(50.0)
  assert result["f1"] == pytest.approx(100.0 * (1 + 2 / 3 + 1) / 4)
  assert result["total"] == 4
  assert result["HasAns_exact"] == pytest.approx(50.0)
  assert result["HasAns_f1"] == pytest.approx(100.0 * (1 + 2 / 3) / 2)
  assert result["HasAns_total"] == 2
  assert result["NoAns_exact"] == pytest.approx(50.0)
  assert result["NoAns_f1"] == pytest.approx(50.0)
  # Threshold search, answering in na order q1 (.1), q2 (.2), q4 (.3),
  # q3 (.9) from 2 (both no-answer questions right):
  #   exact: 2 -> 3 (q1) -> 3 (q2 +0) -> 2 (q4 "dog" -1) -> 2; best 3 at .1
  #   f1:    2 -> 3 -> 3 2/3 (q2) -> 2 2/3 -> 2 2/3; best 3 2/3 at .2
  assert result["best_exact"] == pytest.approx(75.0)
  assert result["best_exact_thresh"] == pytest.approx(0.1)
  assert result["best_f1"] == pytest.approx(100.0 * (3 + 2 / 3) / 4)
  assert result["best_f1_thresh"] == pytest.approx(0.2)


def test_evaluate_v2_applies_na_prob_threshold():
  result = squad_metrics.evaluate_v2(_dataset(_V2_QUESTIONS), _V2_PREDS, _V2_NA,
                          na_prob_thresh=0.25)
  # q3 (.9) and q4 (.3) become "no answer", right for both: exact 1, 0, 1, 1
  # and f1 1, 2/3, 1, 1.
  assert result["exact"] == pytest.approx(75.0)
  assert result["f1"] == pytest.approx(100.0 * (3 + 2 / 3) / 4)
  assert result["NoAns_exact"] == pytest.approx(100.0)


def test_evaluate_v2_without_na_probs_has_no_threshold_search():
  result = squad_metrics.evaluate_v2(_dataset(_V2_QUESTIONS), _V2_PREDS)
  assert "best_f1" not in result
  assert result["exact"] == pytest.approx(50.0)


def test_evaluate_v2_refuses_na_probs_missing_a_prediction():
  with pytest.raises(ValueError, match="q4"):
    squad_metrics.evaluate_v2(_dataset(_V2_QUESTIONS), _V2_PREDS,
                   {"q1": 0.1, "q2": 0.2, "q3": 0.9})


def test_find_best_thresh_keeps_zero_when_answering_never_helps():
  qid_to_has_ans = {"a": False, "b": False}
  best, thresh = squad_metrics.find_best_thresh({"a": "x", "b": "y"}, {"a": 0, "b": 0},
                                     {"a": 0.4, "b": 0.7}, qid_to_has_ans)
  assert (best, thresh) == (100.0, 0.0)


# -------------------------------------------------------------- command --


def test_cli_prints_the_official_v1_line(tmp_path):
  data = _write(tmp_path / "dev.json", {
      "version": "1.1", "data": _dataset([("q1", ["Denver Broncos"]),
                                          ("q2", ["Paris"])])})
  preds = _write(tmp_path / "pred.json", {"q1": "denver broncos", "q2": "x"})
  proc = subprocess.run([sys.executable, "squad_evaluate.py", data, preds],
                        cwd=REPO_ROOT, capture_output=True, text=True,
                        check=True, timeout=120)
  assert proc.stdout == '{"exact_match": 50.0, "f1": 50.0}\n'


def test_main_v2_detected_from_version_field(tmp_path, capsys):
  data = _write(tmp_path / "dev.json", {"version": "v2.0",
                                        "data": _dataset(_V2_QUESTIONS)})
  preds = _write(tmp_path / "pred.json", _V2_PREDS)
  assert se.main([data, preds]) == 0
  out = capsys.readouterr().out
  assert out.startswith('{\n  "exact": 50.0,\n  "f1": ')
  assert list(json.loads(out)) == [
      "exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total",
      "NoAns_exact", "NoAns_f1", "NoAns_total"]


def test_main_v2_detected_from_na_prob_file_and_out_file(tmp_path, capsys):
  data = _write(tmp_path / "dev.json", {"data": _dataset(_V2_QUESTIONS)})
  preds = _write(tmp_path / "pred.json", _V2_PREDS)
  na = _write(tmp_path / "null_odds.json", _V2_NA)
  out_file = str(tmp_path / "eval.json")
  assert se.main([data, preds, "--na-prob-file", na, "--na-prob-thresh",
                  "0.25", "--out-file", out_file]) == 0
  assert capsys.readouterr().out == ""
  with open(out_file) as f:
    result = json.load(f)
  assert result["exact"] == pytest.approx(75.0)
  assert result["best_f1_thresh"] == pytest.approx(0.2)


def test_main_v2_detected_from_is_impossible(tmp_path, capsys):
  dataset = _dataset([("q1", ["Paris"]), ("q2", [])])
  dataset[0]["paragraphs"][0]["qas"][1]["is_impossible"] = True
  data = _write(tmp_path / "dev.json", {"data": dataset})
  preds = _write(tmp_path / "pred.json", {"q1": "Paris", "q2": ""})
  assert se.main([data, preds]) == 0
  assert json.loads(capsys.readouterr().out)["NoAns_exact"] == 100.0


def test_main_version_override(tmp_path, capsys):
  data = _write(tmp_path / "dev.json", {"version": "1.1",
                                        "data": _dataset([("q1", ["Paris"])])})
  preds = _write(tmp_path / "pred.json", {"q1": "Paris"})
  assert se.main([data, preds, "--version", "2.0"]) == 0
  assert json.loads(capsys.readouterr().out)["HasAns_total"] == 1


def test_main_reports_malformed_json_with_position(tmp_path, capsys):
  data = _write(tmp_path / "dev.json", {"data": _dataset([("q1", ["x"])])})
  bad = tmp_path / "pred.json"
  bad.write_text('{"q1": "x",\n "q2": }')
  assert se.main([data, str(bad)]) == 2
  err = capsys.readouterr().err
  assert str(bad) in err and "line 2" in err
