# coding=utf-8
"""How much context a window gives one of its tokens: the rule that picks,
among overlapping windows, the one a token is read from (Google's
_check_is_max_context). Plain Python, shared by the Python windows
(tasks/windows.py) and their graph twin (serving/text_windows.py)."""

# Weight of a window's length in the score: it only breaks ties between
# windows that give a token the same context.
LENGTH_WEIGHT = 0.01


def context_score(start, length, position):
  """The score of the window [start, start + length) for the token at
  `position` inside it: the smaller of its left and right context, plus
  LENGTH_WEIGHT times the window's length."""
  left = position - start
  right = start + length - 1 - position
  return min(left, right) + LENGTH_WEIGHT * length
