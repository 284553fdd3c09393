# coding=utf-8
"""CoNLL-2003 named-entity files: reading them, and scoring entities as the
shared task's evaluation script (conlleval) does.

The files, as distributed: one token per line, its fields separated by
spaces (token, part of speech, chunk, entity tag in the original release;
the tests and other corpora may have only the token and the tag), blank
lines between sentences, and a line whose token is "-DOCSTART-" before each
document. The token is the first field and the entity tag the last. A line
with a tab is split at tabs only (so a token may hold a space), any other
at runs of spaces. A tag is "O" or "<prefix>-<type>" with any type, read
under one of three schemes:

  iob1  the original release: an entity's words are I-<type>; B-<type>
        marks only a word that starts an entity right after another entity
        of the same type.
  iob2  (BIO) every entity starts with B-<type>, its other words I-<type>.
  bioes (IOBES) a one-word entity is S-<type>; a longer one is B-<type>,
        I-<type> ..., E-<type>.

Entity-level scores follow conlleval's definition: an entity (a chunk) is
correct only when the prediction has a chunk of the same type with the
same first and last word; a partial match counts as a wrong guess and a
missed entity. Chunks begin and end by conlleval's rules, which read IOB1
and IOB2 alike: a chunk begins at B-X, or at I-X after O or after a tag of
another type; it ends before B, O or a change of type. conlleval does not
know BIOES (it reads E- as the IOE schemes' end mark and has no S-, so two
adjacent one-word entities of a type would merge), so S-X and E-X are read
as B-X and I-X first: the same entities for well-formed tags, and
conlleval's lenient reading of the rest. Precision = correct / predicted
chunks, recall = correct / gold chunks, F1 their harmonic mean; token
accuracy counts the tags predicted exactly. Sentence breaks close every
chunk.
"""

import collections
import os

from userio import cli
from userio import file_systems
from userio import utf8

TAG_SCHEMES = ("iob1", "iob2", "bioes")
# The prefixes of the entity tags of each scheme, in the label list's order.
SCHEME_PREFIXES = {"iob1": ("B", "I"), "iob2": ("B", "I"),
                   "bioes": ("B", "I", "E", "S")}
# How BIOES's prefixes read as IOB2's, for scoring.
_AS_IOB2 = {"S": "B", "E": "I"}
# The texts a document is read as: all its sentences together (the paper's
# maximal document context), or each sentence alone.
CONTEXTS = ("document", "sentence")
OUTSIDE = "O"
DOCUMENT_START = "-DOCSTART-"
# The names each set goes by in the distributed folders, in order of search.
DATA_FILES = collections.OrderedDict((
    ("train", ("train.txt", "eng.train")),
    ("dev", ("valid.txt", "dev.txt", "eng.testa")),
    ("test", ("test.txt", "eng.testb")),
))

Word = collections.namedtuple("Word", ["text", "tag", "line"])
Word.__doc__ = """One token of a file: its text, its tag (None in a file
without tags) and its 1-based line number."""

Chunk = collections.namedtuple("Chunk", ["type", "start", "end"])
Chunk.__doc__ = """An entity: its type and the indices of its first word
and one past its last."""


# ---------------------------------------------------------------- reading


def find_data_file(data_dir, set_type):
  """The path of set `set_type` ("train", "dev", "test") in `data_dir`.

  Raises:
    cli.UserError listing the names looked for.
  """
  names = DATA_FILES[set_type]
  for name in names:
    path = os.path.join(data_dir, name)
    if file_systems.isfile(path):
      return path
  raise cli.UserError(
      "--data_dir=%s holds no %s file (looked for %s)" % (
          data_dir, set_type, ", ".join(names)),
      fix="Point --data_dir at the folder with the CoNLL-2003 files "
      "(train.txt, valid.txt, test.txt) or give the file one of those names.")


def split_tag(tag):
  """(prefix, type) of a tag as conlleval splits it: at the first hyphen;
  a tag without one has the type ""."""
  prefix, hyphen, entity_type = tag.partition("-")
  return (prefix, entity_type) if hyphen else (tag, "")


