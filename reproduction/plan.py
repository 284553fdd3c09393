# coding=utf-8
"""What reproduce.py runs: tasks, hyperparameter grids, cells, commands.

A cell is one fine-tuning run of run_classifier.py or run_squad.py with one
set of hyperparameters and one seed, in its own output folder. A step is
anything the runner executes (a cell's training, or a follow-up prediction
with a trained cell's checkpoint): its command line, its folder and the
files whose presence means it is done.

The hyperparameter presets are protocols stored in reference_results.json
beside their sources: "paper" (Section 4.1: one batch size and epoch count,
the learning rate chosen on dev), "appendix" (the ranges of Appendix A.3),
"small_models" (Google README's grid for its smaller models) and "custom"
(only what --batch_sizes, --learning_rates and --epochs give). SQuAD always
follows the paper's recipes (Sections 4.2 and 4.3) except under "custom",
and so does SWAG (run_swag.py, Section 4.4). CoNLL-2003 NER (run_ner.py,
Table 7) follows "paper_ner" except under "custom": every restart of every
configuration, fine-tuned, or frozen BERT under a BiLSTM with one of the
six feature modes (a task each).
"""

import collections
import csv
import dataclasses
import io
import json
import os
import random

REFERENCE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                              "reference_results.json")

Grid = collections.namedtuple("Grid", "batch_sizes learning_rates epochs")
NO_GRID = Grid((), (), ())

# Preset -> its protocol in reference_results.json ("custom" has none).
PRESET_PROTOCOLS = {"paper": "paper_glue", "appendix": "paper_appendix",
                    "small_models": "readme_small_models", "custom": None}
# SQuAD's fixed recipes in the paper (Sections 4.2 and 4.3).
SQUAD_PROTOCOLS = {"SQuAD1.1": "paper_squad11", "SQuAD2.0": "paper_squad20"}
# SWAG's fixed recipe in the paper (Section 4.4).
SWAG_PROTOCOL = "paper_swag"
# CoNLL-2003's (Table 7 gives none of its own; see reference_results.json).
NER_PROTOCOL = "paper_ner"

# The published sequence lengths: GLUE at 128 tokens, SQuAD at 384.
GLUE_MAX_SEQ_LENGTH = 128
SQUAD_MAX_SEQ_LENGTH = 384
# run_ner.py's default; the paper does not say what NER's was.
NER_MAX_SEQ_LENGTH = 128

# Tasks with fewer training examples than this get every --seeds seed by
# default (the paper restarted fine-tuning on the small data sets).
SMALL_TASK_EXAMPLES = 10000

TaskSpec = collections.namedtuple("TaskSpec", "name kind metrics")
# The NER tasks: fine-tuning is "CoNLL-2003", a feature mode of run_ner.py
# "CoNLL-2003-<mode>" (Table 7's rows). A "test_" metric is scored on the
# test file and compared with the published test number.
NER_TASK = "CoNLL-2003"
# metrics: what the task reports, the first one selects on dev (the metric
# of the paper's Table 1 for GLUE, F1 for SQuAD).
TASKS = collections.OrderedDict((spec.name, spec) for spec in (
    TaskSpec("MNLI", "glue", ("accuracy",)),
    TaskSpec("QQP", "glue", ("f1", "accuracy")),
    TaskSpec("QNLI", "glue", ("accuracy",)),
    TaskSpec("SST-2", "glue", ("accuracy",)),
    TaskSpec("CoLA", "glue", ("mcc",)),
    TaskSpec("STS-B", "glue", ("spearman", "pearson")),
    TaskSpec("MRPC", "glue", ("f1", "accuracy")),
    TaskSpec("RTE", "glue", ("accuracy",)),
    TaskSpec("WNLI", "glue", ("accuracy",)),
    TaskSpec("SQuAD1.1", "squad", ("f1", "exact_match")),
    TaskSpec("SQuAD2.0", "squad", ("f1", "exact_match")),
    TaskSpec("SWAG", "swag", ("accuracy",)),
    TaskSpec("CoNLL-2003", "ner", ("f1", "test_f1")),
) + tuple(TaskSpec(NER_TASK + "-" + mode, "ner", ("f1",)) for mode in (
    "embeddings", "second_to_last", "last", "sum_last_four",
    "concat_last_four", "sum_all")))
