# coding=utf-8
"""Google's vocab.txt layout, for a vocabulary of any size.

Google's uncased vocabulary begins with 999 reserved lines: [PAD] (id 0),
[unused0] ... [unused98] (ids 1-99), [UNK] (100), [CLS] (101), [SEP] (102),
[MASK] (103), [unused99] ... [unused993] (ids 104-998). Then come the
single characters by code point, then the pieces by decreasing count, the
"##" forms of rare characters last: the order TensorFlow Text's learner
writes (vocabulary/wordpiece_learner.py).

With `num_unused` slots, the first min(num_unused, 99) go before [UNK] and
the rest after [MASK]. So every count of 99 or more keeps Google's ids of
[UNK], [CLS], [SEP] and [MASK] (100-103); a smaller count moves them down
to num_unused + 1 ... num_unused + 4. Slots are named [unused0], [unused1],
... as in the uncased vocabulary (Google's cased one counts from 1); their
names never matter, as the basic tokenizer splits "[unused5]" into three
tokens, so no text maps to them. A model holds a trained row for each slot,
to be given to a new token later without resizing the model.

A vocabulary has exactly `vocab_size` lines: when the learner stops short
of it (it accepts a vocabulary within its slack below the size), further
[unusedN] slots fill the end; when it overshoots, the least frequent pieces
of two or more characters are left out.
"""

PAD = "[PAD]"
SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")
# Google's uncased vocabulary has this many [unusedN] slots.
GOOGLE_NUM_UNUSED = 994
# Slots between [PAD] and [UNK] in Google's vocabularies.
_UNUSED_BEFORE_SPECIALS = 99
_JOINER = "##"


def unused_token(index):
  return "[unused%d]" % index


def reserved_tokens(num_unused):
  """[PAD], the first slots, [UNK], [CLS], [SEP], [MASK], the other slots."""
  before = min(num_unused, _UNUSED_BEFORE_SPECIALS)
  return ([PAD] + [unused_token(i) for i in range(before)] +
          list(SPECIAL_TOKENS) +
          [unused_token(i) for i in range(before, num_unused)])


def smallest_size(num_unused, num_chars):
  """The fewest lines a vocabulary needs: the reserved tokens and every
  character alone and after "##"."""
  return len(reserved_tokens(num_unused)) + 2 * num_chars


def fit_to_size(tokens, vocab_size, num_unused, chars):
  """`tokens` as the learner made them, cut or filled to `vocab_size`.

  Args:
    tokens: list of str, reserved tokens first (`reserved_tokens`).
    vocab_size: lines wanted, at least smallest_size(num_unused, chars).
    num_unused: slots among the reserved tokens.
    chars: the vocabulary's characters; they and their "##" forms stay.

  Returns:
    (list of vocab_size str, pieces left out, slots added at the end).
  """
  excess = len(tokens) - vocab_size
  if excess <= 0:
    added = [unused_token(num_unused + i) for i in range(-excess)]
    return tokens + added, 0, len(added)
  num_reserved = len(reserved_tokens(num_unused))
  kept_always = set(chars) | {_JOINER + char for char in chars}
  dropped = set()
  for index in range(len(tokens) - 1, num_reserved - 1, -1):
    if len(dropped) == excess:
      break
    if tokens[index] not in kept_always:
      dropped.add(index)
  return ([token for index, token in enumerate(tokens)
           if index not in dropped], len(dropped), 0)
