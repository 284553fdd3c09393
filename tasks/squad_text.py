# coding=utf-8
"""run_squad.py's answers from raw text as graph ops: the "text" signature
of a SQuAD export.

    windows = context_windows(tokenizer, questions, contexts, settings)
    (the model on windows.features: start and end logits [windows, length])
    outputs = answers(tokenizer, windows, start_logits, end_logits, search)

`context_windows` is the SQuAD task's feature conversion for prediction
(squad_examples.split_context, then squad_features.example_features): the
context split into words on SQuAD's whitespace, each word
WordPiece-tokenized, the question cut to max_query_length tokens, windows
of the context's tokens started every doc_stride tokens, each laid out
[CLS] question [SEP] window [SEP]; the windows of every example of the
batch are the model's rows. Each row is padded to max_seq_length as the
script pads it: Google's search ranks the logits of every position,
padding included (see `answers`).

`answers` is squad_predictions.predict_example's search for the answer
that predictions.json holds, without the rest of the n-best list: per window
the n_best_size highest start and end logits (ties: the lower position, as
a stable sort), the pairs that lie in the window's document part, start
where the window gives the token the most context, end at or after the
start and span at most max_answer_length tokens; the best pair over the
example's windows by start + end logit (ties: the first in the script's
order), its text mapped onto the context with get_final_text. With
version_2_with_negative, the null score (the lowest [CLS] start + end over
the windows) against the threshold, as write_predictions decides.
"""

import collections

import tensorflow as tf

from runner import serving_input
from serving import text_windows

# The answer when no span of a SQuAD 1.1 question survives the search
# (Google's placeholder n-best entry, squad_predictions._PLACEHOLDER).
NO_SPAN_TEXT = "empty"

WindowSettings = collections.namedtuple(
    "WindowSettings", ["max_seq_length", "doc_stride", "max_query_length",
                       "whitespace"])
WindowSettings.__doc__ = """How contexts become windows: run_squad.py's
  --max_seq_length, --doc_stride and --max_query_length; `whitespace`, the
  sorted code points that separate a context's words
  (squad_examples.whitespace_code_points())."""

SearchSettings = collections.namedtuple(
    "SearchSettings", ["n_best_size", "max_answer_length",
                       "version_2_with_negative", "null_score_diff_threshold"])
SearchSettings.__doc__ = """The answer search's settings: run_squad.py's flags
  of the same names."""

Windows = collections.namedtuple("Windows", [
    "features", "seq_length", "batch", "example", "in_document", "max_context", "word", "words",
    "word_chars", "char_position", "char_word"])
Windows.__doc__ = """The windows of a batch of examples, and what the answer
  search needs of them.

  features: dict "input_ids", "input_mask", "segment_ids" -> int32
    [windows, max_seq_length], the model's rows.
  seq_length: int, max_seq_length.
  batch: int64 scalar, the number of examples.
  example: int64 [windows], the example of each window; an example's
    windows are consecutive, in context order.
  in_document: bool [windows, max_seq_length], the positions of the
    window's context tokens (token_to_orig_map's keys).
  max_context: bool [windows, max_seq_length], where the window gives the
    token the most context (token_is_max_context).
  word: int64 [windows, max_seq_length], the context word of each context
    token (an index into `words`, all examples' words in order), -1
    elsewhere.
  words: tf.string [words], the context words (SquadExample.doc_tokens).
  word_chars: int64 [words + 1], row splits: the characters of word i are
    the non-whitespace characters word_chars[i] to word_chars[i + 1] - 1.
  char_position: int64 [non-whitespace characters], each one's offset in
    its context, in characters.
  char_word: int64 [non-whitespace characters], the word of each one.
"""


def _whitespace(code_points, whitespace):
  """Whether each code point is in the sorted list `whitespace`."""
  table = tf.constant(whitespace, tf.int32)
  index = tf.minimum(tf.searchsorted(table, code_points, side="left"),
                     tf.size(table) - 1)
  return tf.equal(tf.gather(table, index), code_points)


