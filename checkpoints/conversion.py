# coding=utf-8
"""Converting BERT models between Google's checkpoint layout and Hugging
Face's: the library behind convert_checkpoint.py.

Google's layout: a TensorFlow checkpoint (`bert_model.ckpt.index` and
`.data-*`; in a fine-tuning run's output folder the latest `model.ckpt-N`),
`bert_config.json`, `vocab.txt` and, in this project's output folders,
`run_info.json` (task, label list, casing). Hugging Face's: `config.json`,
`model.safetensors`, `vocab.txt` and `tokenizer_config.json`. The layout of
--input is recognized (or given with --from); the output is the other one,
written into a new folder that appears only when complete.

Converted: the encoder and pooler, the pretraining heads (masked LM with its
output projection tied to the word embeddings, next sentence), and the
heads of run_classifier.py, run_squad.py, run_swag.py and run_ner.py
(BertForSequenceClassification, BertForQuestionAnswering,
BertForMultipleChoice and BertForTokenClassification). The names, shapes and config fields of the
two sides are checkpoints/hf_mapping.py's. Optimizer slots, step counters and gradient
accumulators are training state, not model, and are left out. Google's
"gelu" is the tanh approximation and Hugging Face's the erf form; see
docs/interop.md.

`resolve_init_checkpoint` lets --init_checkpoint name a Hugging Face folder:
it converts the folder once into a work folder and returns the checkpoint
prefix; a later run reuses that conversion only when its sidecar
(userio/sidecars.py) vouches for every file of it. A full disk while
converting ends in one line (userio/disk_space.py) and leaves no partial
folder. Only NumPy and the `safetensors` package read and write Hugging
Face's files; PyTorch is not needed.
"""

import collections
import contextlib
import hashlib
import json
import os

from absl import logging
import safetensors
from safetensors import numpy as safetensors_numpy
# Before TensorFlow: it imports TensorFlow without the CPU start-up noise.
from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order
import tensorflow as tf

from userio import cli
from userio import disk_space
from userio import file_systems
from userio import folder_lock
from checkpoints import best_checkpoint
from checkpoints import checkpoint_checks
from checkpoints import hf_mapping
from checkpoints import layouts
import modeling
from userio import output_files
from userio import sidecars
from checkpoints import run_info
import tokenization

GOOGLE = layouts.GOOGLE
HF = layouts.HF

HF_CONFIG_FILE = "config.json"
HF_WEIGHTS_FILE = "model.safetensors"
HF_SHARDS_INDEX_FILE = "model.safetensors.index.json"
HF_TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
HF_TOKENIZER_FILE = "tokenizer.json"
PYTORCH_WEIGHTS_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json")
GOOGLE_CHECKPOINT_NAME = "bert_model.ckpt"
VOCAB_FILE = run_info.WORDPIECE_VOCAB_FILE
# run_ner.py's task name: a converted token classifier is its model.
TOKEN_CLASSIFICATION_TASK = "ner"


# ---------------------------------------------------------------- configs


def _read_json(path, what):
  """The JSON object in file `path`; UserError naming it otherwise."""
  if not tf.io.gfile.exists(path):
    raise cli.UserError("%s not found; %s." % (path, what))
  try:
    with tf.io.gfile.GFile(path, "r") as reader:
      value = json.load(reader)
  except ValueError as e:
    raise cli.UserError("%s is not valid JSON (%s); %s." % (path, e, what)
                        ) from None
  if not isinstance(value, dict):
    raise cli.UserError("%s must hold a JSON object; %s." % (path, what))
  return value


def is_hf_config(path):
  """Whether JSON file `path` is Hugging Face's config.json (it names a
  model_type or architectures; bert_config.json does neither)."""
  config = _read_json(path, "pass bert_config.json or Hugging Face's "
                      "config.json")
  return "model_type" in config or "architectures" in config


def load_bert_config(config_file):
  """modeling.BertConfig of a bert_config.json or a Hugging Face
  config.json (converted: Hugging Face's "gelu" becomes "gelu_exact")."""
  if is_hf_config(config_file):
    values = hf_mapping.bert_config_dict_from_hf(
        _read_json(config_file, "pass the model's config.json"), config_file)
    return modeling.BertConfig.from_dict(values)
  try:
    return modeling.BertConfig.from_json_file(config_file)
  except (ValueError, FileNotFoundError) as e:
    raise cli.UserError(str(e)) from None


