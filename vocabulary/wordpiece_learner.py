# coding=utf-8
"""TensorFlow Text's WordPiece vocabulary learner, written anew.

Google did not publish the program that made BERT's vocab.txt. The
published algorithm for it is TensorFlow Text's learner: project
tensorflow/text, file tensorflow_text/tools/wordpiece_vocab/
wordpiece_tokenizer_learner_lib.py (its `learn` is what
`bert_vocab_from_dataset` calls), described in the guide "Subword
tokenizers" (tensorflow.org/text/guide/subwords_tokenizer). Its steps, as
this module carries them out:

  1. Search range. The count threshold is searched between the largest
     word count (capped by `upper_thresh`) and the smallest (raised to
     `lower_thresh`).
  2. Alphabet. Characters are ranked by how often they occur, and the
     `max_unique_chars` most frequent (ties by code point) are allowed;
     here a character must also occur `min_char_count` times.
  3. Learning words. Words longer than `max_token_length`, reserved tokens
     and words with a character outside the alphabet are left out; of the
     rest, the `max_input_words` most frequent are kept.
  4. Learning with a threshold T, in `num_iterations` rounds. The first
     round takes every start position of every word; later rounds take
     only the positions where the greedy longest-match-first split of the
     word with the previous round's pieces starts a piece. From each such
     start, every substring to every end is a candidate ("##" in front
     when the start is not the word's first character), weighted by the
     word's count. Candidates are visited from the longest to the
     shortest; one whose count (after the subtractions so far) reaches T is
     kept, and its count is subtracted from each of its shorter prefixes
     of the same start, so that occurrences covered by a longer piece do
     not also count for its prefixes. Every allowed character, alone and
     with "##", is then added to the pieces, so that every word can be
     split.
  5. Binary search. T is the middle of the range; a vocabulary with more
     entries than `vocab_size` moves the range above T, one with fewer
     below it. The search stops at a vocabulary of at most `vocab_size`
     and at least `vocab_size * (1 - slack_ratio)` entries, or when the
     range is empty, or at T <= 1, and returns the last vocabulary made
     (which may then be larger or smaller than asked).
  6. Order. The reserved tokens, then the characters by code point, then
     the pieces by decreasing count (ties by code point), each once.

Which counts are subtracted in step 4. The guide subtracts the count of a
kept candidate only; TensorFlow Text's code subtracts the count of every
candidate, kept or not (its issue #583 reports the difference). Both are
here: `prefix_discount="all"` gives the code's vocabularies, `"kept"` the
guide's.

How it is computed (the same results, far less work than counting every
substring). A start position turns a word into a "remainder": the word
from that position to its end. A candidate's count is the total count of
the remainders it is a prefix of, so the candidates of one start kind form
a trie over the remainders. Subtracting the count of every candidate
leaves each candidate exactly the count of the remainders equal to it, so
with "all" the kept pieces are the remainders whose count reaches T.
Subtracting the counts of kept candidates leaves each candidate the count
of its remainders not under a longer kept piece; with "kept" a walk of the
trie (sorted remainders and running sums, entering only prefixes whose
count reaches T) finds the kept pieces. The first round's remainders do not
depend on T, so the search computes them once.

Differences from TensorFlow Text's code, which change nothing for a corpus
whose words are at most `max_token_length` characters long and below the
`max_input_words` cap: characters are counted over all words (TensorFlow
Text leaves out the long ones), and every allowed character is in the
vocabulary (TensorFlow Text takes the characters of the learning words
only), so that every word made of allowed characters can be tokenized.
Ties of the `max_input_words` cut go by word (TensorFlow Text keeps input
order), so the result does not depend on the order of the counts.
"""

import bisect
import collections
import itertools

from absl import logging

JOINER = "##"
PREFIX_DISCOUNTS = ("all", "kept")
_LAST_CODE_POINT = 0x10FFFF

LearnerParams = collections.namedtuple("LearnerParams", [
    "vocab_size", "reserved_tokens", "upper_thresh", "lower_thresh",
    "num_iterations", "max_input_words", "max_token_length",
    "max_unique_chars", "min_char_count", "slack_ratio", "prefix_discount"])


