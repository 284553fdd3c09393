"""tasks/squad_text.py, the SQuAD answer search as graph ops, against
tasks/squad.py's Python path: the windows of varied contexts (real SQuAD
paragraphs, accents, casing, punctuation, CJK, every kind of whitespace,
empty and long contexts) equal example_features' ids, segments, maps and
max-context flags; on random logits, the answers, their logits and the
SQuAD 2.0 null score diffs equal predict_example's, and the answers' offsets
point at them in the context."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import conftest
from serving import graph_tokenizer
from tasks import squad
from tasks import squad_text
import tokenization

# Contexts whose words and pieces stress split_context, the tokenizer and
# get_final_text: accents and casing the uncased model drops, punctuation
# glued to words, a no-break space, an ideographic space, tabs and line
# breaks, U+2028 inside a word (no SQuAD whitespace, but the tokenizer's),
# a zero-width space (dropped by the tokenizer), ideographs, a ligature,
# İ (two characters when lowercased) and an apostrophe.
CONTEXTS = [
    "Marie Skłodowska-Curie (1867–1934) won the Nobel Prize in 1903 and "
    "1911; she was born in Warsaw.",
    "Steve Smith's team beat the Broncos 24–10 at Levi's Stadium\u00a0in "
    "Santa Clara, California.\n\nThe  game\twas  played on February 7, "
    "2016.",
    "In 1271, Kublai Khan imposed the name Great Yuan (Chinese: 大元; "
    "pinyin: Dà Yuán; Wade–Giles: Ta-Yüan).",
    "İstanbul\u3000and Ankara are cities; \u00c9mile Zola wrote "
    "\u201cGerminal\u201d about ﬁnancial and social crises.",
    "a cat ate a rat at a bar\u2028car near\u200b a café",
    "Temüjin was probably born in 1162 in Delüün Boldog, near Burkhan "
    "Khaldun mountain and the Onon and Kherlen rivers.",
    "one",
    "",
    " \t\n",
]
QUESTIONS = ["Who won the Nobel Prize?", "Where was the game played?",
             "What name did Kublai Khan impose?",
             "Who wrote Germinal, and about what?", "What did the cat eat?",
             "Where was Temüjin born?", "Which number?", "Anything?",
             "Nothing here?"]


def _dev_paragraphs(count):
  """(question, context) of the first questions of real SQuAD paragraphs,
  long ones (several windows) among them."""
  with open(os.path.join(conftest.ASSETS_DIR, "squad", "v1.1",
                         "dev-v1.1.json"), encoding="utf-8") as f:
    data = json.load(f)["data"]
  pairs = []
  for article in data[::7]:
    paragraph = article["paragraphs"][0]
    pairs.append((paragraph["qas"][0]["question"], paragraph["context"]))
  return pairs[:count]


PAIRS = list(zip(QUESTIONS, CONTEXTS)) + _dev_paragraphs(6)

# (vocabulary, do_lower_case, max_seq_length, doc_stride, max_query_length):
# short windows with a small stride (many overlapping windows) uncased, and
# longer ones cased.
SETTINGS = [("uncased", True, 40, 6, 10), ("cased", False, 64, 24, 16)]


class _Graph(object):
  """The windows and answers of the graph, fed questions, contexts and
  logits."""

  def __init__(self, vocab_file, do_lower_case, window_settings, search):
    self.graph = tf.Graph()
    with self.graph.as_default():
      self.questions = tf.compat.v1.placeholder(tf.string, [None])
      self.contexts = tf.compat.v1.placeholder(tf.string, [None])
      tokenizer = graph_tokenizer.GraphTokenizer(vocab_file, do_lower_case)
      self.windows = squad_text.context_windows(
          tokenizer, self.questions, self.contexts, window_settings)
      shape = [None, window_settings.max_seq_length]
      self.start = tf.compat.v1.placeholder(tf.float32, shape)
      self.end = tf.compat.v1.placeholder(tf.float32, shape)
      self.answers = {
          search: squad_text.answers(tokenizer, self.windows, self.start,
                                     self.end, search)
          for search in search}
    self.session = tf.compat.v1.Session(graph=self.graph)

  def feed(self, pairs):
    return {self.questions: [q for q, _ in pairs],
            self.contexts: [c for _, c in pairs]}

  def windows_of(self, pairs):
    return self.session.run(self.windows._asdict(), self.feed(pairs))

  def answers_of(self, pairs, search, start, end):
    feed = self.feed(pairs)
    feed.update({self.start: start, self.end: end})
    return self.session.run(self.answers[search], feed)


SEARCHES = [squad_text.SearchSettings(20, 30, False, 0.0),
            squad_text.SearchSettings(3, 4, False, 0.0),
            squad_text.SearchSettings(1, 30, False, 0.0),
            squad_text.SearchSettings(5, 6, True, 0.0),
            squad_text.SearchSettings(1, 6, True, -1.0),
            squad_text.SearchSettings(2, 10, True, 0.5)]


@pytest.fixture(scope="module", params=SETTINGS, ids=lambda s: s[0])
def setup(request, assets_dir):
  vocab, lower, seq_length, stride, query_length = request.param
  vocab_file = os.path.join(assets_dir, "bert_vocab", vocab, "vocab.txt")
  window_settings = squad_text.WindowSettings(
      seq_length, stride, query_length, squad.whitespace_code_points())
  graph = _Graph(vocab_file, lower, window_settings, SEARCHES)
  tokenizer = tokenization.FullTokenizer(vocab_file, lower)
  yield graph, tokenizer, window_settings, lower
  graph.session.close()


def _python_features(pairs, tokenizer, settings):
  """(examples, features of each, word offset of each) as run_squad.py
  makes them for prediction."""
  examples, features, offsets = [], [], []
  offset = 0
  for index, (question, context) in enumerate(pairs):
    example = squad.SquadExample(index, question,
                                 squad.split_context(context)[0])
    examples.append(example)
    features.append(squad.example_features(
        example, tokenizer, settings.max_seq_length, settings.doc_stride,
        settings.max_query_length, False, example_index=index,
        first_unique_id=1000 * index))
    offsets.append(offset)
    offset += len(example.doc_tokens)
  return examples, features, offsets


def test_windows_equal_example_features(setup):
  graph, tokenizer, settings, _ = setup
  got = graph.windows_of(PAIRS)
  examples, features, offsets = _python_features(PAIRS, tokenizer, settings)
  flat = [(i, f) for i, fs in enumerate(features) for f in fs]
  # Long paragraphs make many windows; empty contexts none.
  assert max(len(fs) for fs in features) >= 5
  assert [len(fs) for fs in features][6:9] == [1, 0, 0]
  assert got["batch"] == len(PAIRS)
  assert list(got["example"]) == [i for i, _ in flat]
  for row, (index, feature) in enumerate(flat):
    for name in ("input_ids", "input_mask", "segment_ids"):
      assert list(got["features"][name][row]) == feature.__dict__[name], (
          name, row)
    assert sorted(np.flatnonzero(got["in_document"][row])) == sorted(
        feature.token_to_orig_map)
    for position, word in feature.token_to_orig_map.items():
      assert got["word"][row, position] == offsets[index] + word
      assert got["max_context"][row, position] == (
          feature.token_is_max_context[position])
  words = [w.decode() for w in got["words"]]
  assert words == [w for e in examples for w in e.doc_tokens]


def _python_answer(example, features, start, end, search, lower):
  """(answer, start_logit, end_logit, null score diff or None, (first word,
  last word) of the best span or None) as run_squad.py predicts them."""
  results = [squad.RawResult(f.unique_id, s, e)
             for f, s, e in zip(features, start, end)]
  nbest, diff, best_text = squad.predict_example(
      example, features, results, search.n_best_size,
      search.max_answer_length, lower, search.version_2_with_negative,
      verbose_logging=False)
  entry = next((e for e in nbest if e["text"]), nbest[-1])
  prelim = sorted(squad._prelim_predictions(  # pylint: disable=protected-access
      features, results, search.n_best_size, search.max_answer_length),
                  key=lambda p: p.start_logit + p.end_logit, reverse=True)
  span = None
  if prelim:
    feature = features[prelim[0].feature_index]
    span = (feature.token_to_orig_map[prelim[0].start_index],
            feature.token_to_orig_map[prelim[0].end_index])
  answer = best_text
  if diff is not None:
    answer = squad.answer_at_threshold(diff, best_text,
                                       search.null_score_diff_threshold)
  return answer, entry["start_logit"], entry["end_logit"], diff, span


def _assert_offsets(context, answer, start, end, span):
  """The answer lies at [start, end) of the context, within the best span's
  words, its whitespace there made single spaces.

  Returns:
    whether get_final_text cut the answer out of the span's words.
  """
  doc_tokens, char_to_word = squad.split_context(context)
  assert " ".join(squad.split_context(context[start:end])[0]) == answer
  assert char_to_word[start] >= span[0] and char_to_word[end - 1] <= span[1]
  assert not squad._is_whitespace(context[start])  # pylint: disable=protected-access
  return answer != " ".join(doc_tokens[span[0]:span[1] + 1])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_answers_equal_predict_example(setup, seed):
  graph, tokenizer, settings, lower = setup
  examples, features, _ = _python_features(PAIRS, tokenizer, settings)
  num_windows = sum(len(fs) for fs in features)
  rng = np.random.RandomState(seed)
  shape = (num_windows, settings.max_seq_length)
  start = rng.normal(size=shape).astype(np.float32)
  end = rng.normal(size=shape).astype(np.float32)
  spans = cut = 0
  for search in SEARCHES:
    got = graph.answers_of(PAIRS, search, start, end)
    row = 0
    for index, (example, fs) in enumerate(zip(examples, features)):
      rows = slice(row, row + len(fs))
      row += len(fs)
      answer, start_logit, end_logit, diff, span = _python_answer(
          example, fs, start[rows], end[rows], search, lower)
      assert got["answer"][index].decode() == answer, (search, index)
      assert got["start_logit"][index] == pytest.approx(start_logit, abs=0)
      assert got["end_logit"][index] == pytest.approx(end_logit, abs=0)
      if diff is not None:
        assert got["null_score_diff"][index] == pytest.approx(diff,
                                                              abs=1e-6)
      else:
        assert "null_score_diff" not in got
      first, last = got["answer_start"][index], got["answer_end"][index]
      if answer in ("", "empty") and (span is None or diff is not None):
        assert first == last == -1
      else:
        cut += _assert_offsets(PAIRS[index][1], answer, first, last, span)
        spans += 1
  # Most answers are spans, and get_final_text trims punctuation or
  # partial words off many.
  assert spans > 30 and cut > 5, (spans, cut)
