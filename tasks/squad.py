# coding=utf-8
"""Question answering on SQuAD 1.1 / 2.0: answer spans in a context.

The task of run_squad.py. The file formats and behaviour follow Google's
run_squad.py:

  * A context is split into words on whitespace; every word is WordPiece
    tokenized. A question is cut to --max_query_length tokens. Long contexts
    become several overlapping windows ("doc spans") of at most
    --max_seq_length - len(question) - 3 tokens, started every --doc_stride
    tokens. Each window is one feature: [CLS] question [SEP] window [SEP].
  * A token is scored only in the window where it has the most context
    (tasks/windows.py, Google's `_check_is_max_context`), so overlapping
    windows never compete.
  * The model adds `cls/squad/output_weights` [2, hidden] and
    `cls/squad/output_bias` [2] on top of BERT's sequence output, giving
    start and end logits for every position. The loss is the mean of the
    start and end cross-entropies.
  * Predictions keep the --n_best_size best start and end positions of every
    window, drop impossible spans, map the best span back to the original
    text (`get_final_text`) and write predictions.json and
    nbest_predictions.json (and null_odds.json for SQuAD 2.0).

Beyond the original:

  * Whitespace of the context also includes the Unicode space separators
    (U+00A0 no-break space, U+3000 ideographic space, ...), as the tokenizer
    does. The original split only on ASCII whitespace and U+202F, so a word
    glued to its neighbour by a no-break space could not be answered alone.
  * Bad input (malformed JSON, missing fields, inconsistent flags) fails with
    a message naming the file, the question id and the fix. Training on a
    question with several answers uses the first one (the original raised);
    answers whose text is not found at `answer_start` are skipped and counted.
  * In SQuAD 2.0 mode, a question whose n-best list holds no non-empty answer
    is predicted as "" (the original crashed).
  * Prediction streams: features go to eval.tf_record as they are made and
    only their light metadata (tokens and maps, no id arrays) stays in
    memory; logits are kept as float32 arrays.
  * With answers in --predict_file, the official SQuAD metrics are computed
    and written to eval_results.json; for SQuAD 2.0 also
    predictions_best_threshold.json, the predictions at the null threshold
    that maximizes F1 (derived from the saved null odds, no re-run).
  * Output JSON files are written atomically (temporary file + rename).
"""

import collections
import functools
import json
import math
import os
import unicodedata

from absl import logging
import numpy as np
import tensorflow as tf

from checkpoints import run_info
import modeling
from runner import estimator as estimator_lib
from runner import feature_cache
from runner import serving_input
from runner import tfrecord_input
from runner import training_graph
from tasks import squad_metrics
from tasks import squad_text
from tasks import task
from tasks import windows
import tokenization
from userio import cli
from userio import output_files
from userio import progress
from userio import utf8
from userio import verbosity

# The flags besides --max_seq_length that shape a context's windows: a
# training run records them in run_info.json, and a run that does not train
# (and predictor.py) takes them from there unless given.
WINDOW_FLAGS = ("doc_stride", "max_query_length")
# The first id given to a feature, as in the original.
_FIRST_UNIQUE_ID = 1000000000
# Features logged in full at the start of a conversion, as in the original.
_NUM_LOGGED_EXAMPLES = 20


# ------------------------------------------------------------- data types --


class SquadExample(object):
  """One question with its context split into words.

  For training, `start_position`/`end_position` are word indices into
  `doc_tokens` (-1 for an impossible question).
  """

  def __init__(self, qas_id, question_text, doc_tokens, orig_answer_text=None,
               start_position=None, end_position=None, is_impossible=False):
    self.qas_id = qas_id
    self.question_text = question_text
    self.doc_tokens = doc_tokens
    self.orig_answer_text = orig_answer_text
    self.start_position = start_position
    self.end_position = end_position
    self.is_impossible = is_impossible

  def __str__(self):
    return self.__repr__()

  def __repr__(self):
    parts = ["qas_id: %s" % tokenization.printable_text(self.qas_id),
             "question_text: %s" % (
                 tokenization.printable_text(self.question_text)),
             "doc_tokens: [%s]" % " ".join(self.doc_tokens)]
    if self.start_position is not None:
      parts.append("start_position: %d" % self.start_position)
    if self.end_position is not None:
      parts.append("end_position: %d" % self.end_position)
    if self.is_impossible:
      parts.append("is_impossible: %r" % self.is_impossible)
    return ", ".join(parts)


class InputFeatures(object):
  """One window of one example, ready for the model.

  `token_to_orig_map` maps a position in `tokens` to the index of its word
  in the example's `doc_tokens`; `token_is_max_context` tells whether this
  window is the best one for the token at that position. For training,
  `start_position`/`end_position` are positions in `tokens` (0, the [CLS]
  token, when the answer is not fully inside this window).
  """

  def __init__(self, unique_id, example_index, doc_span_index, tokens,
               token_to_orig_map, token_is_max_context, input_ids, input_mask,
               segment_ids, start_position=None, end_position=None,
               is_impossible=None):
    self.unique_id = unique_id
    self.example_index = example_index
    self.doc_span_index = doc_span_index
    self.tokens = tokens
    self.token_to_orig_map = token_to_orig_map
    self.token_is_max_context = token_is_max_context
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.segment_ids = segment_ids
    self.start_position = start_position
    self.end_position = end_position
    self.is_impossible = is_impossible


# What write_predictions needs of a feature: InputFeatures without the id,
# mask and segment arrays (those go to the TFRecord file only).
FeatureMetadata = collections.namedtuple("FeatureMetadata", [
    "unique_id", "example_index", "doc_span_index", "tokens",
    "token_to_orig_map", "token_is_max_context"])

RawResult = collections.namedtuple("RawResult",
                                   ["unique_id", "start_logits", "end_logits"])