# --tasks=all: the tasks of the paper's Tables 1 to 3 (WNLI was left out
# there; its submission was the majority class). SWAG (Table 4) is asked
# for by name, the NER tasks (Table 7) by name or as table7.
ALL_TASKS = tuple(name for name in TASKS
                  if name not in ("WNLI", "SWAG") and TASKS[name].kind != "ner")
# --tasks=table7: the NER rows of Table 7.
TABLE7_TASKS = tuple(name for name in TASKS if TASKS[name].kind == "ner")

SQUAD_FILES = {
    "SQuAD1.1": ("train-v1.1.json", "dev-v1.1.json"),
    "SQuAD2.0": ("train-v2.0.json", "dev-v2.0.json"),
}


@dataclasses.dataclass(frozen=True)
class Cell:
  """One fine-tuning run: a task, its hyperparameters and a seed."""
  task: str
  batch_size: int
  learning_rate: float
  epochs: float
  order: str
  seed: int

  @property
  def config(self):
    """The hyperparameters without the seed: cells that restart each other."""
    return (self.task, self.batch_size, self.learning_rate, self.epochs,
            self.order)

  @property
  def config_name(self):
    return "bs%d_lr%g_ep%g_%s" % (self.batch_size, self.learning_rate,
                                  self.epochs, self.order)

  @property
  def name(self):
    return "%s/%s_seed%d" % (self.task, self.config_name, self.seed)

  def hparams(self):
    return {"task": self.task, "batch_size": self.batch_size,
            "learning_rate": self.learning_rate, "epochs": self.epochs,
            "train_example_order": self.order, "seed": self.seed}


@dataclasses.dataclass(frozen=True)
class Step:
  """A command the runner executes in `output_dir`.

  `args` is the script and its flags (the interpreter is the runner's);
  the step is done when every file of `done_files` exists in output_dir and
  the command recorded there is `args`.
  """
  name: str
  args: tuple
  output_dir: str
  done_files: tuple


@dataclasses.dataclass(frozen=True)
class Model:
  """The checkpoint's files and casing."""
  bert_config_file: str
  vocab_file: str
  init_checkpoint: str
  do_lower_case: bool


@dataclasses.dataclass(frozen=True)
class Setup:
  """Everything the commands need besides a cell's own hyperparameters.

  data: task -> GLUE data folder, (train file, predict file) for SQuAD,
    or the CoNLL-2003 folder for NER.
  """
  root: str
  model: Model
  data: dict
  output_dir: str
  max_seq_length: int
  squad_max_seq_length: int
  extra_flags: tuple
  ner_max_seq_length: int = NER_MAX_SEQ_LENGTH
  ner_tag_scheme: str = "iob1"


def load_references(path=REFERENCE_FILE):
  """reference_results.json: published numbers and protocols."""
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def protocol_grid(references, protocol):
  """The Grid of a protocol of reference_results.json (None: empty)."""
  if protocol is None:
    return NO_GRID
  entry = references["protocols"][protocol]
  return Grid(tuple(entry["batch_sizes"]), tuple(entry["learning_rates"]),
              tuple(float(e) for e in entry["epochs"]))


def grid_for(task, preset, overrides, references):
  """The Grid a task runs: the preset's (SQuAD: the paper's), overridden.

  overrides: Grid whose non-empty fields replace the preset's.
  """
  protocol = PRESET_PROTOCOLS[preset]
  if TASKS[task].kind == "squad" and preset != "custom":
    protocol = SQUAD_PROTOCOLS[task]
  if TASKS[task].kind == "swag" and preset != "custom":
    protocol = SWAG_PROTOCOL
  if TASKS[task].kind == "ner" and preset != "custom":
    protocol = NER_PROTOCOL
  base = protocol_grid(references, protocol)
  return Grid(*(tuple(new) or old for new, old in zip(overrides, base)))


def cells_for(task, grid, seeds, orders):
  """The cells of one task, in grid order, seeds innermost."""
  if TASKS[task].kind in ("squad", "ner"):
    # run_squad.py and run_ner.py always shuffle their training features.
    orders = ("shuffled",)
  return [Cell(task, b, lr, ep, order, seed)
          for b in grid.batch_sizes for lr in grid.learning_rates
          for ep in grid.epochs for order in orders for seed in seeds]


def cell_dir(output_dir, cell):
  return os.path.join(output_dir, "cells", cell.name)


def _model_flags(model):
  return ["--vocab_file=" + model.vocab_file,
          "--bert_config_file=" + model.bert_config_file,
          "--init_checkpoint=" + model.init_checkpoint,
          "--do_lower_case=%s" % str(model.do_lower_case).lower()]


