# coding=utf-8
"""Builds the real-text corpora of bench/pretraining_data.py from Debian's
documentation packages.

The packages are fetched with `apt-get download` (no installation, so none
of their dependencies come along) and unpacked with `dpkg-deb -x` under
bench/out/pretraining_corpus/packages/. From each HTML page, reStructuredText
source or POD file the builder takes the prose paragraphs (no code blocks,
tables, directives or navigation), splits them into sentences with a simple
rule (a sentence ends at . ! or ? followed by a space and a capital, a
digit, a quote or a CJK character, except after common abbreviations and
initials; a CJK full stop ends a sentence anyway) and keeps sentences of at
least four words (eight characters for CJK text) that are mostly letters. Each file
becomes one document (if it has at least two sentences): one sentence per
line, an empty line between documents, the input format of
create_pretraining_data.py.

Documents are taken from the sources in turn (one from each source, then
the next from each, ...), each source's files in sorted order, so both
corpora mix all sources alike:

  corpus_1x.txt  the first --size_mb megabytes
  corpus_4x.txt  the first 4 x --size_mb megabytes: the 1x corpus and more
                 documents. If the distinct documents run out first, they
                 are repeated from the start, and MANIFEST.txt says how many
                 bytes are repeated.

The output depends only on the package versions (listed in MANIFEST.txt).

    python -m tools.build_pretraining_corpus            # fetch and build
    python -m tools.build_pretraining_corpus --size_mb=4   # a small pair
    python -m tools.build_pretraining_corpus --extended    # 400 MB distinct
"""

import collections
import glob
import gzip
import html.parser
import os
import re
import subprocess

from absl import app
from absl import flags
from absl import logging

import tools

# Where the corpora go unless --output_dir says otherwise; the benchmarks
# bench/pretraining_data.py and bench/vocab_learning.py read them there by
# default.
OUTPUT_DIR = os.path.join(tools.REPO_ROOT, "bench", "out",
                          "pretraining_corpus")

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "output_dir", OUTPUT_DIR,
    "Where the packages are unpacked and the corpora written.")
flags.DEFINE_float("size_mb", 100.0,
                   "Size of corpus_1x.txt; corpus_4x.txt is four times it.")
flags.DEFINE_bool(
    "extended", False,
    "Also take the documents of EXTENDED_SOURCES (Qt's, Boost's, Erlang's and "
    "LilyPond's documentation, LilyPond's in 11 translations, LibreOffice's "
    "help in 31 more languages): over 400 MB of text instead of 180 MB, so "
    "that a 100 MB corpus_1x.txt has a corpus_4x.txt without repeats. The "
    "default keeps the original sources, from which the earlier figures of "
    "docs/ were made.")

# (source name, Debian package, glob patterns under the unpacked package,
# format). Paths matching _EXCLUDED are left out (generated API listings).
SOURCES = (
    ("linux kernel docs", "linux-doc-6.1",
     ["usr/share/doc/linux-doc-6.1/Documentation/**/*.rst.gz"], "rst"),
    ("python docs", "python3.11-doc",
     ["usr/share/doc/python3.11/html/_sources/**/*.rst.txt"], "rst"),
    ("perl docs", "perl-doc", ["usr/share/perl/5.36.0/pod/*.pod"], "pod"),
    ("postgresql docs", "postgresql-doc-15",
     ["usr/share/doc/postgresql-doc-15/html/*.html"], "html"),
    ("debian handbook", "debian-handbook",
     ["usr/share/doc/debian-handbook/html/*/*.html"], "html"),
    ("git docs", "git-doc", ["usr/share/doc/git-doc/**/*.html"], "html"),
    ("django docs", "python-django-doc",
     ["usr/share/doc/python-django-doc/html/**/*.html"], "html"),
    ("apache docs", "apache2-doc",
     ["usr/share/doc/apache2-doc/manual/**/*.html"], "html"),
    ("libreoffice help en", "libreoffice-help-en-us",
     ["usr/share/libreoffice/help/en-US/text/**/*.html"], "html"),
    ("libreoffice help de", "libreoffice-help-de",
     ["usr/share/libreoffice/help/de/text/**/*.html"], "html"),
    ("gimp help", "gimp-help-en", ["usr/share/gimp/2.0/help/en/**/*.html"],
     "html"),
    ("gnucash docs", "gnucash-docs",
     ["usr/share/doc/gnucash-docs/**/*.html"], "html"),
    ("gnome help", "gnome-user-docs", ["usr/share/help/*/*/*.page"], "html"),
    ("java api docs", "openjdk-17-doc",
     ["usr/share/doc/openjdk-17-jre-headless/api/**/*.html"], "html"),
    ("rust docs", "rust-doc", ["usr/share/doc/rust-doc/html/**/*.html"],
     "html"),
)
# LibreOffice's help in the languages SOURCES leaves out (British English
# would repeat the American one almost word for word).
_MORE_HELP_LANGUAGES = (
    "ca cs da dz el es et eu fi fr gl hi hu id it ja km ko nl om pl pt pt-br "
    "ru sk sl sv tr vi zh-cn zh-tw").split()
