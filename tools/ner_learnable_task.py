"""A learnable tagging task on real text, for run_ner.py without CoNLL-2003.

    python -m tools.ner_learnable_task \
      --squad_file=../shared/assets/squad/v1.1/dev-v1.1.json \
      --output_dir=/tmp/ner_task

CoNLL-2003 cannot be redistributed, so this writes a stand-in in its exact
file format (IOB2 tags, -DOCSTART- before each paragraph) from the real
paragraphs of a SQuAD file, tagged by a rule that an uncased model can see:

  NUM   a number (digits, with "," or "." inside), with a following scale
        word (hundred, thousand, million, billion, percent) in the entity;
  TIME  a month or weekday name;
  LOC   a name from a fixed list of countries.

Paragraphs are split into sentences at ". " and into words at spaces and
punctuation, as CoNLL's tokens are. train.txt holds the paragraphs of the
first --num_train_articles articles, valid.txt those of the last articles
(at most --max_train_paragraphs / --max_dev_paragraphs, evenly spaced).
It prints two baselines on valid.txt, scored by conlleval's definition:
every word O, and each word's most frequent training tag (O if unseen).
"""

import collections
import json
import os
import re

from absl import app
from absl import flags

from tasks import conll

flags.DEFINE_string("squad_file", None, "A SQuAD json file (real text).")
flags.DEFINE_string("output_dir", None, "Where train.txt and valid.txt go.")
flags.DEFINE_integer("num_train_articles", 38,
                     "Leading articles whose paragraphs may train.")
flags.DEFINE_integer("max_train_paragraphs", 300,
                     "Most training paragraphs (documents).")
flags.DEFINE_integer("max_dev_paragraphs", 150, "Most dev paragraphs.")
FLAGS = flags.FLAGS

MONTHS_AND_DAYS = frozenset(
    "january february march april may june july august september october "
    "november december monday tuesday wednesday thursday friday saturday "
    "sunday".split())
COUNTRIES = frozenset(
    "france germany china japan india italy spain canada mexico brazil "
    "russia egypt england britain america australia poland greece ireland "
    "scotland portugal sweden norway kenya iran iraq israel turkey korea "
    "vietnam".split())
SCALES = frozenset("hundred thousand million billion percent".split())
_NUMBER = re.compile(r"^[0-9]+([.,][0-9]+)*$")
_WORD = re.compile(r"[0-9]+(?:[.,][0-9]+)*|\w+|[^\w\s]", re.UNICODE)


def tag_words(words):
  """IOB2 tags of one sentence's words by the rule of the docstring."""
  tags = []
  for word in words:
    lower = word.lower()
    if _NUMBER.match(word):
      tags.append("B-NUM")
    elif lower in SCALES and tags and tags[-1] in ("B-NUM", "I-NUM"):
      tags.append("I-NUM")
    elif lower in MONTHS_AND_DAYS:
      tags.append("B-TIME")
    elif lower in COUNTRIES:
      tags.append("B-LOC")
    else:
      tags.append("O")
  return tags


def paragraph_sentences(text):
  """The sentences of a paragraph as lists of words."""
  sentences = []
  for part in re.split(r"(?<=\.)\s+", text):
    words = _WORD.findall(part)
    if words:
      sentences.append(words)
  return sentences


def document_lines(paragraph):
  lines = ["-DOCSTART- -X- -X- O", ""]
  for words in paragraph_sentences(paragraph):
    lines += ["%s %s" % pair for pair in zip(words, tag_words(words))]
    lines.append("")
  return lines


def _paragraphs(articles, limit):
  """At most `limit` paragraphs of `articles`, evenly spaced over them (so
  that every article's topic is in), in file order."""
  texts = [p["context"] for a in articles for p in a["paragraphs"]]
  if len(texts) <= limit:
    return texts
  return [texts[i * len(texts) // limit] for i in range(limit)]


def _baselines(train_path, dev_path):
  """conlleval F1 on dev of all-O and of each word's commonest train tag."""
  train, _ = conll.read_file(train_path, "iob2")
  dev, _ = conll.read_file(dev_path, "iob2")
  votes = collections.defaultdict(collections.Counter)
  for sentence in conll.sentences_of(train):
    for word in sentence:
      votes[word.text.lower()][word.tag] += 1
  sentences = conll.sentences_of(dev)
  results = {}
  for name, guess in (
      ("all O", lambda word: "O"),
      ("commonest training tag", lambda word: votes[word.text.lower()]
       .most_common(1)[0][0] if word.text.lower() in votes else "O")):
    counts = conll.count([[(w.tag, guess(w)) for w in s] for s in sentences])
    results[name] = conll.metrics(counts)["eval_f1"]
  return results


def main(_):
  with open(FLAGS.squad_file, encoding="utf-8") as f:
    articles = json.load(f)["data"]
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  splits = (("train.txt", _paragraphs(articles[:FLAGS.num_train_articles],
                                      FLAGS.max_train_paragraphs)),
            ("valid.txt", _paragraphs(articles[FLAGS.num_train_articles:],
                                      FLAGS.max_dev_paragraphs)))
  for name, paragraphs in splits:
    lines = [line for p in paragraphs for line in document_lines(p)]
    with open(os.path.join(FLAGS.output_dir, name), "w",
              encoding="utf-8") as f:
      f.write("\n".join(lines) + "\n")
    tags = collections.Counter(line.rsplit(" ", 1)[1] for line in lines
                               if line and not line.startswith("-DOC"))
    print("%s: %d documents, %d words, tags %s" % (
        name, len(paragraphs), sum(tags.values()), dict(sorted(tags.items()))))
  for name, f1 in _baselines(*(os.path.join(FLAGS.output_dir, n)
                               for n in ("train.txt", "valid.txt"))).items():
    print("baseline on valid.txt, %s: entity F1 %.2f%%" % (name, 100 * f1))


if __name__ == "__main__":
  flags.mark_flags_as_required(["squad_file", "output_dir"])
  app.run(main)