def _check_tag(tag, where, tag_scheme):
  """A tag must be O or one of the scheme's prefixes, a hyphen and a
  type."""
  prefix, entity_type = split_tag(tag)
  if tag == OUTSIDE or (prefix in SCHEME_PREFIXES[tag_scheme] and
                        entity_type):
    return
  if entity_type and prefix in SCHEME_PREFIXES["bioes"]:
    fix = "If the file is BIOES (IOBES), pass --tag_scheme=bioes."
  else:
    fix = ("Entity tags are O, B-<type> and I-<type> (IOB1, IOB2), and E- "
           "and S- under BIOES; other schemes (BILOU) need converting first.")
  allowed = [OUTSIDE] + [prefix + "-<type>"
                         for prefix in SCHEME_PREFIXES[tag_scheme]]
  raise cli.UserError("%s: tag %r is not %s or %s (--tag_scheme=%s)" % (
      where, tag, ", ".join(allowed[:-1]), allowed[-1], tag_scheme), fix=fix)


def _scheme_problem(previous, tag, tag_scheme):
  """Why `tag` after `previous` ("O" at a sentence's start; a sentence's
  end is read as an "O" after its last tag) contradicts `tag_scheme`, or
  None."""
  prefix, entity_type = split_tag(tag)
  before, before_type = split_tag(previous)
  continues = before != OUTSIDE and before_type == entity_type
  if tag_scheme == "iob2" and prefix == "I" and not continues:
    return "an entity starts with I-%s, but under IOB2 it starts with B-%s" % (
        entity_type, entity_type)
  if tag_scheme == "iob1" and prefix == "B" and not continues:
    return ("B-%s follows %s, but under IOB1 B- only starts an entity right "
            "after another %s entity" % (
                entity_type, previous if previous != OUTSIDE else
                "O or a sentence start", entity_type))
  if tag_scheme != "bioes":
    return None
  is_open = before in ("B", "I")
  if prefix in ("I", "E") and not (is_open and continues):
    return ("%s follows %s, but under BIOES an entity's I- and E- follow its "
            "B- or I-" % (tag, previous if previous != OUTSIDE else
                           "O or a sentence start"))
  if is_open and not (prefix in ("I", "E") and continues):
    return ("%s is followed by %s, but under BIOES an entity of several "
            "words ends with E-%s" % (
                previous, tag if tag != OUTSIDE else "O or a sentence end",
                before_type))
  return None


def _first_problem(sentence, tag_scheme):
  """(the word, the problem) of the first tag of `sentence` that
  contradicts `tag_scheme`, or None."""
  previous = OUTSIDE
  for word in sentence + [Word(None, OUTSIDE, None)]:
    problem = _scheme_problem(previous, word.tag, tag_scheme)
    if problem:
      return word if word.text is not None else sentence[-1], problem
    previous = word.tag
  return None


def check_scheme(sentence, tag_scheme, path):
  """Raises cli.UserError at the first tag of `sentence` (a list of Word)
  that contradicts `tag_scheme`, naming a scheme that reads the sentence
  if there is one."""
  found = _first_problem(sentence, tag_scheme)
  if not found:
    return
  word, problem = found
  others = [scheme for scheme in TAG_SCHEMES if scheme != tag_scheme and all(
      split_tag(w.tag)[0] in SCHEME_PREFIXES[scheme] + (OUTSIDE,)
      for w in sentence) and not _first_problem(sentence, scheme)]
  fix = ("If the file is %s, pass --tag_scheme=%s; else repair the tag." % (
      others[0].upper(), others[0]) if others else "Repair the tag.")
  raise cli.UserError("%s:%d: %s (--tag_scheme=%s)" % (
      path, word.line, problem, tag_scheme), fix=fix)


def _decode(path):
  return utf8.decode(
      file_systems.read_bytes(path), path,
      fix="Convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8).")