def _cell_hparam_flags(cell):
  return ["--train_batch_size=%d" % cell.batch_size,
          "--learning_rate=%g" % cell.learning_rate,
          "--num_train_epochs=%g" % cell.epochs, "--seed=%d" % cell.seed,
          "--do_train=true", "--keep_checkpoint_max=1"]


def cell_step(setup, cell):
  """The Step that trains and evaluates `cell`."""
  output_dir = cell_dir(setup.output_dir, cell)
  if TASKS[cell.task].kind == "glue":
    args = [os.path.join(setup.root, "run_classifier.py"),
            "--task_name=" + cell.task, "--data_dir=" + setup.data[cell.task],
            "--do_eval=true", "--max_seq_length=%d" % setup.max_seq_length,
            "--train_example_order=" + cell.order]
    done = ("eval_results.txt",)
  elif TASKS[cell.task].kind == "swag":
    # run_swag.py's sequence length (128): the paper gives none for SWAG.
    args = [os.path.join(setup.root, "run_swag.py"),
            "--data_dir=" + setup.data[cell.task], "--do_eval=true",
            "--train_example_order=" + cell.order]
    done = ("eval_results.txt",)
  elif TASKS[cell.task].kind == "ner":
    args = ner_args(setup, cell.task)
    done = ("eval_results.txt", "test_results.txt")
  else:
    train_file, predict_file = setup.data[cell.task]
    args = [os.path.join(setup.root, "run_squad.py"),
            "--train_file=" + train_file, "--predict_file=" + predict_file,
            "--do_predict=true",
            "--max_seq_length=%d" % setup.squad_max_seq_length,
            "--version_2_with_negative=%s" % str(
                cell.task == "SQuAD2.0").lower()]
    done = ("eval_results.json",)
  args += (_model_flags(setup.model) + _cell_hparam_flags(cell) +
           ["--output_dir=" + output_dir] + list(setup.extra_flags))
  return Step(cell.name, tuple(args), output_dir, done)


def ner_feature_mode(task):
  """run_ner.py's --feature_mode of a NER task ("none": fine-tuning)."""
  return task[len(NER_TASK) + 1:] or "none"


def ner_args(setup, task):
  """run_ner.py and its task flags: dev and test scored, document context."""
  return [os.path.join(setup.root, "run_ner.py"),
          "--data_dir=" + setup.data[task],
          "--tag_scheme=" + setup.ner_tag_scheme, "--do_eval=true",
          "--do_predict=true", "--context=document",
          "--feature_mode=" + ner_feature_mode(task),
          "--max_seq_length=%d" % setup.ner_max_seq_length]


def prediction_step(setup, cell, checkpoint, task_name, submission_name,
                    evaluate=False):
  """Predicts GLUE's test set (and optionally the dev set) with `checkpoint`.

  The fine-tuned weights come in through --init_checkpoint into a folder of
  their own inside the cell's, so MNLI's checkpoint can also serve
  MNLI-mm's mismatched sets.
  """
  output_dir = os.path.join(cell_dir(setup.output_dir, cell),
                            "predict_" + task_name)
  model = dataclasses.replace(setup.model, init_checkpoint=checkpoint)
  args = [os.path.join(setup.root, "run_classifier.py"),
          "--task_name=" + task_name, "--data_dir=" + setup.data[cell.task],
          "--do_predict=true", "--do_eval=%s" % str(evaluate).lower(),
          "--max_seq_length=%d" % setup.max_seq_length,
          "--output_dir=" + output_dir] + _model_flags(model) + list(
              setup.extra_flags)
  done = (submission_name + ".tsv",) + (
      ("eval_results.txt",) if evaluate else ())
  return Step("%s/predict_%s" % (cell.name, task_name), tuple(args),
              output_dir, done)


# ------------------------------------------------------------ data subsets


def _write_if_changed(path, data):
  """Writes bytes `data` to `path` (temporary file + rename) unless equal.

  Unchanged files keep their content hash, so the feature files the
  scripts made from them stay valid.
  """
  if os.path.isfile(path):
    with open(path, "rb") as f:
      if f.read() == data:
        return
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path + ".tmp", "wb") as f:
    f.write(data)
  os.replace(path + ".tmp", path)


