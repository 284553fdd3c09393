# coding=utf-8
"""The official SQuAD v1.1 and v2.0 metrics.

Written from the published definitions of the official evaluation scripts:

  * `normalize_answer`: lower case, drop punctuation (`string.punctuation`),
    drop the articles a/an/the as whole words, collapse whitespace.
  * exact match: normalized prediction equals a normalized ground truth; the
    best over all ground truths of a question counts.
  * F1: harmonic mean of precision and recall of the normalized tokens (a
    bag of tokens, so repeated tokens count as often as both sides hold
    them); the best over all ground truths counts.
  * v1.1 `evaluate` reports percentages `exact_match` and `f1`; a question
    without a prediction scores 0 (with a message on stderr).
  * v2.0 `evaluate_v2`: questions without answers have the single gold answer
    "" and an empty prediction scores 1 against it (F1 of two empty token
    lists is 1, of one empty list 0). A no-answer probability above
    `na_prob_thresh` turns a prediction into "no answer". Results are split
    into HasAns_/NoAns_ and, with no-answer probabilities, the threshold that
    maximizes exact / F1 is searched (`find_best_thresh`).
"""

import collections
import re
import string
import sys

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(s):
  """Lower text and remove punctuation, articles and extra whitespace."""
  text = s.lower()
  text = "".join(ch for ch in text if ch not in _PUNCTUATION)
  text = _ARTICLES.sub(" ", text)
  return " ".join(text.split())


def get_tokens(s):
  """Normalized tokens of `s`; [] for an empty answer."""
  if not s:
    return []
  return normalize_answer(s).split()


def _overlap_f1(pred_tokens, gold_tokens):
  """F1 of two non-empty bags of tokens; 0 when they share none."""
  common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
  num_same = sum(common.values())
  if num_same == 0:
    return 0.0
  precision = num_same / len(pred_tokens)
  recall = num_same / len(gold_tokens)
  return 2 * precision * recall / (precision + recall)


# --------------------------------------------------------------- v1.1 --


def exact_match_score(prediction, ground_truth):
  """v1.1 exact match of one prediction against one ground truth (bool)."""
  return normalize_answer(prediction) == normalize_answer(ground_truth)


def f1_score(prediction, ground_truth):
  """v1.1 token F1; 0 whenever either side normalizes to no tokens."""
  pred_tokens = normalize_answer(prediction).split()
  gold_tokens = normalize_answer(ground_truth).split()
  if not pred_tokens or not gold_tokens:
    return 0.0
  return _overlap_f1(pred_tokens, gold_tokens)


def metric_max_over_ground_truths(metric_fn, prediction, ground_truths):
  """Best score of `prediction` over all `ground_truths`."""
  return max(metric_fn(prediction, gt) for gt in ground_truths)


def iter_qas(dataset):
  """Yields every question dict of the `data` list of a SQuAD file."""
  for article in dataset:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        yield qa


def evaluate(dataset, predictions):
  """v1.1 metrics of `predictions` (qid -> text) on `dataset` (the "data")."""
  exact_match = f1 = 0.0
  total = 0
  for qa in iter_qas(dataset):
    total += 1
    if qa["id"] not in predictions:
      print("Unanswered question %s will receive score 0." % qa["id"],
            file=sys.stderr)
      continue
    ground_truths = [answer["text"] for answer in qa["answers"]]
    if not ground_truths:
      raise ValueError("Question id %s has no answers; v1.1 needs at least "
                       "one. For SQuAD 2.0 data use --version 2.0." % qa["id"])
    prediction = predictions[qa["id"]]
    exact_match += metric_max_over_ground_truths(
        exact_match_score, prediction, ground_truths)
    f1 += metric_max_over_ground_truths(f1_score, prediction, ground_truths)
  if total == 0:
    raise ValueError("The dataset holds no questions.")
  return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


# --------------------------------------------------------------- v2.0 --


def compute_exact(a_gold, a_pred):
  """v2.0 exact match (0 or 1)."""
  return int(normalize_answer(a_gold) == normalize_answer(a_pred))


def compute_f1(a_gold, a_pred):
  """v2.0 token F1: two empty answers agree (1), one empty answer scores 0."""
  gold_tokens = get_tokens(a_gold)
  pred_tokens = get_tokens(a_pred)
  if not gold_tokens or not pred_tokens:
    return float(gold_tokens == pred_tokens)
  return _overlap_f1(pred_tokens, gold_tokens)


def make_qid_to_has_ans(dataset):
  """qid -> True when the question has at least one answer."""
  return {qa["id"]: bool(qa["answers"]) for qa in iter_qas(dataset)}


def get_raw_scores(dataset, preds):
  """(exact, f1) dicts qid -> best score over gold answers, before thresholds.

  Questions without a prediction are left out here (with a message) and
  scored 0 by `evaluate_v2`.
  """
  exact_scores = {}
  f1_scores = {}
  for qa in iter_qas(dataset):
    qid = qa["id"]
    gold_answers = [a["text"] for a in qa["answers"]
                    if normalize_answer(a["text"])]
    if not gold_answers:
      # The only correct answer to an unanswerable question is "".
      gold_answers = [""]
    if qid not in preds:
      print("Missing prediction for %s" % qid, file=sys.stderr)
      continue
    exact_scores[qid] = max(compute_exact(a, preds[qid]) for a in gold_answers)
    f1_scores[qid] = max(compute_f1(a, preds[qid]) for a in gold_answers)
  return exact_scores, f1_scores


