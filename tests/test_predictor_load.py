"""predictor.py and the exported SavedModel under concurrent requests.

Eight threads send 50 requests each to one loaded model (a tiny
run_classifier.py MRPC model and a tiny run_squad.py model, exported once
per session by tests/test_predictor.py's fixtures): single examples and
batches of up to 6, drawn from a fixed seed, with a malformed request now
and then. Each answer must equal, bit for bit, the answer of the same
request made alone before the load: a request's rows are padded and
computed as they are alone whatever else runs, so concurrency may change
nothing. (Answers of one example batched differently, padded to another
length, differ in float32 rounding; tests/test_predictor.py compares those
with the scripts' own files.) A malformed request (a text of the wrong
type, a missing or empty field, bytes that are not UTF-8, rows longer than
max_seq_length, a wrong input name) fails alone with its own error; every
other request of every thread succeeds.

Memory: the process's resident set after a warm-up round (every thread's
first 10 requests: TensorFlow's and glibc's per-thread pools are made
then) and after the last request. The answers are checked as they come and
not kept, so what the run may legitimately add is the working memory of
the requests in flight: each thread's glibc arena may keep the pages of its
largest request (its activations) plus the arena's top pad, and Python may
keep a few of its 256 KiB object arenas; the bound is that sum.
"""
import json
import os
import random
import threading

import numpy as np
import pytest
import tensorflow as tf

from userio import cli
import predictor
import run_classifier
import test_predictor
# The exports, made once per session (shared with tests/test_predictor.py).
from test_predictor import mrpc_dir  # pylint: disable=unused-import
from test_predictor import squad_dir  # pylint: disable=unused-import

pytestmark = pytest.mark.slow

THREADS = 8
REQUESTS = 50
WARM_UP = 10
MAX_BATCH = 6
SEED = 5
# glibc's default M_TOP_PAD: what an arena keeps above its top when it
# trims; Python's object allocator takes memory in arenas of this size.
GLIBC_TOP_PAD = 128 << 10
PYTHON_ARENA = 256 << 10
PYTHON_ARENAS_KEPT = 8
BYTES_PER_FLOAT = 4


def _rss():
  """The resident set of this process in bytes (/proc/self/statm)."""
  with open("/proc/self/statm") as f:
    return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _forward_bytes(config, rows, length):
  """An upper bound of the activation bytes of one forward pass of `rows`
  rows of `length` tokens: per layer the [rows, length, hidden] tensors
  (embeddings or input, q, k, v, context, attention output, its sum and
  LayerNorm, the output, its sum and LayerNorm: 11), the [rows, heads,
  length, length] scores, probabilities and their mask (3), and the
  [rows, length, intermediate] tensors (the dense and the GELU's 3
  intermediate values: 4)."""
  hidden = rows * length * config["hidden_size"]
  attention = rows * config["num_attention_heads"] * length * length
  intermediate = rows * length * config["intermediate_size"]
  per_layer = 11 * hidden + 3 * attention + 4 * intermediate
  return (config["num_hidden_layers"] + 1) * per_layer * BYTES_PER_FLOAT


def _memory_bound(config, max_seq_length, rows):
  return (THREADS * (_forward_bytes(config, rows, max_seq_length) +
                     GLIBC_TOP_PAD) + PYTHON_ARENAS_KEPT * PYTHON_ARENA)


class Malformed(object):
  """A request that must fail with `error` (a type) matching `words`."""

  def __init__(self, call, error, words):
    self.call, self.error, self.words = call, error, words