class _Reader(object):
  """Gathers the words of one file into documents of sentences."""

  def __init__(self, path, tag_scheme):
    self.path = path
    self.tag_scheme = tag_scheme
    self.documents = [[]]
    self.sentence = []
    self.num_fields = None
    self.first_line = None

  def end_sentence(self):
    if self.sentence:
      if self.num_fields > 1:
        check_scheme(self.sentence, self.tag_scheme, self.path)
      self.documents[-1].append(self.sentence)
      self.sentence = []

  def add_line(self, number, fields):
    """One non-blank line, split into its fields."""
    if fields[0] == DOCUMENT_START:
      self.end_sentence()
      if self.documents[-1]:
        self.documents.append([])
      return
    if self.num_fields is None:
      self.num_fields, self.first_line = len(fields), number
    elif len(fields) != self.num_fields:
      raise cli.UserError(
          "%s:%d: found %d fields, but line %d has %d" % (
              self.path, number, len(fields), self.first_line,
              self.num_fields),
          fix="Every token line needs the same fields (token first, entity "
          "tag last), separated by spaces or tabs; repair that line.")
    tag = None
    if self.num_fields > 1:
      tag = fields[-1]
      _check_tag(tag, "%s:%d" % (self.path, number), self.tag_scheme)
    self.sentence.append(Word(fields[0], tag, number))


def _fields(line):
  """The fields of one line (its "\\r" removed): split at tabs when it has
  one, else at runs of spaces; [] for a blank line."""
  if not line.strip():
    return []
  separator = "\t" if "\t" in line else " "
  return [field.strip(" ") for field in line.split(separator)
          if field.strip(" ")]


def read_file(path, tag_scheme):
  """The documents of a CoNLL file.

  Args:
    path: the file.
    tag_scheme: one of TAG_SCHEMES, checked on every sentence.

  Returns:
    (documents, tagged): documents as lists of sentences, each a list of
    Word; a file without -DOCSTART- lines is one document. `tagged` is
    False for a file whose lines hold a token only (their tags are None).

  Raises:
    cli.UserError naming the file and line of the first problem: a
    missing file, a line with another number of fields than the first, a
    tag that is not O or one of the scheme's prefixes and a type, a tag
    sequence the scheme forbids, or no token.
  """
  if not file_systems.isfile(path):
    raise cli.UserError("%s: file not found (or a folder)" % path,
                        fix="Pass the path of the CoNLL file itself.")
  reader = _Reader(path, tag_scheme)
  for number, line in enumerate(_decode(path).split("\n"), 1):
    fields = _fields(line.rstrip("\r"))
    if fields:
      reader.add_line(number, fields)
    else:
      reader.end_sentence()
  reader.end_sentence()
  documents = [document for document in reader.documents if document]
  if not documents:
    raise cli.UserError("%s holds no tokens" % path,
                        fix="Pass a CoNLL file: one token per line, blank "
                        "lines between sentences.")
  return documents, reader.num_fields > 1


def sentences_of(documents):
  """The sentences of `documents`, in file order."""
  return [sentence for document in documents for sentence in document]


def texts_of(documents, context):
  """The texts to read of `documents` under `context` (one of CONTEXTS):
  each document's sentences joined, or each sentence alone; lists of
  Word."""
  if context == "document":
    return [[word for sentence in document for word in sentence]
            for document in documents]
  return sentences_of(documents)


def entity_types(documents):
  """The sorted entity types the tags of `documents` name."""
  return sorted({split_tag(word.tag)[1] for sentence in sentences_of(documents)
                 for word in sentence if word.tag != OUTSIDE})


def label_list(types, tag_scheme="iob2"):
  """The labels of a model for entity `types`: O, then each type's tags in
  sorted order, with the scheme's prefixes (B- and I- under IOB1 and
  IOB2, whichever a file happens to use; B-, I-, E-, S- under BIOES)."""
  labels = [OUTSIDE]
  for entity_type in sorted(types):
    labels += [prefix + "-" + entity_type
               for prefix in SCHEME_PREFIXES[tag_scheme]]
  return labels


def check_known_tags(documents, labels, path):
  """Raises cli.UserError at the first tag of `documents` not in `labels`
  (an entity type the model was not trained on)."""
  known = set(labels)
  for sentence in sentences_of(documents):
    for word in sentence:
      if word.tag not in known:
        raise cli.UserError(
            "%s:%d: tag %s is not one the model knows (%s)" % (
                path, word.line, word.tag, ", ".join(labels)),
            fix="Evaluate on data with the training set's entity types.")


# ------------------------------------------------------------- evaluation