def feature_metadata(feature):
  """The FeatureMetadata of an InputFeatures."""
  return FeatureMetadata(feature.unique_id, feature.example_index,
                         feature.doc_span_index, feature.tokens,
                         feature.token_to_orig_map,
                         feature.token_is_max_context)


# ---------------------------------------------------------------- reading --


def load_squad_data(input_file):
  """The "data" list of a SQuAD json file; clear errors for a bad file."""
  if not tf.io.gfile.exists(input_file):
    raise cli.UserError("SQuAD file %s does not exist; check --train_file / "
                        "--predict_file." % input_file)
  if tf.io.gfile.isdir(input_file):
    raise cli.UserError("SQuAD file %s is a folder; pass the json file "
                        "itself as --train_file / --predict_file." %
                        input_file)
  with tf.io.gfile.GFile(input_file, "rb") as reader:
    text = utf8.decode(reader.read(), input_file,
                       fix="Save it as UTF-8, as the official SQuAD files "
                       "are.")
  try:
    parsed = json.loads(text)
  except json.JSONDecodeError as e:
    # str(e) puts the place after the message ("... starting at: line 2
    # column 13 (char 24)"), which reads right whatever the message is.
    raise cli.UserError("%s is not valid JSON (%s); fix the file or "
                        "regenerate it." % (input_file, e)) from None
  if not isinstance(parsed, dict) or not isinstance(parsed.get("data"), list):
    raise cli.UserError("%s: expected a JSON object with a \"data\" list of "
                     "articles, as in the official SQuAD files." % input_file)
  return parsed["data"]


def _field(container, key, input_file, where, fix):
  """container[key], or a ValueError naming the file, the place and a fix."""
  if not isinstance(container, dict) or key not in container:
    raise cli.UserError("%s: %s has no \"%s\" field. %s" %
                     (input_file, where, key, fix))
  return container[key]


def _is_whitespace(c):
  """Whether `c` separates words of a context (ASCII or Unicode space)."""
  return c in " \t\r\n" or unicodedata.category(c) == "Zs"


@functools.lru_cache(maxsize=None)
def whitespace_code_points():
  """The code points `_is_whitespace` accepts, ascending (a tuple)."""
  return tuple(code for code in range(0x110000)
               if _is_whitespace(chr(code)))


def split_context(paragraph_text):
  """Splits a context into words on whitespace.

  Returns:
    (doc_tokens, char_to_word_offset): the words, and for every character of
    `paragraph_text` the index of its word (a whitespace character belongs
    to the word before it, -1 before the first word).
  """
  doc_tokens = []
  char_to_word_offset = []
  prev_is_whitespace = True
  for c in paragraph_text:
    if _is_whitespace(c):
      prev_is_whitespace = True
    else:
      if prev_is_whitespace:
        doc_tokens.append(c)
      else:
        doc_tokens[-1] += c
      prev_is_whitespace = False
    char_to_word_offset.append(len(doc_tokens) - 1)
  return doc_tokens, char_to_word_offset


class _QuestionReader(object):
  """Turns the question dicts of one file into SquadExamples.

  Counts the training answers that had to be skipped and the questions with
  several answers, so each is reported once per file.
  """

  def __init__(self, input_file, is_training, version_2_with_negative):
    self.input_file = input_file
    self.is_training = is_training
    self.version_2_with_negative = version_2_with_negative
    self.num_skipped = 0
    self.num_multi_answer = 0
    self.first_multi_answer = None
    self.seen_ids = set()

  def read(self, qa, doc_tokens, char_to_word_offset, where):
    """The SquadExample of question dict `qa`, or None if it is skipped."""
    qas_id = _field(qa, "id", self.input_file, "a question of " + where,
                    "Every question needs a unique \"id\".")
    where = "question id %r (%s)" % (qas_id, where)
    question_text = _field(qa, "question", self.input_file, where,
                           "Every question needs its \"question\" text.")
    if qas_id in self.seen_ids:
      raise cli.UserError("%s: %s appears twice; question ids must be unique "
                       "because predictions are keyed by id." %
                       (self.input_file, where))
    self.seen_ids.add(qas_id)
    if not self.is_training:
      return SquadExample(qas_id, question_text, doc_tokens)
    answer = self._training_answer(qa, where)
    if answer is None:
      return SquadExample(qas_id, question_text, doc_tokens,
                          orig_answer_text="", start_position=-1,
                          end_position=-1, is_impossible=True)
    positions = self._answer_word_positions(answer, doc_tokens,
                                            char_to_word_offset, where)
    if positions is None:
      self.num_skipped += 1
      return None
    return SquadExample(qas_id, question_text, doc_tokens,
                        orig_answer_text=answer["text"],
                        start_position=positions[0],
                        end_position=positions[1])

  def _training_answer(self, qa, where):
    """The answer dict to train on, or None for an impossible question."""
    is_impossible = bool(qa.get("is_impossible", False))
    if is_impossible and not self.version_2_with_negative:
      raise cli.UserError("%s: %s is marked is_impossible; set "
                       "--version_2_with_negative=True to train on SQuAD 2.0 "
                       "data." % (self.input_file, where))
    if is_impossible:
      return None
    answers = _field(qa, "answers", self.input_file, where,
                     "Training needs an \"answers\" list with {\"text\", "
                     "\"answer_start\"} (or \"is_impossible\": true with "
                     "--version_2_with_negative).")
    if not isinstance(answers, list) or not answers:
      raise cli.UserError("%s: %s has no answer; training needs one answer per "
                       "question (or \"is_impossible\": true with "
                       "--version_2_with_negative)." % (self.input_file, where))
    if len(answers) > 1:
      self.num_multi_answer += 1
      self.first_multi_answer = self.first_multi_answer or where
    fix = "Each answer needs \"text\" and \"answer_start\"."
    answer = answers[0]
    _field(answer, "text", self.input_file, "the answer of " + where, fix)
    _field(answer, "answer_start", self.input_file, "the answer of " + where,
           fix)
    return answer

  def _answer_word_positions(self, answer, doc_tokens, char_to_word_offset,
                             where):
    """(start, end) word indices of `answer`, or None if it is not there."""
    orig_answer_text = answer["text"]
    answer_offset = answer["answer_start"]
    if (not isinstance(answer_offset, int) or not orig_answer_text or
        answer_offset < 0 or
        answer_offset + len(orig_answer_text) > len(char_to_word_offset)):
      logging.warning("%s: %s: answer_start %r with text %r lies outside the "
                      "context; skipping.", self.input_file, where,
                      answer_offset, orig_answer_text)
      return None
    start_position = char_to_word_offset[answer_offset]
    end_position = char_to_word_offset[answer_offset + len(orig_answer_text) -
                                       1]
    # Only answers whose words really hold the text are kept; this skips
    # annotations with a wrong answer_start.
    actual_text = " ".join(doc_tokens[start_position:(end_position + 1)])
    cleaned_answer_text = " ".join(
        tokenization.whitespace_tokenize(orig_answer_text))
    if actual_text.find(cleaned_answer_text) == -1:
      logging.warning("%s: %s: could not find answer %r at answer_start %d "
                      "(the words there are %r); skipping.", self.input_file,
                      where, cleaned_answer_text, answer_offset, actual_text)
      return None
    return start_position, end_position

  def report(self):
    """Logs the counts gathered while reading, once."""
    if self.num_skipped:
      logging.warning("%s: skipped %d training questions whose answer text "
                      "was not found at answer_start.", self.input_file,
                      self.num_skipped)
    if self.num_multi_answer:
      logging.info("%s: %d training questions have several answers (the "
                   "first: %s); training uses the first answer of each.",
                   self.input_file, self.num_multi_answer,
                   self.first_multi_answer)


