"""create_vocab.py and vocabulary/: TensorFlow Text's WordPiece learner,
Google's vocab.txt layout, counting, merging counts and bad input.

The learner is checked against vocabularies worked out by hand from the
algorithm's definition, and against a literal re-derivation of that
definition (count every substring from every start, visit the longest
first, subtract as the rule says) on random corpora. bench/vocab_learning.py
compares it with TensorFlow Text's own code on real text.
"""
import collections
import csv
import json
import os
import random
import re
import signal
import subprocess
import sys

from absl import flags
import pytest

from corpus import text_files
import create_pretraining_data
import create_vocab
import processes
import script_runner
import tokenization
from userio import cli
from userio import folder_lock
from vocabulary import layout
from vocabulary import vocab_job
from vocabulary import word_counts
from vocabulary import wordpiece_learner

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MRPC_TRAIN = os.path.join(REPO_ROOT, "sample_data", "mrpc_sample",
                          "train.tsv")
SCRIPT = "create_vocab.py"


# ---------------------------------------------------------------------------
# The learner: worked examples.
# ---------------------------------------------------------------------------


def _params(vocab_size=1000, **kwargs):
  return wordpiece_learner.learner_params(vocab_size, ["[PAD]"], **kwargs)


def test_one_round_keeps_frequent_remainders_hug_pug():
  # Words hug x10, hugs x5, pug x5; threshold 5, one round. Candidates
  # from later starts: ug 10+5+5, g 20, ugs 5, gs 5, s 5, u 20. With either
  # rule, ugs (5) is kept and leaves ug 15 and u 15; ug (15) is kept and
  # leaves u 0; gs (5) leaves g 15; g and s are kept. From the first
  # start: hugs (5) leaves hug 10, hu 10, h 10; pug (5) leaves pu 0, p 0;
  # hug (10) leaves hu 0, h 0.
  words = [("hug", 10), ("hugs", 5), ("pug", 5)]
  chars = frozenset("ghpsu")
  expected = ["[PAD]", "g", "h", "p", "s", "u",
              "##g", "##ug",                      # 15
              "hug",                              # 10
              "##gs", "##s", "##ugs", "hugs", "pug",  # 5
              "##h", "##p", "##u"]                # characters, count 1
  for rule in wordpiece_learner.PREFIX_DISCOUNTS:
    assert wordpiece_learner.learn_with_threshold(
        words, chars, 5, _params(num_iterations=1, prefix_discount=rule)
    ) == expected, rule


def test_the_two_prefix_discount_rules_differ_on_unable_unfit():
  # unable x6, unfit x6, threshold 10. Candidate "un" counts 12 from the
  # first start and "n" 12 from the second; no longer candidate reaches 10.
  # "kept" (the guide) subtracts only kept candidates, so un and ##n keep
  # their 12. "all" (TensorFlow Text's code) also subtracts the candidates
  # not kept: unable and unfit take 6 each from un, leaving 0.
  words = [("unable", 6), ("unfit", 6)]
  letters = ["a", "b", "e", "f", "i", "l", "n", "t", "u"]
  joined = ["##a", "##b", "##e", "##f", "##i", "##l", "##n", "##t", "##u"]
  chars = frozenset(letters)
  one_round = dict(num_iterations=1)
  assert wordpiece_learner.learn_with_threshold(
      words, chars, 10, _params(prefix_discount="all", **one_round)) == (
          ["[PAD]"] + letters + joined)
  assert wordpiece_learner.learn_with_threshold(
      words, chars, 10, _params(prefix_discount="kept", **one_round)) == (
          ["[PAD]"] + letters + ["##n", "un"] +
          [j for j in joined if j != "##n"])
  # Round two splits un|able and un|fit: the later starts are a, b, l, e
  # and f, i, t, none reaching 10, so the spurious ##n is gone.
  assert wordpiece_learner.learn_with_threshold(
      words, chars, 10, _params(prefix_discount="kept", num_iterations=2)
  ) == ["[PAD]"] + letters + ["un"] + joined


