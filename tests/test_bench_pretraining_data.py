"""The pieces of bench/pretraining_data.py, tools/build_pretraining_corpus.py
and tools/build_pretraining_run_corpus.py.

The corpus builder's text extraction and sentence splitting run on
hand-made snippets of each format; the benchmark's process-tree memory
sampling on a child process holding a known amount of memory; the
pre-training run's corpus on hand-made sources. Nothing is timed.
"""

import json
import os
import subprocess
import sys
import time

from bench import pretraining_data
from bench import process_trees
from tools import build_pretraining_corpus as corpus


def test_sentences_split_at_ends_but_not_abbreviations():
  paragraph = ("The file is read, e.g. by the parser. It has 3 parts! Does "
               "it work? J. R. R. Tolkien wrote it. See Fig. 2 for more. "
               "\u8fd9\u662f\u7b2c\u4e00\u53e5\u3002\u8fd9\u662f\u7b2c\u4e8c"
               "\u53e5\u3002")
  assert corpus.split_sentences(paragraph) == [
      "The file is read, e.g. by the parser.", "It has 3 parts!",
      "Does it work?", "J. R. R. Tolkien wrote it.", "See Fig. 2 for more.",
      "\u8fd9\u662f\u7b2c\u4e00\u53e5\u3002",
      "\u8fd9\u662f\u7b2c\u4e8c\u53e5\u3002"]


def test_prose_filter():
  assert corpus.is_prose("This sentence has enough words.")
  assert not corpus.is_prose("Too short.")
  assert not corpus.is_prose("x = f(a[1], b[2]) + g(c[3]) * 42;")
  assert corpus.is_prose("\u8fd9\u662f\u4e00\u4e2a\u8db3\u591f\u957f\u7684"
                         "\u4e2d\u6587\u53e5\u5b50\u3002")


def test_html_paragraphs_skip_code_and_scripts():
  page = ("<html><head><title>T</title><script>var x = 1;</script></head>"
          "<body><p>First <b>bold</b> paragraph &amp; more.</p>"
          "<pre>code block</pre><ul><li>An item.</li></ul>"
          "<div>Tail text</div></body></html>")
  assert corpus.html_paragraphs(page) == [
      "First bold paragraph & more.", "An item.", "Tail text"]


def test_rst_paragraphs_skip_directives_and_literal_blocks():
  text = ("Title\n=====\n\nSome *emphasis* and ``code`` with a "
          ":ref:`link <target>`.\n\n.. note::\n\n   A directive body.\n\n"
          "Example::\n\n    literal block\n\n- A bullet point.\n")
  assert corpus.rst_paragraphs(text) == [
      "Title", "Some emphasis and code with a link.", "Example",
      "A bullet point."]


def test_pod_paragraphs_skip_commands_and_verbatim():
  text = ("=head1 NAME\n\nperlfoo - B<bold> and C<code> and "
          "L<text|perlfunc/open>.\n\n    verbatim code\n\n=cut\n")
  assert corpus.pod_paragraphs(text) == [
      "perlfoo - bold and code and text."]


def test_interleave_takes_one_document_of_each_source_in_turn():
  assert list(corpus.interleave([iter("ab"), iter("wxyz"), iter("")])) == [
      "a", "w", "b", "x", "y", "z"]


def test_extended_sources_add_packages_not_taken_before():
  """--extended must add distinct text: no package twice, none of SOURCES',
  and no British English help beside the American one."""
  base = {package for _, package, _, _ in corpus.SOURCES}
  extra = [package for _, package, _, _ in corpus.EXTENDED_SOURCES]
  assert len(set(extra)) == len(extra)
  assert not base & set(extra)
  assert "libreoffice-help-en-gb" not in extra and len(extra) > 40


