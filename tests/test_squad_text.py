"""tasks/squad_text.py, the SQuAD answer search as graph ops, against
tasks/squad_*.py's Python path: the windows of varied contexts (real SQuAD
paragraphs, accents, casing, punctuation, CJK, every kind of whitespace,
empty and long contexts) equal example_features' ids, segments, maps and
max-context flags; GraphTokenizer.basic_words equals BasicTokenizer; on
random logits, the answers, their logits and the SQuAD 2.0 null score
diffs equal predict_example's, and the answers' offsets point at them in
the context. Then exports served in a process without the project answer
as run_squad.py --do_predict's files do."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import conftest
from serving import graph_tokenizer
from tasks import squad_examples
from tasks import squad_features
from tasks import squad_predictions
from tasks import squad_text
import test_predictor
from test_predictor import squad_dir  # pylint: disable=unused-import
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
      self.words = tokenizer.basic_words(self.contexts)
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
    tensors = self.windows._asdict()
    del tensors["seq_length"]  # A Python int.
    return self.session.run(tensors, self.feed(pairs))

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
      seq_length, stride, query_length,
      squad_examples.whitespace_code_points())
  graph = _Graph(vocab_file, lower, window_settings, SEARCHES)
  tokenizer = tokenization.FullTokenizer(vocab_file, lower)
  yield graph, tokenizer, window_settings, lower
  graph.session.close()


def test_basic_words_equal_basic_tokenizer(setup):
  graph, _, _, lower = setup
  texts = [c for _, c in PAIRS] + [
      "a\u0300\u0301 \u00c0 \u0130i \u03a3\u039f\u03a3 x\u0000y\ufffdz "
      "\u4e00\u4e8c\x0b\x1c\x85\u2028\u2029\u202f\u200b end."]
  got = graph.session.run(graph.words, {graph.contexts: texts})
  basic = tokenization.BasicTokenizer(do_lower_case=lower)
  assert [[w.decode() for w in row] for row in got.to_list()] == [
      basic.tokenize(text) for text in texts]


def _python_features(pairs, tokenizer, settings):
  """(examples, features of each, word offset of each) as run_squad.py
  makes them for prediction."""
  examples, features, offsets = [], [], []
  offset = 0
  for index, (question, context) in enumerate(pairs):
    example = squad_examples.SquadExample(
        index, question, squad_examples.split_context(context)[0])
    examples.append(example)
    features.append(squad_features.example_features(
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
  results = [squad_predictions.RawResult(f.unique_id, s, e)
             for f, s, e in zip(features, start, end)]
  nbest, diff, best_text = squad_predictions.predict_example(
      example, features, results, search.n_best_size,
      search.max_answer_length, lower, search.version_2_with_negative,
      verbose_logging=False)
  entry = next((e for e in nbest if e["text"]), nbest[-1])
  prelim = sorted(
      squad_predictions._prelim_predictions(  # pylint: disable=protected-access
          features, results, search.n_best_size, search.max_answer_length),
      key=lambda p: p.start_logit + p.end_logit, reverse=True)
  span = None
  if prelim:
    feature = features[prelim[0].feature_index]
    span = (feature.token_to_orig_map[prelim[0].start_index],
            feature.token_to_orig_map[prelim[0].end_index])
  answer = best_text
  if diff is not None:
    answer = squad_predictions.answer_at_threshold(
        diff, best_text, search.null_score_diff_threshold)
  return answer, entry["start_logit"], entry["end_logit"], diff, span


def _assert_offsets(context, answer, start, end, span):
  """The answer lies at [start, end) of the context, within the best span's
  words, its whitespace there made single spaces.

  Returns:
    whether get_final_text cut the answer out of the span's words.
  """
  doc_tokens, char_to_word = squad_examples.split_context(context)
  assert " ".join(
      squad_examples.split_context(context[start:end])[0]) == answer
  assert char_to_word[start] >= span[0] and char_to_word[end - 1] <= span[1]
  assert not squad_examples._is_whitespace(  # pylint: disable=protected-access
      context[start])
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


# ------------------------------------------------ served, without project --

# Loads the export in a folder of its own with no PYTHONPATH (nothing of
# the project importable) and calls the text signature once per batch.
SERVE = """
import importlib.util, json, sys
import tensorflow as tf
import tensorflow_text  # Registers the tokenizer's op.
for name in ("tokenization", "modeling", "serving", "tasks"):
  assert importlib.util.find_spec(name) is None, name
request = json.load(sys.stdin)
text = tf.saved_model.load(request["export"]).signatures["text"]
replies = []
for batch in request["batches"]:
  outputs = text(**{k: tf.constant(v, tf.string) for k, v in batch.items()})
  replies.append({k: [x.decode() if isinstance(x, bytes) else x
                      for x in v.numpy().tolist()]
                  for k, v in outputs.items()})