def test_binary_search_x_xy_xyz():
  # x x100, xy x50, xyz x20; the search runs between the smallest count
  # (20) and the largest (100). Four rounds give 7 entries ([PAD], x, y, z
  # and their ## forms) for T > 50, plus xy for 20 < T <= 50 (xyz splits
  # as xy|z and z counts 20 < T), plus xy and xyz for T <= 20.
  words = {"x": 100, "xy": 50, "xyz": 20}
  # Size 8, no slack: T=60 gives 7 (too few, search below), T=39 gives 8.
  assert wordpiece_learner.learn(words, _params(8, slack_ratio=0)) == [
      "[PAD]", "x", "y", "z", "xy", "##x", "##y", "##z"]
  # Size 9: T=60, 39, 29, 24, 21 give too few; T=20 ends the search.
  assert wordpiece_learner.learn(words, _params(9, slack_ratio=0)) == [
      "[PAD]", "x", "y", "z", "xy", "xyz", "##x", "##y", "##z"]


def test_characters_rank_by_count_then_code_point():
  counts = {"ab": 3, "ba": 2, "c": 5, "d": 1}
  assert wordpiece_learner.allowed_characters(counts, 10, 1) == set("abcd")
  # a 5, b 5, c 5, d 1: the cap keeps a and b (ties by code point) ...
  assert wordpiece_learner.allowed_characters(counts, 2, 1) == set("ab")
  # ... and the minimum count leaves d out.
  assert wordpiece_learner.allowed_characters(counts, 10, 2) == set("abc")


# ---------------------------------------------------------------------------
# The learner against a literal re-derivation of the published definition.
# ---------------------------------------------------------------------------


def _reference_round(words, threshold, pieces, rule, chars):
  """One round as the definition states it, substring by substring."""
  counts = collections.Counter()
  for word, count in words:
    starts = range(len(word)) if pieces is None else _greedy_starts(
        word, pieces)
    for start in starts:
      for end in range(start + 1, len(word) + 1):
        counts[(start > 0, word[start:end])] += count
  kept = {}
  for key in sorted(counts, key=lambda k: -len(k[1])):
    count = counts[key]
    if count >= threshold:
      kept[("##" if key[0] else "") + key[1]] = count
    if rule == "all" or count >= threshold:
      for length in range(1, len(key[1])):
        counts[(key[0], key[1][:length])] -= count
  for char in chars:
    kept.setdefault(char, 1)
    kept.setdefault("##" + char, 1)
  return kept


def _greedy_starts(word, pieces):
  starts, start = [], 0
  while start < len(word):
    starts.append(start)
    end = len(word)
    while ("##" if start else "") + word[start:end] not in pieces:
      end -= 1
    start = end
  return starts


def _reference_vocab(words, chars, threshold, rounds, rule):
  pieces = None
  for _ in range(rounds):
    pieces = _reference_round(words, threshold, pieces, rule, chars)
  ranked = sorted(pieces.items(), key=lambda item: (-item[1], item[0]))
  return list(dict.fromkeys(["[PAD]"] + sorted(chars) +
                            [piece for piece, _ in ranked]))


@pytest.mark.parametrize("rule", wordpiece_learner.PREFIX_DISCOUNTS)
def test_learner_matches_the_definition_on_random_corpora(rule):
  rng = random.Random(51)
  for _ in range(120):
    alphabet = "abcde"[:rng.randint(2, 5)]
    counts = collections.Counter()
    for _ in range(rng.randint(1, 25)):
      word = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))
      counts[word] += rng.randint(1, 30)
    words = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    chars = frozenset("".join(counts))
    for threshold in (1, 3, 12):
      for rounds in (1, 2, 4):
        assert wordpiece_learner.learn_with_threshold(
            words, chars, threshold,
            _params(num_iterations=rounds, prefix_discount=rule)) == (
                _reference_vocab(words, chars, threshold, rounds, rule)), (
                    words, threshold, rounds)


# ---------------------------------------------------------------------------
# Counting.
# ---------------------------------------------------------------------------