def resolve_bert_config_file(path, work_dir):
  """A bert_config.json for `path`: itself if it is one; for a Hugging Face
  config.json (or a folder holding one), its conversion written once into
  `work_dir` (named by the sha256 of the config's content)."""
  if file_systems.isdir(path):
    path = os.path.join(path, HF_CONFIG_FILE)
  if not is_hf_config(path):
    return path
  values = hf_mapping.bert_config_dict_from_hf(
      _read_json(path, "pass the model's config.json"), path)
  target = os.path.join(work_dir, "bert_config-%s.json" %
                        run_info.config_sha256(path)[:16])
  if not tf.io.gfile.exists(target):
    tf.io.gfile.makedirs(work_dir)
    output_files.write_text(target, _json_text(values))
  return target


def _json_text(value):
  return json.dumps(value, indent=2, sort_keys=True) + "\n"


# ------------------------------------------------------------------ input


def detect_layout(path):
  """GOOGLE or HF: which layout --input holds.

  A folder with config.json or Hugging Face weights is Hugging Face's;
  a checkpoint prefix, or a folder with a checkpoint, is Google's.

  Raises:
    cli.UserError when it is neither.
  """
  if file_systems.isdir(path):
    names = set(file_systems.listdir(path))
    if names & {HF_CONFIG_FILE, HF_WEIGHTS_FILE, HF_SHARDS_INDEX_FILE} or (
        names & set(PYTORCH_WEIGHTS_FILES)):
      return HF
    if any(name.endswith(".index") for name in names):
      return GOOGLE
  elif file_systems.exists(path + ".index"):
    return GOOGLE
  raise cli.UserError(
      "--input=%s is neither a Hugging Face model folder (config.json and "
      "model.safetensors) nor a Google checkpoint (a prefix such as "
      ".../bert_model.ckpt, or a folder holding one)." % path)


def google_checkpoint_prefix(path):
  """The checkpoint of --input: the prefix itself, a training folder's best
  checkpoint (checkpoints/best_checkpoint.py), else its latest (its
  `checkpoint` file), or a folder's only checkpoint."""
  if not file_systems.isdir(path):
    return path
  best = best_checkpoint.recorded_path(path)
  if best:
    logging.info("Converting %s, the best checkpoint that %s records.", best,
                 run_info.RECORD_FILE)
    return best
  latest = tf.train.latest_checkpoint(path)
  if latest:
    return latest
  prefixes = sorted(name[:-len(".index")]
                    for name in file_systems.listdir(path)
                    if name.endswith(".index"))
  if len(prefixes) != 1:
    raise cli.UserError(
        "--input=%s holds %s; pass the checkpoint prefix (e.g. %s)." % (
            path, "checkpoints %s" % ", ".join(prefixes) if prefixes else
            "no checkpoint", os.path.join(path, GOOGLE_CHECKPOINT_NAME)))
  return os.path.join(path, prefixes[0])


def read_google_checkpoint(prefix):
  """{name: np.ndarray} of every tensor of checkpoint `prefix`.

  Raises:
    cli.UserError naming the checkpoint when it cannot be read.
  """
  try:
    reader = checkpoint_checks.reader_of(prefix)
    return {name: reader.get_tensor(name)
            for name in sorted(reader.get_variable_to_shape_map())}
  except (tf.errors.OpError, ValueError, IndexError) as e:
    raise cli.UserError(
        "checkpoint %s cannot be read (%s); pass an intact checkpoint "
        "prefix (without .index or .data-*)." % (
            prefix, " ".join(str(e).split())[:200])) from None


def _split_training_state(tensors):
  """(model tensors, names of training state left out)."""
  model = {n: v for n, v in tensors.items()
           if not hf_mapping.is_training_state(n)}
  return model, sorted(set(tensors) - set(model))


def hf_weight_files(folder):
  """The safetensors files of a Hugging Face folder (one, or the shards its
  index lists).

  Raises:
    cli.UserError when the folder has no safetensors weights, saying how to
    make them from PyTorch weights.
  """
  single = os.path.join(folder, HF_WEIGHTS_FILE)
  if tf.io.gfile.exists(single):
    return [single]
  index = os.path.join(folder, HF_SHARDS_INDEX_FILE)
  if tf.io.gfile.exists(index):
    weight_map = _read_json(index, "it lists the weight shards").get(
        "weight_map", {})
    return [os.path.join(folder, name)
            for name in sorted(set(weight_map.values()))]
  if any(tf.io.gfile.exists(os.path.join(folder, name))
         for name in PYTORCH_WEIGHTS_FILES):
    raise cli.UserError(
        "%s has PyTorch weights (pytorch_model.bin) only, which need PyTorch "
        "to read; save them as safetensors first, e.g. with transformers: "
        "%s.from_pretrained(dir).save_pretrained(dir, "
        "safe_serialization=True)." % (folder, _model_class(folder)))
  raise cli.UserError("%s has no %s; pass a Hugging Face model folder." % (
      folder, HF_WEIGHTS_FILE))


