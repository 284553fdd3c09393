# coding=utf-8
"""Question answering on SQuAD 1.1 / 2.0: answer spans in a context.

The task of run_squad.py: this module holds SquadTask, which runs it, and
the checks of its flags; the parts it is made of are their own modules:
tasks/squad_examples.py (the json files read into questions),
tasks/squad_features.py (questions into windows, the feature files),
tasks/squad_model.py (the span head, its loss, the model_fn),
tasks/squad_predictions.py (the n-best answer search, the prediction
files), tasks/squad_metrics.py (the official metrics) and
tasks/squad_text.py (windows and search as graph ops, for the export).

The file formats and behaviour follow Google's
run_squad.py:

  * A context is split into words on whitespace; every word is WordPiece
    tokenized. A question is cut to --max_query_length tokens. Long contexts
    become several overlapping windows ("doc spans") of at most
    --max_seq_length - len(question) - 3 tokens, started every --doc_stride
    tokens. Each window is one feature: [CLS] question [SEP] window [SEP].
  * A token is scored only in the window where it has the most context
    (tasks/windows.py, Google's `_check_is_max_context`), so overlapping
    windows never compete.
  * The model adds `cls/squad/output_weights` [2, hidden] and
    `cls/squad/output_bias` [2] on top of BERT's sequence output, giving
    start and end logits for every position. The loss is the mean of the
    start and end cross-entropies.
  * Predictions keep the --n_best_size best start and end positions of every
    window, drop impossible spans, map the best span back to the original
    text (`get_final_text`) and write predictions.json and
    nbest_predictions.json (and null_odds.json for SQuAD 2.0).

Beyond the original:

  * Whitespace of the context also includes the Unicode space separators
    (U+00A0 no-break space, U+3000 ideographic space, ...), as the tokenizer
    does. The original split only on ASCII whitespace and U+202F, so a word
    glued to its neighbour by a no-break space could not be answered alone.
  * Bad input (malformed JSON, missing fields, inconsistent flags) fails with
    a message naming the file, the question id and the fix. Training on a
    question with several answers uses the first one (the original raised);
    answers whose text is not found at `answer_start` are skipped and counted.
  * In SQuAD 2.0 mode, a question whose n-best list holds no non-empty answer
    is predicted as "" (the original crashed).
  * Prediction streams: features go to eval.tf_record as they are made and
    only their light metadata (tokens and maps, no id arrays) stays in
    memory; logits are kept as float32 arrays.
  * With answers in --predict_file, the official SQuAD metrics are computed
    and written to eval_results.json; for SQuAD 2.0 also
    predictions_best_threshold.json, the predictions at the null threshold
    that maximizes F1 (derived from the saved null odds, no re-run).
  * Output JSON files are written atomically (temporary file + rename).
"""

import os

from absl import logging
import numpy as np

from checkpoints import run_info
from tasks import squad_examples
from tasks import squad_features
from tasks import squad_metrics
from tasks import squad_model
from tasks import squad_predictions
from tasks import squad_text
from tasks import task
from userio import cli

# The flags besides --max_seq_length that shape a context's windows: a
# training run records them in run_info.json, and a run that does not train
# (and predictor.py) takes them from there unless given.
WINDOW_FLAGS = ("doc_stride", "max_query_length")


def check_window_flags(max_seq_length, doc_stride, max_query_length,
                       n_best_size, max_answer_length):
  """Checks --max_query_length, --doc_stride, --n_best_size and
  --max_answer_length against --max_seq_length (the values of those flags,
  or of predictor.SquadPredictor's settings of the same names).

  Raises:
    cli.UserError naming the flags and the fix.
  """
  if max_seq_length <= max_query_length + 3:
    raise cli.UserError(
        "--max_seq_length=%d must be greater than --max_query_length=%d + 3 "
        "to leave room for the document." % (max_seq_length,
                                             max_query_length))
  max_doc_tokens = max_seq_length - max_query_length - 3
  if not 1 <= doc_stride < max_doc_tokens:
    raise cli.UserError(
        "--doc_stride=%d must be at least 1 and smaller than the document "
        "room of a window, --max_seq_length - --max_query_length - 3 = "
        "%d - %d - 3 = %d, so that windows overlap; lower --doc_stride or "
        "--max_query_length, or raise --max_seq_length." %
        (doc_stride, max_seq_length, max_query_length, max_doc_tokens))
  if n_best_size < 1 or max_answer_length < 1:
    raise cli.UserError("--n_best_size=%d and --max_answer_length=%d must be "
                        "at least 1." % (n_best_size, max_answer_length))