def _split_contexts(contexts, whitespace):
  """squad_examples.split_context of each context.

  Returns:
    (words, word_rows, word_chars, char_position, char_word): the words
    tf.string [words], the example of each, and the rest as in Windows.
  """
  decoded = tf.strings.unicode_decode(contexts, "UTF-8", errors="replace",
                                      replacement_char=0xFFFD)
  chars = decoded.flat_values
  rows = decoded.value_rowids()
  position = (tf.range(tf.size(chars, out_type=tf.int64)) -
              tf.gather(decoded.row_splits, rows))
  space = _whitespace(chars, whitespace)
  after_space = tf.concat([[True], space[:-1]], 0) | tf.equal(position, 0)
  starts = tf.boolean_mask(after_space, ~space)
  char_word = tf.cumsum(tf.cast(starts, tf.int64)) - 1
  word_rows = tf.boolean_mask(tf.boolean_mask(rows, ~space), starts)
  code_points = tf.RaggedTensor.from_value_rowids(
      tf.boolean_mask(chars, ~space), char_word,
      nrows=tf.size(word_rows, out_type=tf.int64))
  return (tf.strings.unicode_encode(code_points, "UTF-8"), word_rows,
          code_points.row_splits, tf.boolean_mask(position, ~space),
          char_word)


def _column(value, lengths):
  """A ragged [rows, (lengths)] of `value` (int64)."""
  return tf.RaggedTensor.from_row_lengths(
      tf.fill([tf.reduce_sum(lengths)], tf.constant(value, tf.int64)),
      lengths)


def context_windows(tokenizer, questions, contexts, settings):
  """The windows of each (question, context), as
  squad_features.example_features makes them for prediction.

  Args:
    tokenizer: a serving.graph_tokenizer tokenizer (for_model).
    questions, contexts: tf.string [batch].
    settings: a WindowSettings.

  Returns:
    Windows.
  """
  seq_length = settings.max_seq_length
  words, word_rows, word_chars, char_position, char_word = _split_contexts(
      contexts, settings.whitespace)
  batch = tf.shape(contexts, out_type=tf.int64)[0]
  # Each word tokenized alone, as _tokenize_document does.
  pieces = tokenizer.tokenize(words)
  piece_word = pieces.value_rowids()
  document = tf.RaggedTensor.from_value_rowids(
      pieces.flat_values, tf.gather(word_rows, piece_word), nrows=batch)
  query = tokenizer.tokenize(questions)[:, :settings.max_query_length]
  query_lengths = query.row_lengths()
  room = seq_length - query_lengths - 3  # [CLS], [SEP] and [SEP].
  doc_lengths = document.row_lengths()
  spans, span_lengths = text_windows.doc_spans(doc_lengths, room,
                                               settings.doc_stride)
  owners = text_windows.max_context_owners(span_lengths, doc_lengths, room,
                                           settings.doc_stride)
  example = spans.value_rowids()
  starts, lengths = spans.flat_values, span_lengths.flat_values
  first_piece = tf.gather(document.row_splits, example) + starts
  window_pieces = tf.ragged.range(first_piece, first_piece + lengths)
  window_ids = tf.gather(document.flat_values, window_pieces)
  window_query = tf.gather(query, example)
  num_windows = tf.size(example, out_type=tf.int64)
  ones = tf.ones([num_windows], tf.int64)
  cls, sep = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
  ids = tf.concat([_column(cls, ones), window_query, _column(sep, ones),
                   window_ids, _column(sep, ones)], axis=1)
  segments = tf.concat([_column(0, ones), tf.zeros_like(window_query),
                        _column(0, ones), tf.ones_like(window_ids),
                        _column(1, ones)], axis=1)
  shape = [None, seq_length]
  features = {
      "input_ids": tf.cast(ids.to_tensor(0, shape=shape), tf.int32),
      "input_mask": tf.cast(tf.ones_like(ids).to_tensor(0, shape=shape),
                            tf.int32),
      "segment_ids": tf.cast(segments.to_tensor(0, shape=shape), tf.int32),
  }
  token_window = window_pieces.value_rowids()
  in_window = tf.ragged.range(lengths).flat_values
  token_position = tf.gather(starts, token_window) + in_window
  token_example = tf.gather(example, token_window)
  max_context = tf.equal(
      tf.gather(owners.flat_values,
                tf.gather(owners.row_starts(), token_example) +
                token_position),
      token_window - tf.gather(spans.row_starts(), token_example))
  column = tf.gather(tf.gather(query_lengths, example) + 2,
                     token_window) + in_window
  cells = tf.stack([token_window, column], axis=1)
  dense = [num_windows, seq_length]
  word = tf.gather(piece_word, window_pieces.flat_values)
  return Windows(
      features=features, seq_length=seq_length, batch=batch, example=example,
      in_document=tf.scatter_nd(cells, tf.ones_like(column, tf.bool), dense),
      max_context=tf.scatter_nd(cells, max_context, dense),
      word=tf.scatter_nd(cells, word + 1, dense) - 1,
      words=words, word_chars=word_chars, char_position=char_position,
      char_word=char_word)


