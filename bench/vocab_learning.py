# coding=utf-8
"""create_vocab.py at corpus scale: time, peak memory and held-out quality,
against Google's uncased vocabulary and TensorFlow Text's learner.

The corpus is tools/build_pretraining_corpus.py's (run it first with
--extended for a 400 MB corpus_4x.txt without repeats). Its last
--heldout_mb megabytes (whole documents) are the held-out text; the
training text of a size is the first that many megabytes of corpus_4x.txt
before them (corpus_1x.txt is its first 100 MB).

For each --sizes_mb size:
  ours          `python create_vocab.py` on the text (rule "all", the
                default), timed by /usr/bin/time -v, with the peak of the
                resident sets of the whole process tree (main process and
                counting workers) sampled every 0.2 s; it also writes the
                word counts
  ours, kept    the same counts learned with --prefix_discount=kept
For each --peer_sizes_mb size, in bench/out/tftext_venv
(bash bench/setup_tftext_env.sh), never in the project's environment:
  tf-text e2e   tensorflow_text's bert_vocab_from_dataset on the text (its
                own BERT basic tokenizer, lower_case=True, its default
                learner settings, Google's 999 reserved tokens)
  tf-text learn its wordpiece_tokenizer_learner_lib.learn on our word
                counts, to compare with ours entry by entry

Quality on the held-out text, per vocabulary: WordPiece pieces per word and
the share of words that become [UNK], with tokenization.FullTokenizer
(uncased). Results go to --work_dir/results.json and to stdout.

    python -m bench.vocab_learning --sizes_mb=100,398 --peer_sizes_mb=10
    python -m bench.vocab_learning --sizes_mb=398 --peer_sizes_mb= \
        --relearn_rules=        # the 400 MB text run alone
"""

import functools
import json
import os
import re
import subprocess
import sys
import time

from absl import app
from absl import flags

import bench
from bench import process_trees

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "corpus", os.path.join(bench.REPO_ROOT, "bench", "out",
                           "pretraining_corpus", "corpus_4x.txt"),
    "The corpus (tools/build_pretraining_corpus.py --extended).")
flags.DEFINE_string(
    "work_dir", os.path.join(bench.REPO_ROOT, "bench", "out",
                             "vocab_learning"),
    "Where training slices, vocabularies, counts and logs go.")
flags.DEFINE_list("sizes_mb", ["100", "398"],
                  "Training sizes (MB) for create_vocab.py.")
flags.DEFINE_list("peer_sizes_mb", ["10"],
                  "Training sizes (MB) for TensorFlow Text's learner.")
flags.DEFINE_list(
    "relearn_rules", ["all", "kept"],
    "--prefix_discount rules learned again from each size's word counts "
    "(\"all\" also checks that learning from counts matches learning from "
    "text); empty for the text run alone.")
flags.DEFINE_float("heldout_mb", 2.0, "Held-out text at the corpus's end.")
flags.DEFINE_integer("vocab_size", 30522, "Lines of every vocabulary.")
flags.DEFINE_string(
    "google_vocab", os.path.join(os.path.dirname(bench.REPO_ROOT), "shared",
                                 "assets", "bert_vocab", "uncased",
                                 "vocab.txt"),
    "Google's uncased vocab.txt.")
flags.DEFINE_string(
    "peer_python", os.path.join(bench.REPO_ROOT, "bench", "out",
                                "tftext_venv", "bin", "python"),
    "Python of the TensorFlow Text environment.")
flags.DEFINE_integer("peer_timeout", 5400,
                     "Seconds after which a peer run is stopped.")
flags.DEFINE_enum("peer_child", None, ["e2e", "learn"],
                  "Internal: run as the peer's child process.")
flags.DEFINE_string("peer_input", None, "Internal: the peer child's input.")
flags.DEFINE_string("peer_output", None, "Internal: the peer child's output.")

_MB = 1e6
_NUM_RESERVED = 999
_SAMPLE_SECONDS = 0.2


# ---------------------------------------------------------------------------
# Text slices.
# ---------------------------------------------------------------------------


def _document_cut(path, offset):
  """The byte offset of the first document start at or after `offset`."""
  with open(path, "rb") as f:
    f.seek(offset)
    position = offset
    previous_blank = offset == 0
    for line in f:
      if previous_blank:
        return position
      previous_blank = line.strip() == b""
      position += len(line)
  return position


def _copy_range(source, target, start, end):
  if os.path.exists(target) and os.path.getsize(target) == end - start:
    return
  with open(source, "rb") as f, open(target + ".part", "wb") as out:
    f.seek(start)
    left = end - start
    while left:
      block = f.read(min(left, 1 << 24))
      out.write(block)
      left -= len(block)
  os.replace(target + ".part", target)