def _model_class(folder):
  """The transformers class config.json names (AutoModel without one)."""
  path = os.path.join(folder, HF_CONFIG_FILE)
  if tf.io.gfile.exists(path):
    architectures = _read_json(path, "pass the model's config.json").get(
        "architectures")
    if architectures:
      return architectures[0]
  return "AutoModel"


def read_safetensors(files):
  """{name: np.ndarray} of all `files`.

  Raises:
    cli.UserError naming a file that cannot be read or a name in two files.
  """
  tensors = {}
  for path in files:
    if not file_systems.exists(path):
      raise cli.UserError("%s not found (listed in %s)." % (
          path, HF_SHARDS_INDEX_FILE))
    try:
      # A local file is mapped, not read: a model may be gigabytes.
      loaded = (safetensors_numpy.load(file_systems.read_bytes(path))
                if file_systems.is_remote(path) else
                safetensors_numpy.load_file(path))
    except TypeError as e:  # NumPy has no bfloat16.
      raise cli.UserError(
          "%s holds tensors NumPy cannot read (%s); save the model in "
          "float32 (e.g. model.float().save_pretrained(dir))." % (path, e)
          ) from None
    except (safetensors.SafetensorError, OSError) as e:
      raise cli.UserError("%s is not a readable safetensors file (%s)." % (
          path, " ".join(str(e).split())[:200])) from None
    for name in loaded:
      if name in tensors:
        raise cli.UserError("%s appears in two weight files (%s)." % (
            name, path))
    tensors.update(loaded)
  return tensors


def _hf_config_path(folder):
  path = os.path.join(folder, HF_CONFIG_FILE)
  if not tf.io.gfile.exists(path):
    raise cli.UserError(
        "%s has no config.json; a Hugging Face model folder needs the "
        "config.json that was saved with its weights." % folder)
  return path


def hf_do_lower_case(folder, vocab):
  """The casing of a Hugging Face folder's tokenizer: tokenizer_config.json,
  else tokenizer.json's normalizer, else the vocabulary's pieces."""
  path = os.path.join(folder, HF_TOKENIZER_CONFIG_FILE)
  if tf.io.gfile.exists(path):
    value = _read_json(path, "it configures the tokenizer").get(
        "do_lower_case")
    if value is not None:
      return bool(value)
  normalizer = (_read_tokenizer_json(folder) or {}).get("normalizer") or {}
  if "lowercase" in normalizer:
    return bool(normalizer["lowercase"])
  return _casing_of_vocab(vocab, folder, "add \"do_lower_case\" to its "
                          "tokenizer_config.json")


def _casing_of_vocab(tokens, where, fix):
  """do_lower_case as the vocabulary's pieces tell it."""
  cased = tokenization.vocab_is_cased(tokens)
  if cased is None:
    raise cli.UserError("The casing of %s's vocabulary cannot be told from "
                        "its pieces; %s." % (where, fix))
  return not cased


def _read_tokenizer_json(folder):
  path = os.path.join(folder, HF_TOKENIZER_FILE)
  if not tf.io.gfile.exists(path):
    return None
  return _read_json(path, "it is the tokenizer's description")


def hf_vocab(folder):
  """(tokens in id order, vocab.txt or None) of a Hugging Face folder: its
  vocab.txt, else tokenizer.json's WordPiece vocabulary.

  Raises:
    cli.UserError when the folder has neither, or tokenizer.json's ids are
    not 0, 1, 2, ...
  """
  path = os.path.join(folder, VOCAB_FILE)
  if tf.io.gfile.exists(path):
    return list(tokenization.load_vocab(path)), path
  model = (_read_tokenizer_json(folder) or {}).get("model") or {}
  vocab = model.get("vocab")
  if model.get("type") != "WordPiece" or not isinstance(vocab, dict):
    raise cli.UserError(
        "%s has no vocab.txt and no WordPiece tokenizer.json; BERT's "
        "tokenizer needs the model's WordPiece vocabulary." % folder)
  ordered = sorted(vocab.items(), key=lambda item: item[1])
  if [i for _, i in ordered] != list(range(len(ordered))):
    raise cli.UserError("%s: the WordPiece ids are not 0 to %d; pass a "
                        "folder with the model's vocab.txt." % (
                            os.path.join(folder, HF_TOKENIZER_FILE),
                            len(ordered) - 1))
  return [token for token, _ in ordered], None