def _gather(params, indices, valid):
  """params[indices] where `valid`, else 0 (or ""): the index of a row
  without an answer may point anywhere, even into empty params."""
  padded = tf.concat([params, tf.zeros([1], params.dtype)], axis=0)
  return tf.gather(padded, tf.where(valid, indices,
                                    tf.size(params, out_type=indices.dtype)))


def _best_spans(windows, start_logits, end_logits, search):
  """The best valid (start, end) of each example: _prelim_predictions'
  candidates, the first of the highest start + end (float64).

  Returns:
    dict "found" bool [batch]; "window", "start", "end" int64 [batch] (the
    window and positions in it); "start_logit", "end_logit" float32 [batch]
    (0 where nothing is found); "score" float64 [batch].
  """
  k = min(search.n_best_size, windows.seq_length)
  start_values, start_index = tf.math.top_k(start_logits, k)
  end_values, end_index = tf.math.top_k(end_logits, k)
  start_ok = (tf.gather(windows.in_document, start_index, batch_dims=1) &
              tf.gather(windows.max_context, start_index, batch_dims=1))
  end_ok = tf.gather(windows.in_document, end_index, batch_dims=1)
  span = end_index[:, None, :] - start_index[:, :, None]
  valid = tf.reshape(start_ok[:, :, None] & end_ok[:, None, :] & (span >= 0) &
                     (span + 1 <= search.max_answer_length), [-1])
  score = tf.reshape(tf.cast(start_values, tf.float64)[:, :, None] +
                     tf.cast(end_values, tf.float64)[:, None, :], [-1])
  score = tf.where(valid, score, float("-inf"))
  example = tf.repeat(windows.example, k * k)
  batch = windows.batch
  best = tf.math.unsorted_segment_max(score, example, batch)
  found = tf.math.unsorted_segment_max(tf.cast(valid, tf.int32), example,
                                       batch) > 0
  # Candidates in the script's order (window, start rank, end rank): the
  # first of the best wins, as the stable sort puts it first.
  order = tf.range(tf.size(score, out_type=tf.int64))
  chosen = tf.math.unsorted_segment_min(
      tf.where(valid & tf.equal(score, tf.gather(best, example)), order,
               tf.int64.max), example, batch)
  window = chosen // (k * k)
  start_rank = window * k + chosen // k % k
  end_rank = window * k + chosen % k
  return {
      "found": found, "window": window, "score": best,
      "start": tf.cast(_gather(tf.reshape(start_index, [-1]), start_rank,
                               found), tf.int64),
      "end": tf.cast(_gather(tf.reshape(end_index, [-1]), end_rank, found),
                     tf.int64),
      "start_logit": _gather(tf.reshape(start_values, [-1]), start_rank,
                             found),
      "end_logit": _gather(tf.reshape(end_values, [-1]), end_rank, found)}


def _null_candidates(windows, start_logits, end_logits):
  """_null_prediction of each example: the [CLS] logits of the first
  window with the lowest start + end; 0 and 0 without a window.

  Returns:
    (start_logit, end_logit) float32 [batch].
  """
  score = (tf.cast(start_logits[:, 0], tf.float64) +
           tf.cast(end_logits[:, 0], tf.float64))
  batch = windows.batch
  lowest = tf.math.unsorted_segment_min(score, windows.example, batch)
  order = tf.range(tf.size(score, out_type=tf.int64))
  window = tf.math.unsorted_segment_min(
      tf.where(tf.equal(score, tf.gather(lowest, windows.example)), order,
               tf.int64.max), windows.example, batch)
  has_window = tf.math.unsorted_segment_max(
      tf.ones_like(windows.example), windows.example, batch) > 0
  return (_gather(start_logits[:, 0], window, has_window),
          _gather(end_logits[:, 0], window, has_window))


