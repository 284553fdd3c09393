# coding=utf-8
"""What a file of pre-training records was made with: its sidecar.

create_pretraining_data.py writes, beside each records file it completes,
the sidecar `<file>.meta.json` (userio/sidecars.py): the sha256 and the
number of tokens of the vocabulary it tokenized the text with, the casing,
and the settings that shaped the records (`describe`). run_pretraining.py
reads them back (`vocabulary_of`) and refuses records that cannot belong to
the model it trains: made with a vocabulary larger than the config's
vocab_size, with another vocabulary than its --vocab_file, or with two
vocabularies in one run. Records without a sidecar (Google's script's, or
older ones) are taken as they are: their token ids are still checked
against the config.

Token ids are all the records hold, so nothing else could tell a record
made with one vocabulary from one made with another of the same size.
"""

from userio import cli
from userio import sidecars

# The sidecar's keys that run_pretraining.py reads.
VOCAB_SHA256 = "vocab_sha256"
VOCAB_SIZE = "vocab_size"
MADE_BY = "create_pretraining_data.py"


def describe(vocab_file, vocab_size, do_lower_case, **settings):
  """The `depends_on` of a records file's sidecar.

  Args:
    vocab_file: the vocabulary the text was tokenized with (vocab.txt or a
      SentencePiece .model); its sha256 is recorded.
    vocab_size: the tokens in it (the ids the records may hold).
    do_lower_case: the casing the text was tokenized with.
    **settings: further JSON values that shaped the records (lengths,
      masking, seed, mode).
  """
  return dict(settings, made_by=MADE_BY,
              vocab_sha256=sidecars.describe_file(vocab_file)["sha256"],
              vocab_size=int(vocab_size), do_lower_case=bool(do_lower_case))


def write(path, depends_on, num_records):
  """Writes the sidecar of the complete records file `path`."""
  sidecars.write(path, depends_on, records=int(num_records))


def is_sidecar(path):
  """Whether `path` is a sidecar (a glob such as `records*` matches them
  next to the records)."""
  return path.endswith(sidecars.SIDECAR_SUFFIX)


def _short(sha256):
  return sha256[:12]


def vocabulary_of(paths, config_vocab_size, bert_config_file,
                  vocab_file=None):
  """The sha256 of the vocabulary the records of `paths` were made with, as
  their sidecars record it (None when none of them has a sidecar).

  Args:
    paths: the records files (--input_file).
    config_vocab_size: the vocab_size of the model's config.
    bert_config_file: the config's path, for messages.
    vocab_file: the vocabulary the run is told the records use
      (--vocab_file), or None.

  Raises:
    cli.UserError naming the file, when a sidecar records a vocabulary of
    more tokens than the config has embeddings, another vocabulary than
    `vocab_file`, or another one than an earlier file's.
  """
  wanted = (sidecars.describe_file(vocab_file)["sha256"] if vocab_file
            else None)
  found, first = None, None
  for path in paths:
    record = sidecars.read(path) or {}
    sha256, size = record.get(VOCAB_SHA256), record.get(VOCAB_SIZE)
    if not sha256:
      continue
    if isinstance(size, int) and size > config_vocab_size:
      raise cli.UserError(
          "--input_file: %s was made with a vocabulary of %d tokens (its "
          "sidecar says), more than the vocab_size=%d of --bert_config_file"
          "=%s, so its last ids have no embedding; pass the config of a "
          "model with that vocabulary, or make the records with the model's "
          "vocabulary." % (path, size, config_vocab_size, bert_config_file))
    if wanted is not None and sha256 != wanted:
      raise cli.UserError(
          "--input_file: %s was made with another vocabulary than --vocab_"
          "file=%s (sha256 %s... in its sidecar, %s... here); pass the "
          "vocabulary create_pretraining_data.py was run with, or make the "
          "records again with this one." % (
              path, vocab_file, _short(sha256), _short(wanted)))
    if found is not None and sha256 != found:
      raise cli.UserError(
          "--input_file: %s and %s were made with different vocabularies "
          "(sha256 %s... and %s... in their sidecars); make all the records "
          "of a run with the model's one vocabulary." % (
              first, path, _short(found), _short(sha256)))
    if found is None:
      found, first = sha256, path
  return found