_LILYPOND_LANGUAGES = "ca cs de es fr hu it ja nl pt zh".split()
# What --extended adds: enough text for a 400 MB corpus without repeats.
EXTENDED_SOURCES = (
    ("qt docs", "qtbase5-doc-html", ["usr/share/qt5/doc/**/*.html"], "html"),
    ("boost docs", "libboost1.81-doc",
     ["usr/share/doc/libboost1.81-doc/**/*.html"], "html"),
    ("erlang docs", "erlang-doc", ["usr/share/doc/erlang-doc/**/*.html"],
     "html"),
    ("lilypond docs", "lilypond-doc-html",
     ["usr/share/doc/lilypond/html/Documentation/**/*.html"], "html"),
) + tuple(
    ("lilypond docs " + language, "lilypond-doc-html-" + language,
     ["usr/share/doc/lilypond/html/Documentation/**/*.html"], "html")
    for language in _LILYPOND_LANGUAGES
) + tuple(
    ("libreoffice help " + language, "libreoffice-help-" + language,
     ["usr/share/libreoffice/help/*/text/**/*.html"], "html")
    for language in _MORE_HELP_LANGUAGES)
_EXCLUDED = re.compile(r"/(class-use|core_arch|arch|src)/|/index-files/|"
                       r"-(summary|tree)\.html$|/allclasses|/search")

# Words after which a period does not end a sentence.
_ABBREVIATIONS = frozenset(
    "e.g i.e etc vs cf al fig figs no nos mr mrs ms dr prof sr jr st vol "
    "approx resp incl ca ed eds pp ch sec ref refs eq".split())
_CJK_RANGES = r"\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af"
_SENTENCE_END = re.compile(
    r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9\u00c0-\u024f\u0391-\u03a9"
    r"\u0410-\u042f" + _CJK_RANGES + r"])|(?<=[\u3002\uff01\uff1f])")
_CJK = re.compile("[" + _CJK_RANGES + "]")
_MIN_WORDS = 4
_MIN_CJK_CHARS = 8
_MAX_SENTENCE_CHARS = 1500


# ---------------------------------------------------------------------------
# Paragraphs of each format.
# ---------------------------------------------------------------------------


class _HtmlParagraphs(html.parser.HTMLParser):
  """Text between block-level tags, without scripts, styles and code."""

  _BLOCKS = frozenset(
      "p div li dd dt td th tr table ul ol dl h1 h2 h3 h4 h5 h6 br hr "
      "section article header footer nav blockquote title caption "
      "figure figcaption note item".split())
  _SKIPPED = frozenset("script style pre code-block screen programlisting "
                       "nav head".split())

  def __init__(self):
    super().__init__(convert_charrefs=True)
    self.paragraphs = []
    self._text = []
    self._skipping = 0

  def _flush(self):
    text = " ".join("".join(self._text).split())
    if text:
      self.paragraphs.append(text)
    self._text = []

  def handle_starttag(self, tag, attrs):
    if tag in self._SKIPPED:
      self._skipping += 1
    if tag in self._BLOCKS:
      self._flush()

  def handle_endtag(self, tag):
    if tag in self._SKIPPED and self._skipping:
      self._skipping -= 1
    if tag in self._BLOCKS:
      self._flush()

  def handle_data(self, data):
    if not self._skipping:
      self._text.append(data)

  def close(self):
    super().close()
    self._flush()