def _first_occurrence(haystacks, needles):
  """str.find of each needle in its haystack, in bytes (-1: absent or an
  empty needle). In valid UTF-8 the first byte match is the first character
  match."""
  def find(pair):
    haystack, needle = pair
    parts = tf.strings.split(haystack, sep=needle, maxsplit=1)
    before = tf.concat([parts, [""]], 0)[0]  # An empty haystack has none.
    return tf.where(tf.equal(needle, "") | (tf.size(parts) < 2),
                    tf.constant(-1, tf.int64),
                    tf.cast(tf.strings.length(before), tf.int64))
  return tf.map_fn(find, (haystacks, needles),
                   fn_output_signature=tf.int64)


def _predicted_text(tokenizer, windows, best):
  """_span_text's tok_text: the span's pieces joined by spaces with "##"
  removed and runs of spaces made one (pieces hold no whitespace)."""
  tokens = sorted(tokenizer.vocab, key=tokenizer.vocab.get)
  flat_ids = tf.reshape(tf.cast(windows.features["input_ids"], tf.int64),
                        [-1])
  row = best["window"] * windows.seq_length
  first = row + best["start"]
  last = tf.where(best["found"], row + best["end"] + 1, first)
  pieces = tf.gather(tf.constant(tokens),
                     tf.gather(flat_ids, tf.ragged.range(first, last)))
  text = tf.strings.reduce_join(pieces, axis=1, separator=" ")
  for pattern, replacement in ((" ##", ""), ("##", ""), ("^ +| +$", ""),
                               (" +", " ")):
    text = tf.strings.regex_replace(text, pattern, replacement)
  return text


def _space_counts(texts):
  """(spaces_before, lengths): spaces_before(positions) counts the U+0020
  of each text before its character `positions` (clipped to the text);
  lengths are the texts' lengths in characters."""
  chars = tf.strings.unicode_decode(texts, "UTF-8")
  space = tf.cast(tf.equal(chars.flat_values, 32), tf.int64)
  before = tf.concat([tf.cumsum(space, exclusive=True),
                      [tf.reduce_sum(space)]], 0)
  lengths = chars.row_lengths()
  base = chars.row_splits[:-1]

  def spaces_before(positions):
    at = base + tf.clip_by_value(positions, 0, lengths)
    return tf.gather(before, at) - tf.gather(before, base)

  return spaces_before, lengths


def _final_text(tokenizer, windows, best):
  """get_final_text of each best span, and where it lies in the context.

  The span's words joined by spaces (orig_text) are basic-tokenized and
  joined by spaces (tok_text); the predicted text is looked up in it (the
  first occurrence) and carried over to orig_text by its index among the
  characters that are not spaces, when both texts have as many; else the
  answer is orig_text whole.

  Returns:
    (text tf.string, start int64, end int64) [batch]: the answer, and its
    characters' offsets in the context (end exclusive; the answer's words
    are joined by one space, the context may hold other whitespace).
  """
  found = best["found"]
  flat_word = tf.reshape(windows.word, [-1])
  row = best["window"] * windows.seq_length
  first_word = _gather(flat_word, row + best["start"], found)
  last_word = _gather(flat_word, row + best["end"], found)
  orig_text = tf.strings.reduce_join(
      tf.gather(windows.words, tf.ragged.range(
          first_word, tf.where(found, last_word + 1, first_word))),
      axis=1, separator=" ")
  tok_text = tf.strings.reduce_join(
      tokenizer.basic_words(orig_text), axis=1,
      separator=" ")
  pred_text = _predicted_text(tokenizer, windows, best)
  at_byte = _first_occurrence(tok_text, pred_text)
  start = tf.cast(tf.strings.length(
      tf.strings.substr(tok_text, tf.zeros_like(at_byte),
                        tf.maximum(at_byte, 0)), unit="UTF8_CHAR"), tf.int64)
  end = start + tf.cast(tf.strings.length(pred_text, unit="UTF8_CHAR"),
                        tf.int64) - 1
  spaces_before, tok_length = _space_counts(tok_text)
  first_char = _gather(windows.word_chars, first_word, found)
  orig_chars = _gather(windows.word_chars, last_word + 1, found) - first_char
  mapped = found & (at_byte >= 0) & tf.equal(
      tok_length - spaces_before(tok_length), orig_chars)
  # The k-th character of orig_text that is not a space is the k-th
  # non-whitespace character of its words in the context.
  start_char = first_char + tf.where(mapped, start - spaces_before(start), 0)
  end_char = tf.where(mapped, first_char + end - spaces_before(end),
                      first_char + orig_chars - 1)
  start_word = _gather(windows.char_word, start_char, found)
  end_word = _gather(windows.char_word, end_char, found)
  # Its offset in orig_text: the characters before it plus one space per
  # word before its own.
  offset = start_char - first_char + start_word - first_word
  length = end_char - start_char + end_word - start_word + 1
  text = tf.where(mapped, tf.strings.substr(orig_text, offset, length,
                                            unit="UTF8_CHAR"), orig_text)
  return (text, _gather(windows.char_position, start_char, found),
          _gather(windows.char_position, end_char, found) + 1)