# ----------------------------------------------------------------- writing


def write_google_checkpoint(tensors, prefix):
  """Saves {name: np.ndarray} as TensorFlow checkpoint `prefix` (what
  tf.train.load_checkpoint and init_from_checkpoint read), under a
  temporary prefix renamed when complete."""
  temporary = prefix + output_files.TEMPORARY_SUFFIX
  with tf.Graph().as_default():
    feeds, variables = {}, {}
    for name, value in tensors.items():
      placeholder = tf.compat.v1.placeholder(tf.as_dtype(value.dtype),
                                             value.shape)
      variables[name] = tf.compat.v1.Variable(placeholder, name="v")
      feeds[placeholder] = value
    saver = tf.compat.v1.train.Saver(var_list=variables, max_to_keep=None)
    with tf.compat.v1.Session() as sess:
      sess.run([v.initializer for v in variables.values()], feeds)
      saved = saver.save(sess, temporary, write_meta_graph=False,
                         write_state=False)
  data_files = tf.io.gfile.glob(saved + ".data-*")
  # The index last: a prefix with an index is complete.
  for path in data_files + [saved + ".index"]:
    tf.io.gfile.rename(path, prefix + path[len(saved):], overwrite=True)


def write_safetensors(tensors, path):
  """Saves {name: np.ndarray} as a safetensors file transformers loads."""
  metadata = {"format": "pt"}
  with output_files.replacing(path) as temporary:
    if file_systems.is_remote(temporary):
      with tf.io.gfile.GFile(temporary, "wb") as writer:
        writer.write(safetensors_numpy.save(tensors, metadata=metadata))
      return
    safetensors_numpy.save_file(tensors, temporary, metadata=metadata)
    # safetensors makes the file readable by its owner only; give it the
    # permissions of the other files written here.
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(temporary, 0o666 & ~mask)


def _write_vocab(model, path):
  """The model's vocab.txt: a copy of the one read (byte for byte), else
  its tokens one per line."""
  if model.vocab_file:
    output_files.copy(model.vocab_file, path)
  else:
    output_files.write_text(path, "".join(t + "\n" for t in model.vocab))


class _NewFolder(object):
  """Writes an output folder under a temporary name; renamed when done.

  The folder must not exist or be empty, so nothing of the user's is
  overwritten; on an error the temporary folder is removed.
  """

  def __init__(self, path):
    self.path = path
    if file_systems.isdir(path) and file_systems.listdir(path):
      raise cli.UserError("--output_dir=%s already holds files; pass a new "
                          "or empty folder." % path)
    if file_systems.isfile(path):
      raise cli.UserError("--output_dir=%s is a file; pass a folder." % path)
    self.temporary = path.rstrip("/") + output_files.TEMPORARY_SUFFIX

  def __enter__(self):
    if tf.io.gfile.exists(self.temporary):
      tf.io.gfile.rmtree(self.temporary)
    tf.io.gfile.makedirs(self.temporary)
    return self.temporary

  def __exit__(self, kind, value, trace):
    if kind is not None:
      try:
        tf.io.gfile.rmtree(self.temporary)
      except file_systems.errors(self.temporary):
        pass  # The original error is what the user needs to see.
      return False
    if not file_systems.is_remote(self.path) and os.path.isdir(self.path):
      os.rmdir(self.path)  # Empty (checked above); a rename replaces none.
    file_systems.move_folder(self.temporary, self.path)
    return False


# -------------------------------------------------------------- converting


Model = collections.namedtuple(
    "Model", "tensors bert_config architecture labels task do_lower_case "
    "vocab vocab_file source problem_type")