def _load(plans, answer_of, same):
  """Runs each thread's list of requests (callables) at once, in THREADS
  threads, checking each answer against `answer_of[request]` with `same`,
  and each Malformed's error.

  Returns:
    (RSS after the warm-up round, RSS at the end, answers checked, errors
    checked, problems found).
  """
  problems = []
  counts = [0, 0]
  lock = threading.Lock()
  warmed = threading.Barrier(THREADS + 1)
  finish = threading.Barrier(THREADS + 1)

  def note(problem):
    with lock:
      problems.append(problem)

  def work(requests):
    for index, request in enumerate(requests):
      if index == WARM_UP:
        warmed.wait()
        warmed.wait()  # The main thread measures in between.
      if isinstance(request, Malformed):
        try:
          request.call()
        except request.error as e:
          if request.words not in str(e):
            note("%s: %s" % (request.words, e))
          with lock:
            counts[1] += 1
        else:
          note("no error: %s" % request.words)
        continue
      try:
        got = request()
      except Exception as e:  # pylint: disable=broad-except
        note("%s raised %r" % (request, e))
        continue
      if not same(got, answer_of[request]):
        note("%s: %r != %r" % (request, got, answer_of[request]))
      with lock:
        counts[0] += 1
    finish.wait()

  threads = [threading.Thread(target=work, args=(plan,), daemon=True)
             for plan in plans]
  for thread in threads:
    thread.start()
  warmed.wait()
  before = _rss()
  warmed.wait()
  finish.wait()
  after = _rss()
  for thread in threads:
    thread.join(60)
  return before, after, counts[0], counts[1], problems


class Request(object):
  """A callable request with a readable name."""

  def __init__(self, name, call):
    self.name, self.call = name, call

  def __call__(self):
    return self.call()

  def __repr__(self):
    return self.name


def _plans(make_request, make_malformed, num_examples):
  """THREADS lists of REQUESTS requests drawn from SEED: a single example,
  a batch of 2 to MAX_BATCH, or (one in ten) a malformed request."""
  rng = random.Random(SEED)
  plans = []
  for _ in range(THREADS):
    plan = []
    for _ in range(REQUESTS):
      draw = rng.random()
      if draw < 0.1:
        plan.append(make_malformed(rng))
      else:
        size = 1 if draw < 0.5 else rng.randint(2, MAX_BATCH)
        plan.append(make_request(tuple(rng.randrange(num_examples)
                                       for _ in range(size))))
    plans.append(plan)
  return plans


def _alone(plans):
  """The answer of each (well-formed) request made alone, in turn."""
  return {request: request() for plan in plans for request in plan
          if not isinstance(request, Malformed)}


def _assert_survived(result, plans, config, max_seq_length, rows=MAX_BATCH):
  """Every request answered as alone or failed with its own error, and the
  memory within the bound of `rows` rows per model call."""
  before, after, answers, errors, problems = result
  assert not problems, problems[:5]
  malformed = sum(isinstance(r, Malformed) for plan in plans for r in plan)
  assert (answers, errors) == (THREADS * REQUESTS - malformed, malformed)
  bound = _memory_bound(config, max_seq_length, rows)
  assert after - before <= bound, (after - before, bound)


def _config():
  with open(test_predictor.TINY_CONFIG) as f:
    return json.load(f)


# ------------------------------------------------------- classification --


def _mrpc_examples():
  return [(e.text_a, e.text_b) for e in
          run_classifier.MrpcProcessor().get_test_examples(
              test_predictor.MRPC_SAMPLE)]


def _malformed_classifier_request(model, examples):
  long_row = np.ones([1, model.model.max_seq_length + 1], np.int32)
  kinds = [
      Malformed(lambda: model.predict(examples[0][0]), cli.UserError,
                "text_b is missing"),
      Malformed(lambda: model.predict("", examples[0][1]), cli.UserError,
                "text_a must be a non-empty string"),
      Malformed(lambda: model.predict(7, "Two."), cli.UserError,
                "text_a must be a non-empty string, not 7"),
      Malformed(lambda: model.predict(b"\xff\xfe", "Two."), cli.UserError,
                "text_a must be a non-empty string"),
      Malformed(lambda: model.model.run(long_row, long_row, long_row),
                tf.errors.InvalidArgumentError,
                "Requests may hold at most --max_seq_length=%d tokens" %
                model.model.max_seq_length),
      Malformed(lambda: model.predict_batch([examples[0], {
          "text_a": "A.", "txt_b": "B."}]), cli.UserError,
                "an example is a text or a (text_a, text_b) pair"),
  ]
  return lambda rng: rng.choice(kinds)


