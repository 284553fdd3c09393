# coding=utf-8
"""SQuAD's answers from the model's logits: Google's n-best search.

Per question, the n_best_size best start and end positions of each of its
windows are paired into candidate spans (in the window's document part,
starting where the window gives the token the most context, ordered, at
most max_answer_length tokens); the best distinct ones are mapped back
onto the context's text (`get_final_text`) and scored with a softmax. For
SQuAD 2.0 the null answer competes through its score diff against
--null_score_diff_threshold (`answer_at_threshold`,
`predictions_at_threshold` for another threshold). `search_answers` does it
for every question, `write_predictions` writes predictions.json,
nbest_predictions.json and null_odds.json (atomically,
`write_json_atomically`).
"""

import collections
import json
import math

from absl import logging

from tasks import squad_text
import tokenization
from userio import output_files
from userio import progress

RawResult = collections.namedtuple("RawResult",
                                   ["unique_id", "start_logits", "end_logits"])


# ------------------------------------------------------------ predictions --

_PrelimPrediction = collections.namedtuple(
    "PrelimPrediction",
    ["feature_index", "start_index", "end_index", "start_logit", "end_logit"])

_NbestPrediction = collections.namedtuple(
    "NbestPrediction", ["text", "start_logit", "end_logit"])

# Stands in when no candidate survives, so every n-best list is non-empty.
_PLACEHOLDER = _NbestPrediction(text=squad_text.NO_SPAN_TEXT, start_logit=0.0,
                                end_logit=0.0)

SquadPredictions = collections.namedtuple(
    "SquadPredictions", ["predictions", "null_odds", "best_non_null"])


def _get_best_indexes(logits, n_best_size):
  """Indexes of the `n_best_size` largest logits, best first."""
  index_and_score = sorted(enumerate(logits), key=lambda x: x[1],
                           reverse=True)
  return [index for index, _ in index_and_score[:n_best_size]]


def _compute_softmax(scores):
  """Softmax of a list of floats, in float64 Python arithmetic."""
  if not scores:
    return []
  max_score = max(scores)
  exp_scores = [math.exp(score - max_score) for score in scores]
  total_sum = sum(exp_scores)
  return [score / total_sum for score in exp_scores]


def _strip_spaces(text):
  """(text without " ", map from its positions to positions in `text`)."""
  ns_chars = []
  ns_to_s_map = collections.OrderedDict()
  for i, c in enumerate(text):
    if c == " ":
      continue
    ns_to_s_map[len(ns_chars)] = i
    ns_chars.append(c)
  return "".join(ns_chars), ns_to_s_map


def get_final_text(pred_text, orig_text, do_lower_case, *,
                   verbose_logging=False):
  """Projects a tokenized prediction back onto the original text.

  `pred_text` is normalized (e.g. lowercased, punctuation split off) while
  `orig_text` is the span of original words it came from, which may hold
  more, e.g. pred_text "steve smith" and orig_text "Steve Smith's". The
  original text is run through BasicTokenizer, the prediction located in it,
  and the position carried over character by character once spaces are
  removed from both (the tokenizer only inserts spaces when the lengths
  agree). When anything does not line up, `orig_text` is returned whole.
  """
  tokenizer = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
  tok_text = " ".join(tokenizer.tokenize(orig_text))
  start_position = tok_text.find(pred_text)
  if start_position == -1:
    if verbose_logging:
      logging.info("Unable to find text: '%s' in '%s'", pred_text, orig_text)
    return orig_text
  end_position = start_position + len(pred_text) - 1
  orig_ns_text, orig_ns_to_s_map = _strip_spaces(orig_text)
  tok_ns_text, tok_ns_to_s_map = _strip_spaces(tok_text)
  if len(orig_ns_text) != len(tok_ns_text):
    if verbose_logging:
      logging.info("Length not equal after stripping spaces: '%s' vs '%s'",
                   orig_ns_text, tok_ns_text)
    return orig_text
  tok_s_to_ns_map = {s: ns for ns, s in tok_ns_to_s_map.items()}
  orig_start_position = orig_ns_to_s_map.get(
      tok_s_to_ns_map.get(start_position))
  if orig_start_position is None:
    if verbose_logging:
      logging.info("Couldn't map start position")
    return orig_text
  orig_end_position = orig_ns_to_s_map.get(tok_s_to_ns_map.get(end_position))
  if orig_end_position is None:
    if verbose_logging:
      logging.info("Couldn't map end position")
    return orig_text
  return orig_text[orig_start_position:(orig_end_position + 1)]