def check_data_flags(*, do_train, train_file, do_predict, predict_file,
                     do_eval=False, dev_file=None):
  """Training needs --train_file, prediction --predict_file, evaluation
  --dev_file.

  Raises:
    cli.UserError naming the flag.
  """
  if do_train and not train_file:
    raise cli.UserError("--do_train needs --train_file (a SQuAD json file).")
  if do_predict and not predict_file:
    raise cli.UserError("--do_predict needs --predict_file (a SQuAD json "
                        "file).")
  if do_eval and not dev_file:
    raise cli.UserError("--do_eval needs --dev_file (a SQuAD json file with "
                        "answers, e.g. dev-v1.1.json).")


class SquadTask(task.Task):
  """SQuAD's json files, the span head, Google's n-best answer search and
  the official metrics."""

  name = "squad"
  serves_text = True

  def __init__(self, *, train_file=None, predict_file=None, dev_file=None,
               version_2_with_negative=False, window_flags=None,
               given_window_flags=(), n_best_size=20, max_answer_length=30,
               null_score_diff_threshold=0.0, verbose_logging=False):
    """Args:
      train_file, predict_file, dev_file: SQuAD json files (--train_file,
        --predict_file, --dev_file: --do_eval's, with answers).
      version_2_with_negative: SQuAD 2.0 (questions without an answer).
      window_flags: {name: value} of WINDOW_FLAGS (doc_stride,
        max_query_length).
      given_window_flags: those of WINDOW_FLAGS the command line set; a run
        that does not train takes the others from the training run's
        run_info.json.
      n_best_size, max_answer_length, null_score_diff_threshold,
        verbose_logging: the n-best search's settings (write_predictions).
    """
    super().__init__()
    self.train_file = train_file
    self.predict_file = predict_file
    self.dev_file = dev_file
    self.version_2_with_negative = version_2_with_negative
    self.window_flags = dict(window_flags)
    self.given_window_flags = frozenset(given_window_flags)
    self.n_best_size = n_best_size
    self.max_answer_length = max_answer_length
    self.null_score_diff_threshold = null_score_diff_threshold
    self.verbose_logging = verbose_logging
    self.examples = {}
    # The dev set's (features, official data) once evaluation made them.
    self._dev = None

  @property
  def doc_stride(self):
    return self.window_flags["doc_stride"]

  @property
  def max_query_length(self):
    return self.window_flags["max_query_length"]

  def start(self, flags, bert_config, tokenizer):
    """A run that does not train windows contexts as training did; then the
    window flags are checked against --max_seq_length."""
    super().start(flags, bert_config, tokenizer)
    check_data_flags(do_train=flags.do_train, train_file=self.train_file,
                     do_predict=flags.do_predict,
                     predict_file=self.predict_file, do_eval=flags.do_eval,
                     dev_file=self.dev_file)
    if not flags.do_train:
      self._reuse_recorded_window_flags(run_info.read(flags.output_dir))
    check_window_flags(flags.max_seq_length, self.doc_stride,
                       self.max_query_length, self.n_best_size,
                       self.max_answer_length)

  def record(self):
    return self.make_record(
        None, version_2_with_negative=self.version_2_with_negative,
        **self.window_flags)

  def read_data(self):
    """The questions of every set the run reads; the dev set must have
    answers to score."""
    files = {task.TRAIN: (self.train_file, "--train_file"),
             task.DEV: (self.dev_file, "--dev_file"),
             task.TEST: (self.predict_file, "--predict_file")}
    for set_type in self.sets_to_read():
      input_file, flag = files[set_type]
      self.examples[set_type] = self._read_examples(
          input_file, flag, is_training=set_type == task.TRAIN)
    if task.DEV in self.examples and not squad_examples.has_answers(
        squad_examples.load_squad_data(self.dev_file),
        self.version_2_with_negative):
      raise cli.UserError(
          "--dev_file=%s lacks answers for some questions; --do_eval scores "
          "answers, so pass a SQuAD file that has them%s." % (
              self.dev_file, "" if self.version_2_with_negative else
              " (SQuAD 2.0 data needs --version_2_with_negative)"))

  def num_train_examples(self):
    return len(self.examples[task.TRAIN]), self.train_file

  def head_shapes(self):
    return ()

  def head(self, features, mode, settings):
    return squad_model.squad_head(features, mode, settings)

  def train_input_fn(self):
    """The training examples, shuffled once with --seed so that the input's
    small shuffle buffer suffices (the windows of one example are
    neighbours in the file)."""
    train_examples = task.shuffled(self.examples[task.TRAIN],
                                   self.flags.seed)
    train_file = os.path.join(self.work_dir, "train.tf_record")
    num_features = squad_features.write_features(
        train_examples, self.tokenizer, train_file,
        self.flags.max_seq_length, self.doc_stride, self.max_query_length,
        is_training=True)
    return (squad_features.input_fn_builder(
        input_file=train_file, seq_length=self.flags.max_seq_length,
        is_training=True, drop_remainder=True, seed=self.flags.seed),
            ["Num orig examples = %d" % len(train_examples),
             "Num split examples = %d" % num_features])

  def evaluate(self, estimator, checkpoint_path=None):
    """The official metrics of `checkpoint_path`'s answers to --dev_file
    (eval_results.json); its windows are written once per run
    (dev.tf_record)."""
    if self._dev is None:
      features = squad_features.write_eval_features(
          self.examples[task.DEV], self.tokenizer,
          self._output_path("dev.tf_record"), self.flags.max_seq_length,
          self.doc_stride, self.max_query_length)
      self._dev = features, squad_examples.load_squad_data(self.dev_file)
    features, data = self._dev
    predictions, _ = squad_predictions.search_answers(
        self.examples[task.DEV], features,
        self._predict_results(estimator, self._output_path("dev.tf_record"),
                              len(features), checkpoint_path,
                              for_evaluation=True),
        self.n_best_size, self.max_answer_length, self.flags.do_lower_case,
        version_2_with_negative=self.version_2_with_negative,
        null_score_diff_threshold=self.null_score_diff_threshold)
    results = self._official_metrics(data, predictions)
    squad_predictions.write_json_atomically(
        self._output_path("eval_results.json"), results)
    results.update(task.checkpoint_step(estimator, checkpoint_path))
    return task.Metrics(results, file_name=None, summaries="eval")

  def eval_metric_names(self):
    """F1 first, then exact match (SQuAD 2.0: its official keys)."""
    if not self.version_2_with_negative:
      return ["f1", "exact_match"]
    return ["f1", "exact", "HasAns_f1", "HasAns_exact", "NoAns_f1",
            "NoAns_exact", "best_f1", "best_exact", "best_f1_thresh",
            "best_exact_thresh"]

  def predict(self, estimator, checkpoint_path=None):
    """predictions.json and nbest_predictions.json (and null_odds.json for
    SQuAD 2.0) of --predict_file; with answers in it, the official metrics
    (eval_results.json).

    Memory: the examples (words of every context) and, per feature, its
    tokens and maps and two float32 logit vectors stay in memory; the id
    arrays are only in eval.tf_record.
    """
    eval_examples = self.examples[task.TEST]
    eval_file = os.path.join(self.flags.output_dir, "eval.tf_record")
    eval_features = squad_features.write_eval_features(
        eval_examples, self.tokenizer, eval_file, self.flags.max_seq_length,
        self.doc_stride, self.max_query_length)
    task.log_block("Running predictions", [
        "Num orig examples = %d" % len(eval_examples),
        "Num split examples = %d" % len(eval_features),
        "Batch size = %d" % self.flags.predict_batch_size])
    predictions = squad_predictions.write_predictions(
        eval_examples, eval_features,
        self._predict_results(estimator, eval_file, len(eval_features),
                              checkpoint_path),
        self.n_best_size, self.max_answer_length, self.flags.do_lower_case,
        self._output_path("predictions.json"),
        self._output_path("nbest_predictions.json"),
        self._output_path("null_odds.json"),
        version_2_with_negative=self.version_2_with_negative,
        null_score_diff_threshold=self.null_score_diff_threshold,
        verbose_logging=self.verbose_logging)
    return self._evaluate(predictions)

  def serving_input_receiver_fn(self):
    text_signature = None
    if self.exports_text():
      text_signature = squad_text.text_signature_of(
          self.graph_tokenizer_fn(),
          squad_text.WindowSettings(
              self.flags.max_seq_length, self.doc_stride,
              self.max_query_length, squad_examples.whitespace_code_points()),
          squad_text.SearchSettings(
              self.n_best_size, self.max_answer_length,
              self.version_2_with_negative, self.null_score_diff_threshold))
    return squad_model.serving_input_receiver_fn_builder(
        self.flags.max_seq_length, text_signature)

  def _output_path(self, name):
    return os.path.join(self.flags.output_dir, name)

  def _reuse_recorded_window_flags(self, stored):
    """Each of WINDOW_FLAGS that the command line did not give becomes its
    value in `stored`, the run_info.json of --output_dir (None: none)."""
    for name in WINDOW_FLAGS:
      if stored and name in stored and name not in self.given_window_flags:
        self.window_flags[name] = stored[name]
        logging.info("--%s=%d, the training run's (%s).", name, stored[name],
                     run_info.RECORD_FILE)

  def _read_examples(self, input_file, flag, is_training):
    """The questions of --train_file / --predict_file; refuses none."""
    examples = squad_examples.read_squad_examples(
        input_file, is_training=is_training,
        version_2_with_negative=self.version_2_with_negative)
    if not examples:
      raise cli.UserError("%s=%s holds no questions%s; pass a SQuAD json "
                          "file with articles." % (
                              flag, input_file, " whose answer is found in "
                              "its context" if is_training else ""))
    return examples

  def _predict_results(self, estimator, input_file, num_features,
                       checkpoint_path, for_evaluation=False):
    """RawResults of every feature in `input_file` (logits as float32), in
    batches of --predict_batch_size (`for_evaluation`: --eval_batch_size)."""
    batch_size = (self.flags.eval_batch_size if for_evaluation else
                  self.flags.predict_batch_size)
    all_results = []
    for result in estimator.predict(
        squad_features.input_fn_builder(
            input_file=input_file, seq_length=self.flags.max_seq_length,
            is_training=False, drop_remainder=False),
        checkpoint_path=checkpoint_path, yield_single_examples=True,
        num_batches=-(-num_features // batch_size),
        for_evaluation=for_evaluation):
      all_results.append(squad_predictions.RawResult(
          unique_id=int(result["unique_ids"]),
          start_logits=np.asarray(result["start_logits"], np.float32),
          end_logits=np.asarray(result["end_logits"], np.float32)))
    return all_results

  def _evaluate(self, predictions):
    """The official metrics of `predictions` on --predict_file, written to
    eval_results.json (with SQuAD 2.0 also the predictions at the best
    null threshold); None when the file lacks answers."""
    data = squad_examples.load_squad_data(self.predict_file)
    if not squad_examples.has_answers(data, self.version_2_with_negative):
      logging.info("%s lacks answers for some questions; skipping the "
                   "evaluation (SQuAD 2.0 data needs "
                   "--version_2_with_negative).", self.predict_file)
      return None
    results = self._official_metrics(data, predictions)
    if self.version_2_with_negative:
      squad_predictions.write_json_atomically(
          self._output_path("predictions_best_threshold.json"),
          squad_predictions.predictions_at_threshold(
              predictions.null_odds, predictions.best_non_null,
              results["best_f1_thresh"]))
      logging.info("Best F1 null threshold %.4f; its predictions are in "
                   "predictions_best_threshold.json (pass it as "
                   "--null_score_diff_threshold to predict with it).",
                   results["best_f1_thresh"])
    squad_predictions.write_json_atomically(
        self._output_path("eval_results.json"), results)
    return task.Metrics(results, file_name=None, summaries=None)

  def _official_metrics(self, data, predictions):
    """The official evaluation (v1.1, or v2.0 with the null odds) of
    SquadPredictions on a SQuAD "data" list."""
    if self.version_2_with_negative:
      return squad_metrics.evaluate_v2(data, predictions.predictions,
                                       predictions.null_odds)
    return squad_metrics.evaluate(data, predictions.predictions)