Model.__doc__ = """A model read from either layout, in Google's terms.

  tensors: {Google name: float32 np.ndarray}, no training state.
  bert_config: dict of bert_config.json's fields.
  architecture: Hugging Face's name of the model's head.
  labels: the classifier's labels ([None] for regression) or None.
  problem_type: a classifier's checkpoints/problem_types name, or None.
  task: the fine-tuning task's name or None.
  do_lower_case: the tokenizer's casing.
  vocab: the WordPiece tokens in id order.
  vocab_file: the vocab.txt they were read from, or None.
  source: what was read (for the log and run_info.json).
"""


def read_hf_model(folder):
  """The `Model` of a Hugging Face folder.

  Raises:
    cli.UserError naming the file and field or tensor that does not fit.
  """
  config_path = _hf_config_path(folder)
  weight_files = hf_weight_files(folder)
  hf_config = _read_json(config_path, "pass the model's config.json")
  bert_config = hf_mapping.bert_config_dict_from_hf(hf_config, config_path)
  where = ", ".join(weight_files)
  tensors, origins = hf_mapping.hf_to_google_tensors(
      read_safetensors(weight_files), where)
  tensors, origins = hf_mapping.declared_head_from_hf(tensors, origins,
                                                     hf_config)
  architecture = hf_mapping.architecture_of(tensors, where)
  hf_mapping.check_declared_architecture(hf_config, architecture, config_path)
  outputs = hf_mapping.classifier_outputs(tensors)
  hf_mapping.check_tensors(
      tensors, modeling.BertConfig.from_dict(bert_config), architecture,
      where, config_path, outputs, display=lambda name: origins.get(
          name, hf_mapping.google_to_hf_name(name, architecture)))
  labels = problem_type = None
  if outputs is not None:
    labels = _checked_labels(hf_mapping.hf_labels(hf_config, config_path),
                             outputs, "%s's id2label" % config_path)
    problem_type = hf_mapping.hf_problem_type(hf_config, labels)
  vocab, vocab_file = hf_vocab(folder)
  task = hf_config.get("finetuning_task") or (
      "squad" if architecture == "BertForQuestionAnswering" else None)
  if architecture == hf_mapping.TOKEN_CLASSIFICATION:
    task = TOKEN_CLASSIFICATION_TASK
  return Model(tensors, bert_config, architecture, labels, task,
               hf_do_lower_case(folder, vocab), vocab, vocab_file,
               {"layout": HF, "path": file_systems.absolute(folder),
                "sha256": _files_sha256(weight_files + [config_path])},
               problem_type)


def _checked_labels(labels, outputs, where):
  """The classifier's label list: `labels` when their count fits its
  `outputs` ([None], regression, fits one), HF's default names without.

  Raises:
    cli.UserError naming `where` when the count differs.
  """
  if labels is None:
    labels = ["LABEL_%d" % i for i in range(outputs)]
    logging.warning("No labels are named for the classifier; they become %s.",
                    ", ".join(labels))
  if len(labels) != outputs:
    raise cli.UserError("%s lists %d labels, but the classifier has %d "
                        "outputs." % (where, len(labels), outputs))
  return labels


def _files_sha256(paths):
  """One sha256 over the bytes of `paths` in order."""
  digest = hashlib.sha256()
  for path in paths:
    digest.update(run_info.file_sha256(path).encode("ascii"))
  return digest.hexdigest()


