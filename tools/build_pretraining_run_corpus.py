# coding=utf-8
"""Writes the corpus of the pre-training run in docs/results.md.

Two real sources, in create_pretraining_data.py's input format (one
sentence per line, an empty line between documents):

  * the 48 Wikipedia articles of SQuAD v1.1 dev, one document per article,
    its paragraphs' sentences in order (split with the rule of
    build_pretraining_corpus.py);
  * the first --docs_mb megabytes of build_pretraining_corpus.py's
    corpus_1x.txt (Debian's documentation packages), cut at a document
    boundary;
  * with --glue_dir, the text of GLUE training sets (labels unused): each
    MRPC pair a document of two sentences, and SST-2's phrases and CoLA's
    sentences in file order, --glue_sentences_per_document to a document
    (their neighbours are unrelated, so these documents teach the masked
    LM only, not next-sentence prediction).

    python -m tools.build_pretraining_corpus
    python -m tools.build_pretraining_run_corpus --output_file=/tmp/pt/train.txt \
      --heldout_file=/tmp/pt/heldout.txt

Every --heldout_every-th document (of either source) goes to --heldout_file
instead, so that evaluation measures text the model never trained on.
"""

import json
import os
import sys

from absl import flags

from tasks import glue
import tools
from tools import build_pretraining_corpus
from userio import cli

ASSETS = os.path.join(os.path.dirname(tools.REPO_ROOT), "shared", "assets")

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "squad_file", os.path.join(ASSETS, "squad", "v1.1", "dev-v1.1.json"),
    "SQuAD JSON whose articles become documents.")
flags.DEFINE_string(
    "docs_corpus", os.path.join(build_pretraining_corpus.OUTPUT_DIR,
                                "corpus_1x.txt"),
    "build_pretraining_corpus.py's corpus_1x.txt.")
flags.DEFINE_float("docs_mb", 12.0,
                   "Megabytes taken from the start of --docs_corpus.")
flags.DEFINE_string(
    "glue_dir", "",
    "A GLUE folder whose MRPC, SST-2 and CoLA train.tsv files add their "
    "text (none if empty).")
flags.DEFINE_integer(
    "glue_sentences_per_document", 8,
    "SST-2 phrases or CoLA sentences grouped into one document.")
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


GLUE_TASKS = ("MRPC", "SST-2", "CoLA")


def _one_line(text):
  """The text with its runs of white space (newlines too) made one space."""
  return " ".join(text.split())


def glue_documents(glue_dir, sentences_per_document):
  """Documents made of the training texts of GLUE_TASKS under glue_dir."""
  documents = []
  for task in GLUE_TASKS:
    processor = glue.PROCESSORS[task.lower()]()
    try:
      examples = processor.get_train_examples(os.path.join(glue_dir, task))
    except cli.UserError as e:
      # The reader's advice names run_classifier's flags; keep its finding.
      raise cli.UserError(
          "--glue_dir=%s: %s" % (glue_dir, e.finding),
          fix="It must hold GLUE's %s folders as downloaded."
          % ", ".join(GLUE_TASKS)) from e
    if task == "MRPC":
      pairs = ([_one_line(e.text_a), _one_line(e.text_b)] for e in examples)
      documents.extend([t for t in pair if t] for pair in pairs)
      continue
    texts = [t for t in (_one_line(e.text_a) for e in examples) if t]
    documents.extend(texts[i:i + sentences_per_document]
                     for i in range(0, len(texts), sentences_per_document))
  return documents


def write_atomically(path, blocks):
  """Writes the text blocks; the file appears only when complete."""
  temporary = path + ".partial"
  with open(temporary, "w", encoding="utf-8") as f:
    f.write("".join(blocks))
  os.replace(temporary, path)
  return sum(len(b.encode("utf-8")) for b in blocks) / 2**20


def main(argv):
  del argv
  inputs = [("--squad_file", FLAGS.squad_file, "")]
  if FLAGS.docs_mb > 0:
    inputs.append(("--docs_corpus", FLAGS.docs_corpus,
                   " (run python -m tools.build_pretraining_corpus first, or "
                   "--docs_mb=0 for none)"))
  inputs += [("--glue_dir", os.path.join(FLAGS.glue_dir, task, "train.tsv"),
              "") for task in GLUE_TASKS if FLAGS.glue_dir]
  for flag, path, hint in inputs:
    if not os.path.isfile(path):
      sys.exit(f"{flag}: {path}: no such file{hint}")
  if FLAGS.heldout_every < 2:
    sys.exit(f"--heldout_every={FLAGS.heldout_every}: must be at least 2")
  if FLAGS.docs_mb < 0:
    sys.exit(f"--docs_mb={FLAGS.docs_mb:g}: must be 0 or more")
  if FLAGS.glue_sentences_per_document < 2:
    sys.exit("--glue_sentences_per_document="
             f"{FLAGS.glue_sentences_per_document}: must be at least 2")
  for path, flag in ((FLAGS.output_file, "--output_file"),
                     (FLAGS.heldout_file, "--heldout_file")):
    folder = os.path.dirname(os.path.abspath(path)) if path else None
    if folder and not os.path.isdir(folder):
      sys.exit(f"{flag}={path}: folder {folder} does not exist; create it "
               "first")
  articles = ["\n".join(d) + "\n\n"
              for d in squad_documents(FLAGS.squad_file)]
  docs = (leading_documents(FLAGS.docs_corpus, int(FLAGS.docs_mb * 2**20))
          if FLAGS.docs_mb > 0 else [])
  glue = (["\n".join(d) + "\n\n" for d in glue_documents(
      FLAGS.glue_dir, FLAGS.glue_sentences_per_document)]
          if FLAGS.glue_dir else [])
  train, heldout = [], []
  for source in (articles, docs, glue):
    for i, block in enumerate(source):
      held = FLAGS.heldout_file and i % FLAGS.heldout_every == 0
      (heldout if held else train).append(block)
  size = write_atomically(FLAGS.output_file, train)
  print(f"{FLAGS.output_file}: {len(train)} documents, {size:.1f} MB "
        f"(from {len(articles)} SQuAD articles, {FLAGS.docs_mb:g} MB of "
        f"documentation and {len(glue)} GLUE documents)")
  if FLAGS.heldout_file:
    size = write_atomically(FLAGS.heldout_file, heldout)
    print(f"{FLAGS.heldout_file}: {len(heldout)} held-out documents, "
          f"{size:.1f} MB")


if __name__ == "__main__":
  cli.run(main)
