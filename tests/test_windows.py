"""Tests for tasks/windows.py: windows over long texts, Google's max-context
rule on worked examples, and the mean of the windows' log-probabilities."""
import itertools

import numpy as np
import pytest

from tasks import windows


def test_windows_start_every_stride_and_the_last_reaches_the_end():
  # 20 tokens, room 10, stride 4: starts 0, 4, 8, 12; the window at 12
  # reaches the end with 8 tokens, so no window starts at 16.
  assert windows.doc_spans(20, 10, 4) == [(0, 10), (4, 10), (8, 10),
                                          (12, 8)]
  # A text that fits is one window; an empty text has none.
  assert windows.doc_spans(7, 10, 4) == [(0, 7)]
  assert windows.doc_spans(0, 10, 4) == []
  # A stride beyond the room makes adjacent windows, never a gap.
  assert windows.doc_spans(25, 10, 30) == [(0, 10), (10, 10), (20, 5)]


@pytest.mark.parametrize("room,stride", [(0, 4), (10, 0)])
def test_windows_refuse_no_room_or_no_stride(room, stride):
  with pytest.raises(ValueError, match="No room for the document.*raise"):
    windows.doc_spans(20, room, stride, fix="raise it")


def test_max_context_worked_example():
  # Windows (0, 10), (4, 10), (8, 10), (12, 8) over 20 tokens. Token 7:
  # window 0 scores min(7, 2) + 0.1 = 2.1, window 1 min(3, 6) + 0.1 = 3.1 ->
  # window 1. Token 12: window 1 min(8, 1) + 0.1 = 1.1, window 2
  # min(4, 5) + 0.1 = 4.1, window 3 min(0, 7) + 0.08 = 0.08 -> window 2.
  # Token 6: window 0 min(6, 3) = 3.1, window 1 min(2, 7) = 2.1 -> window 0.
  spans = windows.doc_spans(20, 10, 4)
  owners = [0] * 7 + [1] * 4 + [2] * 4 + [3] * 5
  assert windows.max_context_owners(spans, 20) == owners
  for position in range(20):
    assert [windows.check_is_max_context(spans, i, position)
            for i in range(4)] == [i == owners[position] for i in range(4)]


def test_max_context_tie_goes_to_the_first_window():
  # Token 5 of windows (0, 8) and (2, 8): min(5, 2) = 2 and min(3, 4) = 3 ->
  # the second. Token 4: min(4, 3) = 3 in both, same length -> the first.
  spans = [windows.DocSpan(0, 8), windows.DocSpan(2, 8)]
  assert windows.check_is_max_context(spans, 1, 5)
  assert windows.check_is_max_context(spans, 0, 4)
  assert not windows.check_is_max_context(spans, 1, 4)
  # Same context, the longer window wins by its 0.01 * length.
  spans = [windows.DocSpan(0, 5), windows.DocSpan(0, 6)]
  assert windows.max_context_owners(spans, 6)[2] == 1


def _owner_by_definition(spans, position):
  """The best window written out from the definition, independently."""
  scored = [(min(position - s.start, s.start + s.length - 1 - position) +
             0.01 * s.length, -i) for i, s in enumerate(spans)
            if s.start <= position < s.start + s.length]
  return -max(scored)[1]


@pytest.mark.parametrize("num_tokens,room,stride", list(itertools.product(
    [1, 9, 31, 64], [1, 5, 16], [1, 3, 7, 20])))
def test_every_token_has_exactly_one_owner(num_tokens, room, stride):
  spans = windows.doc_spans(num_tokens, room, stride)
  covered = sorted(p for s in spans for p in range(s.start,
                                                   s.start + s.length))
  assert sorted(set(covered)) == list(range(num_tokens))
  owners = windows.max_context_owners(spans, num_tokens)
  assert owners == [_owner_by_definition(spans, p) for p in range(num_tokens)]
  for position in range(num_tokens):
    assert sum(windows.check_is_max_context(spans, i, position)
               for i in range(len(spans))) == 1


def test_mean_log_probabilities_worked_example():
  # Windows with probabilities (0.8, 0.2) and (0.4, 0.6): the geometric
  # means are sqrt(0.32) and sqrt(0.12); normalized, class 0 has
  # sqrt(.32) / (sqrt(.32) + sqrt(.12)).
  log_probs = np.log([[0.8, 0.2], [0.4, 0.6]])
  scores = windows.mean_log_probabilities(log_probs)
  want = np.array([np.sqrt(0.32), np.sqrt(0.12)])
  np.testing.assert_allclose(np.exp(scores), want / want.sum(), rtol=1e-12)
  # One window keeps its own probabilities.
  np.testing.assert_allclose(
      windows.mean_log_probabilities(np.log([[0.3, 0.7]])),
      np.log([0.3, 0.7]), rtol=1e-12)
