# coding=utf-8
"""Google's pre-training instances, on token ids: documents to masked-LM and
next-sentence instances (create_training_instances and the functions below
it, with Google's random semantics: the same documents, options and seed
give the same instances), and a corpus's lines to a document of ids.

create_pretraining_data.py runs this on a whole corpus (its faithful mode)
or shard by shard (its scalable mode) and keeps Google's names of these
functions reachable from the script.
"""

import collections

from userio import cli

# SentencePiece marks the first piece of each word with this character.
_SPM_WORD_START = "\u2581"

# ---------------------------------------------------------------------------
# Instances: Google's algorithm, on token ids.
# ---------------------------------------------------------------------------


class TrainingInstance(object):
  """One segment pair before padding.

  Attributes:
    tokens: ids of [CLS] A [SEP] B [SEP], masked ones replaced.
    segment_ids: 0 for [CLS], A and the first [SEP]; 1 for B and the last.
    masked_lm_positions: ascending positions of the masked tokens.
    masked_lm_labels: the original ids at those positions.
    is_random_next: whether B was taken from another document.
  """

  __slots__ = ("tokens", "segment_ids", "masked_lm_positions",
               "masked_lm_labels", "is_random_next")

  def __init__(self, tokens, segment_ids, masked_lm_positions,
               masked_lm_labels, is_random_next):
    self.tokens = tokens
    self.segment_ids = segment_ids
    self.masked_lm_positions = masked_lm_positions
    self.masked_lm_labels = masked_lm_labels
    self.is_random_next = is_random_next


# The token ids the masking needs: `words` are the random replacements in
# the vocabulary's order, `continuations` the ids of pieces that continue a
# word (whole-word masking keeps them with the piece before).
MaskingVocab = collections.namedtuple(
    "MaskingVocab", ["cls", "sep", "mask", "words", "continuations"])

# Everything that shapes the instances besides the documents and the seed.
InstanceOptions = collections.namedtuple(
    "InstanceOptions", ["max_seq_length", "short_seq_prob", "masked_lm_prob",
                        "max_predictions_per_seq", "do_whole_word_mask",
                        "dupe_factor"])


def masking_vocab(tokenizer):
  """The MaskingVocab of a `tokenization.FullTokenizer`.

  The replacement words are the vocabulary's entries in file order (for
  WordPiece, a token listed twice counts once, with the id of its last
  line, as Google's dict-based lookup gives it).

  Raises:
    cli.UserError: [CLS], [SEP] or [MASK] is not in the vocabulary.
  """
  missing = [t for t in ("[CLS]", "[SEP]", "[MASK]")
             if t not in tokenizer.vocab]
  if missing:
    raise cli.UserError(
        "The vocabulary has no %s; use the vocabulary of a BERT model "
        "(a SentencePiece model needs them as user-defined symbols)." %
        " or ".join(missing))
  cls, sep, mask = tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]",
                                                    "[MASK]"])
  return MaskingVocab(cls=cls, sep=sep, mask=mask,
                      words=list(tokenizer.vocab.values()),
                      continuations=_continuation_ids(tokenizer))


def _continuation_ids(tokenizer):
  """Ids of the pieces that continue the word of the piece before them."""
  sp_model = tokenizer.sp_model
  if sp_model is None:
    return frozenset(i for token, i in tokenizer.vocab.items()
                     if token.startswith("##"))
  return frozenset(
      i for piece, i in tokenizer.vocab.items()
      if not piece.startswith(_SPM_WORD_START) and
      not (sp_model.is_control(i) or sp_model.is_unknown(i)))


def create_training_instances(all_documents, options, vocab, rng,
                              make_record=lambda instance: instance,
                              meter=None):
  """Google's instances of a corpus, in Google's order.

  Shuffles the documents, makes `options.dupe_factor` passes over them
  (each document gives its pairs in every pass, with new draws), then
  shuffles all instances.

  Args:
    all_documents: list of documents, each a list of sentences, each a
      non-empty list of token ids. Shuffled in place.
    options: InstanceOptions.
    vocab: MaskingVocab.
    rng: random.Random; every draw comes from it, in Google's order.
    make_record: applied to each TrainingInstance as it is made (e.g. to
      serialize it, which keeps far less in memory).
    meter: optional progress.Progress, advanced by documents processed.

  Returns:
    list of make_record(instance), shuffled.
  """
  rng.shuffle(all_documents)
  records = []
  for _ in range(options.dupe_factor):
    for document_index in range(len(all_documents)):
      records.extend(
          make_record(instance) for instance in create_instances_from_document(
              all_documents, document_index, options, vocab, rng))
      if meter is not None:
        meter.advance(instances=len(records))
  rng.shuffle(records)
  return records


