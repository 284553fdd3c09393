# coding=utf-8
"""An exported model and the predictors that answer raw text with it.

    from prediction import exported_models
    model = exported_models.load("/tmp/mrpc_export")
    model.predict("He left early.", "He went away early.")
    model.predict_batch([("A cat.", "The cat."), ("Hi.", "Bye.")])

`load` reads what the model needs besides its weights (vocabulary, casing,
labels, max_seq_length, SQuAD's window settings) from the export's
assets.extra/ folder and returns the predictor of its task. Text goes
through the tasks' own functions, so an example gets the tokens it got in
training and evaluation; a batch is padded to its longest example only.
"""

import json
import os

import numpy as np
import tensorflow as tf

from checkpoints import problem_types
from checkpoints import run_info
from prediction import window_defaults
from runner import serving_input
from serving import graph_tokenizer
from tasks import classification
from tasks import classification_features
from tasks import classification_predictions
from tasks import conll
from tasks import glue
from tasks import multiple_choice
from tasks import ner
from tasks import squad
from tasks import squad_examples
from tasks import squad_features
from tasks import squad_predictions
from tasks import swag
import tokenization
from userio import cli

SAVED_MODEL_FILE = "saved_model.pb"
ASSETS_DIR = "assets.extra"
SQUAD_TASK = "squad"
# What run_info.json must hold for prediction.
_RECORD_FIELDS = ("task", "labels", "do_lower_case", "max_seq_length",
                  "vocab_file")
_SQUAD_OUTPUTS = ("start_logits", "end_logits")
CLASSIFIER_OUTPUT = "probabilities"
REGRESSION_OUTPUT = "predictions"
# A multiple-choice example: the given sentence and its candidate endings.
CHOICE_FIELDS = ("sentence", "endings")

NER_TASK = ner.TASK_NAME
SWAG_TASK = multiple_choice.TASK_NAME


# ------------------------------------------------------------ the model --


def find_saved_model(export_dir):
  """The SavedModel folder of `export_dir`: itself, or its newest export.

  Args:
    export_dir: a SavedModel folder, or the --export_dir of the scripts,
      which holds one folder per export named by its unix time.

  Raises:
    cli.UserError when neither holds a saved_model.pb.
  """
  if not tf.io.gfile.isdir(export_dir):
    raise cli.UserError("--export_dir=%s is not a folder; pass the folder "
                        "that a fine-tuning script's --export_dir wrote." %
                        export_dir)
  if tf.io.gfile.exists(os.path.join(export_dir, SAVED_MODEL_FILE)):
    return export_dir
  exports = sorted(
      (int(name.rstrip("/")), name.rstrip("/"))
      for name in tf.io.gfile.listdir(export_dir)
      if name.rstrip("/").isdigit() and tf.io.gfile.exists(
          os.path.join(export_dir, name.rstrip("/"), SAVED_MODEL_FILE)))
  if not exports:
    raise cli.UserError(
        "%s holds no %s, nor a <unix time> folder with one; pass the folder "
        "that a fine-tuning script's --export_dir wrote." %
        (export_dir, SAVED_MODEL_FILE))
  return os.path.join(export_dir, exports[-1][1])


def _asset(path, name):
  """The path of assets.extra/<name> of SavedModel `path`; it must exist."""
  asset = os.path.join(path, ASSETS_DIR, name)
  if not tf.io.gfile.exists(asset):
    raise cli.UserError(
        "%s has no %s/%s; export the model again with this project's "
        "fine-tuning script (--export_dir), which writes it."
        % (path, ASSETS_DIR, name))
  return asset


def read_record(path):
  """The run_info.json of SavedModel `path`, checked for what prediction
  needs."""
  asset = _asset(path, run_info.RECORD_FILE)
  with tf.io.gfile.GFile(asset, "r") as reader:
    try:
      record = json.load(reader)
    except ValueError as e:
      raise cli.UserError("%s is not valid JSON (%s); export the model "
                          "again." % (asset, e)) from None
  missing = [field for field in _RECORD_FIELDS
             if not isinstance(record, dict) or field not in record]
  if missing:
    raise cli.UserError("%s lacks %s; export the model again with this "
                        "project's scripts." % (asset, ", ".join(missing)))
  return record


