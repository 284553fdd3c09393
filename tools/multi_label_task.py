"""A multi-label task on real text, for run_classifier.py's own-data path.

    python -m tools.multi_label_task --glue_dir=../shared/assets/glue \
      --output_dir=/tmp/multi_label

Each example is one to three sentences of real text, drawn from five
sources and shuffled together; its labels are the sources present:

  positive      a positive SST-2 movie-review sentence (label 1)
  negative      a negative SST-2 movie-review sentence (label 0)
  news          a sentence of MRPC's news pairs
  question      a QNLI question (from Wikipedia articles)
  encyclopedia  a QNLI context sentence (Wikipedia)

So a text may hold praise and a complaint, or a question beside the news.
Telling the sources apart needs sentiment (with its negations) and the
register of news against an encyclopedia, not only words that mark one
source. An example draws its number of sentences (1, 2 or 3) and each
sentence's source uniformly; no sentence appears twice in a file.

train.jsonl draws on SST-2's and MRPC's training files, dev.jsonl on their
dev files less any sentence the training files also have (MRPC repeats
some); QNLI (its dev file only is here) is split by a hash of the text. So
the two files share no sentence. SST-2's training file holds phrases:
only those of at least --min_words words are used. Rows are
{"id", "text", "labels": [...]} (JSON Lines; run_classifier.py reads the
list as multi-label).

It prints two baselines on dev.jsonl, scored by the classifier's own
multi-label metrics (tasks/classifier_metrics.py), at threshold 0.5 and at
the threshold run_classifier.py's --tune_threshold would pick on dev:
  prior         each label's training frequency as its probability
  bag of words  one logistic regression per label (NumPy, full-batch
                gradient descent with Adam and L2) on binary word features
                of BERT's basic tokenizer (lower-cased, punctuation split),
                words seen at least twice in training. Its L2 weight and
                steps are the best dev micro-F1 of L2 in {0, 1e-4, 1e-3,
                1e-2} and {200, 400, 1000} steps, so the baseline is tuned
                on dev as the fine-tuned model's threshold is.
"""

import csv
import hashlib
import json
import os
import random

from absl import app
from absl import flags
import numpy as np

from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order
from tasks import classifier_metrics
import tokenization

FLAGS = flags.FLAGS

LABELS = ("positive", "negative", "news", "question", "encyclopedia")
MAX_SENTENCES = 3
# The bag-of-words baseline's training.
BOW_STEPS = 1000
BOW_LEARNING_RATE = 0.05
BOW_L2 = 1e-4
THRESHOLD = 0.5


def _tsv(path):
  with open(path, encoding="utf-8-sig", newline="") as f:
    rows = list(csv.reader(f, delimiter="\t", quotechar=None))
  return rows[0], rows[1:]


def _in_dev(text):
  """The stated split rule for QNLI's texts: a fifth of them, by hash."""
  return int(hashlib.md5(text.encode("utf-8")).hexdigest(), 16) % 5 == 0


def source_sentences(glue_dir, split, min_words):
  """{label: sorted distinct sentences} of one split ("train", "dev");
  SST-2's of at least `min_words` words."""
  sentences = {label: set() for label in LABELS}
  header, rows = _tsv(os.path.join(glue_dir, "SST-2", split + ".tsv"))
  text, label = header.index("sentence"), header.index("label")
  for row in rows:
    if len(row[text].split()) >= min_words:
      sentences["positive" if row[label] == "1" else "negative"].add(
          row[text].strip())
  header, rows = _tsv(os.path.join(glue_dir, "MRPC", split + ".tsv"))
  for row in rows:
    sentences["news"].update(row[3:5])
  header, rows = _tsv(os.path.join(glue_dir, "QNLI", "dev.tsv"))
  for row in rows:
    for label, text in (("question", row[1]), ("encyclopedia", row[2])):
      if _in_dev(text) == (split == "dev"):
        sentences[label].add(text)
  return {label: sorted(texts) for label, texts in sentences.items()}


def split_sources(glue_dir, min_words):
  """{"train": ..., "dev": ...} of source_sentences, dev without any
  sentence that training has (MRPC reuses sentences across its files)."""
  train = source_sentences(glue_dir, "train", min_words)
  seen = set().union(*train.values())
  dev = {label: [text for text in texts if text not in seen]
         for label, texts in source_sentences(glue_dir, "dev",
                                              min_words).items()}
  return {"train": train, "dev": dev}


def make_examples(sentences, count, rng, prefix):
  """`count` examples; no sentence is used twice.

  Raises:
    ValueError when a source runs out of sentences.
  """
  pools = {label: rng.sample(texts, len(texts))
           for label, texts in sentences.items()}
  examples = []
  for index in range(count):
    sources = [rng.choice(LABELS)
               for _ in range(rng.randint(1, MAX_SENTENCES))]
    parts = []
    for label in sources:
      if not pools[label]:
        raise ValueError("Out of %s sentences after %d examples; lower "
                         "--num_train / --num_dev." % (label, index))
      parts.append(pools[label].pop())
    examples.append({"id": "%s-%d" % (prefix, index), "text": " ".join(parts),
                     "labels": [label for label in LABELS
                                if label in sources]})
  return examples