def test_tree_memory_counts_the_children(tmp_path):
  # A child that starts a grandchild holding 200 MB and waits.
  script = tmp_path / "hold.py"
  script.write_text(
      "import subprocess, sys, time\n"
      "if sys.argv[1:] == ['grandchild']:\n"
      "  block = bytearray(200 * 2**20)\n"
      "  print('ready', flush=True)\n"
      "  time.sleep(60)\n"
      "else:\n"
      "  p = subprocess.Popen([sys.executable, __file__, 'grandchild'],\n"
      "                       stdout=subprocess.PIPE, text=True)\n"
      "  print(p.stdout.readline().strip(), flush=True)\n"
      "  p.wait()\n")
  child = subprocess.Popen([sys.executable, str(script)],
                           stdout=subprocess.PIPE, text=True)
  try:
    assert child.stdout.readline().strip() == "ready"
    tree = process_trees.process_tree(child.pid)
    assert len(tree) == 2 and tree[0] == child.pid
    rss, pss = process_trees.tree_memory(child.pid)
    assert rss >= 200 * 2**20 and pss >= 200 * 2**20
    assert rss < 400 * 2**20
    # The sampler kills the whole tree past its limit.
    sampler = process_trees.TreePeak(child.pid, 0.2,
                                     max_rss_bytes=100 * 2**20)
    child.wait(timeout=60)
    sampler.stop()
    assert sampler.killed and sampler.rss >= 200 * 2**20
    deadline = time.time() + 30
    while (len(process_trees.process_tree(child.pid)) > 1 and
           time.time() < deadline):
      time.sleep(0.1)
  finally:
    for pid in process_trees.process_tree(child.pid):
      try:
        os.kill(pid, 9)
      except OSError:
        pass
    child.wait(timeout=60)


def test_run_corpus_takes_articles_and_whole_documents(tmp_path, run_script):
  """tools/build_pretraining_run_corpus.py on a hand-made SQuAD file (an
  article of one sentence is dropped) and documentation corpus (cut before
  the document that would pass --docs_mb); every second document of each
  source is held out."""
  squad = {"data": [
      {"paragraphs": [{"context": "First one here.  Second one here."},
                      {"context": "Third one here."}]},
      {"paragraphs": [{"context": "Only one sentence."}]},
      {"paragraphs": [{"context": "Alpha is here. Beta is\nthere."}]}]}
  squad_file = tmp_path / "squad.json"
  squad_file.write_text(json.dumps(squad))
  docs = ["d1 a\nd1 b\n\n", "d2 a\nd2 b\n\n", "d3 a\nd3 b\n\n",
          "d4 a\nd4 b\n\n"]
  docs_file = tmp_path / "docs.txt"
  docs_file.write_text("".join(docs))
  train, heldout = tmp_path / "train.txt", tmp_path / "heldout.txt"
  result = run_script("tools/build_pretraining_run_corpus.py", [
      "--squad_file=%s" % squad_file, "--docs_corpus=%s" % docs_file,
      "--docs_mb=%r" % (3.5 * len(docs[0]) / 2**20),
      "--output_file=%s" % train, "--heldout_file=%s" % heldout,
      "--heldout_every=2"], 120)
  assert result.returncode == 0, result.stderr
  first = "First one here.\nSecond one here.\nThird one here.\n\n"
  second = "Alpha is here.\nBeta is there.\n\n"
  assert heldout.read_text() == first + docs[0] + docs[2]
  assert train.read_text() == second + docs[1]
  assert not os.path.exists(str(train) + ".partial")


def test_run_corpus_takes_glue_training_text(tmp_path, run_script):
  """With --glue_dir (and no documentation: --docs_mb=0 needs no such
  corpus), each MRPC pair is a document and SST-2's phrases and CoLA's
  sentences are grouped in file order, white space collapsed; GLUE
  documents are held out like the others."""
  squad = {"data": [{"paragraphs": [{"context": "One. Two."}]},
                    {"paragraphs": [{"context": "Three. Four."}]}]}
  squad_file = tmp_path / "squad.json"
  squad_file.write_text(json.dumps(squad))
  glue = tmp_path / "glue"
  tables = {
      "MRPC": "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
              "1\t1\t2\tm1 a\tm1 b\n0\t3\t4\tm2  a\tm2 b\n",
      "SST-2": "sentence\tlabel\ngood  film \t1\nbad\t0\nfine one\t1\n",
      "CoLA": "x\t1\t\tc1\nx\t0\t*\tc2\nx\t1\t\tc3\n"}
  for task, text in tables.items():
    (glue / task).mkdir(parents=True)
    (glue / task / "train.tsv").write_text(text)
  train, heldout = tmp_path / "train.txt", tmp_path / "heldout.txt"
  result = run_script("tools/build_pretraining_run_corpus.py", [
      "--squad_file=%s" % squad_file,
      "--docs_corpus=%s" % (tmp_path / "absent.txt"), "--docs_mb=0",
      "--glue_dir=%s" % glue, "--glue_sentences_per_document=2",
      "--output_file=%s" % train, "--heldout_file=%s" % heldout,
      "--heldout_every=2"], 120)
  assert result.returncode == 0, result.stderr
  assert heldout.read_text() == ("One.\nTwo.\n\n" "m1 a\nm1 b\n\n"
                                 "good film\nbad\n\n" "c1\nc2\n\n")
  assert train.read_text() == ("Three.\nFour.\n\n" "m2 a\nm2 b\n\n"
                               "fine one\n\n" "c3\n\n")