def html_paragraphs(text):
  parser = _HtmlParagraphs()
  parser.feed(text)
  parser.close()
  return parser.paragraphs


_RST_INLINE = re.compile(r":[\w:+-]+:`([^`<]*?)(?:\s*<[^>]*>)?`|`+([^`]+?)`+_*"
                         r"|\*\*?([^*]+)\*\*?")
_RST_SKIP_LINE = re.compile(r"^(\.\. |[=\-~^\"'`#*+:.]{3,}\s*$|[+|])")


def rst_paragraphs(text):
  """Prose paragraphs of reStructuredText: blank-line separated blocks that
  are not directives, tables or literal blocks (after "::")."""
  paragraphs = []
  literal = False
  for block in re.split(r"\n\s*\n", text):
    lines = [l for l in block.splitlines() if l.strip()]
    if not lines:
      continue
    indented = lines[0][:1] in (" ", "\t")
    if literal and indented:
      continue
    literal = lines[-1].rstrip().endswith("::")
    if indented and lines[0].lstrip().startswith(".."):
      continue
    kept = [l.strip() for l in lines if not _RST_SKIP_LINE.match(l.strip())]
    paragraph = _RST_INLINE.sub(
        lambda m: next(g for g in m.groups() if g is not None),
        " ".join(kept))
    paragraph = re.sub(r"^([-*+]|#\.|\d+\.)\s+", "", paragraph)
    if paragraph:
      paragraphs.append(paragraph.rstrip(":"))
  return paragraphs


# A formatting code such as B<bold> or L<text|target>: keep the text.
_POD_CODE = re.compile(r"[A-Z]<+\s*([^|<>]*?)(?:\|[^<>]*)?\s*>+")


def pod_paragraphs(text):
  """Prose paragraphs of POD: not commands, not verbatim (indented)."""
  paragraphs = []
  for block in re.split(r"\n\s*\n", text):
    if not block.strip() or block[:1] in (" ", "\t", "="):
      continue
    paragraph = " ".join(block.split())
    for _ in range(3):  # formatting codes nest
      paragraph = _POD_CODE.sub(r"\1", paragraph)
    paragraphs.append(paragraph)
  return paragraphs


_PARAGRAPHS = {"html": html_paragraphs, "rst": rst_paragraphs,
               "pod": pod_paragraphs}


# ---------------------------------------------------------------------------
# Sentences.
# ---------------------------------------------------------------------------


def split_sentences(paragraph):
  """Sentences of a paragraph by the rule in the module docstring."""
  sentences = []
  start = 0
  for match in _SENTENCE_END.finditer(paragraph):
    candidate = paragraph[start:match.start()].strip()
    last_word = candidate.rsplit(None, 1)[-1] if candidate else ""
    word = last_word.rstrip(".\"')]").lower()
    if candidate.endswith(".") and (word in _ABBREVIATIONS or
                                    (len(word) == 1 and word.isalpha())):
      continue
    if candidate:
      sentences.append(candidate)
    start = match.end()
  rest = paragraph[start:].strip()
  if rest:
    sentences.append(rest)
  return sentences


def is_prose(sentence):
  """Long enough, not too long, and mostly letters."""
  if len(sentence) > _MAX_SENTENCE_CHARS:
    return False
  if len(_CJK.findall(sentence)) >= _MIN_CJK_CHARS:
    return True
  if len(sentence.split()) < _MIN_WORDS:
    return False
  visible = [c for c in sentence if not c.isspace()]
  return sum(c.isalpha() for c in visible) >= 0.7 * len(visible)


def document_sentences(path, text_format):
  """The prose sentences of one file."""
  opener = gzip.open if path.endswith(".gz") else open
  with opener(path, "rt", encoding="utf-8", errors="replace") as f:
    text = f.read()
  return [s for p in _PARAGRAPHS[text_format](text)
          for s in split_sentences(p) if is_prose(s)]