def make_tokenizer(path, record):
  """The FullTokenizer of the vocabulary and casing that `record` names."""
  vocab = _asset(path, record["vocab_file"])
  is_wordpiece = record["vocab_file"] == run_info.WORDPIECE_VOCAB_FILE
  try:
    return tokenization.FullTokenizer(
        vocab_file=vocab if is_wordpiece else None,
        do_lower_case=record["do_lower_case"],
        spm_model_file=None if is_wordpiece else vocab)
  except (UnicodeDecodeError, RuntimeError, OSError) as e:
    raise cli.UserError("%s is not a readable %s (%s); export the model "
                        "again." % (vocab, "vocabulary" if is_wordpiece else
                                    "SentencePiece model", e)) from None


class ExportedModel(object):
  """An exported model, loaded once, with what its assets say.

  Attributes:
    path: the SavedModel's folder.
    record: its run_info.json (task, labels, do_lower_case, max_seq_length,
      ...).
    tokenizer: tokenization.FullTokenizer of its vocabulary and casing.
    max_seq_length: the longest request the model serves, in tokens.
    output_names: the serving signature's outputs, sorted.
  """

  def __init__(self, export_dir):
    self.path = find_saved_model(export_dir)
    self.record = read_record(self.path)
    self.tokenizer = make_tokenizer(self.path, self.record)
    self.max_seq_length = int(self.record["max_seq_length"])
    text_ops = graph_tokenizer.register_text_ops()
    try:
      self._loaded = tf.saved_model.load(self.path)
    except (OSError, ValueError, tf.errors.OpError) as e:
      if not text_ops and "Op type not registered" in str(e):
        graph_tokenizer.import_tensorflow_text()  # Says what to install.
      raise cli.UserError("%s could not be loaded as a SavedModel (%s); "
                          "export the model again." % (
                              self.path, " ".join(str(e).split())[:300])
                          ) from None
    self._serve = self._loaded.signatures.get("serving_default")
    if self._serve is None or sorted(
        self._serve.structured_input_signature[1]) != sorted(
            serving_input.MODEL_INPUTS):
      raise cli.UserError(
          "%s has no serving_default signature taking %s; export the model "
          "again with this project's scripts." % (
              self.path, ", ".join(serving_input.MODEL_INPUTS)))
    self.output_names = sorted(self._serve.structured_outputs)

  def run(self, input_ids, input_mask, segment_ids):
    """The signature's outputs for one batch.

    Args:
      input_ids, input_mask, segment_ids: int32 arrays [batch, length],
        length at most max_seq_length.

    Returns:
      dict output name -> numpy array [batch, ...].
    """
    outputs = self._serve(input_ids=input_ids, input_mask=input_mask,
                          segment_ids=segment_ids)
    return {name: value.numpy() for name, value in outputs.items()}

  def run_rows(self, rows, batch_size, pad_to=None):
    """The outputs of each row, the rows batched by length.

    Rows are sorted by length and cut into batches of `batch_size`; each
    batch is padded to its longest row (or to `pad_to`), so that rows of
    similar lengths share a batch and little padding is computed.

    Args:
      rows: list of (input_ids, segment_ids) int lists, each at most
        max_seq_length long.
      batch_size: rows per model call.
      pad_to: optional length to pad every batch to.

    Returns:
      list, per row: dict output name -> numpy array of that row (positional
      outputs as long as the row's batch was padded).
    """
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
    outputs = [None] * len(rows)
    for start in range(0, len(order), batch_size):
      batch = order[start:start + batch_size]
      length = pad_to or max(len(rows[i][0]) for i in batch)
      input_ids, input_mask, segment_ids = (
          np.zeros([len(batch), length], np.int32) for _ in range(3))
      for j, i in enumerate(batch):
        ids, segments = rows[i]
        input_ids[j, :len(ids)] = ids
        input_mask[j, :len(ids)] = 1
        segment_ids[j, :len(ids)] = segments
      values = self.run(input_ids, input_mask, segment_ids)
      for j, i in enumerate(batch):
        outputs[i] = {name: value[j] for name, value in values.items()}
    return outputs