def read_google_model(path, bert_config_file=None, vocab_file=None,
                      do_lower_case=None):
  """The `Model` of a Google checkpoint (prefix or folder).

  Args:
    path: a checkpoint prefix, or a folder with a checkpoint (its latest).
    bert_config_file, vocab_file: default: bert_config.json and vocab.txt
      beside the checkpoint.
    do_lower_case: default: run_info.json's beside the checkpoint, else
      the vocabulary's casing.

  Raises:
    cli.UserError naming the file or tensor that does not fit.
  """
  prefix = google_checkpoint_prefix(path)
  # The run's folder holds its config, vocabulary and record, also when the
  # checkpoint is its best/ one.
  folder = path if file_systems.isdir(path) else os.path.dirname(prefix)
  bert_config_file = bert_config_file or os.path.join(
      folder, run_info.CONFIG_FILE)
  vocab_file = vocab_file or os.path.join(folder, VOCAB_FILE)
  for flag, file_path in (("--bert_config_file", bert_config_file),
                          ("--vocab_file", vocab_file)):
    if not tf.io.gfile.exists(file_path):
      raise cli.UserError("%s not found; pass %s." % (file_path, flag))
  config = load_bert_config(bert_config_file)
  vocab = list(tokenization.load_vocab(vocab_file))
  if len(vocab) > config.vocab_size:
    raise cli.UserError(
        "--vocab_file=%s has %d tokens, more than the vocab_size=%d of %s, so "
        "its last ids have no embedding; pass the vocabulary that belongs to "
        "the model." % (vocab_file, len(vocab), config.vocab_size,
                        bert_config_file))
  record = run_info.read(folder) or {}
  if do_lower_case is None:
    do_lower_case = record.get("do_lower_case")
  if do_lower_case is None:
    do_lower_case = _casing_of_vocab(vocab, vocab_file,
                                     "pass --do_lower_case")
  tokenization.validate_case_matches_vocab(do_lower_case, vocab,
                                           "--vocab_file=" + vocab_file)
  tensors, dropped = _split_training_state(read_google_checkpoint(prefix))
  if dropped:
    logging.info("Left out %d tensors of training state (optimizer slots, "
                 "step counters, accumulators), e.g. %s.", len(dropped),
                 dropped[0])
  architecture = hf_mapping.architecture_of(tensors, prefix)
  outputs = hf_mapping.classifier_outputs(tensors)
  hf_mapping.check_tensors(tensors, config, architecture, prefix,
                           bert_config_file, outputs)
  labels = None
  if outputs is not None:
    labels = _checked_labels(record.get("labels"), outputs, os.path.join(
        folder, run_info.RECORD_FILE))
  return Model(tensors, config.to_dict(), architecture, labels,
               record.get("task"), bool(do_lower_case), vocab, vocab_file,
               {"layout": GOOGLE, "path": file_systems.absolute(prefix)},
               record.get("problem_type") if labels is not None else None)


def write_hf_model(model, folder):
  """Writes `model` into `folder` in Hugging Face's layout."""
  tensors = hf_mapping.google_to_hf_tensors(model.tensors, model.architecture)
  pad_token_id = model.vocab.index("[PAD]") if "[PAD]" in model.vocab else 0
  config = hf_mapping.hf_config_dict(model.bert_config, model.architecture,
                                     model.labels, model.task, pad_token_id,
                                     model.problem_type)
  write_safetensors(tensors, os.path.join(folder, HF_WEIGHTS_FILE))
  output_files.write_text(os.path.join(folder, HF_CONFIG_FILE),
                          _json_text(config))
  output_files.write_text(
      os.path.join(folder, HF_TOKENIZER_CONFIG_FILE),
      _json_text(hf_mapping.hf_tokenizer_config(
          model.do_lower_case, model.bert_config["max_position_embeddings"])))
  _write_vocab(model, os.path.join(folder, VOCAB_FILE))


def write_google_model(model, folder):
  """Writes `model` into `folder` in Google's layout (bert_model.ckpt,
  bert_config.json, vocab.txt, run_info.json)."""
  write_google_checkpoint(model.tensors,
                          os.path.join(folder, GOOGLE_CHECKPOINT_NAME))
  output_files.write_text(os.path.join(folder, run_info.CONFIG_FILE),
                          _json_text(model.bert_config))
  _write_vocab(model, os.path.join(folder, VOCAB_FILE))
  record = {"task": model.task, "labels": model.labels,
            "do_lower_case": model.do_lower_case,
            "converted_from": model.source}
  if model.problem_type is not None:
    record["problem_type"] = model.problem_type
  output_files.write_text(os.path.join(folder, run_info.RECORD_FILE),
                          _json_text(record))