json.dump(replies, sys.stdout)
"""


def _serve(tmp_path, export_dir, batches):
  """The text signature's outputs on each batch of (question, context)."""
  (version,) = os.listdir(export_dir)
  folder = tmp_path / "client"
  folder.mkdir(exist_ok=True)
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  request = {"export": os.path.join(export_dir, version), "batches": [
      {"question": [q for q, _ in batch], "context": [c for _, c in batch]}
      for batch in batches]}
  result = subprocess.run(
      [sys.executable, "-c", SERVE], cwd=str(folder), env=env, text=True,
      input=json.dumps(request), capture_output=True, timeout=600,
      check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  return json.loads(result.stdout)


def _build_squad_text(run_script, squad_dir, root):
  """Predictions (v1 and v2) and exports of test_predictor's SQuAD model
  on its questions and on CONTEXTS' (accents, casing, punctuation,
  whitespace of every kind)."""
  shutil.copytree(os.path.join(squad_dir, "out"), os.path.join(root, "out"))
  with open(os.path.join(squad_dir, "squad.json"), encoding="utf-8") as f:
    data = json.load(f)
  data["data"].append({"title": "own", "paragraphs": [
      {"context": context, "qas": [{"id": "own%d" % i, "question": question}]}
      for i, (question, context) in enumerate(zip(QUESTIONS, CONTEXTS))]})
  predict_file = os.path.join(root, "squad.json")
  with open(predict_file, "w", encoding="utf-8") as f:
    json.dump(data, f, ensure_ascii=False)
  common = ["run_squad.py", "--vocab_file=" + test_predictor._vocab_file(),  # pylint: disable=protected-access
            "--bert_config_file=" + test_predictor.TINY_CONFIG,
            "--output_dir=" + os.path.join(root, "out"),
            "--predict_file=" + predict_file,
            "--do_predict"] + test_predictor.SQUAD_FLAGS
  for version, extra in (("v1", []), ("v2", [
      "--version_2_with_negative",
      "--null_score_diff_threshold=%s" % test_predictor.V2_THRESHOLD])):
    conftest.run_logged(run_script, common[0], common[1:] + extra + [
        "--export_dir=" + os.path.join(root, "export_" + version)],
                        os.path.join(root, version + ".log"))
    names = ["predictions.json", "nbest_predictions.json"]
    if version == "v2":
      names.append("null_odds.json")
    for name in names:
      shutil.move(os.path.join(root, "out", name),
                  os.path.join(root, version + "_" + name))


@pytest.fixture(scope="module")
def squad_text_dir(shared_dir, run_script, squad_dir):
  return conftest.build_once(
      shared_dir, "squad_text",
      lambda root: _build_squad_text(run_script, squad_dir, root))


def _questions(root):
  """[(id, question, context)] of the run's predict file, in file order."""
  with open(os.path.join(root, "squad.json"), encoding="utf-8") as f:
    data = json.load(f)["data"]
  return [(qa["id"], qa["question"], paragraph["context"])
          for article in data for paragraph in article["paragraphs"]
          for qa in paragraph["qas"]]


def _json(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


@pytest.mark.slow
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_served_answers_equal_run_squad_predictions(squad_text_dir, tmp_path,
                                                    version):
  root = squad_text_dir
  questions = _questions(root)
  pairs = [(q, c) for _, q, c in questions]
  # The whole set in one batch (contexts of one to many windows), the
  # longest context alone and a short one alone.
  longest = max(range(len(pairs)), key=lambda i: len(pairs[i][1]))
  alone = [longest, len(pairs) - 3]
  replies = _serve(tmp_path, os.path.join(root, "export_" + version),
                   [pairs] + [[pairs[i]] for i in alone])
  predictions = _json(os.path.join(root, version + "_predictions.json"))
  nbest = _json(os.path.join(root, version + "_nbest_predictions.json"))
  got = replies[0]
  for index, (qid, _, context) in enumerate(questions):
    answer = got["answer"][index]
    assert answer == predictions[qid], qid
    entry = next((e for e in nbest[qid] if e["text"]), nbest[qid][-1])
    for name in ("start_logit", "end_logit"):
      assert got[name][index] == pytest.approx(entry[name], abs=1e-5)
    start, end = got["answer_start"][index], got["answer_end"][index]
    if answer in ("", "empty") and start == -1:
      assert end == -1
    else:
      assert " ".join(
          squad_examples.split_context(context[start:end])[0]) == answer
  for reply, index in zip(replies[1:], alone):
    assert {name: values[0] for name, values in reply.items()} == (
        {name: values[index] for name, values in got.items()})
  if version == "v2":
    odds = _json(os.path.join(root, "v2_null_odds.json"))
    np.testing.assert_allclose(got["null_score_diff"],
                               [odds[qid] for qid, _, _ in questions],
                               atol=1e-5)
    # The threshold answers some questions and leaves others unanswered.
    assert {a == "" for a in got["answer"]} == {True, False}
  else:
    assert "null_score_diff" not in got