def read_squad_examples(input_file, is_training, *,
                        version_2_with_negative=False):
  """Reads a SQuAD json file into a list of SquadExample.

  Args:
    input_file: path of a SQuAD 1.1 / 2.0 json file.
    is_training: whether to read the answers (one per question) and their
      word positions.
    version_2_with_negative: whether questions may be "is_impossible".

  Returns:
    list of SquadExample, in file order (training questions whose answer is
    not found at its answer_start are left out).
  """
  data = load_squad_data(input_file)
  reader = _QuestionReader(input_file, is_training, version_2_with_negative)
  examples = []
  for article_index, article in enumerate(data):
    where = "article %d" % article_index
    paragraphs = _field(article, "paragraphs", input_file, where,
                        "Every article needs a \"paragraphs\" list.")
    for paragraph_index, paragraph in enumerate(paragraphs):
      where = "article %d, paragraph %d" % (article_index, paragraph_index)
      fix = "Every paragraph needs \"context\" and \"qas\"."
      context = _field(paragraph, "context", input_file, where, fix)
      doc_tokens, char_to_word_offset = split_context(context)
      for qa in _field(paragraph, "qas", input_file, where, fix):
        example = reader.read(qa, doc_tokens, char_to_word_offset, where)
        if example is not None:
          examples.append(example)
  reader.report()
  return examples


def has_answers(data, version_2_with_negative):
  """Whether a SQuAD "data" list can be scored: every question has answers.

  SQuAD 2.0 questions may have an empty "answers" list (no answer); SQuAD
  1.1 needs at least one answer per question.
  """
  found = False
  for article in data:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        if not qa.get("answers") and not (version_2_with_negative and
                                          "answers" in qa):
          return False
        found = True
  return found


# ----------------------------------------------------- feature conversion --


def _improve_answer_span(doc_tokens, input_start, input_end, tokenizer,
                         orig_answer_text):
  """The sub-token span that matches the tokenized answer exactly.

  The word positions cover whole words, but an answer may be part of one,
  e.g. "1895" in "(1895-1943).": the tightest span inside
  [input_start, input_end] whose tokens equal the answer's tokens wins.
  """
  tok_answer_text = " ".join(tokenizer.tokenize(orig_answer_text))
  for new_start in range(input_start, input_end + 1):
    for new_end in range(input_end, new_start - 1, -1):
      text_span = " ".join(doc_tokens[new_start:(new_end + 1)])
      if text_span == tok_answer_text:
        return new_start, new_end
  return input_start, input_end


def _tokenize_document(doc_tokens, tokenizer):
  """(all_doc_tokens, tok_to_orig_index, orig_to_tok_index) of the words."""
  tok_to_orig_index = []
  orig_to_tok_index = []
  all_doc_tokens = []
  for i, token in enumerate(doc_tokens):
    orig_to_tok_index.append(len(all_doc_tokens))
    for sub_token in tokenizer.tokenize(token):
      tok_to_orig_index.append(i)
      all_doc_tokens.append(sub_token)
  return all_doc_tokens, tok_to_orig_index, orig_to_tok_index


def _answer_token_span(example, all_doc_tokens, orig_to_tok_index, tokenizer):
  """Sub-token (start, end) of a training answer; (-1, -1) if impossible."""
  if example.is_impossible:
    return -1, -1
  tok_start_position = orig_to_tok_index[example.start_position]
  if example.end_position < len(example.doc_tokens) - 1:
    tok_end_position = orig_to_tok_index[example.end_position + 1] - 1
  else:
    tok_end_position = len(all_doc_tokens) - 1
  return _improve_answer_span(all_doc_tokens, tok_start_position,
                              tok_end_position, tokenizer,
                              example.orig_answer_text)