def example_fields(task, text_columns=None):
  """The names of the two texts of an example of `task` (the second is
  optional for some tasks); for a classifier trained on your own files,
  `text_columns` (run_info.json's) names them as its files' header did."""
  if text_columns and not any(str(name).isdigit()
                              for name in text_columns if name):
    return text_columns[0], text_columns[1] or "text_b"
  if task == SQUAD_TASK:
    return "question", "context"
  if task == SWAG_TASK:
    return CHOICE_FIELDS
  if task == NER_TASK:
    return "text", "text_b"
  return "text_a", "text_b"


def _shown(value):
  """`value` as an error message shows it: JSON, or the repr of what JSON
  cannot write (bytes given for text, ...)."""
  return json.dumps(value, ensure_ascii=False, default=repr)


def check_example(task, values, text_pairs=None, fields=None):
  """Checks the two texts of one example for a model of `task`, named
  `fields` (default: `example_fields(task)`).

  SQuAD needs both; a classifier needs the first, and the second exactly
  when it classifies sentence pairs: when its task (one of run_classifier's)
  does, or as `text_pairs` (the run_info.json of a model trained on your own
  files) says.

  Raises:
    cli.UserError saying which text is missing or wrong.
  """
  if task == SWAG_TASK:
    check_choices(values)
    return
  fields = fields or example_fields(task)
  model = ("this model" if task == classification.FILE_TASK else
           "the %s model" % task.upper())
  processor = glue.PROCESSORS.get(task)
  if task == NER_TASK and values[1] is not None:
    raise cli.UserError("the NER model tags one text: give text alone (a "
                        "text line holds no tab)")
  if task == SQUAD_TASK:
    wants_second = True
  elif text_pairs is not None:
    wants_second = text_pairs
  elif processor is not None:
    wants_second = processor.text_pairs
  else:  # A task of the user's own: either form.
    wants_second = values[1] is not None
  for name, value, wanted in zip(fields, values, (True, wants_second)):
    if value is None and wanted:
      raise cli.UserError(
          "%s is missing: %s reads %s (in a text line: two texts "
          "separated by a tab)" % (name, model, " and ".join(fields)))
    if value is not None and not wanted:
      raise cli.UserError("%s classifies single texts: give %s alone" % (
          model, fields[0]))
    if value is not None and (not isinstance(value, str) or
                              not value.strip()):
      raise cli.UserError("%s must be a non-empty string, not %s" % (
          name, _shown(value)))


def check_choices(values):
  """Checks a multiple-choice example: (sentence, list of endings).

  Raises:
    cli.UserError saying what is missing or wrong.
  """
  sentence, endings = values
  if not isinstance(sentence, str) or not sentence.strip():
    raise cli.UserError("sentence must be a non-empty string, not %s" %
                        json.dumps(sentence, ensure_ascii=False))
  if not isinstance(endings, list) or len(endings) < 2:
    raise cli.UserError(
        "endings must be a list of at least 2 candidate endings (in a text "
        "line: the sentence, then each ending, separated by tabs), not %s"
        % _shown(endings))
  for ending in endings:
    if not isinstance(ending, str) or not ending.strip():
      raise cli.UserError("each ending must be a non-empty string, not %s" %
                          _shown(ending))


def _check_batch_size(batch_size):
  if not isinstance(batch_size, int) or batch_size < 1:
    raise cli.UserError("batch_size must be a positive integer, got %r." %
                        (batch_size,))
  return batch_size


# ------------------------------------------------------- classification --