_TRICKY_LINES = [
    "Héllo, Wörld!  It's 3.5\tmiles (5.6 km) — naïve café.",
    "a\x0bb c\u2028d e\u00a0f g\x00h i\ufffdj k\u200bl",
    "中文字符和English混合。 Ｆｕｌｌｗｉｄｔｈ ＡＢＣ",
    "Ελληνικά Кириллица עברית العربية ﬁnancial Straße İstanbul",
    " leading and trailing spaces  ",
    "",
]


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_counts_equal_tokenizing_whole_lines(do_lower_case):
  basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
  expected = collections.Counter()
  for line in _TRICKY_LINES * 3:
    expected.update(basic.tokenize(line))
  counts = collections.Counter()
  word_counts.count_lines(_TRICKY_LINES * 3, basic, counts)
  assert counts == expected


def test_shards_are_those_of_create_pretraining_data(tmp_path):
  """Both scripts read the corpus through the one reader; the counts of
  the shards (cut at 60 bytes) add up to BasicTokenizer's words of every
  line of the file, whatever the order they are added in."""
  assert word_counts.text_files is text_files
  assert create_pretraining_data.text_files is text_files
  path = tmp_path / "corpus.txt"
  documents = [["Doc %d, line %d!" % (d, l) for l in range(d % 3 + 1)]
               for d in range(20)]
  path.write_text("".join("\n".join(lines) + "\n\n" for lines in documents))
  basic = tokenization.BasicTokenizer(do_lower_case=True)
  expected = collections.Counter(
      word for lines in documents for line in lines
      for word in basic.tokenize(line))
  specs = text_files.plan_shards([str(path)], 60)
  assert len(specs) == -(-path.stat().st_size // 60) > 3
  job = vocab_job.VocabJob(do_lower_case=True)
  results = [job.work(spec) for spec in specs]
  assert sum(r["documents"] for r in results) == len(documents)
  assert sum(r["bytes"] for r in results) == path.stat().st_size
  forward = job.empty()
  for result in results:
    forward = job.add(forward, result)
  halves = [job.empty(), job.empty()]
  for i, result in enumerate(reversed(results)):
    halves[i % 2] = job.add(halves[i % 2], result)
  assert forward == job.merge(halves) == expected


def test_count_file_round_trip(tmp_path):
  counts = collections.Counter({"the": 5, "##": 1, "#": 2, "ü": 2, "a": 5})
  path = str(tmp_path / "counts.tsv")
  word_counts.write_counts(path, counts, do_lower_case=False)
  with open(path, encoding="utf-8") as f:
    assert f.read() == ("#word_counts\tdo_lower_case=False\n"
                        "a\t5\nthe\t5\n#\t2\nü\t2\n##\t1\n")
  assert word_counts.read_counts([path, path]) == (
      collections.Counter({k: 2 * v for k, v in counts.items()}), False)


# ---------------------------------------------------------------------------
# Google's layout.
# ---------------------------------------------------------------------------


def _google_vocab(assets_dir, kind="uncased"):
  with open(os.path.join(assets_dir, "bert_vocab", kind, "vocab.txt"),
            encoding="utf-8") as f:
    return f.read().splitlines()


def test_default_reserved_block_is_googles(assets_dir):
  google = _google_vocab(assets_dir)
  assert layout.reserved_tokens(layout.GOOGLE_NUM_UNUSED) == google[:999]


def test_other_unused_counts():
  few = layout.reserved_tokens(3)
  assert few == ["[PAD]", "[unused0]", "[unused1]", "[unused2]", "[UNK]",
                 "[CLS]", "[SEP]", "[MASK]"]
  many = layout.reserved_tokens(101)
  assert many.index("[UNK]") == 100 and many.index("[MASK]") == 103
  assert many[104:] == ["[unused99]", "[unused100]"]
  assert layout.reserved_tokens(0) == ["[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                       "[MASK]"]


def test_fit_to_size_fills_with_slots_or_drops_rare_pieces():
  reserved = layout.reserved_tokens(1)
  learned = reserved + ["a", "b", "ab", "ba", "##a", "##b"]
  assert layout.fit_to_size(learned, 14, 1, {"a", "b"}) == (
      learned + ["[unused1]", "[unused2]"], 0, 2)
  assert layout.fit_to_size(learned, 10, 1, {"a", "b"}) == (
      reserved + ["a", "b", "##a", "##b"], 2, 0)


# ---------------------------------------------------------------------------
# The command.
# ---------------------------------------------------------------------------


def _mrpc_sentences():
  with open(MRPC_TRAIN, encoding="utf-8-sig") as f:
    rows = list(csv.reader(f, delimiter="\t", quotechar=None))[1:]
  return [sentence for row in rows for sentence in row[3:5]]


# A character seen once, left out with --min_char_count=2.
_RARE_LINE = "The ǂ sign appears once."


def _write_corpus(folder):
  """MRPC's sentences as documents of four sentences, and a few lines with
  accents, CJK and a rare character."""
  sentences = _mrpc_sentences() + [
      "Crème brûlée at the café, naïvely.", "東京と大阪 は 日本 の 都市 です。",
      _RARE_LINE]
  path = os.path.join(folder, "corpus.txt")
  with open(path, "w", encoding="utf-8") as f:
    for index, sentence in enumerate(sentences):
      f.write(sentence + "\n" + ("\n" if index % 4 == 3 else ""))
  return path, sentences


def _read_lines(path):
  with open(path, encoding="utf-8") as f:
    return f.read().splitlines()


def _run_ok(run_script, args):
  result = run_script(SCRIPT, args)
  assert result.returncode == 0, result.stderr[-3000:]
  return result


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  return _write_corpus(str(tmp_path_factory.mktemp("vocab_corpus")))


@pytest.mark.slow
def test_vocab_has_googles_layout_and_covers_every_word(
    corpus, tmp_path, run_script, assets_dir):
  path, sentences = corpus
  out = str(tmp_path / "vocab.txt")
  _run_ok(run_script, ["--input_file=" + path, "--output_file=" + out,
                       "--vocab_size=2500", "--min_char_count=2"])
  tokens = _read_lines(out)
  assert len(tokens) == 2500 and len(set(tokens)) == 2500
  assert tokens[:999] == _google_vocab(assets_dir)[:999]
  tokenizer = tokenization.FullTokenizer(out, do_lower_case=True)
  assert tokenizer.vocab["[UNK]"] == 100 and tokenizer.vocab["[MASK]"] == 103
  basic = tokenization.BasicTokenizer(do_lower_case=True)
  chars = collections.Counter(c for s in sentences
                              for w in basic.tokenize(s) for c in w)
  # The characters by code point, right after the reserved block; each
  # also with ##.
  kept = sorted(c for c, n in chars.items() if n >= 2)
  assert tokens[999:999 + len(kept)] == kept
  assert all("##" + c in tokenizer.vocab for c in kept)
  # A word becomes [UNK] exactly when it holds a character seen once.
  unknown = [sum(any(chars[c] < 2 for c in word)
                 for word in basic.tokenize(sentence))
             for sentence in sentences]
  assert unknown[sentences.index(_RARE_LINE)] == 1  # the word "ǂ"
  assert [tokenizer.tokenize(s).count("[UNK]")
          for s in sentences] == unknown
  assert not tokenization.vocab_is_cased(tokens)


@pytest.mark.slow
def test_same_input_same_file_whatever_the_workers(corpus, tmp_path,
                                                   run_script):
  path, _ = corpus
  outputs = []
  for index, (workers, shard_mb) in enumerate([(1, 4.0), (2, 0.002)]):
    out = str(tmp_path / ("vocab%d.txt" % index))
    _run_ok(run_script, ["--input_file=" + path, "--output_file=" + out,
                         "--vocab_size=1800", "--do_lower_case=False",
                         "--num_unused=20", "--num_workers=%d" % workers,
                         "--shard_size_mb=%g" % shard_mb])
    with open(out, "rb") as f:
      outputs.append(f.read())
  assert outputs[0] == outputs[1]
  tokens = outputs[0].decode("utf-8").splitlines()
  assert tokens[21:25] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  assert tokenization.vocab_is_cased(tokens)


_SHORT_WARNING = re.compile(
    r"\d\d:\d\d:\d\d Warning: Only (\d+) of the (\d+) lines of the vocabulary "
    r"are learned pieces and characters; \[unusedN\] slots fill (\d+)% of it\. "
    r"Learn from a larger corpus, or pass a smaller --vocab_size \(this "
    r"corpus fills (\d+) lines\) and give bert_config.json the same "
    r"vocab_size\.$")


def _warnings(stderr):
  return script_runner.warning_lines(stderr)


@pytest.mark.slow
def test_a_corpus_too_small_for_the_size_is_one_warning_naming_the_fix(
    tmp_path, run_script):
  """MRPC's 29 kB cannot fill 3000 lines: one warning (at the default
  verbosity) gives the learned lines, the share of [unusedN] slots and the
  size this corpus fills, each as counted in the file written; at that
  size the run does not warn. The counting line says "1 shard" and counts
  the words BasicTokenizer finds in the file's lines."""
  out = str(tmp_path / "vocab.txt")
  result = _run_ok(run_script, ["--input_file=" + MRPC_TRAIN,
                                "--output_file=" + out, "--vocab_size=3000",
                                "--num_unused=20"])
  tokens = _read_lines(out)
  slots = sum(bool(re.fullmatch(r"\[unused\d+\]", t)) for t in tokens)
  learned = len(tokens) - slots - 5  # [PAD], [UNK], [CLS], [SEP], [MASK]
  warnings = _warnings(result.stderr)
  assert len(warnings) == 1, result.stderr[-3000:]
  found = _SHORT_WARNING.match(warnings[0])
  assert found, warnings[0]
  fills = len(tokens) - (slots - 20)
  assert [int(n) for n in found.groups()] == [
      learned, 3000, round(100 * slots / 3000), fills]
  assert 0.8 < slots / 3000 < 1

  basic = tokenization.BasicTokenizer(do_lower_case=True)
  with open(MRPC_TRAIN, encoding="utf-8") as f:
    words = collections.Counter(
        word for line in f for word in basic.tokenize(line.strip()))
  assert " Counting words: 1 shard, " in result.stderr
  assert " Counted {:,} distinct words, {:,} words in all.\n".format(
      len(words), sum(words.values())) in result.stderr

  result = _run_ok(run_script, ["--input_file=" + MRPC_TRAIN,
                                "--output_file=" + out,
                                "--vocab_size=%d" % fills, "--num_unused=20"])
  assert not _warnings(result.stderr), result.stderr[-3000:]


def test_output_folders_are_locked_for_the_run(tmp_path, monkeypatch):
  """In-process: while counting, the folders of --output_file and
  --counts_output are locked by this process; a run finding one locked by
  another run is refused naming it, without touching the temporary file
  that run may be writing; the locks go when the run ends."""
  vocab_dir, counts_dir = tmp_path / "vocab", tmp_path / "counts"
  vocab_dir.mkdir()
  counts_dir.mkdir()
  others = counts_dir / "counts.tsv.tmp"
  others.write_text("the other run's counts")
  flag_values = flags.FlagValues()
  create_vocab.define_flags(flag_values)
  flag_values([SCRIPT, "--input_file=" + MRPC_TRAIN,
               "--output_file=%s" % (vocab_dir / "vocab.txt"),
               "--counts_output=%s" % (counts_dir / "counts.tsv"),
               "--vocab_size=3000", "--num_workers=1"])
  owners = []
  finish = vocab_job.VocabJob.finish

  def finish_noting_the_locks(job, counts):
    for folder in (vocab_dir, counts_dir):
      with open(str(folder / "run.lock")) as f:
        owners.append(json.load(f)["pid"])
    return finish(job, counts)

  monkeypatch.setattr(vocab_job.VocabJob, "finish", finish_noting_the_locks)
  holder = subprocess.Popen(
      [sys.executable, "-c", "import sys, time\n"
       "from userio import folder_lock\n"
       "lock = folder_lock.hold(sys.argv[1])\n"
       "print('held', flush=True)\n"
       "time.sleep(120)\n", str(counts_dir)],
      cwd=REPO_ROOT, env=dict(os.environ, PYTHONPATH=REPO_ROOT),
      stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline() == "held\n"
    with pytest.raises(cli.UserError) as raised:
      create_vocab.run(flag_values)
  finally:
    holder.kill()
    holder.wait()
  assert str(raised.value).startswith(
      "%s, the folder of --counts_output, is in use by another run (pid %d "
      % (counts_dir, holder.pid))
  assert not owners
  assert others.read_text() == "the other run's counts"
  assert sorted(os.listdir(str(vocab_dir))) == []
  create_vocab.run(flag_values)
  assert owners == [os.getpid()] * 2
  assert sorted(os.listdir(str(vocab_dir))) == ["vocab.txt"]
  assert sorted(os.listdir(str(counts_dir))) == ["counts.tsv"]


# create_vocab.py as a user runs it, except that counting a shard records
# the worker's pid in the folder $PIDS and then takes ten minutes: a run
# stopped meanwhile has busy workers.
_SLOW_COUNTING = r"""
import os, sys, time
sys.argv[0] = "create_vocab.py"
import create_vocab
from userio import cli
from vocabulary import word_counts

def count_shard(spec, do_lower_case):
  open(os.path.join(os.environ["PIDS"], str(os.getpid())), "w").close()
  time.sleep(600)

word_counts.count_shard = count_shard
create_vocab.define_flags()
cli.run(create_vocab.main)
"""


@pytest.mark.slow
@pytest.mark.parametrize("stop,signum,to_group,status,line", [
    ("SIGTERM", signal.SIGTERM, False, 128 + signal.SIGTERM,
     "create_vocab.py: stopped by SIGTERM."),
    ("Ctrl-C", signal.SIGINT, True, 130, "create_vocab.py: interrupted."),
    ("kill -9", signal.SIGKILL, False, -signal.SIGKILL, None)])
def test_a_stopped_run_leaves_no_worker_and_nothing_written(
    tmp_path, stop, signum, to_group, status, line):
  """A run of two workers, each busy with a shard, is stopped: it ends at
  once (one line and the status of the stop, or killed), its workers end
  with it, and its folders hold nothing it wrote. Ctrl-C reaches the whole
  process group, as a terminal sends it. After kill -9 only the lock file
  stays, and no live process holds its lock (workers inherit it)."""
  del stop  # The test's name.
  out, pids = tmp_path / "out", tmp_path / "pids"
  out.mkdir()
  pids.mkdir()
  run = subprocess.Popen(
      [sys.executable, "-c", _SLOW_COUNTING, "--input_file=" + MRPC_TRAIN,
       "--output_file=%s" % (out / "vocab.txt"),
       "--counts_output=%s" % (out / "counts.tsv"), "--num_workers=2",
       "--shard_size_mb=0.002"],
      cwd=REPO_ROOT, env=dict(os.environ, PYTHONPATH=REPO_ROOT, PIDS=str(pids)),
      stderr=subprocess.PIPE, text=True, start_new_session=True)
  workers = []
  try:
    assert processes.wait_for(lambda: len(os.listdir(pids)) == 2 or
                     run.poll() is not None, 300), "no worker started"
    workers = [int(name) for name in os.listdir(pids)]
    assert len(workers) == 2 and run.poll() is None
    if to_group:
      os.killpg(run.pid, signum)
    else:
      run.send_signal(signum)
    _, stderr = run.communicate(timeout=60)
    assert processes.wait_for(
        lambda: not any(map(processes.running, workers)), 10), (
            [pid for pid in workers if processes.running(pid)])
  finally:
    run.kill()
    for pid in workers:
      if processes.running(pid):
        os.kill(pid, signal.SIGKILL)
  assert run.returncode == status, stderr[-3000:]
  if line is not None:
    assert "Traceback" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == line
  assert set(os.listdir(out)) <= (set() if line else {"run.lock"})
  assert folder_lock.held_by(str(out)) is None


@pytest.mark.slow
@pytest.mark.parametrize("names", [["empty.txt"], ["a.txt", "b.txt"]])
def test_an_empty_corpus_is_refused_before_counting(names, tmp_path,
                                                    run_script):
  """Files of 0 bytes hold no word: one line says so before any counting
  (no line of the counting step), and nothing is written."""
  for name in names:
    (tmp_path / name).write_bytes(b"")
  paths = ",".join(str(tmp_path / name) for name in names)
  result = run_script(SCRIPT, ["--input_file=" + paths,
                               "--output_file=%s" % (tmp_path / "v.txt")])
  assert result.returncode == 2
  assert result.stderr == (
      "%s: error: --input_file: %s %s empty (0 bytes): there are no words to "
      "learn from; name the corpus's text files.\n" % (
          SCRIPT, paths.replace(",", ", "),
          "is" if len(names) == 1 else "are"))
  assert sorted(os.listdir(tmp_path)) == names


@pytest.mark.slow
def test_a_document_longer_than_a_small_shard_is_named_with_the_size(
    tmp_path, run_script):
  """A document of 2,500 bytes with --shard_size_mb=0.001: the shard from
  byte 0 finds no empty line in [1000, 2000) and ends at the first line
  start from byte 2000 on (50-byte lines: byte 2000), with one warning
  naming the shard's size as the flag gives it."""
  path = tmp_path / "corpus.txt"
  path.write_text("".join(("Line %02d of a document without an empty line."
                           % i).ljust(49) + "\n" for i in range(50)) +
                  "\nShort one.\n", encoding="utf-8")
  result = _run_ok(run_script, [
      "--input_file=%s" % path, "--output_file=%s" % (tmp_path / "v.txt"),
      "--shard_size_mb=0.001", "--vocab_size=1100", "--num_unused=20"])
  warnings = [w for w in _warnings(result.stderr) if "longer than" in w]
  assert [w.split(" ", 1)[1] for w in warnings] == [
      "Warning: %s: a document longer than a shard (0.001 MB, "
      "--shard_size_mb) ends at byte 2000 (is an empty line missing between "
      "documents?); it is cut there." % path]


def _bad_utf8(tmp):
  path = os.path.join(tmp, "bad.txt")
  with open(path, "wb") as f:
    f.write(b"Good line one.\nGood line two.\n\nBad \xff byte here.\n")
  return ["--input_file=" + path, "--output_file=%s/v.txt" % tmp]


_BAD_INPUTS = {
    "missing_file": (
        lambda tmp: ["--input_file=%s/nothing*.txt" % tmp,
                     "--output_file=%s/v.txt" % tmp],
        ["nothing*.txt matches no file"]),
    "non_utf8_line": (_bad_utf8, ["bad.txt:4: byte 0xff at column 5 is not UTF-8"]),
    "vocab_size_below_reserved": (
        lambda tmp: ["--input_file=" + MRPC_TRAIN,
                     "--output_file=%s/v.txt" % tmp, "--vocab_size=900"],
        ["--vocab_size=900", "999"]),
    "vocab_size_below_characters": (
        lambda tmp: ["--input_file=" + MRPC_TRAIN,
                     "--output_file=%s/v.txt" % tmp, "--vocab_size=1050"],
        ["--vocab_size=1050 is too small", "characters"]),
    "output_not_writable": (
        lambda tmp: ["--input_file=" + MRPC_TRAIN,
                     "--output_file=/sys/vocab.txt"],
        ["--output_file=/sys/vocab.txt: cannot write there"]),
    "counts_other_casing": (
        lambda tmp: _counts_of_other_casing(tmp),
        ["--do_lower_case=False"]),
}


def _counts_of_other_casing(tmp):
  path = os.path.join(tmp, "counts.tsv")
  word_counts.write_counts(path, {"Word": 3}, do_lower_case=False)
  return ["--counts_input=" + path, "--output_file=%s/v.txt" % tmp]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_BAD_INPUTS))
def test_bad_input_ends_in_one_line(name, tmp_path, run_script):
  make_args, expected = _BAD_INPUTS[name]
  tmp = str(tmp_path)
  result = run_script(SCRIPT, make_args(tmp))
  assert result.returncode == 2, result.stderr[-3000:]
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith(SCRIPT + ": error: "), result.stderr[-3000:]
  for part in expected:
    assert part in last, (part, last)
  assert not os.path.exists(os.path.join(tmp, "v.txt"))
  assert not [n for n in os.listdir(tmp) if n.endswith(".tmp")]