def _window_tokens(query_tokens, all_doc_tokens, tok_to_orig_index,
                   doc_spans, doc_span_index):
  """(tokens, segment_ids, token_to_orig_map, token_is_max_context)."""
  doc_span = doc_spans[doc_span_index]
  tokens = ["[CLS]"] + query_tokens + ["[SEP]"]
  segment_ids = [0] * len(tokens)
  token_to_orig_map = {}
  token_is_max_context = {}
  for i in range(doc_span.length):
    split_token_index = doc_span.start + i
    token_to_orig_map[len(tokens)] = tok_to_orig_index[split_token_index]
    token_is_max_context[len(tokens)] = windows.check_is_max_context(
        doc_spans, doc_span_index, split_token_index)
    tokens.append(all_doc_tokens[split_token_index])
    segment_ids.append(1)
  tokens.append("[SEP]")
  segment_ids.append(1)
  return tokens, segment_ids, token_to_orig_map, token_is_max_context


def _window_answer(example, doc_span, tok_span, num_query_tokens):
  """Training (start, end) positions of the answer inside one window.

  An impossible question, or an answer not fully inside the window, points
  at [CLS] (0, 0).
  """
  if example.is_impossible:
    return 0, 0
  doc_start = doc_span.start
  doc_end = doc_span.start + doc_span.length - 1
  if not (tok_span[0] >= doc_start and tok_span[1] <= doc_end):
    return 0, 0
  doc_offset = num_query_tokens + 2
  return (tok_span[0] - doc_start + doc_offset,
          tok_span[1] - doc_start + doc_offset)


def _log_feature(feature, example, is_training):
  logging.info("*** Example ***")
  logging.info("unique_id: %s", feature.unique_id)
  logging.info("example_index: %s", feature.example_index)
  logging.info("doc_span_index: %s", feature.doc_span_index)
  logging.info("tokens: %s", " ".join(
      tokenization.printable_text(x) for x in feature.tokens))
  logging.info("token_to_orig_map: %s", " ".join(
      "%d:%d" % (x, y) for x, y in feature.token_to_orig_map.items()))
  logging.info("token_is_max_context: %s", " ".join(
      "%d:%s" % (x, y) for x, y in feature.token_is_max_context.items()))
  logging.info("input_ids: %s", " ".join(str(x) for x in feature.input_ids))
  logging.info("input_mask: %s", " ".join(str(x) for x in feature.input_mask))
  logging.info("segment_ids: %s",
               " ".join(str(x) for x in feature.segment_ids))
  if is_training and example.is_impossible:
    logging.info("impossible example")
  if is_training and not example.is_impossible:
    answer_text = " ".join(
        feature.tokens[feature.start_position:(feature.end_position + 1)])
    logging.info("start_position: %d", feature.start_position)
    logging.info("end_position: %d", feature.end_position)
    logging.info("answer: %s", tokenization.printable_text(answer_text))


def example_features(example, tokenizer, max_seq_length, doc_stride,
                     max_query_length, is_training, *, example_index=0,
                     first_unique_id=_FIRST_UNIQUE_ID, pad=True):
  """The features of one example, one per window.

  Args:
    example: a SquadExample.
    tokenizer, max_seq_length, doc_stride, max_query_length, is_training:
      as `convert_examples_to_features`.
    example_index: the example's index, stored in its features.
    first_unique_id: the unique_id of the first window; the others follow.
    pad: whether to pad the id arrays with 0 to max_seq_length; without
      padding each window's arrays have its own length (at most
      max_seq_length), as a served request may.

  Returns:
    list of InputFeatures, in window order.
  """
  query_tokens = tokenizer.tokenize(example.question_text)[:max_query_length]
  all_doc_tokens, tok_to_orig_index, orig_to_tok_index = (
      _tokenize_document(example.doc_tokens, tokenizer))
  tok_span = None
  if is_training:
    tok_span = _answer_token_span(example, all_doc_tokens, orig_to_tok_index,
                                  tokenizer)
  # [CLS], [SEP] and [SEP] take 3 positions.
  max_tokens_for_doc = max_seq_length - len(query_tokens) - 3
  doc_spans = windows.doc_spans(
      len(all_doc_tokens), max_tokens_for_doc, doc_stride,
      fix="The room is --max_seq_length - query tokens - 3; raise "
      "--max_seq_length or lower --max_query_length, and keep --doc_stride "
      "at least 1.")
  features = []
  for doc_span_index, doc_span in enumerate(doc_spans):
    tokens, segment_ids, token_to_orig_map, token_is_max_context = (
        _window_tokens(query_tokens, all_doc_tokens, tok_to_orig_index,
                       doc_spans, doc_span_index))
    input_ids = tokenizer.convert_tokens_to_ids(tokens)
    input_mask = [1] * len(input_ids)
    padding = [0] * (max_seq_length - len(input_ids)) if pad else []
    start_position = end_position = None
    if is_training:
      start_position, end_position = _window_answer(
          example, doc_span, tok_span, len(query_tokens))
    features.append(InputFeatures(
        unique_id=first_unique_id + doc_span_index,
        example_index=example_index, doc_span_index=doc_span_index,
        tokens=tokens, token_to_orig_map=token_to_orig_map,
        token_is_max_context=token_is_max_context,
        input_ids=input_ids + padding, input_mask=input_mask + padding,
        segment_ids=segment_ids + padding, start_position=start_position,
        end_position=end_position, is_impossible=example.is_impossible))
  return features