def test_classifier_predictor_under_concurrent_requests(mrpc_dir):  # pylint: disable=redefined-outer-name
  model = predictor.load(os.path.join(mrpc_dir, "export"))
  examples = _mrpc_examples()

  def request(indices):
    if len(indices) == 1:
      return Request("predict%s" % (indices,),
                     lambda: model.predict(*examples[indices[0]]))
    return Request("predict_batch%s" % (indices,), lambda: model.predict_batch(
        [examples[i] for i in indices]))

  plans = _plans(request, _malformed_classifier_request(model, examples),
                 len(examples))
  answers = _alone(plans)
  result = _load(plans, answers, lambda got, want: got == want)
  _assert_survived(result, plans, _config(), model.model.max_seq_length)


def test_saved_model_under_concurrent_requests(mrpc_dir):  # pylint: disable=redefined-outer-name
  """The bare serving signature, fed padded feature arrays."""
  model = predictor.load(os.path.join(mrpc_dir, "export"))
  serve = tf.saved_model.load(model.model.path).signatures["serving_default"]
  rows = [model.row(a, b) for a, b in _mrpc_examples()]
  max_seq_length = model.model.max_seq_length

  def features(indices):
    length = max(len(rows[i][0]) for i in indices)
    arrays = {name: np.zeros([len(indices), length], np.int32)
              for name in ("input_ids", "input_mask", "segment_ids")}
    for j, i in enumerate(indices):
      ids, segments = rows[i]
      arrays["input_ids"][j, :len(ids)] = ids
      arrays["input_mask"][j, :len(ids)] = 1
      arrays["segment_ids"][j, :len(ids)] = segments
    return arrays

  def request(indices):
    arrays = features(indices)
    return Request("serve%s" % (indices,), lambda: serve(**arrays)[
        "probabilities"].numpy())

  too_long = {name: np.ones([2, max_seq_length + 1], np.int32)
              for name in ("input_ids", "input_mask", "segment_ids")}
  misnamed = dict(features((0,)))
  misnamed["input_idz"] = misnamed.pop("input_ids")
  kinds = [
      Malformed(lambda: serve(**too_long), tf.errors.InvalidArgumentError,
                "Requests may hold at most --max_seq_length=%d tokens" %
                max_seq_length),
      Malformed(lambda: serve(**misnamed), TypeError,
                "missing a required argument: 'input_ids'"),
      Malformed(lambda: serve(**dict(features((0, 1)), input_mask=np.ones(
          [2, 3], np.int32))), tf.errors.InvalidArgumentError,
                "Incompatible shapes"),
  ]
  plans = _plans(request, lambda rng: rng.choice(kinds), len(rows))
  answers = _alone(plans)
  result = _load(plans, answers, np.array_equal)
  _assert_survived(result, plans, _config(), max_seq_length)


# ---------------------------------------------------------------- SQuAD --


def test_squad_predictor_under_concurrent_requests(squad_dir):  # pylint: disable=redefined-outer-name
  model = predictor.load(os.path.join(squad_dir, "export"),
                         **test_predictor.SQUAD_OPTIONS)
  questions = list(test_predictor._squad_questions(  # pylint: disable=protected-access
      squad_dir).values())

  def request(indices):
    if len(indices) == 1:
      return Request("predict%s" % (indices,),
                     lambda: model.predict(*questions[indices[0]]))
    return Request("predict_batch%s" % (indices,), lambda: model.predict_batch(
        [questions[i] for i in indices]))

  kinds = [
      Malformed(lambda: model.predict("Who?", ""), cli.UserError,
                "context must be a non-empty string"),
      Malformed(lambda: model.predict(None, questions[0][1]), cli.UserError,
                "question is missing"),
      Malformed(lambda: model.predict(b"\xc3\x28?", questions[0][1]),
                cli.UserError, "question must be a non-empty string"),
  ]
  plans = _plans(request, lambda rng: rng.choice(kinds), len(questions))
  answers = _alone(plans)
  result = _load(plans, answers, lambda got, want: got == want)
  windows = max(len(model.features(*question)[1]) for question in questions)
  _assert_survived(result, plans, _config(), model.model.max_seq_length,
                   rows=MAX_BATCH * windows)