class ClassifierPredictor(object):
  """Label and probabilities (or a regression score) of raw sentences.

  A model trained with run_classifier.py --long_text=windows (its
  run_info.json says so) reads a text longer than max_seq_length in the
  same windows and combines their outputs as that script does; others
  truncate it as Google's script does.

  A multi-label model (run_classifier.py on your own files) predicts the
  labels whose probability is above its threshold: the `threshold` given,
  else the one its training run recorded, else 0.5.

  Attributes:
    model: the ExportedModel.
    labels: the label list in the model's order (None for regression).
    problem_type: single_label, multi_label or regression.
    threshold: the multi-label threshold.
    windows: whether long texts are read in windows.
  """

  def __init__(self, model, *, batch_size=32, threshold=None):
    self.model = model
    self.batch_size = _check_batch_size(batch_size)
    self.windows = model.record.get("long_text") == "windows"
    self._doc_stride = model.record.get("doc_stride")
    if REGRESSION_OUTPUT in model.output_names:
      self.labels = None
      self.problem_type = problem_types.REGRESSION
    elif CLASSIFIER_OUTPUT in model.output_names:
      self.labels = list(model.record["labels"])
      self.problem_type = model.record.get("problem_type",
                                           problem_types.SINGLE_LABEL)
    else:
      raise cli.UserError(
          "%s serves %s, not a classifier's %r or a regression's %r." % (
              model.path, ", ".join(model.output_names), CLASSIFIER_OUTPUT,
              REGRESSION_OUTPUT))
    if threshold is None:
      threshold = model.record.get("threshold")
    self.threshold = (classification.ClassificationTask.threshold
                      if threshold is None else threshold)

  def row(self, text_a, text_b=None):
    """The model inputs of one example: (input_ids, segment_ids), unpadded.

    Raises:
      cli.UserError when the texts do not suit the task (check_example).
    """
    check_example(self.model.record["task"], (text_a, text_b),
                  self.model.record.get("text_pairs"))
    example = glue.InputExample(guid=None, text_a=text_a,
                                          text_b=text_b)
    tokens, segment_ids = classification_features.example_tokens(
        example, self.model.max_seq_length, self.model.tokenizer)
    return self.model.tokenizer.convert_tokens_to_ids(tokens), segment_ids

  def window_rows(self, text_a, text_b=None):
    """The model inputs of each window of one example (one row when it
    fits), as run_classifier.py --long_text=windows lays them out."""
    check_example(self.model.record["task"], (text_a, text_b),
                  self.model.record.get("text_pairs"))
    example = glue.InputExample(guid=None, text_a=text_a,
                                          text_b=text_b)
    convert = self.model.tokenizer.convert_tokens_to_ids
    return [(convert(window.tokens), window.segment_ids)
            for window in classification_features.example_windows(
                example, self.model.max_seq_length, self.model.tokenizer,
                self._doc_stride)]

  def _result(self, outputs):
    name = CLASSIFIER_OUTPUT if self.labels else REGRESSION_OUTPUT
    return classification_predictions.answer(outputs[name], self.labels or [None],
                                 self.problem_type, self.threshold)

  def predict_batch(self, examples):
    """Predicts a list of examples.

    Args:
      examples: list of text_a strings or (text_a, text_b) pairs.

    Returns:
      list of dicts, one per example: {"label": the most probable label,
      "probabilities": {label: probability}}; for a multi-label model
      {"labels": those above the threshold, "probabilities": ...}; or
      {"score": float} for a regression model.
    """
    pairs = [_example_texts(example) for example in examples]
    if not self.windows:
      return [self._result(outputs) for outputs in self.model.run_rows(
          [self.row(*pair) for pair in pairs], self.batch_size)]
    rows, counts = [], []
    for pair in pairs:
      parts = self.window_rows(*pair)
      rows += parts
      counts.append(len(parts))
    name = CLASSIFIER_OUTPUT if self.labels else REGRESSION_OUTPUT
    combined = classification_predictions.combine_windows(
        [outputs[name] for outputs in self.model.run_rows(
            rows, self.batch_size)], counts, is_regression=not self.labels,
        multi_label=self.problem_type == problem_types.MULTI_LABEL)
    return [self._result({name: value}) for value in combined]

  def predict(self, text_a, text_b=None):
    """The prediction of one sentence or pair (see predict_batch)."""
    return self.predict_batch([(text_a, text_b)])[0]


def _example_texts(example):
  """(text_a, text_b or None) of an example given as a text or a pair.

  Raises:
    cli.UserError for anything else (a dict would be read as its keys).
  """
  if isinstance(example, str):
    return example, None
  if isinstance(example, (tuple, list)) and len(example) in (1, 2):
    return tuple(example) + (None,) * (2 - len(example))
  raise cli.UserError("an example is a text or a (text_a, text_b) pair, "
                      "not %s" % _shown(example))


# ---------------------------------------------------------------- SQuAD --


