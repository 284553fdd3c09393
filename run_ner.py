# coding=utf-8
"""Fine-tunes BERT for named-entity recognition on CoNLL-2003, as the paper
ran it (Devlin et al. 2019, Section 5.3 and Table 7).

  * The data are CoNLL-2003's files as distributed (train.txt, valid.txt,
    test.txt, or eng.train, eng.testa, eng.testb) in --data_dir, or files of
    your own in the same format (--train_file, --dev_file, --predict_file:
    a token per line, its tag last, fields split by spaces or tabs), with
    any entity types, tagged IOB1 (CoNLL-2003's original release), IOB2 or
    BIOES (--tag_scheme); see tasks/conll.py.
  * Each word is WordPiece tokenized; its first sub-token carries its label
    and is what the token-level softmax classifies (no CRF). The other
    sub-tokens, [CLS], [SEP] and padding take no part in the loss.
  * "Maximal document context" (--context=document, the default): all
    sentences of a document are read as one text, cut into windows of
    --max_seq_length tokens ([CLS] window [SEP]) started every --doc_stride
    tokens; a word is predicted from the window where its first sub-token
    has the most context (tasks/windows.py, the rule of run_squad.py).
    Training reads every window with all of its words labeled.
    --context=sentence reads each sentence alone, for comparison.
  * The head: `cls/ner/output_weights` [num_labels, width] and
    `cls/ner/output_bias` [num_labels] on BERT's sequence output (what
    Hugging Face's BertForTokenClassification calls `classifier`); the loss
    averages the cross-entropies of all the batch's labeled words, or of
    each window's and then over the windows (--loss_average;
    tasks/token_loss.py).
  * --feature_mode: the paper's feature-based rows of Table 7. BERT is
    frozen (no BERT variable is trained or given optimizer slots) and one of
    its layer combinations feeds a randomly initialized two-layer BiLSTM
    (--lstm_size units per direction) under the same classifier.
  * Scores are conlleval's (entity-level precision, recall and F1, overall
    and per type): eval_results.txt and eval_conlleval.txt for --do_eval on
    the dev file, test_results.txt and test_conlleval.txt for --do_predict
    on the test file when it has tags (also TensorBoard scalars in
    output_dir/eval and output_dir/test); the predictions in CoNLL format
    (token, gold tag, predicted tag per line) in eval_predictions.txt /
    test_predictions.txt, for the official script.

Training, checkpoints, resuming, precision, memory planning, distribution,
export and the output folder's run_info.json (with the label list, the tag
scheme and the feature mode) are the other scripts'. The task lives in
tasks/ner.py.
"""

from absl import flags

from startup import shared_flags
from tasks import conll
from tasks import feature_modes
from tasks import token_loss
from userio import cli

FLAGS = flags.FLAGS


def define_flags(flag_values=flags.FLAGS):
  """Defines the script's flags (from `__main__`, not at import)."""
  flags.DEFINE_string(
      "data_dir", None,
      "Folder with the CoNLL-2003 files: train.txt, valid.txt (or dev.txt) "
      "and test.txt, or the original eng.train, eng.testa, eng.testb.",
      flag_values=flag_values)
  for name, what in (("train_file", "training"), ("dev_file", "--do_eval's"),
                     ("predict_file", "--do_predict's (tags optional)")):
    flags.DEFINE_string(
        name, None, "Your own %s file in CoNLL format, instead of "
        "--data_dir." % what, flag_values=flag_values)
  shared_flags.define_common_flags(
      max_seq_length_default=128, flag_values=flag_values,
      serving_outputs="tag_ids [batch, length] (the label list is in "
      "run_info.json) and tag_probabilities [batch, length, labels]",
      text_inputs="text [batch] (tags per word, with offsets)")
  shared_flags.define_skip_padding_flag(flag_values)
  shared_flags.define_evaluation_flags(
      flag_values, best_metric_default="eval_f1 (conlleval's entity-level F1)")
  flags.adopt_module_key_flags(shared_flags, flag_values=flag_values)
  flags.DEFINE_bool(
      "do_eval", False,
      "Predict the dev file and score it: eval_results.txt, "
      "eval_conlleval.txt, eval_predictions.txt.", flag_values=flag_values)
  flags.DEFINE_integer("eval_batch_size", 8, "Windows per eval batch.",
                       flag_values=flag_values)
  flags.DEFINE_enum(
      "tag_scheme", "iob1", list(conll.TAG_SCHEMES),
      "iob1: CoNLL-2003's original release (entities are I-<type>, B- only "
      "between two entities of one type); iob2: BIO, every entity starts "
      "with B-; bioes: IOBES, S-<type> for one word, else B- ... E-. The "
      "files are checked against it.", flag_values=flag_values)
  flags.DEFINE_enum(
      "loss_average", token_loss.DEFAULT, list(token_loss.LOSS_AVERAGES),
      "word: the loss is the mean cross-entropy over all labeled words of "
      "the batch, as Hugging Face's BertForTokenClassification; window: "
      "each window's mean over its labeled words, averaged over the batch's "
      "windows.", flag_values=flag_values)
  flags.DEFINE_enum(
      "context", "document", list(conll.CONTEXTS),
      "document: a document's sentences are read together in overlapping "
      "windows, each word predicted from the window where it has the most "
      "context (the paper's maximal document context); sentence: each "
      "sentence alone.", flag_values=flag_values)
  flags.DEFINE_integer(
      "doc_stride", None,
      "Tokens between the starts of two windows of a long text; default: "
      "half of a window, (--max_seq_length - 2) // 2.",
      flag_values=flag_values)
  flags.DEFINE_enum(
      "feature_mode", feature_modes.FINE_TUNING,
      list(feature_modes.FEATURE_MODES),
      "none: fine-tune BERT with the token classifier on its last layer. "
      "Otherwise BERT stays frozen and a two-layer BiLSTM reads: embeddings, "
      "second_to_last or last (one layer), sum_last_four / sum_all (a "
      "learned weighted sum of the last four / all encoder layers) or "
      "concat_last_four (Table 7's feature-based rows).",
      flag_values=flag_values)
  flags.DEFINE_integer(
      "lstm_size", 768,
      "With --feature_mode: units per direction of each BiLSTM layer (the "
      "paper: 768).", flag_values=flag_values)


# --help is answered here, before TensorFlow loads (seconds).
cli.answer_help(__name__, define_flags)

# pylint: disable=g-import-not-at-top,wrong-import-position
# Before TensorFlow: it imports TensorFlow without the CPU start-up noise.
from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order

from driver import training
from tasks import ner
from tasks import task as task_lib
# pylint: enable=g-import-not-at-top,wrong-import-position


def main(_, flag_values=FLAGS):
  task = ner.NerTask(
      flag_values.data_dir,
      data_files={task_lib.TRAIN: flag_values.train_file,
                  task_lib.DEV: flag_values.dev_file,
                  task_lib.TEST: flag_values.predict_file},
      tag_scheme=flag_values.tag_scheme, context=flag_values.context,
      doc_stride=flag_values.doc_stride,
      feature_mode=flag_values.feature_mode,
      lstm_size=flag_values.lstm_size,
      loss_average=flag_values.loss_average)
  training.run(task, shared_flags.read(flag_values))


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("output_dir")
  cli.run(main)
