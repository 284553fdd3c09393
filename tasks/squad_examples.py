# coding=utf-8
"""SQuAD's json files read into questions: the task's examples.

`read_squad_examples` turns a SQuAD 1.1 / 2.0 file into SquadExamples, one
per question, with its context split into words on whitespace
(`split_context`; whitespace is ASCII's and Unicode's space separators,
`whitespace_code_points` for the export's graph). For training it finds
each question's first answer among the words and skips, with a count, the
answers not found at their answer_start. A malformed file, a missing field
or a repeated question id fails in one line naming the file, the place and
the fix. `has_answers` tells whether a file can be scored.
"""

import functools
import json
import unicodedata

from absl import logging
import tensorflow as tf

import tokenization
from userio import cli
from userio import utf8


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