def convert_examples_to_features(examples, tokenizer, max_seq_length,
                                 doc_stride, max_query_length, is_training,
                                 output_fn):
  """Cuts every example into windows and passes each feature to `output_fn`.

  Features are handed over one at a time so a caller can stream them to a
  file instead of holding them all.

  Args:
    examples: list of SquadExample.
    tokenizer: a tokenization.FullTokenizer.
    max_seq_length: int, tokens per feature (padded with id 0).
    doc_stride: int, tokens between the starts of consecutive windows.
    max_query_length: int, questions are cut to this many tokens.
    is_training: whether to compute start/end positions.
    output_fn: callable(InputFeatures).
  """
  unique_id = _FIRST_UNIQUE_ID
  for example_index, example in enumerate(examples):
    for feature in example_features(
        example, tokenizer, max_seq_length, doc_stride, max_query_length,
        is_training, example_index=example_index, first_unique_id=unique_id):
      if example_index < _NUM_LOGGED_EXAMPLES and verbosity.details():
        _log_feature(feature, example, is_training)
      output_fn(feature)
      unique_id += 1


class FeatureWriter(object):
  """Writes InputFeatures to a TFRecord file of tf.train.Examples.

  `writer`, when given, takes the serialized records instead of a file
  opened at `filename` (any object with write(bytes) and close(), e.g. a
  feature_cache.FeatureFile, which is closed by its own context).
  """

  def __init__(self, filename, is_training, writer=None):
    self.filename = filename
    self.is_training = is_training
    self.num_features = 0
    self._writer = writer or tf.io.TFRecordWriter(filename)
    self._owns_writer = writer is None

  def process_feature(self, feature):
    """Writes one InputFeatures."""
    self.num_features += 1
    ints = feature_cache.int64_feature
    features = collections.OrderedDict()
    features["unique_ids"] = ints([feature.unique_id])
    features["input_ids"] = ints(feature.input_ids)
    features["input_mask"] = ints(feature.input_mask)
    features["segment_ids"] = ints(feature.segment_ids)
    if self.is_training:
      features["start_positions"] = ints([feature.start_position])
      features["end_positions"] = ints([feature.end_position])
      features["is_impossible"] = ints([1 if feature.is_impossible else 0])
    self._writer.write(feature_cache.serialized_example(features))

  def close(self):
    if self._owns_writer:
      self._writer.close()


def write_features(examples, tokenizer, output_file, max_seq_length,
                   doc_stride, max_query_length, is_training, on_feature=None):
  """Converts `examples` and writes their features to `output_file`.

  The file is written under a temporary name and renamed when complete (a
  failure leaves no temporary file; a full disk ends in one line with about
  the space the file needs, runner/feature_cache.py); progress is logged
  every 10 seconds.

  Args:
    on_feature: optional callable(InputFeatures), called for each feature
      before it is written.

  Returns:
    The number of features written.
  """
  meter = progress.Progress("Writing features to %s" % output_file,
                            len(examples))
  with feature_cache.FeatureFile(output_file, len(examples),
                                 examples_done=lambda: meter.done) as out:
    writer = FeatureWriter(filename=output_file, is_training=is_training,
                           writer=out)

    def write(feature):
      if on_feature is not None:
        on_feature(feature)
      writer.process_feature(feature)
      # An example yields one or more features, in example order.
      meter.advance(feature.example_index + 1 - meter.done)

    try:
      convert_examples_to_features(
          examples=examples, tokenizer=tokenizer,
          max_seq_length=max_seq_length, doc_stride=doc_stride,
          max_query_length=max_query_length, is_training=is_training,
          output_fn=write)
    finally:
      writer.close()
  meter.advance(len(examples) - meter.done)
  meter.finish()
  return writer.num_features


def write_eval_features(examples, tokenizer, output_file, max_seq_length,
                        doc_stride, max_query_length):
  """Streams the prediction features of `examples` to `output_file`.

  Each feature's id arrays go to the TFRecord file at once; only its
  FeatureMetadata (tokens and maps, which write_predictions needs) is kept.

  Returns:
    list of FeatureMetadata, one per feature written, in file order.
  """
  metadata = []
  write_features(examples, tokenizer, output_file, max_seq_length,
                 doc_stride, max_query_length, is_training=False,
                 on_feature=lambda f: metadata.append(feature_metadata(f)))
  return metadata


def input_fn_builder(input_file, seq_length, is_training, drop_remainder, *,
                     seed=None):
  """An `input_fn(params)` reading a FeatureWriter file.

  Training repeats the data forever and shuffles it (buffer 100, `seed`);
  all int64 features are cast to int32.
  """
  name_to_features = {
      "unique_ids": tf.io.FixedLenFeature([], tf.int64),
      "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
      "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
      "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
  }
  if is_training:
    name_to_features["start_positions"] = tf.io.FixedLenFeature([], tf.int64)
    name_to_features["end_positions"] = tf.io.FixedLenFeature([], tf.int64)

  return tfrecord_input.tfrecord_input_fn(input_file, name_to_features,
                                          is_training, drop_remainder, seed)


# ------------------------------------------------------------------ model --


def create_model(bert_config, is_training, input_ids, input_mask, segment_ids,
                 use_one_hot_embeddings, *, gradient_checkpointing=False,
                 compute_dtype=tf.float32):
  """BERT plus the span head.

  Args:
    bert_config: modeling.BertConfig.
    is_training: bool, enables dropout.
    input_ids, input_mask, segment_ids: int32 [B, S].
    use_one_hot_embeddings: bool, embedding lookup by one-hot matmul.
    gradient_checkpointing: recompute each layer in the backward pass.
    compute_dtype: dtype of BERT's activations (the head runs in float32).

  Returns:
    (start_logits, end_logits), float32 [B, S].
  """
  model = modeling.BertModel(
      config=bert_config, is_training=is_training, input_ids=input_ids,
      input_mask=input_mask, token_type_ids=segment_ids,
      use_one_hot_embeddings=use_one_hot_embeddings,
      gradient_checkpointing=gradient_checkpointing,
      compute_dtype=compute_dtype)
  final_hidden = tf.cast(model.get_sequence_output(), tf.float32)
  batch_size, seq_length, hidden_size = modeling.get_shape_list(
      final_hidden, expected_rank=3)
  output_weights = tf.compat.v1.get_variable(
      "cls/squad/output_weights", [2, hidden_size],
      initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.02))
  output_bias = tf.compat.v1.get_variable(
      "cls/squad/output_bias", [2],
      initializer=tf.compat.v1.zeros_initializer())
  final_hidden_matrix = tf.reshape(final_hidden,
                                   [batch_size * seq_length, hidden_size])
  logits = tf.matmul(final_hidden_matrix, output_weights, transpose_b=True)
  logits = tf.nn.bias_add(logits, output_bias)
  logits = tf.reshape(logits, [batch_size, seq_length, 2])
  start_logits, end_logits = tf.unstack(tf.transpose(logits, [2, 0, 1]),
                                        axis=0)
  return start_logits, end_logits