def _end_of_chunk(previous, tag, previous_type, entity_type):
  """Whether a chunk ended between the previous word and this one: the
  rules of conlleval (which also read IOBES's E and the bracket tags)."""
  if (previous, tag) in (("B", "B"), ("B", "O"), ("I", "B"), ("I", "O"),
                         ("E", "E"), ("E", "I"), ("E", "O")):
    return True
  if previous not in ("O", ".") and previous_type != entity_type:
    return True
  return previous in ("[", "]")


def _start_of_chunk(previous, tag, previous_type, entity_type):
  """Whether a chunk started between the previous word and this one, by
  conlleval's rules."""
  if (previous, tag) in (("B", "B"), ("I", "B"), ("O", "B"), ("O", "I"),
                         ("E", "E"), ("E", "I"), ("O", "E")):
    return True
  if tag not in ("O", ".") and previous_type != entity_type:
    return True
  return tag in ("[", "]")


def _scored(tag):
  """(prefix, type) of a tag as the scores read it: BIOES's S- and E- as
  B- and I-."""
  prefix, entity_type = split_tag(tag)
  return _AS_IOB2.get(prefix, prefix), entity_type


def chunks(tags):
  """The entities of one sentence's tags by conlleval's rules (BIOES read
  as IOB2).

  Returns:
    list of Chunk(type, start, end), end exclusive, in order.
  """
  found = []
  previous, previous_type = OUTSIDE, ""
  start = None
  for index, tag in enumerate(list(tags) + [OUTSIDE]):
    prefix, entity_type = _scored(tag)
    if start is not None and _end_of_chunk(previous, prefix, previous_type,
                                           entity_type):
      found.append(Chunk(previous_type, start, index))
      start = None
    if index < len(tags) and _start_of_chunk(previous, prefix, previous_type,
                                             entity_type):
      start = index
    previous, previous_type = prefix, entity_type
  return found


class Counts(object):
  """conlleval's counts over a corpus.

  Attributes:
    tokens: tokens scored (sentence breaks excluded).
    correct_tags: tokens whose predicted tag equals the gold tag.
    gold, guessed, correct: collections.Counter entity type -> number of
      gold chunks, predicted chunks and correctly predicted chunks.
  """

  def __init__(self):
    self.tokens = 0
    self.correct_tags = 0
    self.gold = collections.Counter()
    self.guessed = collections.Counter()
    self.correct = collections.Counter()

  def types(self):
    """Every type that is gold or predicted, sorted."""
    return sorted(set(self.gold) | set(self.guessed))


def count(sentences):
  """conlleval's counts of (gold, predicted) tag pairs.

  The state machine is conlleval's: a chunk is correct when gold and
  prediction start a chunk of the same type on the same word and both end
  it before the same word, with the types agreeing throughout. Chunks read
  BIOES as IOB2; token accuracy compares the tags as written.

  Args:
    sentences: iterable of sentences, each a list of (gold tag, predicted
      tag); a break between sentences closes every chunk.

  Returns:
    Counts.
  """
  counts = Counts()
  in_correct = False
  last_gold, last_gold_type = OUTSIDE, ""
  last_guess, last_guess_type = OUTSIDE, ""

  def step(gold_tag, guess_tag, is_break):
    nonlocal in_correct, last_gold, last_gold_type, last_guess
    nonlocal last_guess_type
    gold, gold_type = _scored(gold_tag)
    guess, guess_type = _scored(guess_tag)
    gold_ends = _end_of_chunk(last_gold, gold, last_gold_type, gold_type)
    guess_ends = _end_of_chunk(last_guess, guess, last_guess_type, guess_type)
    if in_correct:
      if gold_ends and guess_ends and last_guess_type == last_gold_type:
        in_correct = False
        counts.correct[last_gold_type] += 1
      elif gold_ends != guess_ends or guess_type != gold_type:
        in_correct = False
    gold_starts = _start_of_chunk(last_gold, gold, last_gold_type, gold_type)
    guess_starts = _start_of_chunk(last_guess, guess, last_guess_type,
                                   guess_type)
    if gold_starts and guess_starts and guess_type == gold_type:
      in_correct = True
    if gold_starts:
      counts.gold[gold_type] += 1
    if guess_starts:
      counts.guessed[guess_type] += 1
    if not is_break:
      if gold_tag == guess_tag:
        counts.correct_tags += 1
      counts.tokens += 1
    last_gold, last_gold_type = gold, gold_type
    last_guess, last_guess_type = guess, guess_type

  for index, sentence in enumerate(sentences):
    if index:
      step(OUTSIDE, OUTSIDE, True)
    for gold, guess in sentence:
      step(gold, guess, False)
  if in_correct:
    counts.correct[last_gold_type] += 1
  return counts