def _prelim_predictions(features, results, n_best_size, max_answer_length):
  """Valid (start, end) candidates of all windows of one example."""
  prelim_predictions = []
  for feature_index, (feature, result) in enumerate(zip(features, results)):
    start_indexes = _get_best_indexes(result.start_logits, n_best_size)
    end_indexes = _get_best_indexes(result.end_logits, n_best_size)
    for start_index in start_indexes:
      for end_index in end_indexes:
        # Spans must lie in the document part of the window, start where
        # this window has the most context, and be ordered and short enough.
        if (start_index not in feature.token_to_orig_map or
            end_index not in feature.token_to_orig_map or
            not feature.token_is_max_context.get(start_index, False) or
            end_index < start_index or
            end_index - start_index + 1 > max_answer_length):
          continue
        prelim_predictions.append(_PrelimPrediction(
            feature_index, start_index, end_index,
            float(result.start_logits[start_index]),
            float(result.end_logits[end_index])))
  return prelim_predictions


def _null_prediction(results):
  """The [CLS]/[CLS] candidate of the window where it scores lowest.

  A context without any token has no window; its null candidate gets logits
  0 as in the original.
  """
  best = _PrelimPrediction(0, 0, 0, 0.0, 0.0) if not results else None
  for feature_index, result in enumerate(results):
    start_logit = float(result.start_logits[0])
    end_logit = float(result.end_logits[0])
    if best is None or start_logit + end_logit < (best.start_logit +
                                                  best.end_logit):
      best = _PrelimPrediction(feature_index, 0, 0, start_logit, end_logit)
  return best


def _span_text(example, feature, pred, do_lower_case, verbose_logging):
  """The original-text answer of a non-null candidate."""
  tok_tokens = feature.tokens[pred.start_index:(pred.end_index + 1)]
  orig_doc_start = feature.token_to_orig_map[pred.start_index]
  orig_doc_end = feature.token_to_orig_map[pred.end_index]
  orig_tokens = example.doc_tokens[orig_doc_start:(orig_doc_end + 1)]
  # De-tokenize WordPieces: "##" marks the continuation of a word.
  tok_text = " ".join(tok_tokens).replace(" ##", "").replace("##", "")
  tok_text = " ".join(tok_text.strip().split())
  orig_text = " ".join(orig_tokens)
  return get_final_text(tok_text, orig_text, do_lower_case,
                        verbose_logging=verbose_logging)


def _nbest(example, features, prelim_predictions, n_best_size, do_lower_case,
           verbose_logging):
  """The n best distinct answers (text, start_logit, end_logit), best first."""
  prelim_predictions = sorted(prelim_predictions,
                              key=lambda x: x.start_logit + x.end_logit,
                              reverse=True)
  seen_predictions = set()
  nbest = []
  for pred in prelim_predictions:
    if len(nbest) >= n_best_size:
      break
    if pred.start_index > 0:
      final_text = _span_text(example, features[pred.feature_index], pred,
                              do_lower_case, verbose_logging)
    else:
      final_text = ""
    if final_text in seen_predictions:
      continue
    seen_predictions.add(final_text)
    nbest.append(_NbestPrediction(final_text, pred.start_logit,
                                  pred.end_logit))
  return nbest


def _nbest_json(nbest):
  """The nbest_predictions.json entries of one question."""
  probs = _compute_softmax([e.start_logit + e.end_logit for e in nbest])
  return [collections.OrderedDict([("text", entry.text),
                                   ("probability", prob),
                                   ("start_logit", entry.start_logit),
                                   ("end_logit", entry.end_logit)])
          for entry, prob in zip(nbest, probs)]


def predict_example(example, features, results, n_best_size,
                    max_answer_length, do_lower_case, version_2_with_negative,
                    verbose_logging):
  """(nbest_json, null score diff or None, best non-null text) of a question.

  `features` are the question's windows (InputFeatures or FeatureMetadata)
  and `results` their RawResults, in the same order.

  For SQuAD 2.0 the null candidate (score_null = the lowest [CLS] start+end
  over the windows) competes in the n-best list and the score diff is
  score_null - (start + end of the best non-empty answer).
  """
  prelim = _prelim_predictions(features, results, n_best_size,
                               max_answer_length)
  null = _null_prediction(results) if version_2_with_negative else None
  if null is not None:
    prelim.append(null)
  nbest = _nbest(example, features, prelim, n_best_size, do_lower_case,
                 verbose_logging)
  if null is not None and all(entry.text for entry in nbest):
    nbest.append(_NbestPrediction("", null.start_logit, null.end_logit))
  best_non_null = next((entry for entry in nbest if entry.text), None)
  if best_non_null is None:
    # No span survived (every candidate was invalid): keep a placeholder so
    # the list is never empty; in SQuAD 2.0 the answer is then "" below.
    nbest.append(_PLACEHOLDER)
  if null is None:
    return _nbest_json(nbest), None, nbest[0].text
  reference = best_non_null or _PLACEHOLDER
  score_diff = (null.start_logit + null.end_logit - reference.start_logit -
                reference.end_logit)
  return (_nbest_json(nbest), score_diff,
          best_non_null.text if best_non_null else "")