def _position_loss(logits, positions, seq_length):
  """Mean cross-entropy of float32 `logits` [B, S] at int `positions` [B]."""
  one_hot_positions = tf.one_hot(positions, depth=seq_length,
                                 dtype=tf.float32)
  log_probs = tf.nn.log_softmax(logits, axis=-1)
  return -tf.reduce_mean(tf.reduce_sum(one_hot_positions * log_probs, axis=-1))


def squad_head(features, mode, settings):
  """`create_model` on a batch of `input_fn_builder`'s features, as
  runner/training_graph.model_fn_builder calls a head (TRAIN and PREDICT).

  TRAIN: loss = (start cross-entropy + end cross-entropy) / 2 against the
  features "start_positions"/"end_positions". PREDICT: "unique_ids",
  "start_logits", "end_logits".
  """
  if mode == estimator_lib.ModeKeys.EVAL:
    raise ValueError("SQuAD is evaluated from its predictions (the official "
                     "metrics); its model has no EVAL mode.")
  start_logits, end_logits = create_model(
      bert_config=settings.bert_config,
      is_training=mode == estimator_lib.ModeKeys.TRAIN,
      input_ids=features["input_ids"], input_mask=features["input_mask"],
      segment_ids=features["segment_ids"],
      use_one_hot_embeddings=settings.use_one_hot_embeddings,
      gradient_checkpointing=settings.gradient_checkpointing,
      compute_dtype=settings.compute_dtype)
  if mode == estimator_lib.ModeKeys.PREDICT:
    return training_graph.ModelOutputs(None, predictions={
        "unique_ids": features["unique_ids"],
        "start_logits": start_logits, "end_logits": end_logits})
  seq_length = modeling.get_shape_list(features["input_ids"])[1]
  return training_graph.ModelOutputs((
      _position_loss(start_logits, features["start_positions"], seq_length) +
      _position_loss(end_logits, features["end_positions"], seq_length)) / 2.0)


def model_fn_builder(bert_config, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, use_tpu,
                     use_one_hot_embeddings, *, optimizer="adamw",
                     gradient_checkpointing=False,
                     compute_dtype=tf.float32):
  """The `model_fn` for estimator.Estimator: `squad_head` in
  runner/training_graph.py's model_fn. float16 activations train with
  dynamic loss scaling."""
  return training_graph.model_fn_builder(
      squad_head, training_graph.ModelSettings(
          bert_config, init_checkpoint, learning_rate, num_train_steps,
          num_warmup_steps, use_tpu, use_one_hot_embeddings, optimizer,
          gradient_checkpointing, compute_dtype))


def serving_input_receiver_fn_builder(seq_length, text_signature=None):
  """The serving input of an exported SQuAD model (see runner/serving_input.py).

  A request feeds int32 "input_ids", "input_mask" and "segment_ids" of shape
  [batch, seq_length], as `convert_examples_to_features` makes them; the
  outputs are "start_logits" and "end_logits" [batch, seq_length]. The
  model_fn's "unique_ids" prediction is left out of the signature: a
  request's ids are the caller's to keep. With a `text_signature`
  (squad_text.text_signature_of), the "text" signature takes questions and
  contexts instead and answers them.
  """
  return serving_input.receiver_fn_builder(
      seq_length, {"unique_ids": tf.int32}, text_signature=text_signature)


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


def check_window_flags(max_seq_length, doc_stride, max_query_length,
                       n_best_size, max_answer_length):
  """Checks --max_query_length, --doc_stride, --n_best_size and
  --max_answer_length against --max_seq_length (the values of those flags,
  or of predictor.SquadPredictor's settings of the same names).

  Raises:
    cli.UserError naming the flags and the fix.
  """
  if max_seq_length <= max_query_length + 3:
    raise cli.UserError(
        "--max_seq_length=%d must be greater than --max_query_length=%d + 3 "
        "to leave room for the document." % (max_seq_length,
                                             max_query_length))
  max_doc_tokens = max_seq_length - max_query_length - 3
  if not 1 <= doc_stride < max_doc_tokens:
    raise cli.UserError(
        "--doc_stride=%d must be at least 1 and smaller than the document "
        "room of a window, --max_seq_length - --max_query_length - 3 = "
        "%d - %d - 3 = %d, so that windows overlap; lower --doc_stride or "
        "--max_query_length, or raise --max_seq_length." %
        (doc_stride, max_seq_length, max_query_length, max_doc_tokens))
  if n_best_size < 1 or max_answer_length < 1:
    raise cli.UserError("--n_best_size=%d and --max_answer_length=%d must be "
                        "at least 1." % (n_best_size, max_answer_length))




def check_data_flags(*, do_train, train_file, do_predict, predict_file,
                     do_eval=False, dev_file=None):
  """Training needs --train_file, prediction --predict_file, evaluation
  --dev_file.

  Raises:
    cli.UserError naming the flag.
  """
  if do_train and not train_file:
    raise cli.UserError("--do_train needs --train_file (a SQuAD json file).")
  if do_predict and not predict_file:
    raise cli.UserError("--do_predict needs --predict_file (a SQuAD json "
                        "file).")
  if do_eval and not dev_file:
    raise cli.UserError("--do_eval needs --dev_file (a SQuAD json file with "
                        "answers, e.g. dev-v1.1.json).")