def test_run_corpus_names_a_malformed_glue_file(tmp_path, run_script):
  """A GLUE table with a short row ends in one line naming --glue_dir and
  the file's line, exit status 2, and no corpus written."""
  squad_file = tmp_path / "squad.json"
  squad_file.write_text(json.dumps(
      {"data": [{"paragraphs": [{"context": "One. Two."}]}]}))
  glue = tmp_path / "glue"
  for task in ("MRPC", "SST-2", "CoLA"):
    (glue / task).mkdir(parents=True)
  (glue / "MRPC" / "train.tsv").write_text(
      "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\ta\tb\n")
  (glue / "SST-2" / "train.tsv").write_text("sentence\tlabel\nshort\n")
  (glue / "CoLA" / "train.tsv").write_text("x\t1\t\tc1\n")
  train = tmp_path / "train.txt"
  result = run_script("tools/build_pretraining_run_corpus.py", [
      "--squad_file=%s" % squad_file, "--docs_mb=0", "--glue_dir=%s" % glue,
      "--output_file=%s" % train], 120)
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert "Traceback" not in result.stderr, result.stderr
  assert "--glue_dir=" in lines[-1], lines
  assert "SST-2/train.tsv:2: found 1 columns, expected 2" in lines[-1], lines
  # The reader's own advice names run_classifier's flag, not this script's.
  assert "--data_dir" not in lines[-1], lines
  assert not train.exists()


def test_cut_corpus_keeps_whole_documents_that_fit(tmp_path):
  source = tmp_path / "corpus.txt"
  documents = ["a b c.\nd e f.\n\n", "g h.\n\n", "i j k l.\nm.\n\n"]
  source.write_text("".join(documents))
  cut = tmp_path / "cut.txt"
  fits = len(documents[0]) + len(documents[1])
  assert pretraining_data.cut_corpus(str(source), fits + 3, str(cut)) == fits
  assert cut.read_text() == documents[0] + documents[1]


def _record(corpus, mode, rate, workers=None, pss=1.0):
  return dict(corpus=corpus, corpus_mb=20.0, mode=mode, num_workers=workers,
              instances=100, seconds=100.0 / rate, instances_per_second=rate,
              time_v_peak=1.0, tree_rss_peak=1.0, tree_pss_peak=pss)


def test_targets_take_the_most_workers_and_give_the_scaling():
  records = [_record("c1", "faithful", 10.0),
             _record("c1", "scalable", 12.0, workers=1),
             _record("c1", "scalable", 21.0, workers=2),
             dict(_record("c1", "scalable", 1.0, workers=4), error="killed"),
             _record("c4", "scalable", 20.0, workers=2, pss=1.1)]
  lines = pretraining_data.targets(records, min_speedup=2.0, max_growth=0.2)
  assert lines[0] == "c1 speed-up 2.10x (target >= 2.00x): met"
  assert lines[1] == "c1 scalable scaling: 1 -> 2 processes 1.75x"
  assert lines[2].startswith("scalable peaks c1 -> c4: tree PSS +10% "
                             "(target within 20%: met)")
  assert len(lines) == 3


def test_scaling_compares_beam_with_the_local_mode():
  records = [_record("c1", "scalable", 12.0, workers=1),
             _record("c1", "scalable", 21.0, workers=2),
             _record("c1", "beam", 9.0, workers=1),
             _record("c1", "beam", 18.0, workers=2),
             dict(_record("c1", "beam", 1.0, workers=4), error="killed")]
  assert pretraining_data.scaling(records) == [
      "c1 scalable scaling: 1 -> 2 processes 1.75x",
      "c1 beam scaling: 1 -> 2 processes 2.00x",
      "c1 beam / scalable at 1 workers: 0.75x",
      "c1 beam / scalable at 2 workers: 0.86x"]