def learner_params(vocab_size, reserved_tokens, upper_thresh=10**7,
                   lower_thresh=10, num_iterations=4,
                   max_input_words=5 * 10**6, max_token_length=50,
                   max_unique_chars=1000, min_char_count=1, slack_ratio=0.05,
                   prefix_discount="all"):
  """LearnerParams with TensorFlow Text's defaults.

  Args:
    vocab_size: the most entries of the vocabulary, reserved ones included.
    reserved_tokens: list of str, the vocabulary's first entries.
    upper_thresh, lower_thresh: bounds of the count threshold's search
      (None: the largest, the smallest word count).
    num_iterations: learning rounds per threshold.
    max_input_words: the most words to learn from (None: all).
    max_token_length: longer words are not learned from.
    max_unique_chars: the most characters in the vocabulary.
    min_char_count: characters seen fewer times are left out.
    slack_ratio: a vocabulary this fraction smaller than vocab_size ends
      the search.
    prefix_discount: "all" (TensorFlow Text's code) or "kept" (its guide).
  """
  if prefix_discount not in PREFIX_DISCOUNTS:
    raise ValueError("prefix_discount must be one of %s, not %r" %
                     (PREFIX_DISCOUNTS, prefix_discount))
  return LearnerParams(vocab_size, list(reserved_tokens), upper_thresh,
                       lower_thresh, num_iterations, max_input_words,
                       max_token_length, max_unique_chars, min_char_count,
                       slack_ratio, prefix_discount)


def learn(word_counts, params):
  """The vocabulary of `word_counts`: a binary search over the threshold.

  Args:
    word_counts: dict or iterable of (word, count) pairs, words distinct
      and non-empty, counts positive.
    params: LearnerParams.

  Returns:
    list of str: reserved tokens, characters, pieces (module docstring).
  """
  word_counts = dict(word_counts)
  lower, upper = search_range(word_counts.values(), params.upper_thresh,
                              params.lower_thresh)
  chars = allowed_characters(word_counts, params.max_unique_chars,
                             params.min_char_count)
  words = learning_words(word_counts, params, chars)
  first_round = Remainders.of_whole_words(words)
  while True:
    threshold = (lower + upper) // 2
    vocab = learn_with_threshold(words, chars, threshold, params,
                                 first_round)
    logging.info("Count threshold %d: %d entries (aiming at %d).",
                 threshold, len(vocab), params.vocab_size)
    if (within_slack(len(vocab), params) or lower >= upper or
        threshold <= 1):
      return vocab
    if len(vocab) > params.vocab_size:
      lower = threshold + 1
    else:
      upper = threshold - 1


def within_slack(size, params):
  """Whether a vocabulary of `size` entries ends the search: at most
  `params.vocab_size`, and short of it by no more than the slack."""
  shortfall = params.vocab_size - size
  return 0 <= shortfall <= max(params.slack_ratio * params.vocab_size, 0)


def search_range(counts, upper_thresh, lower_thresh):
  """(lower, upper) bounds of the threshold: the word counts' extremes,
  narrowed by the given bounds (None: not narrowed)."""
  counts = list(counts)
  upper = max(counts) if upper_thresh is None else min(max(counts),
                                                       upper_thresh)
  lower = min(counts) if lower_thresh is None else max(min(counts),
                                                       lower_thresh)
  return lower, upper


def character_counts(word_counts):
  """Counter char -> occurrences in the corpus (each word times its
  count)."""
  counts = collections.Counter()
  for word, count in word_counts.items():
    for char in word:
      counts[char] += count
  return counts


def allowed_characters(word_counts, max_unique_chars, min_char_count):
  """The characters of the vocabulary: the `max_unique_chars` most frequent
  (ties by code point) of those seen at least `min_char_count` times."""
  ranked = sorted(((char, count)
                   for char, count in character_counts(word_counts).items()
                   if count >= min_char_count),
                  key=lambda item: (-item[1], item[0]))
  return frozenset(char for char, _ in ranked[:max_unique_chars])


def learning_words(word_counts, params, chars):
  """The (word, count) pairs learned from, by decreasing count then word."""
  reserved = set(params.reserved_tokens)
  words = sorted(
      ((word, count) for word, count in word_counts.items()
       if len(word) <= params.max_token_length and word not in reserved and
       all(char in chars for char in word)),
      key=lambda item: (-item[1], item[0]))
  return words[:params.max_input_words]


def learn_with_threshold(words, chars, threshold, params, first_round=None):
  """The vocabulary that `num_iterations` rounds learn with one threshold.

  Args:
    words: list of (word, count), as `learning_words` gives them.
    chars: the allowed characters (every word's characters among them).
    threshold: the count a piece needs.
    params: LearnerParams.
    first_round: Remainders.of_whole_words(words), if already made.

  Returns:
    list of str, in the order of step 6 of the module docstring.
  """
  pieces = _with_characters({}, chars)
  for iteration in range(params.num_iterations):
    if iteration == 0:
      remainders = (Remainders.of_whole_words(words) if first_round is None
                    else first_round)
    else:
      remainders = Remainders.of_splits(words, pieces)
    pieces = _with_characters(
        remainders.kept_pieces(threshold, params.prefix_discount), chars)
  return final_vocabulary(params.reserved_tokens, chars, pieces)


def _with_characters(pieces, chars):
  """`pieces` (dict piece -> count) with every character, alone and after
  the joiner, added with count 1 where missing."""
  for char in chars:
    pieces.setdefault(char, 1)
    pieces.setdefault(JOINER + char, 1)
  return pieces