def prepare_slices(corpus, work_dir, sizes_mb, heldout_mb):
  """Writes heldout.txt and train_<size>mb.txt; returns their paths."""
  total = os.path.getsize(corpus)
  heldout_start = _document_cut(corpus, total - int(heldout_mb * _MB))
  heldout = os.path.join(work_dir, "heldout.txt")
  _copy_range(corpus, heldout, heldout_start, total)
  trains = {}
  for size in sizes_mb:
    end = _document_cut(corpus, int(float(size) * _MB))
    if end > heldout_start:
      raise app.UsageError("--sizes_mb=%s reaches the held-out text; the "
                           "corpus has %.0f MB before it." %
                           (size, heldout_start / _MB))
    trains[size] = os.path.join(work_dir, "train_%smb.txt" % size)
    _copy_range(corpus, trains[size], 0, end)
  return heldout, trains


# ---------------------------------------------------------------------------
# Measured runs.
# ---------------------------------------------------------------------------


def run_measured(command, log_path, timeout):
  """Runs `command` under /usr/bin/time -v from the repository's root.

  Returns:
    dict: seconds (wall), max_rss_gib (largest single process, time -v),
    tree_peak_gib (sampled sum over the process tree), returncode.
  """
  with open(log_path, "w") as log:
    process = subprocess.Popen(["/usr/bin/time", "-v"] + command,
                               cwd=bench.REPO_ROOT, stdout=log,
                               stderr=subprocess.STDOUT)
    start = time.monotonic()
    peak = 0
    while process.poll() is None:
      peak = max(peak, process_trees.tree_memory(process.pid)[0])
      if time.monotonic() - start > timeout:
        process.kill()
      time.sleep(_SAMPLE_SECONDS)
    seconds = time.monotonic() - start
  with open(log_path) as log:
    text = log.read()
  match = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
  return {"seconds": round(seconds, 1), "returncode": process.returncode,
          "max_rss_gib": round(int(match.group(1)) / 2**20, 2)
                         if match else None,
          "tree_peak_gib": round(peak / 2**30, 2)}


def _create_vocab(args, vocab_size):
  """The argv of create_vocab.py with `args`, learning `vocab_size` lines."""
  return [sys.executable, "create_vocab.py",
          "--vocab_size=%d" % vocab_size] + args


# ---------------------------------------------------------------------------
# The peer, in its own environment.
# ---------------------------------------------------------------------------


def _reserved_tokens(google_vocab):
  """The first lines of Google's vocabulary, its reserved tokens."""
  with open(google_vocab, encoding="utf-8") as f:
    return f.read().splitlines()[:_NUM_RESERVED]


def peer_child(kind, input_path, output_path, vocab_size, google_vocab):
  """TensorFlow Text's learner (runs in bench/out/tftext_venv).

  Writes to `output_path` a vocabulary of `vocab_size` lines with the
  reserved tokens of `google_vocab`, learned by kind "e2e" from the text
  of `input_path`, by "learn" from its word counts (create_vocab.py's
  --counts_output).
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset  # pylint: disable=g-import-not-at-top
  from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner  # pylint: disable=g-import-not-at-top
  reserved = _reserved_tokens(google_vocab)
  if kind == "e2e":
    lines = tf.data.TextLineDataset(input_path).filter(
        lambda line: tf.strings.length(tf.strings.strip(line)) > 0)
    vocab = bert_vocab_from_dataset.bert_vocab_from_dataset(
        lines.batch(1024), vocab_size, reserved,
        bert_tokenizer_params={"lower_case": True})
  else:
    counts = []
    with open(input_path, encoding="utf-8") as f:
      next(f)  # The header line.
      for line in f:
        word, count = line.rstrip("\n").split("\t")
        counts.append((word, int(count)))
    vocab = learner.learn(counts, vocab_size, reserved)
  with open(output_path, "w", encoding="utf-8") as f:
    f.write("".join(token + "\n" for token in vocab))


def run_peer(kind, input_path, output_path, log_path, peer_python,
             vocab_size, google_vocab, timeout):
  """run_measured's record of peer_child's `kind` run in `peer_python`'s
  environment, stopped after `timeout` seconds."""
  command = [peer_python, "-m", "bench.vocab_learning",
             "--peer_child=" + kind, "--peer_input=" + input_path,
             "--peer_output=" + output_path,
             "--vocab_size=%d" % vocab_size,
             "--google_vocab=" + google_vocab]
  return run_measured(command, log_path, timeout)


# ---------------------------------------------------------------------------
# Quality on held-out text.
# ---------------------------------------------------------------------------


def heldout_words(heldout):
  """Counter of the held-out text's words (uncased basic tokens)."""
  import collections  # pylint: disable=g-import-not-at-top
  import tokenization  # pylint: disable=g-import-not-at-top
  from vocabulary import word_counts  # pylint: disable=g-import-not-at-top
  counts = collections.Counter()
  with open(heldout, encoding="utf-8") as f:
    word_counts.count_lines((line.strip() for line in f),
                            tokenization.BasicTokenizer(True), counts)
  return counts


def quality(vocab_path, words):
  """Pieces per word and the share of [UNK] words, over `words`."""
  import tokenization  # pylint: disable=g-import-not-at-top
  vocab = tokenization.load_vocab(vocab_path)
  wordpiece = tokenization.WordpieceTokenizer(vocab)
  pieces = unknown = total = 0
  for word, count in words.items():
    tokens = wordpiece.tokenize(word)
    pieces += len(tokens) * count
    unknown += (tokens == ["[UNK]"]) * count
    total += count
  return {"pieces_per_word": round(pieces / total, 4),
          "unk_word_percent": round(100.0 * unknown / total, 4),
          "lines": len(vocab)}