class SquadPredictor(object):
  """Answers of questions about a context, with run_squad.py's search.

  A context is split into windows of the export's max_seq_length as in
  run_squad.py (doc_stride, max_query_length); the n-best search over the
  windows' start and end logits (n_best_size, max_answer_length, casing
  restored with get_final_text) is squad_predictions.predict_example's.
  """

  def __init__(self, model, *, doc_stride=None, max_query_length=None,
               n_best_size=20, max_answer_length=30,
               null_score_diff_threshold=0.0, version_2_with_negative=None,
               batch_size=32, pad_to_max_seq_length=False):
    """Keeps the model and the search settings.

    Args:
      model: an ExportedModel of run_squad.py.
      doc_stride, max_query_length, n_best_size, max_answer_length,
        null_score_diff_threshold: as run_squad.py's flags; None for
        doc_stride or max_query_length: the value the model was trained
        with (its run_info.json), else run_squad.py's default.
      version_2_with_negative: whether "" (no answer) may be predicted;
        default: what the model was trained for (its run_info.json).
      batch_size: windows per model call.
      pad_to_max_seq_length: pad every window to max_seq_length as
        run_squad.py does. Google's search ranks the logits of all positions,
        padding included, and keeps the n_best_size best: a padding
        position can take the place of a real one. With the padding left
        out (the default), the candidates are a superset of run_squad's;
        the answers are the same unless padding displaced a candidate.
    """
    self.model = model
    missing = [name for name in _SQUAD_OUTPUTS
               if name not in model.output_names]
    if missing:
      raise cli.UserError("%s serves %s, not SQuAD's %s." % (
          model.path, ", ".join(model.output_names), " and ".join(missing)))
    if doc_stride is None:
      doc_stride = model.record.get(
          "doc_stride", window_defaults.WINDOW_DEFAULTS["doc_stride"])
    if max_query_length is None:
      max_query_length = model.record.get(
          "max_query_length",
          window_defaults.WINDOW_DEFAULTS["max_query_length"])
    self.doc_stride = doc_stride
    self.max_query_length = max_query_length
    self.n_best_size = n_best_size
    self.max_answer_length = max_answer_length
    self.max_seq_length = model.max_seq_length
    try:
      squad.check_window_flags(
          self.max_seq_length, doc_stride, max_query_length, n_best_size,
          max_answer_length)
    except cli.UserError as e:
      raise cli.UserError("%s (max_seq_length is the export's, from %s)" %
                          (e, model.path)) from None
    self.null_score_diff_threshold = null_score_diff_threshold
    if version_2_with_negative is None:
      version_2_with_negative = model.record.get("version_2_with_negative",
                                                 False)
    self.version_2_with_negative = bool(version_2_with_negative)
    self.batch_size = _check_batch_size(batch_size)
    self.pad_to_max_seq_length = pad_to_max_seq_length

  def features(self, question, context, example_index=0, first_unique_id=0):
    """(SquadExample, its InputFeatures unpadded, one per window).

    Raises:
      cli.UserError when a text is missing or empty.
    """
    check_example(SQUAD_TASK, (question, context))
    doc_tokens, _ = squad_examples.split_context(context)
    example = squad_examples.SquadExample(qas_id=example_index,
                                     question_text=question,
                                     doc_tokens=doc_tokens)
    features = squad_features.example_features(
        example, self.model.tokenizer, self.max_seq_length, self.doc_stride,
        self.max_query_length, is_training=False,
        example_index=example_index, first_unique_id=first_unique_id,
        pad=False)
    return example, features

  def _answer(self, example, features, outputs):
    """The answer dict of one question from its windows' outputs."""
    results = []
    for feature, output in zip(features, outputs):
      # Left-out padding stays out of the search: the logits of a window
      # are cut to its own tokens.
      length = (len(output["start_logits"]) if self.pad_to_max_seq_length
                else len(feature.input_ids))
      results.append(squad_predictions.RawResult(
          feature.unique_id, output["start_logits"][:length],
          output["end_logits"][:length]))
    nbest, score_diff, best_text = squad_predictions.predict_example(
        example, features, results, self.n_best_size, self.max_answer_length,
        self.model.record["do_lower_case"], self.version_2_with_negative,
        verbose_logging=False)
    answer = {"answer": best_text, "nbest": [dict(entry) for entry in nbest]}
    if score_diff is not None:
      answer["answer"] = squad_predictions.answer_at_threshold(
          score_diff, best_text, self.null_score_diff_threshold)
      answer["null_score_diff"] = score_diff
    return answer

  def predict_batch(self, questions):
    """Answers a list of (question, context) pairs.

    Returns:
      list of dicts, one per question: {"answer": text, "nbest": [{"text",
      "probability", "start_logit", "end_logit"}, ...] best first}, and for
      SQuAD 2.0 "null_score_diff" (the null score minus the best non-null
      score; the answer is "" when it exceeds null_score_diff_threshold).
    """
    examples = []
    unique_id = 0
    for index, (question, context) in enumerate(questions):
      example, features = self.features(question, context, index,
                                        unique_id)
      examples.append((example, features))
      unique_id += len(features)
    windows = [feature for _, features in examples for feature in features]
    outputs = self.model.run_rows(
        [(f.input_ids, f.segment_ids) for f in windows], self.batch_size,
        pad_to=self.max_seq_length if self.pad_to_max_seq_length else None)
    answers = []
    for example, features in examples:
      answers.append(self._answer(example, features,
                                  outputs[:len(features)]))
      outputs = outputs[len(features):]
    return answers

  def predict(self, question, context):
    """The answer to one question (see predict_batch)."""
    return self.predict_batch([(question, context)])[0]