def answers(tokenizer, windows, start_logits, end_logits, search):
  """The answers of the examples whose windows are `windows`, as
  run_squad.py's predictions.json holds them.

  Args:
    tokenizer: the GraphTokenizer that made `windows`.
    windows: a Windows.
    start_logits, end_logits: float32 [windows, max_seq_length], the
      model's on windows.features.
    search: a SearchSettings.

  Returns:
    dict of [batch] tensors:
      "answer" tf.string: predictions.json's text; "empty" when no span
        survives in SQuAD 1.1 (the script's placeholder), "" for no answer
        in SQuAD 2.0.
      "start_logit", "end_logit" float32: those of the best non-empty
        answer (nbest_predictions.json's first entry with a text; 0 when
        there is none).
      "answer_start", "answer_end" int32: the answer's offsets in the
        context, in characters (Python's str indices; end exclusive), -1
        when the answer is not a span ("", "empty").
      "null_score_diff" float32 (SQuAD 2.0 only): null_odds.json's score
        null minus the best non-empty score; the answer is "" above the
        threshold.
  """
  best = _best_spans(windows, start_logits, end_logits, search)
  text, start, end = _final_text(tokenizer, windows, best)
  listed = best["found"]
  outputs = {}
  if search.version_2_with_negative:
    null_start, null_end = _null_candidates(windows, start_logits, end_logits)
    null_score = (tf.cast(null_start, tf.float64) +
                  tf.cast(null_end, tf.float64))
    if search.n_best_size == 1:
      # A null candidate that ranks first fills the one-entry list.
      listed &= ~(null_score > best["score"])
    diff = (null_score - tf.cast(tf.where(listed, best["start_logit"], 0.0),
                                 tf.float64)
            - tf.cast(tf.where(listed, best["end_logit"], 0.0), tf.float64))
    answered = listed & ~(diff > search.null_score_diff_threshold)
    outputs["answer"] = tf.where(answered, text, "")
    outputs["null_score_diff"] = tf.cast(diff, tf.float32)
  else:
    answered = listed
    outputs["answer"] = tf.where(answered, text, NO_SPAN_TEXT)
  for name in ("start_logit", "end_logit"):
    outputs[name] = tf.where(listed, best[name], 0.0)
  outputs["answer_start"] = tf.cast(tf.where(answered, start, -1), tf.int32)
  outputs["answer_end"] = tf.cast(tf.where(answered, end, -1), tf.int32)
  return outputs


def text_signature_of(tokenizer_fn, window_settings, search):
  """A SQuAD model's signature from raw text (runner/serving_input.py).

  Inputs "question" and "context", tf.string [batch]; outputs as `answers`
  gives them. The settings are baked into the export.

  Args:
    tokenizer_fn: callable () -> a serving.graph_tokenizer tokenizer,
      called in the export graph.
    window_settings: a WindowSettings.
    search: a SearchSettings.
  """
  built = {}

  def inputs_fn():
    texts = {name: tf.compat.v1.placeholder(tf.string, [None], name=name)
             for name in ("question", "context")}
    built["tokenizer"] = tokenizer_fn()
    built["windows"] = context_windows(built["tokenizer"], texts["question"],
                                       texts["context"], window_settings)
    return texts, built["windows"].features

  def outputs_fn(predictions, texts):
    del texts  # The windows hold what the answers need of them.
    return answers(built["tokenizer"], built["windows"],
                   predictions["start_logits"], predictions["end_logits"],
                   search)

  return serving_input.TextSignature(inputs_fn, outputs_fn)