def _without_padding(tokens):
  """`tokens` less the [unusedN] slots that fill its end (vocabulary/
  layout.py), which TensorFlow Text does not write."""
  end = len(tokens)
  while end > _NUM_RESERVED and re.fullmatch(r"\[unused\d+\]",
                                             tokens[end - 1]):
    end -= 1
  return tokens[:end]


def _diff(ours_path, theirs_path):
  with open(ours_path, encoding="utf-8") as f:
    ours = _without_padding(f.read().splitlines())
  with open(theirs_path, encoding="utf-8") as f:
    theirs = _without_padding(f.read().splitlines())
  only_ours = sorted(set(ours) - set(theirs))
  only_theirs = sorted(set(theirs) - set(ours))
  return {"identical_prefix": next(
      (i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b),
      min(len(ours), len(theirs))),
          "lines": [len(ours), len(theirs)],
          "only_ours": only_ours[:20], "only_theirs": only_theirs[:20],
          "num_only_ours": len(only_ours),
          "num_only_theirs": len(only_theirs)}


# ---------------------------------------------------------------------------
# Main.
# ---------------------------------------------------------------------------


def main(_):
  if FLAGS.peer_child:
    peer_child(FLAGS.peer_child, FLAGS.peer_input, FLAGS.peer_output,
               FLAGS.vocab_size, FLAGS.google_vocab)
    return
  in_work_dir = functools.partial(os.path.join, FLAGS.work_dir)
  peer = dict(peer_python=FLAGS.peer_python, vocab_size=FLAGS.vocab_size,
              google_vocab=FLAGS.google_vocab, timeout=FLAGS.peer_timeout)
  os.makedirs(FLAGS.work_dir, exist_ok=True)
  sizes = sorted(set(FLAGS.sizes_mb) | set(FLAGS.peer_sizes_mb), key=float)
  heldout, trains = prepare_slices(FLAGS.corpus, FLAGS.work_dir, sizes,
                                   FLAGS.heldout_mb)
  results = {"runs": {}, "quality": {}, "comparisons": {}}
  words = heldout_words(heldout)
  results["heldout_words"] = sum(words.values())
  vocabs = {"google uncased": FLAGS.google_vocab}
  for size in sizes:
    counts = in_work_dir("counts_%smb.tsv" % size)
    vocab = in_work_dir("ours_all_%smb.txt" % size)
    results["runs"]["ours %s MB" % size] = run_measured(_create_vocab([
        "--input_file=" + trains[size], "--output_file=" + vocab,
        "--counts_output=" + counts], FLAGS.vocab_size),
        in_work_dir("ours_all_%smb.log" % size), FLAGS.peer_timeout)
    vocabs["ours %s MB" % size] = vocab
    for rule in FLAGS.relearn_rules:
      learned = in_work_dir("ours_%s_from_counts_%smb.txt" % (rule, size))
      command = _create_vocab([
          "--counts_input=" + counts, "--output_file=" + learned,
          "--prefix_discount=" + rule], FLAGS.vocab_size)
      log = in_work_dir("ours_%s_learn_%smb.log" % (rule, size))
      results["runs"]["ours %s, learning from counts, %s MB" % (
          rule, size)] = run_measured(command, log, FLAGS.peer_timeout)
    if "all" in FLAGS.relearn_rules:
      results["comparisons"]["ours from text vs from counts, %s MB" % size] = (
          _diff(vocab, in_work_dir("ours_all_from_counts_%smb.txt" % size)))
    if "kept" in FLAGS.relearn_rules:
      vocabs["ours kept %s MB" % size] = in_work_dir(
          "ours_kept_from_counts_%smb.txt" % size)
    if size in FLAGS.peer_sizes_mb:
      for kind, source in (("e2e", trains[size]), ("learn", counts)):
        output = in_work_dir("tftext_%s_%smb.txt" % (kind, size))
        results["runs"]["tf-text %s %s MB" % (kind, size)] = run_peer(
            kind, source, output,
            in_work_dir("tftext_%s_%smb.log" % (kind, size)), **peer)
        if os.path.exists(output):
          vocabs["tf-text %s %s MB" % (kind, size)] = output
      if os.path.exists(in_work_dir("tftext_learn_%smb.txt" % size)):
        results["comparisons"]["ours vs tf-text learn, %s MB" % size] = _diff(
            vocab, in_work_dir("tftext_learn_%smb.txt" % size))
    for name, path in vocabs.items():
      if name not in results["quality"]:
        results["quality"][name] = quality(path, words)
    with open(in_work_dir("results.json"), "w") as f:
      json.dump(results, f, indent=1, ensure_ascii=False)
  print(json.dumps(results, indent=1, ensure_ascii=False))


if __name__ == "__main__":
  app.run(main)