def convert(input_path, output_dir, layout=None, *, bert_config_file=None,
            vocab_file=None, do_lower_case=None, shown_as=None):
  """Converts the model at `input_path` into the other layout.

  Args:
    input_path: a Hugging Face folder or a Google checkpoint (prefix or
      folder).
    output_dir: a new (or empty) folder.
    layout: GOOGLE or HF, the layout of `input_path`; None recognizes it.
    bert_config_file, vocab_file, do_lower_case: for a Google input only
      (`read_google_model`).
    shown_as: the folder the log line names (default `output_dir`): the
      name a caller gives the folder once it is complete.

  Returns:
    The layout written (GOOGLE or HF).

  Raises:
    cli.UserError naming the file, tensor or field that does not fit.
  """
  layout = layout or detect_layout(input_path)
  google_only = {"--bert_config_file": bert_config_file,
                 "--vocab_file": vocab_file, "--do_lower_case": do_lower_case}
  given = [flag for flag, value in google_only.items() if value is not None]
  if layout == HF and given:
    raise cli.UserError("%s applies to a Google checkpoint only; a Hugging "
                        "Face folder's own files are used." % given[0])
  target = _NewFolder(output_dir)
  if layout == HF:
    model = read_hf_model(input_path)
  else:
    model = read_google_model(input_path, bert_config_file, vocab_file,
                              do_lower_case)
  parent, name = os.path.split(file_systems.absolute(output_dir))
  with disk_space.writing(
      parent, "the converted model %s" % name, size=lambda: _model_bytes(
          model), flag="--output_dir",
      partial=lambda entry: entry.startswith(name) and (
          disk_space.is_partial(entry))), target as folder:
    (write_google_model if layout == HF else write_hf_model)(model, folder)
  logging.info("Wrote %s (%s, %d tensors, %s layout) from %s.",
               shown_as or output_dir, model.architecture, len(model.tensors),
               "Google's" if layout == HF else "Hugging Face's",
               model.source["path"])
  return GOOGLE if layout == HF else HF


def _model_bytes(model):
  """About the bytes a conversion of `model` writes: its weights and
  vocabulary."""
  return (sum(tensor.nbytes for tensor in model.tensors.values()) +
          sum(len(token.encode("utf-8")) + 1 for token in model.vocab))


def lock_output_dir(output_dir):
  """Takes the lock of convert_checkpoint.py's --output_dir
  (userio/folder_lock.py): the lock file `<output_dir>.lock` lies beside
  it, since the folder appears only when complete.

  Returns:
    The FolderLock, held while the caller keeps it.

  Raises:
    cli.UserError naming the run that holds it.
  """
  parent = os.path.dirname(file_systems.absolute(output_dir))
  with disk_space.writing(parent, "the lock of --output_dir=%s" % output_dir,
                          flag="--output_dir"):
    tf.io.gfile.makedirs(parent)
    return (folder_lock.hold(output_dir, beside=True) or
            contextlib.nullcontext())


def is_hf_folder(path):
  """Whether `path` is a folder holding a Hugging Face model (anything else,
  a checkpoint prefix or a folder of neither layout, is not)."""
  try:
    return file_systems.isdir(path) and detect_layout(path) == HF
  except cli.UserError:
    return False  # checkpoint_checks.check_checkpoint_prefix explains.


def resolve_init_checkpoint(path, work_dir):
  """The checkpoint prefix that --init_checkpoint=`path` stands for.

  A Hugging Face folder is converted into `work_dir/hf-<key>/` (beside the
  checkpoint: bert_config.json, vocab.txt, run_info.json, and the sidecar
  files.meta.json recording each file's size and checksum), keyed by the
  sha256 of its weights and config; a later call with the same files
  reuses that conversion when the sidecar vouches for it, and converts
  again, saying why, when not (a file cut short or damaged). Anything else
  is returned unchanged.

  Returns:
    A checkpoint prefix for modeling.get_assignment_map_from_checkpoint and
    tf.compat.v1.train.init_from_checkpoint.
  """
  if not is_hf_folder(path):
    return path
  key = _files_sha256(hf_weight_files(path) + [_hf_config_path(path)])
  folder = os.path.join(work_dir, "hf-%s" % key[:16])
  prefix = os.path.join(folder, GOOGLE_CHECKPOINT_NAME)
  source = {"converted_from_sha256": key}
  reason = sidecars.check_folder(folder, source)
  if reason is None:
    logging.info("--init_checkpoint=%s: using its conversion %s.", path,
                 prefix)
    return prefix
  if file_systems.isdir(folder):
    logging.info("--init_checkpoint=%s: converting it again, as %s cannot "
                 "be reused: %s.", path, folder, reason)
    tf.io.gfile.rmtree(folder)
  # Another process may convert the same folder at the same time: each
  # writes its own, and the first to finish names it.
  staging = "%s.%d" % (folder, os.getpid())
  convert(path, staging, HF, shown_as=folder)
  sidecars.write_folder(staging, source)
  try:
    file_systems.move_folder(staging, folder)
  except file_systems.errors(staging):
    tf.io.gfile.rmtree(staging)
  return prefix


def bert_config_file_of(init_checkpoint):
  """bert_config.json beside a checkpoint prefix, or None."""
  path = os.path.join(os.path.dirname(init_checkpoint), run_info.CONFIG_FILE)
  return path if tf.io.gfile.exists(path) else None