class SquadTask(task.Task):
  """SQuAD's json files, the span head, Google's n-best answer search and
  the official metrics."""

  name = "squad"
  serves_text = True

  def __init__(self, *, train_file=None, predict_file=None, dev_file=None,
               version_2_with_negative=False, window_flags=None,
               given_window_flags=(), n_best_size=20, max_answer_length=30,
               null_score_diff_threshold=0.0, verbose_logging=False):
    """Args:
      train_file, predict_file, dev_file: SQuAD json files (--train_file,
        --predict_file, --dev_file: --do_eval's, with answers).
      version_2_with_negative: SQuAD 2.0 (questions without an answer).
      window_flags: {name: value} of WINDOW_FLAGS (doc_stride,
        max_query_length).
      given_window_flags: those of WINDOW_FLAGS the command line set; a run
        that does not train takes the others from the training run's
        run_info.json.
      n_best_size, max_answer_length, null_score_diff_threshold,
        verbose_logging: the n-best search's settings (write_predictions).
    """
    super().__init__()
    self.train_file = train_file
    self.predict_file = predict_file
    self.dev_file = dev_file
    self.version_2_with_negative = version_2_with_negative
    self.window_flags = dict(window_flags)
    self.given_window_flags = frozenset(given_window_flags)
    self.n_best_size = n_best_size
    self.max_answer_length = max_answer_length
    self.null_score_diff_threshold = null_score_diff_threshold
    self.verbose_logging = verbose_logging
    self.examples = {}
    # The dev set's (features, official data) once evaluation made them.
    self._dev = None

  @property
  def doc_stride(self):
    return self.window_flags["doc_stride"]

  @property
  def max_query_length(self):
    return self.window_flags["max_query_length"]

  def start(self, flags, bert_config, tokenizer):
    """A run that does not train windows contexts as training did; then the
    window flags are checked against --max_seq_length."""
    super().start(flags, bert_config, tokenizer)
    check_data_flags(do_train=flags.do_train, train_file=self.train_file,
                     do_predict=flags.do_predict,
                     predict_file=self.predict_file, do_eval=flags.do_eval,
                     dev_file=self.dev_file)
    if not flags.do_train:
      self._reuse_recorded_window_flags(run_info.read(flags.output_dir))
    check_window_flags(flags.max_seq_length, self.doc_stride,
                       self.max_query_length, self.n_best_size,
                       self.max_answer_length)

  def record(self):
    return self.make_record(
        None, version_2_with_negative=self.version_2_with_negative,
        **self.window_flags)

  def read_data(self):
    """The questions of every set the run reads; the dev set must have
    answers to score."""
    files = {task.TRAIN: (self.train_file, "--train_file"),
             task.DEV: (self.dev_file, "--dev_file"),
             task.TEST: (self.predict_file, "--predict_file")}
    for set_type in self.sets_to_read():
      input_file, flag = files[set_type]
      self.examples[set_type] = self._read_examples(
          input_file, flag, is_training=set_type == task.TRAIN)
    if task.DEV in self.examples and not has_answers(
        load_squad_data(self.dev_file), self.version_2_with_negative):
      raise cli.UserError(
          "--dev_file=%s lacks answers for some questions; --do_eval scores "
          "answers, so pass a SQuAD file that has them%s." % (
              self.dev_file, "" if self.version_2_with_negative else
              " (SQuAD 2.0 data needs --version_2_with_negative)"))

  def num_train_examples(self):
    return len(self.examples[task.TRAIN]), self.train_file

  def head_shapes(self):
    return ()

  def head(self, features, mode, settings):
    return squad_head(features, mode, settings)

  def train_input_fn(self):
    """The training examples, shuffled once with --seed so that the input's
    small shuffle buffer suffices (the windows of one example are
    neighbours in the file)."""
    train_examples = task.shuffled(self.examples[task.TRAIN],
                                   self.flags.seed)
    train_file = os.path.join(self.work_dir, "train.tf_record")
    num_features = write_features(
        train_examples, self.tokenizer, train_file,
        self.flags.max_seq_length, self.doc_stride, self.max_query_length,
        is_training=True)
    return (input_fn_builder(input_file=train_file,
                             seq_length=self.flags.max_seq_length,
                             is_training=True, drop_remainder=True,
                             seed=self.flags.seed),
            ["Num orig examples = %d" % len(train_examples),
             "Num split examples = %d" % num_features])

  def evaluate(self, estimator, checkpoint_path=None):
    """The official metrics of `checkpoint_path`'s answers to --dev_file
    (eval_results.json); its windows are written once per run
    (dev.tf_record)."""
    if self._dev is None:
      features = write_eval_features(
          self.examples[task.DEV], self.tokenizer,
          self._output_path("dev.tf_record"), self.flags.max_seq_length,
          self.doc_stride, self.max_query_length)
      self._dev = features, load_squad_data(self.dev_file)
    features, data = self._dev
    predictions, _ = search_answers(
        self.examples[task.DEV], features,
        self._predict_results(estimator, self._output_path("dev.tf_record"),
                              len(features), checkpoint_path,
                              for_evaluation=True),
        self.n_best_size, self.max_answer_length, self.flags.do_lower_case,
        version_2_with_negative=self.version_2_with_negative,
        null_score_diff_threshold=self.null_score_diff_threshold)
    results = self._official_metrics(data, predictions)
    write_json_atomically(self._output_path("eval_results.json"), results)
    results.update(task.checkpoint_step(estimator, checkpoint_path))
    return task.Metrics(results, file_name=None, summaries="eval")

  def eval_metric_names(self):
    """F1 first, then exact match (SQuAD 2.0: its official keys)."""
    if not self.version_2_with_negative:
      return ["f1", "exact_match"]
    return ["f1", "exact", "HasAns_f1", "HasAns_exact", "NoAns_f1",
            "NoAns_exact", "best_f1", "best_exact", "best_f1_thresh",
            "best_exact_thresh"]

  def predict(self, estimator, checkpoint_path=None):
    """predictions.json and nbest_predictions.json (and null_odds.json for
    SQuAD 2.0) of --predict_file; with answers in it, the official metrics
    (eval_results.json).

    Memory: the examples (words of every context) and, per feature, its
    tokens and maps and two float32 logit vectors stay in memory; the id
    arrays are only in eval.tf_record.
    """
    eval_examples = self.examples[task.TEST]
    eval_file = os.path.join(self.flags.output_dir, "eval.tf_record")
    eval_features = write_eval_features(
        eval_examples, self.tokenizer, eval_file, self.flags.max_seq_length,
        self.doc_stride, self.max_query_length)
    task.log_block("Running predictions", [
        "Num orig examples = %d" % len(eval_examples),
        "Num split examples = %d" % len(eval_features),
        "Batch size = %d" % self.flags.predict_batch_size])
    predictions = write_predictions(
        eval_examples, eval_features,
        self._predict_results(estimator, eval_file, len(eval_features),
                              checkpoint_path),
        self.n_best_size, self.max_answer_length, self.flags.do_lower_case,
        self._output_path("predictions.json"),
        self._output_path("nbest_predictions.json"),
        self._output_path("null_odds.json"),
        version_2_with_negative=self.version_2_with_negative,
        null_score_diff_threshold=self.null_score_diff_threshold,
        verbose_logging=self.verbose_logging)
    return self._evaluate(predictions)

  def serving_input_receiver_fn(self):
    text_signature = None
    if self.exports_text():
      text_signature = squad_text.text_signature_of(
          self.graph_tokenizer_fn(),
          squad_text.WindowSettings(
              self.flags.max_seq_length, self.doc_stride,
              self.max_query_length, whitespace_code_points()),
          squad_text.SearchSettings(
              self.n_best_size, self.max_answer_length,
              self.version_2_with_negative, self.null_score_diff_threshold))
    return serving_input_receiver_fn_builder(self.flags.max_seq_length,
                                             text_signature)

  def _output_path(self, name):
    return os.path.join(self.flags.output_dir, name)

  def _reuse_recorded_window_flags(self, stored):
    """Each of WINDOW_FLAGS that the command line did not give becomes its
    value in `stored`, the run_info.json of --output_dir (None: none)."""
    for name in WINDOW_FLAGS:
      if stored and name in stored and name not in self.given_window_flags:
        self.window_flags[name] = stored[name]
        logging.info("--%s=%d, the training run's (%s).", name, stored[name],
                     run_info.RECORD_FILE)

  def _read_examples(self, input_file, flag, is_training):
    """The questions of --train_file / --predict_file; refuses none."""
    examples = read_squad_examples(
        input_file, is_training=is_training,
        version_2_with_negative=self.version_2_with_negative)
    if not examples:
      raise cli.UserError("%s=%s holds no questions%s; pass a SQuAD json "
                          "file with articles." % (
                              flag, input_file, " whose answer is found in "
                              "its context" if is_training else ""))
    return examples

  def _predict_results(self, estimator, input_file, num_features,
                       checkpoint_path, for_evaluation=False):
    """RawResults of every feature in `input_file` (logits as float32), in
    batches of --predict_batch_size (`for_evaluation`: --eval_batch_size)."""
    batch_size = (self.flags.eval_batch_size if for_evaluation else
                  self.flags.predict_batch_size)
    all_results = []
    for result in estimator.predict(
        input_fn_builder(input_file=input_file,
                         seq_length=self.flags.max_seq_length,
                         is_training=False, drop_remainder=False),
        checkpoint_path=checkpoint_path, yield_single_examples=True,
        num_batches=-(-num_features // batch_size),
        for_evaluation=for_evaluation):
      all_results.append(RawResult(
          unique_id=int(result["unique_ids"]),
          start_logits=np.asarray(result["start_logits"], np.float32),
          end_logits=np.asarray(result["end_logits"], np.float32)))
    return all_results

  def _evaluate(self, predictions):
    """The official metrics of `predictions` on --predict_file, written to
    eval_results.json (with SQuAD 2.0 also the predictions at the best
    null threshold); None when the file lacks answers."""
    data = load_squad_data(self.predict_file)
    if not has_answers(data, self.version_2_with_negative):
      logging.info("%s lacks answers for some questions; skipping the "
                   "evaluation (SQuAD 2.0 data needs "
                   "--version_2_with_negative).", self.predict_file)
      return None
    results = self._official_metrics(data, predictions)
    if self.version_2_with_negative:
      write_json_atomically(
          self._output_path("predictions_best_threshold.json"),
          predictions_at_threshold(predictions.null_odds,
                                   predictions.best_non_null,
                                   results["best_f1_thresh"]))
      logging.info("Best F1 null threshold %.4f; its predictions are in "
                   "predictions_best_threshold.json (pass it as "
                   "--null_score_diff_threshold to predict with it).",
                   results["best_f1_thresh"])
    write_json_atomically(self._output_path("eval_results.json"), results)
    return task.Metrics(results, file_name=None, summaries=None)

  def _official_metrics(self, data, predictions):
    """The official evaluation (v1.1, or v2.0 with the null odds) of
    SquadPredictions on a SQuAD "data" list."""
    if self.version_2_with_negative:
      return squad_metrics.evaluate_v2(data, predictions.predictions,
                                       predictions.null_odds)
    return squad_metrics.evaluate(data, predictions.predictions)