def final_vocabulary(reserved_tokens, chars, pieces):
  """Reserved tokens, characters by code point, then pieces by decreasing
  count and code point; each entry once, at its first place."""
  ordered = itertools.chain(
      reserved_tokens, sorted(chars),
      (piece for piece, _ in sorted(pieces.items(),
                                    key=lambda item: (-item[1], item[0]))))
  return list(dict.fromkeys(ordered))


class Remainders(object):
  """The remainders of one learning round and their counts.

  `first` maps the words themselves (start 0) to their counts; `later`
  maps the remainders of later starts (without the joiner) to the total
  count of the words they were cut from.
  """

  def __init__(self, first, later):
    self.first = first
    self.later = later
    self._sorted = {}

  @classmethod
  def of_whole_words(cls, words):
    """The first round: every start position of every word."""
    first = {}
    later = collections.Counter()
    for word, count in words:
      first[word] = count
      for start in range(1, len(word)):
        later[word[start:]] += count
    return cls(first, later)

  @classmethod
  def of_splits(cls, words, pieces):
    """A later round: the starts of the pieces of the greedy
    longest-match-first split of each word with `pieces`."""
    first_pieces = {p for p in pieces if not p.startswith(JOINER)}
    later_pieces = {p[len(JOINER):] for p in pieces if p.startswith(JOINER)}
    first = {}
    # Remainders by length: the rest of a remainder after its first piece
    # is shorter, so visiting the lengths downwards hands each remainder
    # all of its count before it passes that count on.
    by_length = collections.defaultdict(collections.Counter)
    for word, count in words:
      first[word] = count
      cut = _longest_prefix(word, first_pieces)
      if cut < len(word):
        by_length[len(word) - cut][word[cut:]] += count
    later = collections.Counter()
    for length in range(max(by_length, default=0), 0, -1):
      for remainder, count in by_length.pop(length, {}).items():
        later[remainder] = count
        cut = _longest_prefix(remainder, later_pieces)
        if cut < length:
          by_length[length - cut][remainder[cut:]] += count
    return cls(first, later)

  def kept_pieces(self, threshold, prefix_discount):
    """dict piece -> count of the candidates kept with `threshold`."""
    kept = {}
    for remainders, joiner in ((self.first, ""), (self.later, JOINER)):
      if prefix_discount == "all":
        found = [(remainder, count) for remainder, count in remainders.items()
                 if count >= threshold]
      else:
        strings, running = self._sorted_with_running_sums(joiner, remainders)
        found = _KeptPieceWalk(strings, running, threshold).pieces()
      kept.update((joiner + piece, count) for piece, count in found)
    return kept

  def _sorted_with_running_sums(self, joiner, remainders):
    """The remainders in code point order and the running sums of their
    counts (running[i] = total count of the first i); made once, as the
    search asks the first round again for every threshold."""
    if joiner not in self._sorted:
      strings = sorted(remainders)
      running = [0]
      running.extend(itertools.accumulate(remainders[s] for s in strings))
      self._sorted[joiner] = (strings, running)
    return self._sorted[joiner]


def _longest_prefix(text, pieces):
  """Length of the longest prefix of `text` in `pieces` (0 if none)."""
  for end in range(len(text), 0, -1):
    if text[:end] in pieces:
      return end
  return 0


class _KeptPieceWalk(object):
  """The candidates kept when only kept ones lose their count to their
  prefixes (the guide's rule), found on the trie of sorted remainders.

  A candidate's count is then the count of its remainders that no longer
  kept candidate covers; it is kept when that reaches the threshold. A
  candidate whose remainders count less than the threshold in all can
  neither be kept nor hold a kept one, so the walk skips it.
  """

  def __init__(self, strings, running, threshold):
    self._strings = strings
    self._running = running
    self._threshold = threshold
    self._kept = []

  def pieces(self):
    """list of (piece, count) kept."""
    self._covered_children("", 0, len(self._strings))
    return self._kept

  def _covered_children(self, prefix, lo, hi):
    """Total count that kept candidates cover below `prefix`, whose
    remainders are strings[lo:hi]; records the kept candidates."""
    strings = self._strings
    depth = len(prefix)
    position = lo + 1 if lo < hi and len(strings[lo]) == depth else lo
    covered = 0
    while position < hi:
      char = strings[position][depth]
      end = hi if ord(char) == _LAST_CODE_POINT else bisect.bisect_left(
          strings, prefix + chr(ord(char) + 1), position, hi)
      if self._running[end] - self._running[position] >= self._threshold:
        covered += self._visit(prefix + char, position, end)
      position = end
    return covered

  def _visit(self, candidate, lo, hi):
    """Decides on `candidate`; returns the count it and the kept candidates
    below it cover."""
    total = self._running[hi] - self._running[lo]
    covered = self._covered_children(candidate, lo, hi)
    if total - covered >= self._threshold:
      self._kept.append((candidate, total - covered))
      return total
    return covered
