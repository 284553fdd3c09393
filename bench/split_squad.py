"""Splits a SQuAD file by article, for real runs when only a dev set is at hand.

    python bench/split_squad.py --input=../shared/assets/squad/v1.1/dev-v1.1.json \
      --num_train_articles=38 --output_dir=/tmp/squad_split

writes `train.json` (the first N articles) and `eval.json` (the rest), each a
complete SQuAD file with the input's "version".
"""

import json
import os

from absl import app
from absl import flags

flags.DEFINE_string("input", None, "SQuAD json file to split.")
flags.DEFINE_integer("num_train_articles", 38,
                     "How many leading articles go to train.json.")
flags.DEFINE_string("output_dir", None, "Where train.json and eval.json go.")
FLAGS = flags.FLAGS


def split(dataset, num_train_articles):
  """(train, eval) SQuAD dicts: the first articles and the rest."""
  articles = dataset["data"]
  if not 0 < num_train_articles < len(articles):
    raise ValueError("--num_train_articles=%d: the file has %d articles; "
                     "pick a number between 1 and %d." %
                     (num_train_articles, len(articles), len(articles) - 1))
  version = dataset.get("version", "1.1")
  return ({"version": version, "data": articles[:num_train_articles]},
          {"version": version, "data": articles[num_train_articles:]})


def main(_):
  with open(FLAGS.input, encoding="utf-8") as f:
    dataset = json.load(f)
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  for name, part in zip(("train.json", "eval.json"),
                        split(dataset, FLAGS.num_train_articles)):
    path = os.path.join(FLAGS.output_dir, name)
    with open(path, "w", encoding="utf-8") as f:
      json.dump(part, f)
    print("%s: %d articles, %d questions" % (
        path, len(part["data"]),
        sum(len(p["qas"]) for a in part["data"] for p in a["paragraphs"])))


if __name__ == "__main__":
  flags.mark_flags_as_required(["input", "output_dir"])
  app.run(main)
