# coding=utf-8
"""Fine-tunes a tiny BERT on the built-in MRPC-format sample, end to end.

`make demo` runs this: it trains a small randomly initialized model (2
layers, hidden 64) on sample_data/mrpc_sample (200 train, 60 dev, 40 test
sentence pairs), evaluates it, predicts the test pairs and prints the
metrics and where the outputs are. It calls run_classifier.py exactly as a
user would, with flags, so the printed command can be reused.

The vocabulary is Google's uncased vocab.txt from ../shared/assets when it
is there; otherwise a small one is built from the sample text, so the demo
also works on a fresh machine. A randomly initialized model learns little
from 200 pairs: expect dev accuracy somewhat above chance, not MRPC scores.
"""

import argparse
import csv
import os
import shutil
import subprocess
import sys

REPO_DIR = os.path.dirname(os.path.abspath(__file__))
DATA_DIR = os.path.join(REPO_DIR, "sample_data", "mrpc_sample")
CONFIG_FILE = os.path.join(REPO_DIR, "sample_data", "tiny_bert_config.json")
SHARED_VOCAB = os.path.join(os.path.dirname(REPO_DIR), "shared", "assets",
                            "bert_vocab", "uncased", "vocab.txt")
OUTPUT_DIR = os.path.join(REPO_DIR, "demo_output")
# The files the fallback vocabulary is built from, in this order.
SAMPLE_FILES = ("train.tsv", "dev.tsv", "test.tsv")
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def sample_sentences():
  """Yields the two sentences of every pair in SAMPLE_FILES."""
  for name in SAMPLE_FILES:
    path = os.path.join(DATA_DIR, name)
    with open(path, encoding="utf-8-sig", newline="") as f:
      rows = list(csv.reader(f, delimiter="\t", quotechar=None))
    for row in rows[1:]:
      yield row[3]
      yield row[4]


def build_vocab(vocab_file):
  """Writes a WordPiece vocab covering the sample text; returns its size.

  Every lowercased word of the sample is a token, and every character also
  appears alone and as a "##" continuation, so any word still splits into
  known pieces. Sorted, so the same sample always gives the same file.
  """
  # Imported here: it loads TensorFlow, which the usual path does not need
  # in this process (run_classifier.py runs in its own).
  import tokenization  # pylint: disable=g-import-not-at-top
  basic = tokenization.BasicTokenizer(do_lower_case=True)
  words = set()
  for sentence in sample_sentences():
    words.update(basic.tokenize(sentence))
  chars = sorted(set("".join(words)))
  tokens = list(SPECIAL_TOKENS) + sorted(words)
  tokens += [c for c in chars if c not in words] + ["##" + c for c in chars]
  with open(vocab_file, "w", encoding="utf-8") as f:
    f.write("".join(token + "\n" for token in tokens))
  return len(tokens)


def choose_vocab():
  """Google's uncased vocab if present, else one built from the sample."""
  if os.path.isfile(SHARED_VOCAB):
    print("Vocabulary: %s" % SHARED_VOCAB)
    return SHARED_VOCAB
  vocab_file = os.path.join(OUTPUT_DIR, "vocab.txt")
  size = build_vocab(vocab_file)
  print("Vocabulary: %s not found; built %s (%d tokens) from the sample."
        % (SHARED_VOCAB, vocab_file, size))
  return vocab_file


def classifier_command(vocab_file, model_dir):
  return [
      sys.executable, os.path.join(REPO_DIR, "run_classifier.py"),
      "--task_name=MRPC",
      "--do_train", "--do_eval", "--do_predict",
      "--data_dir=%s" % DATA_DIR,
      "--vocab_file=%s" % vocab_file,
      "--bert_config_file=%s" % CONFIG_FILE,
      "--do_lower_case=True",
      "--max_seq_length=64",
      "--train_batch_size=16",
      "--learning_rate=5e-4",
      "--num_train_epochs=30",
      "--save_checkpoints_steps=200",
      "--log_step_count_steps=75",
      "--seed=12345",
      "--output_dir=%s" % model_dir,
  ]


def main():
  # A rerun starts from scratch: a kept checkpoint would make
  # run_classifier resume (and skip) the training instead of redoing it.
  shutil.rmtree(OUTPUT_DIR, ignore_errors=True)
  os.makedirs(OUTPUT_DIR)
  vocab_file = choose_vocab()
  model_dir = os.path.join(OUTPUT_DIR, "mrpc")
  command = classifier_command(vocab_file, model_dir)
  print("Running:\n  python " + " \\\n    ".join(command[1:]))
  sys.stdout.flush()
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  returncode = subprocess.run(command, cwd=REPO_DIR, env=env).returncode
  if returncode != 0:
    sys.exit("run_classifier.py failed with exit code %d; see its log above."
             % returncode)

  print("\nDev set results (%s):" % os.path.join(model_dir,
                                                  "eval_results.txt"))
  with open(os.path.join(model_dir, "eval_results.txt")) as f:
    print("".join("  " + line for line in f))
  print("Test set predictions:")
  print("  class probabilities: %s"
        % os.path.join(model_dir, "test_results.tsv"))
  print("  GLUE submission:     %s" % os.path.join(model_dir, "MRPC.tsv"))
  print("Checkpoints and TensorBoard logs: %s" % model_dir)


if __name__ == "__main__":
  # No options; --help describes the demo instead of running it.
  argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
  ).parse_args()
  main()