# ------------------------------------------------------- multiple choice --


class MultipleChoicePredictor(object):
  """Probabilities of a sentence's candidate endings (run_swag.py models).

  Each ending is laid out with the sentence as run_swag.py lays out a
  choice (segment A the sentence, segment B the ending, which for SWAG's
  questions is sent2 and the ending joined); the model scores each choice
  and a softmax over the question's endings gives their probabilities.
  Any number of endings (at least 2) can be asked.
  """

  def __init__(self, model, *, batch_size=32):
    self.model = model
    self.batch_size = _check_batch_size(batch_size)
    if CLASSIFIER_OUTPUT not in model.output_names:
      raise cli.UserError("%s serves %s, not a multiple-choice model's %r." %
                          (model.path, ", ".join(model.output_names),
                           CLASSIFIER_OUTPUT))

  def rows(self, sentence, endings):
    """The inputs of one question: a list of (input_ids, segment_ids) per
    ending, unpadded."""
    check_choices((sentence, endings))
    tokenizer = self.model.tokenizer
    return [(tokenizer.convert_tokens_to_ids(tokens), segments)
            for tokens, segments in swag.choice_layouts(
                sentence, endings, self.model.max_seq_length, tokenizer)]

  def _run(self, questions):
    """Probabilities of questions with the same number of endings, each a
    list of rows; one model call, padded to the longest row."""
    length = max(len(ids) for rows in questions for ids, _ in rows)
    shape = [len(questions), len(questions[0]), length]
    input_ids, input_mask, segment_ids = (np.zeros(shape, np.int32)
                                          for _ in range(3))
    for i, rows in enumerate(questions):
      for j, (ids, segments) in enumerate(rows):
        input_ids[i, j, :len(ids)] = ids
        input_mask[i, j, :len(ids)] = 1
        segment_ids[i, j, :len(ids)] = segments
    return self.model.run(input_ids, input_mask,
                          segment_ids)[CLASSIFIER_OUTPUT]

  def predict_batch(self, examples):
    """Predicts a list of (sentence, endings) questions.

    Questions with the same number of endings share model calls, sorted by
    length so that little padding is computed.

    Returns:
      list of dicts, one per question: {"choice": index of the most
      probable ending, "ending": its text, "probabilities": one per
      ending, in their order}.
    """
    rows = [self.rows(sentence, endings) for sentence, endings in examples]
    order = sorted(range(len(rows)), key=lambda i: (
        len(rows[i]), max(len(ids) for ids, _ in rows[i])))
    probabilities = [None] * len(rows)
    start = 0
    while start < len(order):
      batch = [i for i in order[start:start + self.batch_size]
               if len(rows[i]) == len(rows[order[start]])]
      for i, values in zip(batch, self._run([rows[i] for i in batch])):
        probabilities[i] = [float(p) for p in values]
      start += len(batch)
    results = []
    for (_, endings), values in zip(examples, probabilities):
      best = int(np.argmax(values))
      results.append({"choice": best, "ending": endings[best],
                      "probabilities": values})
    return results

  def predict(self, sentence, endings):
    """The prediction of one question (see predict_batch)."""
    return self.predict_batch([(sentence, endings)])[0]