def create_instances_from_document(all_documents, document_index, options,
                                   vocab, rng):
  """The instances of one document, with Google's draws.

  Sentences are gathered into a chunk until it reaches the target length
  (max_seq_length - 3, or with probability short_seq_prob a random length
  from 2 up). A random number of the chunk's sentences form A; B is either
  the rest of the chunk or, half of the time (always for a one-sentence
  chunk), text from a random other document, in which case the chunk's
  unused sentences start the next chunk.

  Returns:
    list of TrainingInstance.
  """
  document = all_documents[document_index]
  max_num_tokens = options.max_seq_length - 3
  target_seq_length = max_num_tokens
  if rng.random() < options.short_seq_prob:
    target_seq_length = rng.randint(2, max_num_tokens)

  instances = []
  chunk = []
  chunk_length = 0
  i = 0
  while i < len(document):
    chunk.append(document[i])
    chunk_length += len(document[i])
    if i == len(document) - 1 or chunk_length >= target_seq_length:
      a_end = 1
      if len(chunk) >= 2:
        a_end = rng.randint(1, len(chunk) - 1)
      tokens_a = [t for sentence in chunk[:a_end] for t in sentence]
      # A one-sentence chunk has no next sentence of its own to offer.
      is_random_next = len(chunk) == 1 or rng.random() < 0.5
      if is_random_next:
        tokens_b = _random_next_tokens(
            all_documents, document_index,
            target_seq_length - len(tokens_a), rng)
        # The chunk's sentences after A were not used: they start the next
        # chunk instead of being dropped.
        i -= len(chunk) - a_end
      else:
        tokens_b = [t for sentence in chunk[a_end:] for t in sentence]
      truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
      instances.append(_make_instance(tokens_a, tokens_b, is_random_next,
                                      options, vocab, rng))
      chunk = []
      chunk_length = 0
    i += 1
  return instances


def _random_next_tokens(all_documents, document_index, target_length, rng):
  """Consecutive sentences of a random other document, from a random start,
  until `target_length` tokens are reached (or the document ends)."""
  # Ten tries to avoid the current document; a one-document corpus (or a
  # very unlucky draw) falls back to the document itself.
  for _ in range(10):
    random_index = rng.randint(0, len(all_documents) - 1)
    if random_index != document_index:
      break
  random_document = all_documents[random_index]
  tokens = []
  for sentence in random_document[rng.randint(0, len(random_document) - 1):]:
    tokens.extend(sentence)
    if len(tokens) >= target_length:
      break
  return tokens


def _make_instance(tokens_a, tokens_b, is_random_next, options, vocab, rng):
  """[CLS] A [SEP] B [SEP], masked, as a TrainingInstance."""
  tokens = [vocab.cls] + tokens_a + [vocab.sep] + tokens_b + [vocab.sep]
  segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
  tokens, positions, labels = create_masked_lm_predictions(
      tokens, options.masked_lm_prob, options.max_predictions_per_seq, vocab,
      rng, do_whole_word_mask=options.do_whole_word_mask)
  return TrainingInstance(tokens, segment_ids, positions, labels,
                          is_random_next)


def create_masked_lm_predictions(tokens, masked_lm_prob,
                                 max_predictions_per_seq, vocab, rng,
                                 do_whole_word_mask=False):
  """Picks the tokens to predict and replaces them, with Google's draws.

  The candidates are all positions but [CLS] and [SEP] (with whole-word
  masking, groups of a word's pieces; a piece continuing a word attaches
  to the last group even across a [SEP]). They are shuffled and taken in
  order until round(len(tokens) * masked_lm_prob) positions are masked
  (Python 3 rounds halves to even; at least 1, at most
  max_predictions_per_seq), skipping a group that would overshoot. A
  chosen token becomes [MASK] 80% of the time, stays itself 10% and
  becomes a random vocabulary entry 10%.

  Args:
    tokens: list of ids, [CLS] A [SEP] B [SEP].
    masked_lm_prob, max_predictions_per_seq: as the flags.
    vocab: MaskingVocab.
    rng: random.Random.
    do_whole_word_mask: mask whole words.

  Returns:
    (masked tokens, ascending positions, original ids at the positions).
  """
  candidates = []
  for i, token in enumerate(tokens):
    if token == vocab.cls or token == vocab.sep:
      continue
    if (do_whole_word_mask and candidates and
        token in vocab.continuations):
      candidates[-1].append(i)
    else:
      candidates.append([i])
  rng.shuffle(candidates)

  num_to_predict = min(max_predictions_per_seq,
                       max(1, int(round(len(tokens) * masked_lm_prob))))
  output_tokens = list(tokens)
  masked = []
  # The groups are disjoint, so no position can be chosen twice.
  for group in candidates:
    if len(masked) >= num_to_predict:
      break
    if len(masked) + len(group) > num_to_predict:
      continue
    for index in group:
      if rng.random() < 0.8:
        output_tokens[index] = vocab.mask
      elif rng.random() >= 0.5:
        output_tokens[index] = vocab.words[rng.randint(0,
                                                       len(vocab.words) - 1)]
      masked.append((index, tokens[index]))
  masked.sort()
  return (output_tokens, [index for index, _ in masked],
          [label for _, label in masked])


def truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
  """Shortens the longer list (B on a tie) one token at a time, from the
  front or the back at random, until both fit in `max_num_tokens`."""
  while len(tokens_a) + len(tokens_b) > max_num_tokens:
    trunc_tokens = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
    if rng.random() < 0.5:
      del trunc_tokens[0]
    else:
      trunc_tokens.pop()


# ---------------------------------------------------------------------------
# Tokenizing the text (corpus/text_files.py reads it).
# ---------------------------------------------------------------------------


def tokenize_document(lines, tokenizer):
  """The token ids of each line that has any; [] if none has."""
  document = []
  for line in lines:
    ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line))
    if ids:
      document.append(ids)
  return document
