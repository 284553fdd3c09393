"""A learnable multiple-choice task in SWAG's file format, from real text.

    python -m tools.next_sentence_choices \
      --input=../shared/assets/squad/v1.1/dev-v1.1.json \
      --output_dir=/tmp/next_sentence

SWAG itself cannot be redistributed. This builds questions of the same
form from SQuAD's paragraphs (real Wikipedia text): the given sentence
(sent1) is a sentence of a paragraph, the true ending the sentence that
follows it there, and the three other endings sentences of other
paragraphs of the same article, so all four are on the topic and only the
order of the text tells them apart. sent2 is empty: each ending is a whole
sentence. The articles are split, the first --num_train_articles for
train.csv and the rest for val.csv, so no paragraph is in both; test.csv
holds val.csv's questions without the label. Chance is 25%.

Sentences are split at ".", "!" or "?" followed by a space and a capital
letter, which is close enough for Wikipedia prose.
"""

import csv
import json
import os
import random
import re

from absl import app
from absl import flags

from tasks import swag

FLAGS = flags.FLAGS


def define_flags():
  """The command's flags; defined when run, not on import, so that a
  module importing `article_questions` gets no flags of this command."""
  flags.DEFINE_string("input", None, "A SQuAD json file (its contexts are "
                      "the text).")
  flags.DEFINE_integer("num_train_articles", 38,
                       "How many leading articles make train.csv.")
  flags.DEFINE_integer("questions_per_paragraph", 1,
                       "Questions drawn from each paragraph (at most one "
                       "per pair of neighbouring sentences).")
  flags.DEFINE_integer("seed", 0, "Seed of the draws.")
  flags.DEFINE_string("output_dir", None,
                      "Where train.csv, val.csv and test.csv go.")

HEADER = ["", "video-id", "fold-ind", "startphrase", swag.CONTEXT_COLUMN,
          swag.START_COLUMN, "gold-source"] + list(swag.ENDING_COLUMNS) + [
              swag.LABEL_COLUMN]
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


def sentences(text):
  """The sentences of a paragraph, stripped, empty ones dropped."""
  return [part.strip() for part in _SENTENCE_END.split(text)
          if part.strip()]


def article_questions(article, rng, per_paragraph, first_id):
  """SWAG rows (without the leading id) of one SQuAD article."""
  paragraphs = [sentences(p["context"]) for p in article["paragraphs"]]
  rows = []
  for index, parts in enumerate(paragraphs):
    others = [s for j, other in enumerate(paragraphs) if j != index
              for s in other]
    positions = list(range(len(parts) - 1))
    if len(others) < swag.NUM_CHOICES - 1 or not positions:
      continue
    for position in rng.sample(positions, min(per_paragraph,
                                              len(positions))):
      endings = rng.sample(others, swag.NUM_CHOICES - 1)
      label = rng.randrange(swag.NUM_CHOICES)
      endings.insert(label, parts[position + 1])
      rows.append(["%s-%d" % (article["title"], index),
                   str(first_id + len(rows)), parts[position],
                   parts[position], "", "gold"] + endings + [str(label)])
  return rows


def write_csv(path, rows, with_label=True):
  """Writes rows in SWAG's layout, numbered in the unnamed first column."""
  with open(path, "w", encoding="utf-8", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(HEADER if with_label else HEADER[:-1])
    for number, row in enumerate(rows):
      writer.writerow([str(number)] + (row if with_label else row[:-1]))


def main(_):
  with open(FLAGS.input, encoding="utf-8") as f:
    articles = json.load(f)["data"]
  rng = random.Random(FLAGS.seed)
  splits = {"train.csv": articles[:FLAGS.num_train_articles],
            "val.csv": articles[FLAGS.num_train_articles:]}
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  for name, part in splits.items():
    rows = []
    for article in part:
      rows += article_questions(article, rng, FLAGS.questions_per_paragraph,
                                len(rows))
    write_csv(os.path.join(FLAGS.output_dir, name), rows)
    if name == "val.csv":
      write_csv(os.path.join(FLAGS.output_dir, "test.csv"), rows,
                with_label=False)
    print("%s: %d questions from %d articles" % (
        os.path.join(FLAGS.output_dir, name), len(rows), len(part)))


if __name__ == "__main__":
  define_flags()
  flags.mark_flags_as_required(["input", "output_dir"])
  app.run(main)