def predictions_at_threshold(null_odds, best_non_null, threshold):
  """SQuAD 2.0 answers for a null threshold, from saved scores.

  Args:
    null_odds: qid -> score_null - best non-null score (null_odds.json).
    best_non_null: qid -> best non-empty n-best text ("" if none).
    threshold: predict "" where the null odds exceed it.

  Returns:
    OrderedDict qid -> answer text.
  """
  return collections.OrderedDict(
      (qid, answer_at_threshold(diff, best_non_null[qid], threshold))
      for qid, diff in null_odds.items())


def answer_at_threshold(score_diff, best_non_null, threshold):
  """A SQuAD 2.0 answer: "" (no answer) when the question's null score diff
  exceeds `threshold`, else its best non-empty answer."""
  return "" if score_diff > threshold else best_non_null


def write_json_atomically(path, value):
  """Writes `value` as indented JSON; readers never see a partial file."""
  output_files.write_text(path, json.dumps(value, indent=4) + "\n",
                          flag="--output_dir")


def write_predictions(all_examples, all_features, all_results, n_best_size,
                      max_answer_length, do_lower_case, output_prediction_file,
                      output_nbest_file, output_null_log_odds_file, *,
                      version_2_with_negative=False,
                      null_score_diff_threshold=0.0, verbose_logging=False):
  """Writes predictions.json, nbest_predictions.json (and null_odds.json).

  Args:
    all_examples: list of SquadExample.
    all_features: InputFeatures or FeatureMetadata of every window.
    all_results: RawResult per window (logits as floats or float arrays).
    n_best_size, max_answer_length: as the flags.
    do_lower_case: as the tokenizer, for get_final_text.
    output_prediction_file, output_nbest_file, output_null_log_odds_file:
      paths; the null odds file is written only with version_2_with_negative.
    version_2_with_negative: whether "" (no answer) may be predicted.
    null_score_diff_threshold: predict "" when score_null - best non-null
      score exceeds this.
    verbose_logging: log text-alignment problems.

  Returns:
    SquadPredictions(predictions, null_odds, best_non_null): the written
    answers, and for SQuAD 2.0 the null odds and best non-empty answer of
    every question (else empty dicts).
  """
  logging.info("Writing predictions to: %s", output_prediction_file)
  logging.info("Writing nbest to: %s", output_nbest_file)
  predictions, all_nbest_json = search_answers(
      all_examples, all_features, all_results, n_best_size,
      max_answer_length, do_lower_case,
      version_2_with_negative=version_2_with_negative,
      null_score_diff_threshold=null_score_diff_threshold,
      verbose_logging=verbose_logging)
  write_json_atomically(output_prediction_file, predictions.predictions)
  write_json_atomically(output_nbest_file, all_nbest_json)
  if version_2_with_negative:
    write_json_atomically(output_null_log_odds_file, predictions.null_odds)
  return predictions


def search_answers(all_examples, all_features, all_results, n_best_size,
                   max_answer_length, do_lower_case, *,
                   version_2_with_negative=False,
                   null_score_diff_threshold=0.0, verbose_logging=False):
  """Google's n-best answer search over every question, writing nothing.

  Args: as `write_predictions`' (without the output files).

  Returns:
    (SquadPredictions, the n-best list of each question by its id).
  """
  example_index_to_features = collections.defaultdict(list)
  for feature in all_features:
    example_index_to_features[feature.example_index].append(feature)
  unique_id_to_result = {result.unique_id: result for result in all_results}
  all_predictions = collections.OrderedDict()
  all_nbest_json = collections.OrderedDict()
  scores_diff_json = collections.OrderedDict()
  best_non_null = collections.OrderedDict()
  # The n-best search is minutes on a full dev set: progress lines show it.
  searched = progress.Progress("Searching the answers", len(all_examples),
                               "questions")
  for example_index, example in enumerate(all_examples):
    searched.advance()
    features = example_index_to_features[example_index]
    results = [_result_of(unique_id_to_result, f, example) for f in features]
    nbest_json, score_diff, best_text = predict_example(
        example, features, results, n_best_size, max_answer_length,
        do_lower_case, version_2_with_negative, verbose_logging)
    all_nbest_json[example.qas_id] = nbest_json
    if score_diff is None:
      all_predictions[example.qas_id] = best_text
      continue
    scores_diff_json[example.qas_id] = score_diff
    best_non_null[example.qas_id] = best_text
    all_predictions[example.qas_id] = answer_at_threshold(
        score_diff, best_text, null_score_diff_threshold)
  searched.finish()
  return (SquadPredictions(all_predictions, scores_diff_json, best_non_null),
          all_nbest_json)


def _result_of(unique_id_to_result, feature, example):
  if feature.unique_id not in unique_id_to_result:
    raise ValueError("No model output for feature %d of question id %r; the "
                     "predictions do not match the features (was eval."
                     "tf_record rewritten during prediction?)." %
                     (feature.unique_id, example.qas_id))
  return unique_id_to_result[feature.unique_id]