# ------------------------------------------------------------------ NER --


class NerPredictor(object):
  """The entities of raw texts, with run_ner.py's windows.

  A text is cut into words at whitespace and punctuation
  (tokenization.split_words_with_offsets), read in windows of the export's
  max_seq_length as run_ner.py reads a document, each word tagged from the
  window where its first sub-token has the most context; entities are the
  tags' chunks by conlleval's rules (tasks/conll.py).
  """

  def __init__(self, model, *, doc_stride=None, batch_size=32):
    """Keeps the model and the window settings.

    Args:
      model: an ExportedModel of run_ner.py.
      doc_stride: tokens between window starts; default: the stride the
        model was trained with (its run_info.json), else half a window.
      batch_size: windows per model call.
    """
    self.model = model
    if ner.TAG_IDS not in model.output_names:
      raise cli.UserError("%s serves %s, not NER's %s." % (
          model.path, ", ".join(model.output_names), ner.TAG_IDS))
    self.labels = list(model.record["labels"])
    if doc_stride is None:
      doc_stride = model.record.get(
          "doc_stride", max(1, (model.max_seq_length - 2) // 2))
    if doc_stride < 1:
      raise cli.UserError("doc_stride=%d must be at least 1." % doc_stride)
    self.doc_stride = doc_stride
    self.batch_size = _check_batch_size(batch_size)

  def _entities(self, text, words, tags, scores):
    found = []
    for chunk in conll.chunks(tags):
      start, end = words[chunk.start][1], words[chunk.end - 1][2]
      found.append({"text": text[start:end], "type": chunk.type,
                    "start": start, "end": end,
                    "score": float(np.mean(scores[chunk.start:chunk.end]))})
    return found

  def predict_batch(self, texts):
    """Tags a list of texts.

    Returns:
      list of dicts, one per text: {"entities": [{"text", "type", "start",
      "end", "score"}, ...]} in text order; text[start:end] is the entity,
      score the mean probability of its words' predicted tags.
    """
    jobs = []
    rows = []
    for text in texts:
      check_example(NER_TASK, (text, None))
      words = tokenization.split_words_with_offsets(text)
      windows = ner.text_windows(
          [word for word, _, _ in words], self.model.tokenizer,
          self.model.max_seq_length, self.doc_stride)
      jobs.append((text, words, windows))
      rows += [(self.model.tokenizer.convert_tokens_to_ids(w.tokens),
                [0] * len(w.tokens)) for w in windows]
    outputs = self.model.run_rows(rows, self.batch_size)
    results = []
    for text, words, windows in jobs:
      tags, scores = [None] * len(words), [None] * len(words)
      for window, output in zip(windows, outputs):
        for position, word in window.word_positions:
          label = int(output[ner.TAG_IDS][position])
          tags[word] = self.labels[label]
          scores[word] = output[ner.TAG_PROBABILITIES][position][label]
      outputs = outputs[len(windows):]
      results.append({"entities": self._entities(text, words, tags, scores)})
    return results

  def predict(self, text):
    """The entities of one text (see predict_batch)."""
    return self.predict_batch([text])[0]


def load(export_dir, **options):
  """A predictor of the model exported in `export_dir`.

  Args:
    export_dir: a SavedModel folder a fine-tuning script exported, or the
      --export_dir folder holding them (the newest is loaded).
    **options: keyword arguments of the predictor's class.

  Returns:
    SquadPredictor for a run_squad.py model, MultipleChoicePredictor for a
    run_swag.py one, NerPredictor for a run_ner.py one, else
    ClassifierPredictor.
  """
  model = ExportedModel(export_dir)
  if model.record["task"] == SQUAD_TASK:
    return SquadPredictor(model, **options)
  if model.record["task"] == SWAG_TASK:
    return MultipleChoicePredictor(model, **options)
  if model.record["task"] == NER_TASK:
    return NerPredictor(model, **options)
  return ClassifierPredictor(model, **options)
