"""Splits a SQuAD file by article, for real runs when only a dev set is at hand.

    python -m tools.split_squad --input=../shared/assets/squad/v1.1/dev-v1.1.json \
      --num_train_articles=38 --output_dir=/tmp/squad_split

writes `train.json` (the first N articles) and `eval.json` (the rest), each a
complete SQuAD file with the input's "version". `--num_eval_articles=M`
keeps only the first M articles after the training ones in `eval.json`, for
a small evaluation set (e.g. --num_train_articles=2 --num_eval_articles=1
gives a few hundred questions to train on and a one-article dev slice).
"""

import json
import os

from absl import app
from absl import flags

from reproduction import plan

flags.DEFINE_string("input", None, "SQuAD json file to split.")
flags.DEFINE_integer("num_train_articles", 38,
                     "How many leading articles go to train.json.")
flags.DEFINE_integer(
    "num_eval_articles", None,
    "How many of the articles after those go to eval.json (default: all).")
flags.DEFINE_string("output_dir", None, "Where train.json and eval.json go.")
FLAGS = flags.FLAGS


def main(_):
  with open(FLAGS.input, encoding="utf-8") as f:
    dataset = json.load(f)
  try:
    parts = plan.split_squad_articles(dataset, FLAGS.num_train_articles,
                                      FLAGS.num_eval_articles)
  except ValueError as e:
    raise app.UsageError("--num_train_articles=%d, --num_eval_articles=%s: "
                         "%s" % (FLAGS.num_train_articles,
                                 FLAGS.num_eval_articles, e)) from e
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  for name, part in zip(("train.json", "eval.json"), parts):
    path = os.path.join(FLAGS.output_dir, name)
    with open(path, "w", encoding="utf-8") as f:
      json.dump(part, f)
    print("%s: %d articles, %d questions" % (
        path, len(part["data"]), plan.count_squad_questions(part)))


if __name__ == "__main__":
  flags.mark_flags_as_required(["input", "output_dir"])
  app.run(main)