def _scores(correct, guessed, gold, scale=1.0):
  """(precision, recall, F1) as fractions of `scale` (100: conlleval's
  percentages, computed in its order, so they round as it prints them); 0
  where undefined."""
  precision = scale * correct / guessed if guessed else 0.0
  recall = scale * correct / gold if gold else 0.0
  total = precision + recall
  return precision, recall, 2 * precision * recall / total if total else 0.0


def metrics(counts, prefix="eval_"):
  """eval_results.txt's values of `counts`, as fractions.

  Returns:
    dict: <prefix>precision, recall, f1 (entity level), accuracy (token
    level); per type T: <prefix>precision_T, recall_T, f1_T, and gold_T /
    predicted_T, the numbers of gold and predicted entities.
  """
  results = {}
  precision, recall, f1 = _scores(sum(counts.correct.values()),
                                  sum(counts.guessed.values()),
                                  sum(counts.gold.values()))
  results.update({prefix + "precision": precision, prefix + "recall": recall,
                  prefix + "f1": f1, prefix + "accuracy": (
                      counts.correct_tags / counts.tokens if counts.tokens
                      else 0.0)})
  for entity_type in counts.types():
    precision, recall, f1 = _scores(counts.correct[entity_type],
                                    counts.guessed[entity_type],
                                    counts.gold[entity_type])
    results.update({
        "%sprecision_%s" % (prefix, entity_type): precision,
        "%srecall_%s" % (prefix, entity_type): recall,
        "%sf1_%s" % (prefix, entity_type): f1,
        "%sgold_%s" % (prefix, entity_type): counts.gold[entity_type],
        "%spredicted_%s" % (prefix, entity_type):
            counts.guessed[entity_type]})
  return results


def report(counts):
  """The text conlleval prints for `counts` (percentages, 2 decimals)."""
  gold, guessed = sum(counts.gold.values()), sum(counts.guessed.values())
  correct = sum(counts.correct.values())
  lines = ["processed %d tokens with %d phrases; found: %d phrases; "
           "correct: %d." % (counts.tokens, gold, guessed, correct)]
  if counts.tokens:
    precision, recall, f1 = _scores(correct, guessed, gold, 100.0)
    lines.append("accuracy: %6.2f%%; precision: %6.2f%%; recall: %6.2f%%; "
                 "FB1: %6.2f" % (100.0 * counts.correct_tags / counts.tokens,
                                 precision, recall, f1))
  for entity_type in counts.types():
    precision, recall, f1 = _scores(counts.correct[entity_type],
                                    counts.guessed[entity_type],
                                    counts.gold[entity_type], 100.0)
    lines.append("%17s: precision: %6.2f%%; recall: %6.2f%%; FB1: %6.2f  %d"
                 % (entity_type, precision, recall, f1,
                    counts.guessed[entity_type]))
  return "\n".join(lines) + "\n"


def predictions_text(documents, predicted):
  """The predictions in CoNLL format, which conlleval reads.

  Args:
    documents: the file's documents (lists of sentences of Word).
    predicted: the predicted tags of each sentence, in file order.

  Returns:
    The text: one line per token, "token gold predicted" (or "token
    predicted" for a file without tags), separated by single spaces; a
    blank line after each sentence. -DOCSTART- lines are left out.
  """
  lines = []
  for sentence, tags in zip(sentences_of(documents), predicted):
    for word, tag in zip(sentence, tags):
      fields = [word.text] + ([word.tag] if word.tag is not None else []) + [
          tag]
      lines.append(" ".join(fields))
    lines.append("")
  return "\n".join(lines) + "\n"
