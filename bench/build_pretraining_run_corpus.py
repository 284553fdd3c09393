# coding=utf-8
"""Writes the corpus of the pre-training run in docs/results.md.

Two real sources, in create_pretraining_data.py's input format (one
sentence per line, an empty line between documents):

  * the 48 Wikipedia articles of SQuAD v1.1 dev, one document per article,
    its paragraphs' sentences in order (split with the rule of
    build_pretraining_corpus.py);
  * the first --docs_mb megabytes of build_pretraining_corpus.py's
    corpus_1x.txt (Debian's documentation packages), cut at a document
    boundary.

    python bench/build_pretraining_corpus.py
    python bench/build_pretraining_run_corpus.py --output_file=/tmp/pt/train.txt \
      --heldout_file=/tmp/pt/heldout.txt

Every --heldout_every-th document (of either source) goes to --heldout_file
instead, so that evaluation measures text the model never trained on.
"""

import json
import os
import sys

from absl import app
from absl import flags

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import build_pretraining_corpus  # pylint: disable=g-import-not-at-top

REPO_ROOT = os.path.dirname(BENCH_DIR)
ASSETS = os.path.join(os.path.dirname(REPO_ROOT), "shared", "assets")

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "squad_file", os.path.join(ASSETS, "squad", "v1.1", "dev-v1.1.json"),
    "SQuAD JSON whose articles become documents.")
flags.DEFINE_string(
    "docs_corpus", os.path.join(REPO_ROOT, "bench", "out",
                                "pretraining_corpus", "corpus_1x.txt"),
    "build_pretraining_corpus.py's corpus_1x.txt.")
flags.DEFINE_float("docs_mb", 12.0,
                   "Megabytes taken from the start of --docs_corpus.")
flags.DEFINE_string("output_file", None, "The corpus to write.")
flags.DEFINE_string("heldout_file", None,
                    "Where the held-out documents go (none held out if "
                    "unset).")
flags.DEFINE_integer("heldout_every", 20,
                     "Hold out documents 0, k, 2k, ... of each source.")
flags.mark_flag_as_required("output_file")


def squad_documents(path):
  """One list of sentences per article of a SQuAD file."""
  with open(path, encoding="utf-8") as f:
    articles = json.load(f)["data"]
  documents = []
  for article in articles:
    sentences = [s for p in article["paragraphs"]
                 for s in build_pretraining_corpus.split_sentences(
                     " ".join(p["context"].split()))]
    if len(sentences) >= 2:
      documents.append(sentences)
  return documents


def leading_documents(path, size_bytes):
  """Whole documents (text blocks) from the start of a corpus, up to a size."""
  kept, total = [], 0
  with open(path, encoding="utf-8") as f:
    document = []
    for line in f:
      document.append(line)
      if line.strip():
        continue
      block = "".join(document)
      document = []
      total += len(block.encode("utf-8"))
      if total > size_bytes:
        break
      kept.append(block)
  return kept


def write_atomically(path, blocks):
  """Writes the text blocks; the file appears only when complete."""
  temporary = path + ".partial"
  with open(temporary, "w", encoding="utf-8") as f:
    f.write("".join(blocks))
  os.replace(temporary, path)
  return sum(len(b.encode("utf-8")) for b in blocks) / 2**20


def main(argv):
  del argv
  for path, flag in ((FLAGS.squad_file, "--squad_file"),
                     (FLAGS.docs_corpus, "--docs_corpus")):
    if not os.path.isfile(path):
      sys.exit(f"{flag}={path}: no such file (run "
               "bench/build_pretraining_corpus.py first for the documentation "
               "corpus)")
  if FLAGS.heldout_every < 2:
    sys.exit(f"--heldout_every={FLAGS.heldout_every}: must be at least 2")
  if FLAGS.docs_mb < 0:
    sys.exit(f"--docs_mb={FLAGS.docs_mb:g}: must be 0 or more")
  for path, flag in ((FLAGS.output_file, "--output_file"),
                     (FLAGS.heldout_file, "--heldout_file")):
    folder = os.path.dirname(os.path.abspath(path)) if path else None
    if folder and not os.path.isdir(folder):
      sys.exit(f"{flag}={path}: folder {folder} does not exist; create it "
               "first")
  articles = ["\n".join(d) + "\n\n"
              for d in squad_documents(FLAGS.squad_file)]
  docs = leading_documents(FLAGS.docs_corpus, int(FLAGS.docs_mb * 2**20))
  train, heldout = [], []
  for source in (articles, docs):
    for i, block in enumerate(source):
      held = FLAGS.heldout_file and i % FLAGS.heldout_every == 0
      (heldout if held else train).append(block)
  size = write_atomically(FLAGS.output_file, train)
  print(f"{FLAGS.output_file}: {len(train)} documents, {size:.1f} MB "
        f"(from {len(articles)} SQuAD articles and {FLAGS.docs_mb:g} MB of "
        "documentation)")
  if FLAGS.heldout_file:
    size = write_atomically(FLAGS.heldout_file, heldout)
    print(f"{FLAGS.heldout_file}: {len(heldout)} held-out documents, "
          f"{size:.1f} MB")


if __name__ == "__main__":
  app.run(main)