# ---------------------------------------------------------------------------
# Packages and corpora.
# ---------------------------------------------------------------------------


def unpack(package, packages_dir):
  """Downloads and unpacks `package` once; returns (root, version)."""
  root = os.path.join(packages_dir, package)
  debs = glob.glob(os.path.join(packages_dir, package + "_*.deb"))
  if not debs:
    logging.info("apt-get download %s", package)
    subprocess.run(["apt-get", "download", package], cwd=packages_dir,
                   check=True, timeout=1800, stdout=subprocess.DEVNULL)
    debs = glob.glob(os.path.join(packages_dir, package + "_*.deb"))
  if not os.path.isdir(root):
    subprocess.run(["dpkg-deb", "-x", debs[0], root + ".part"], check=True,
                   timeout=1800)
    os.rename(root + ".part", root)
  version = subprocess.run(
      ["dpkg-deb", "-f", debs[0], "Version"], check=True, timeout=60,
      capture_output=True, text=True).stdout.strip()
  return root, version


def source_documents(root, patterns, text_format, stats):
  """Yields the documents (lists of sentences) of one source's files."""
  paths = sorted({p for pattern in patterns
                  for p in glob.glob(os.path.join(root, pattern),
                                     recursive=True)
                  if not _EXCLUDED.search(p[len(root):])})
  for path in paths:
    sentences = document_sentences(path, text_format)
    if len(sentences) >= 2:
      stats["files"] += 1
      yield sentences


def interleave(sources):
  """One document of each source in turn, until all are exhausted."""
  iterators = collections.deque(sources)
  while iterators:
    iterator = iterators.popleft()
    item = next(iterator, None)
    if item is not None:
      yield item
      iterators.append(iterator)


def write_corpora(documents, size, output_dir):
  """Writes corpus_1x.txt (`size` bytes) and corpus_4x.txt (4 x `size`);
  returns (distinct bytes written, repeated bytes)."""
  distinct = []
  written = repeated = 0
  targets = {"corpus_1x.txt": size, "corpus_4x.txt": 4 * size}
  outputs = {name: open(os.path.join(output_dir, name + ".part"), "wb")
             for name in targets}

  def emit(data):
    for name, target in targets.items():
      if written < target:
        outputs[name].write(data)

  for document in documents:
    if written >= 4 * size:
      break
    data = ("\n".join(document) + "\n\n").encode("utf-8")
    distinct.append(data)
    emit(data)
    written += len(data)
  while written < 4 * size and distinct:
    for data in distinct:
      if written >= 4 * size:
        break
      emit(data)
      written += len(data)
      repeated += len(data)
  for name, f in outputs.items():
    f.close()
    os.replace(f.name, os.path.join(output_dir, name))
  return written - repeated, repeated


def main(argv):
  del argv
  packages_dir = os.path.join(FLAGS.output_dir, "packages")
  os.makedirs(packages_dir, exist_ok=True)
  stats = collections.OrderedDict()
  versions = collections.OrderedDict()
  sources = []
  chosen = SOURCES + (EXTENDED_SOURCES if FLAGS.extended else ())
  for name, package, patterns, text_format in chosen:
    root, versions[package] = unpack(package, packages_dir)
    stats[name] = collections.Counter()
    sources.append(source_documents(root, patterns, text_format,
                                    stats[name]))
  distinct, repeated = write_corpora(interleave(sources),
                                     int(FLAGS.size_mb * 1e6),
                                     FLAGS.output_dir)
  lines = ["packages (apt-get download, Debian 12):"]
  lines += ["  %s %s" % item for item in versions.items()]
  lines.append("documents used per source:")
  lines += ["  %s: %d" % (name, s["files"]) for name, s in stats.items()]
  lines.append("distinct bytes: %d; repeated bytes (4x corpus only): %d" %
               (distinct, repeated))
  with open(os.path.join(FLAGS.output_dir, "MANIFEST.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")
  print("\n".join(lines))


if __name__ == "__main__":
  app.run(main)