def _link_other_files(source_dir, target_dir, train_file):
  """Links every file of `source_dir` but `train_file` into `target_dir`
  (made if missing); existing links stay."""
  os.makedirs(target_dir, exist_ok=True)
  for name in sorted(os.listdir(source_dir)):
    link = os.path.join(target_dir, name)
    if name != train_file and not os.path.lexists(link):
      os.symlink(os.path.abspath(os.path.join(source_dir, name)), link)


def sample_lines(lines, count, seed=0):
  """`count` of `lines` drawn at random (fixed seed), in their file order."""
  if count >= len(lines):
    return list(lines)
  keep = sorted(random.Random(seed).sample(range(len(lines)), count))
  return [lines[i] for i in keep]


def subset_glue_dir(source_dir, target_dir, train_file, has_header, count):
  """A data folder whose train file has `count` random rows of the source.

  The other files of `source_dir` are linked, not copied. Rows are drawn
  with a fixed seed, the same for every cell, and keep their file order.
  """
  _link_other_files(source_dir, target_dir, train_file)
  with open(os.path.join(source_dir, train_file), "rb") as f:
    lines = f.read().splitlines(keepends=True)
  header = lines[:1] if has_header else []
  rows = [line for line in lines[len(header):] if line.strip()]
  _write_if_changed(os.path.join(target_dir, train_file),
                    b"".join(header + sample_lines(rows, count)))


def subset_csv_dir(source_dir, target_dir, train_file, count):
  """`subset_glue_dir` for comma-separated files with a header (SWAG's),
  whose quoted fields may hold line breaks: rows are parsed as CSV, drawn
  the same way and written back as CSV."""
  _link_other_files(source_dir, target_dir, train_file)
  with open(os.path.join(source_dir, train_file), encoding="utf-8",
            newline="") as f:
    rows = [row for row in csv.reader(f) if row]
  text = io.StringIO()
  csv.writer(text, lineterminator="\n").writerows(
      rows[:1] + sample_lines(rows[1:], count))
  _write_if_changed(os.path.join(target_dir, train_file),
                    text.getvalue().encode("utf-8"))


def subset_conll_dir(source_dir, target_dir, train_file, count):
  """A CoNLL-2003 folder whose training file holds whole documents from its
  start up to `count` sentences (at least one document); the other files
  are linked."""
  _link_other_files(source_dir, target_dir, train_file)
  with open(os.path.join(source_dir, train_file), "rb") as f:
    lines = f.read().splitlines(keepends=True)
  kept, sentences, in_sentence = [], 0, False
  for line in lines:
    if line.startswith(b"-DOCSTART-") and kept and sentences >= count:
      break
    if line.strip() and not line.startswith(b"-DOCSTART-"):
      sentences += not in_sentence
      in_sentence = True
    else:
      in_sentence = False
    kept.append(line)
  _write_if_changed(os.path.join(target_dir, train_file), b"".join(kept))


def split_squad_articles(dataset, num_train_articles, num_eval_articles=None):
  """(train, eval) SQuAD dicts: the first `num_train_articles` articles,
  and the next `num_eval_articles` (None: all the rest)."""
  articles = dataset["data"]
  if not 0 < num_train_articles < len(articles):
    raise ValueError("%d training articles asked for, but the file has %d "
                     "articles; pick a number between 1 and %d." %
                     (num_train_articles, len(articles), len(articles) - 1))
  left = len(articles) - num_train_articles
  if num_eval_articles is None:
    num_eval_articles = left
  if not 0 < num_eval_articles <= left:
    raise ValueError("%d evaluation articles asked for, but %d articles are "
                     "left after the training ones; pick a number between 1 "
                     "and %d." % (num_eval_articles, left, left))
  version = dataset.get("version", "1.1")
  return ({"version": version, "data": articles[:num_train_articles]},
          {"version": version,
           "data": articles[num_train_articles:
                            num_train_articles + num_eval_articles]})


def first_squad_questions(dataset, count):
  """The dataset cut after its first `count` questions (file order)."""
  articles = []
  left = count
  for article in dataset["data"]:
    paragraphs = []
    for paragraph in article["paragraphs"]:
      if left <= 0:
        break
      qas = paragraph["qas"][:left]
      left -= len(qas)
      paragraphs.append(dict(paragraph, qas=qas))
    if paragraphs:
      articles.append(dict(article, paragraphs=paragraphs))
  return dict(dataset, data=articles)


def write_squad_json(path, dataset):
  _write_if_changed(path, json.dumps(dataset).encode("utf-8"))


def count_squad_questions(dataset):
  return sum(len(p["qas"]) for a in dataset["data"] for p in a["paragraphs"])