def _targets(examples):
  return np.array([[label in e["labels"] for label in LABELS]
                   for e in examples], dtype=np.float64)


def bag_of_words(train, dev):
  """Dev probabilities [examples, labels] of the logistic regressions."""
  tokenizer = tokenization.BasicTokenizer(do_lower_case=True)
  train_words = [set(tokenizer.tokenize(e["text"])) for e in train]
  counts = {}
  for words in train_words:
    for word in words:
      counts[word] = counts.get(word, 0) + 1
  vocabulary = {word: i for i, word in enumerate(
      sorted(w for w, n in counts.items() if n >= 2))}

  def features(word_sets):
    x = np.zeros((len(word_sets), len(vocabulary)))
    for row, words in enumerate(word_sets):
      x[row, [vocabulary[w] for w in words if w in vocabulary]] = 1.0
    return x

  x = features(train_words)
  y = _targets(train)
  weights = np.zeros((x.shape[1], len(LABELS)))
  bias = np.zeros(len(LABELS))
  moments = [np.zeros_like(weights), np.zeros_like(weights),
             np.zeros_like(bias), np.zeros_like(bias)]
  for step in range(1, BOW_STEPS + 1):
    p = 1 / (1 + np.exp(-(x @ weights + bias)))
    gradients = (x.T @ (p - y) / len(x) + BOW_L2 * weights,
                 (p - y).mean(axis=0))
    for i, (value, gradient) in enumerate(zip((weights, bias), gradients)):
      moments[2 * i] = 0.9 * moments[2 * i] + 0.1 * gradient
      moments[2 * i + 1] = 0.999 * moments[2 * i + 1] + 0.001 * gradient ** 2
      value -= BOW_LEARNING_RATE * (moments[2 * i] / (1 - 0.9 ** step)) / (
          np.sqrt(moments[2 * i + 1] / (1 - 0.999 ** step)) + 1e-8)
  dev_x = features([set(tokenizer.tokenize(e["text"])) for e in dev])
  return 1 / (1 + np.exp(-(dev_x @ weights + bias)))


def _report(name, labels, probabilities):
  """Prints the metrics at THRESHOLD and at the dev set's best."""
  for threshold in sorted({THRESHOLD, classifier_metrics.best_threshold(
      labels, probabilities)}):
    values = classifier_metrics.multi_label_metrics(
        labels, probabilities, threshold, LABELS, prefix="")
    print("baseline on dev.jsonl, %s, threshold %.2f: micro F1 %.2f, macro "
          "F1 %.2f, exact match %.2f, LRAP %.4f; F1 per label %s" % (
              name, threshold, 100 * values["micro_f1"],
              100 * values["macro_f1"], 100 * values["exact_match"],
              values["lrap"],
              ", ".join("%s %.2f" % (label, 100 * values["f1_" + label])
                        for label in LABELS)))


def main(_):
  rng = random.Random(FLAGS.seed)
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  data = {}
  sources = split_sources(FLAGS.glue_dir, FLAGS.min_words)
  for split, count in (("train", FLAGS.num_train), ("dev", FLAGS.num_dev)):
    data[split] = make_examples(sources[split], count, rng, split)
    path = os.path.join(FLAGS.output_dir, split + ".jsonl")
    with open(path, "w", encoding="utf-8") as f:
      for example in data[split]:
        f.write(json.dumps(example, ensure_ascii=False) + "\n")
    frequency = _targets(data[split]).mean(axis=0)
    print("%s: %d examples; share with each label: %s" % (
        path, count, ", ".join("%s %.3f" % pair
                               for pair in zip(LABELS, frequency))))
  labels = _targets(data["dev"])
  prior = np.tile(_targets(data["train"]).mean(axis=0), (len(labels), 1))
  _report("prior", labels, prior)
  _report("bag of words", labels, bag_of_words(data["train"], data["dev"]))


def _define_flags():
  # Defined when run, not on import: a test process importing this module
  # also holds other modules' --output_dir.
  flags.DEFINE_string("glue_dir", None, "GLUE's folder (SST-2, MRPC, QNLI).")
  flags.DEFINE_string("output_dir", None, "Where train.jsonl and dev.jsonl go.")
  flags.DEFINE_integer("num_train", 3000, "Training examples.")
  flags.DEFINE_integer("num_dev", 1000, "Dev examples.")
  flags.DEFINE_integer("min_words", 6, "Fewest words of an SST-2 sentence.")
  flags.DEFINE_integer("seed", 12345, "Seed of the draws.")
  flags.mark_flags_as_required(["glue_dir", "output_dir"])


if __name__ == "__main__":
  _define_flags()
  app.run(main)
