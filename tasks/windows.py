# coding=utf-8
"""Overlapping windows over a text longer than the model reads at once.

A text of `num_tokens` WordPiece tokens is cut into windows ("doc spans")
of at most `max_tokens` tokens whose starts are `stride` tokens apart, the
last one reaching the text's end. Where windows overlap, a token belongs
to the window that gives it the most context: its score in a window is
min(tokens to its left, tokens to its right) + 0.01 * the window's length,
and the first window with the highest score wins: Google's rule in
run_squad.py, for any text read in windows.

The windows of a long classified text are also combined here: the example's
class scores are the mean over its windows of their log-probabilities.
"""

import collections

import numpy as np

from serving import context_score
from userio import cli

DocSpan = collections.namedtuple("DocSpan", ["start", "length"])

# What a classifier does with a text longer than its sequence (its
# --long_text): Google's truncation, or windows over the text.
TRUNCATE, WINDOWS = "truncate", "windows"
LONG_TEXT_MODES = (TRUNCATE, WINDOWS)


def doc_spans(num_tokens, max_tokens, stride, *, fix=None):
  """The windows over `num_tokens` tokens.

  Args:
    num_tokens: tokens in the text.
    max_tokens: the most tokens a window holds (at least 1).
    stride: tokens between the starts of consecutive windows (at least 1);
      a window never starts past the end of the one before it.
    fix: what the caller's user should change when there is no room
      (named flags), appended to the error.

  Returns:
    list of DocSpan(start, length), in text order; none for an empty text.

  Raises:
    cli.UserError (a ValueError) when `max_tokens` or `stride` is below 1.
  """
  if max_tokens < 1 or stride < 1:
    raise cli.UserError(
        "No room for the document: windows of %d tokens started every %d "
        "tokens, but both must be at least 1" % (max_tokens, stride),
        fix=fix)
  spans = []
  start = 0
  while start < num_tokens:
    length = min(num_tokens - start, max_tokens)
    spans.append(DocSpan(start=start, length=length))
    if start + length == num_tokens:
      break
    start += min(length, stride)
  return spans


def _context_score(span, position):
  """The score of window `span` for the token at `position` (inside it)."""
  return context_score.context_score(span.start, span.length, position)


def check_is_max_context(spans, span_index, position):
  """Whether window `span_index` of `spans` is the one that gives the token
  at `position` the most context (the first of the best on a tie)."""
  best_score = None
  best_index = None
  for index, span in enumerate(spans):
    if not span.start <= position < span.start + span.length:
      continue
    score = _context_score(span, position)
    if best_score is None or score > best_score:
      best_score = score
      best_index = index
  return span_index == best_index


def max_context_owners(spans, num_tokens):
  """For every token, the index of the window that gives it the most
  context: `check_is_max_context` for all tokens in one pass over the
  windows (a list of `num_tokens` ints)."""
  owners = [None] * num_tokens
  best = [None] * num_tokens
  for index, span in enumerate(spans):
    for position in range(span.start, span.start + span.length):
      score = _context_score(span, position)
      if best[position] is None or score > best[position]:
        best[position] = score
        owners[position] = index
  return owners


def mean_log_probabilities(window_log_probs):
  """The class scores of one example from those of its windows.

  Args:
    window_log_probs: float array-like [num_windows, num_classes], each row
      a window's log-probabilities.

  Returns:
    float64 array [num_classes]: the mean of the rows, renormalized so that
    its exponentials (the example's probabilities) sum to 1. The argmax is
    the class with the highest geometric mean of the windows'
    probabilities.
  """
  scores = np.mean(np.asarray(window_log_probs, np.float64), axis=0)
  return scores - np.logaddexp.reduce(scores)