def apply_no_ans_threshold(scores, na_probs, qid_to_has_ans, na_prob_thresh):
  """Scores after predicting "no answer" wherever na_prob > na_prob_thresh."""
  new_scores = {}
  for qid, score in scores.items():
    if na_probs[qid] > na_prob_thresh:
      new_scores[qid] = float(not qid_to_has_ans[qid])
    else:
      new_scores[qid] = score
  return new_scores


def make_eval_dict(exact_scores, f1_scores, qid_list=None):
  """OrderedDict(exact, f1, total) in percent over `qid_list` (default all)."""
  if not qid_list:
    qid_list = list(exact_scores)
  total = len(qid_list)
  return collections.OrderedDict([
      ("exact", 100.0 * sum(exact_scores[k] for k in qid_list) / total),
      ("f1", 100.0 * sum(f1_scores[k] for k in qid_list) / total),
      ("total", total),
  ])


def merge_eval(main_eval, new_eval, prefix):
  """Copies `new_eval` into `main_eval` with keys prefixed `<prefix>_`."""
  for key in new_eval:
    main_eval["%s_%s" % (prefix, key)] = new_eval[key]


def find_best_thresh(preds, scores, na_probs, qid_to_has_ans):
  """(best score in percent, threshold) over no-answer thresholds.

  Starts from answering nothing (every unanswerable question right), then
  answers the questions in increasing na_prob order: an answerable question
  gains its score, an unanswerable one loses 1 if its prediction is not
  empty. The best running total and the na_prob where it was reached win.
  """
  cur_score = sum(1 for qid in qid_to_has_ans if not qid_to_has_ans[qid])
  best_score = cur_score
  best_thresh = 0.0
  for qid in sorted(na_probs, key=lambda k: na_probs[k]):
    if qid not in scores:
      continue
    if qid_to_has_ans[qid]:
      diff = scores[qid]
    else:
      diff = -1 if preds.get(qid) else 0
    cur_score += diff
    if cur_score > best_score:
      best_score = cur_score
      best_thresh = na_probs[qid]
  return 100.0 * best_score / len(scores), best_thresh


def find_all_best_thresh(main_eval, preds, exact_raw, f1_raw, na_probs,
                         qid_to_has_ans):
  """Adds best_exact(_thresh) and best_f1(_thresh) to `main_eval`."""
  best_exact, exact_thresh = find_best_thresh(preds, exact_raw, na_probs,
                                              qid_to_has_ans)
  best_f1, f1_thresh = find_best_thresh(preds, f1_raw, na_probs, qid_to_has_ans)
  main_eval["best_exact"] = best_exact
  main_eval["best_exact_thresh"] = exact_thresh
  main_eval["best_f1"] = best_f1
  main_eval["best_f1_thresh"] = f1_thresh


def _fill_missing(scores, qid_to_has_ans):
  """Scores with 0 for every question that has no prediction."""
  filled = dict.fromkeys(qid_to_has_ans, 0.0)
  filled.update(scores)
  return filled


def evaluate_v2(dataset, preds, na_probs=None, na_prob_thresh=1.0):
  """The official v2.0 OrderedDict of metrics.

  Args:
    dataset: the "data" list of a SQuAD file.
    preds: qid -> predicted text ("" for no answer).
    na_probs: qid -> no-answer probability (or score; larger = less likely
      to have an answer) for every predicted question. None: all 0 and no
      threshold search.
    na_prob_thresh: predictions with na_prob above it count as "no answer".

  Returns:
    OrderedDict with exact, f1, total, HasAns_*/NoAns_* (when such questions
    exist) and, given `na_probs`, best_exact(_thresh) and best_f1(_thresh).
  """
  search_thresh = na_probs is not None
  if na_probs is None:
    na_probs = {k: 0.0 for k in preds}
  missing = [qid for qid in preds if qid not in na_probs]
  if missing:
    raise ValueError("The no-answer probabilities lack %d predicted "
                     "question ids (e.g. %r); pass the null_odds.json written "
                     "with these predictions." % (len(missing), missing[0]))
  qid_to_has_ans = make_qid_to_has_ans(dataset)
  if not qid_to_has_ans:
    raise ValueError("The dataset holds no questions.")
  exact_raw, f1_raw = get_raw_scores(dataset, preds)
  exact_thresh = _fill_missing(apply_no_ans_threshold(
      exact_raw, na_probs, qid_to_has_ans, na_prob_thresh), qid_to_has_ans)
  f1_thresh = _fill_missing(apply_no_ans_threshold(
      f1_raw, na_probs, qid_to_has_ans, na_prob_thresh), qid_to_has_ans)
  out_eval = make_eval_dict(exact_thresh, f1_thresh)
  has_ans_qids = [k for k, v in qid_to_has_ans.items() if v]
  no_ans_qids = [k for k, v in qid_to_has_ans.items() if not v]
  if has_ans_qids:
    merge_eval(out_eval, make_eval_dict(exact_thresh, f1_thresh, has_ans_qids),
               "HasAns")
  if no_ans_qids:
    merge_eval(out_eval, make_eval_dict(exact_thresh, f1_thresh, no_ans_qids),
               "NoAns")
  if search_thresh:
    find_all_best_thresh(out_eval, preds,
                         _fill_missing(exact_raw, qid_to_has_ans),
                         _fill_missing(f1_raw, qid_to_has_ans), na_probs,
                         qid_to_has_ans)
  return out_eval
