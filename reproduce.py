# coding=utf-8
"""Reproduces BERT's published fine-tuning results with one command.

  python reproduce.py --bert_dir=$BERT --glue_dir=$GLUE --squad_dir=$SQUAD \
    --tasks=all --output_dir=/tmp/reproduce

(add --swag_dir=$SWAG --tasks=all,SWAG for the paper's Table 4, and
--conll_dir=$CONLL --tasks=table7 for CoNLL-2003 NER, Table 7)

runs run_classifier.py, run_squad.py, run_swag.py and run_ner.py (as child
processes, with their flags) over the published protocol of each task,
then writes results.md,
results.json, TensorBoard HParams summaries and a GLUE test-server
submission (glue_submission.zip) into --output_dir. Run again with the same
flags, it skips finished cells and resumes interrupted ones. See
docs/reproduce.md.
"""

import datetime
import json
import os
import platform
import shlex
import signal
import sys

from absl import app
from absl import flags

from reproduction import plan
from reproduction import report
from reproduction import scheduler
from startup import shared_flags
from userio import cli

ROOT = os.path.dirname(os.path.abspath(__file__))

FLAGS = flags.FLAGS


def define_flags():
  """Defines the command's flags (called from `__main__`, not at import)."""
  flags.DEFINE_string(
      "bert_dir", None,
      "Folder of a model in Google's layout: bert_config.json, vocab.txt and "
      "bert_model.ckpt. Its name gives the casing (uncased_... or cased_...).")
  flags.DEFINE_string("bert_config_file", None,
                      "Instead of <bert_dir>/bert_config.json.")
  flags.DEFINE_string("vocab_file", None, "Instead of <bert_dir>/vocab.txt.")
  flags.DEFINE_string(
      "init_checkpoint", None,
      "Instead of <bert_dir>/bert_model.ckpt; an empty value trains from "
      "random weights (for smoke runs only).")
  flags.DEFINE_bool(
      "do_lower_case", None,
      "Lowercase the text; default: from the model folder's name (uncased or "
      "cased), required when the name says neither.")
  flags.DEFINE_string("glue_dir", None,
                      "GLUE data as its download script writes it: one "
                      "folder per task (CoLA, MNLI, MRPC, ...).")
  flags.DEFINE_string(
      "squad_dir", None,
      "SQuAD files: train-v1.1.json, dev-v1.1.json, train-v2.0.json, "
      "dev-v2.0.json (only those of the tasks asked for).")
  flags.DEFINE_string(
      "swag_dir", None,
      "SWAG's files as released (train.csv, val.csv, test.csv), for "
      "--tasks=SWAG (run_swag.py with the paper's recipe).")
  flags.DEFINE_string(
      "conll_dir", None,
      "CoNLL-2003 as distributed (train.txt, valid.txt, test.txt or "
      "eng.train, eng.testa, eng.testb), for the NER tasks.")
  flags.DEFINE_enum("conll_tag_scheme", "iob1", ["iob1", "iob2"],
                    "The tags of --conll_dir: iob1 (the original release) or "
                    "iob2 (BIO).")
  flags.DEFINE_integer("ner_max_seq_length", plan.NER_MAX_SEQ_LENGTH,
                       "run_ner.py's window length (the paper does not give "
                       "NER's).")
  flags.DEFINE_list(
      "tasks", ["all"],
      "Tasks to run: all (the tasks of the paper's Tables 1 to 3), table7 "
      "(CoNLL-2003 NER: fine-tuning and the six feature-based rows) or some "
      "of " + ", ".join(plan.TASKS) + ".")
  flags.DEFINE_enum("preset", "paper", list(plan.PRESET_PROTOCOLS),
                    "Hyperparameter grid: paper, appendix, small_models or "
                    "custom (see docs/reproduce.md).")
  flags.DEFINE_list("batch_sizes", [],
                    "Replace the preset's batch sizes, e.g. 32.")
  flags.DEFINE_list("learning_rates", [],
                    "Replace the preset's learning rates, e.g. 2e-5,3e-5.")
  flags.DEFINE_list("epochs", [], "Replace the preset's epoch counts, e.g. 3.")
  flags.DEFINE_list(
      "seeds", ["12345"],
      "Fine-tuning seeds: random restarts (different data order, dropout and "
      "classifier initialization) of every configuration of the small tasks.")
  flags.DEFINE_enum(
      "restart_tasks", "small", ["small", "all"],
      "Which tasks run every seed: small (fewer than %d training examples, "
      "the paper's random restarts) or all; the others use the first seed."
      % plan.SMALL_TASK_EXAMPLES)
  flags.DEFINE_list(
      "train_example_orders", ["shuffled"],
      "run_classifier.py's --train_example_order values to run: shuffled, "
      "file or both (a grid dimension for comparing them).")
  flags.DEFINE_integer(
      "max_train_examples", None,
      "Train on this many examples per task (GLUE: drawn at random with a "
      "fixed seed; SQuAD: the first questions); marks the run as reduced.")
  flags.DEFINE_integer("max_seq_length", plan.GLUE_MAX_SEQ_LENGTH,
                       "GLUE sequence length (published: %d)." %
                       plan.GLUE_MAX_SEQ_LENGTH)
  flags.DEFINE_integer("squad_max_seq_length",
                       plan.SQUAD_MAX_SEQ_LENGTH,
                       "SQuAD sequence length (published: %d)." %
                       plan.SQUAD_MAX_SEQ_LENGTH)
  flags.DEFINE_integer(
      "squad_split_articles", None,
      "When only the dev files exist: train on the first N articles of each "
      "dev file and evaluate on the rest; marks the run as reduced.")
  flags.DEFINE_string(
      "extra_flags", "",
      "More flags for every script run, e.g. \"--precision=bf16 "
      "--micro_batch_size=auto\"; marks the run as reduced.")
  flags.DEFINE_list(
      "devices", None,
      "GPU indices to run cells on, one cell per GPU at a time, or cpu (one "
      "cell at a time); default: CUDA_VISIBLE_DEVICES, else nvidia-smi's "
      "GPUs, else cpu.")
  flags.DEFINE_bool("glue_submission", True,
                    "Predict GLUE's test sets with each task's selected model "
                    "and zip the files for the GLUE server.")
  flags.DEFINE_string(
      "reference_model", None,
      "Published model to compare with (BERT-Base, BERT-Large, BERT-Tiny, "
      "...); default: the one with the config's layers and width, else "
      "BERT-Base.")
  flags.DEFINE_bool("dry_run", False,
                    "Print the cells' commands and exit without running them.")
  flags.DEFINE_string("output_dir", None,
                      "Where cells, data subsets and results go.")


# ------------------------------------------------------------------- model


def _casing_from_name(folder):
  """True (uncased), False (cased) or None from a model folder's name."""
  name = os.path.basename(os.path.normpath(folder)).lower()
  if "uncased" in name:
    return True
  if name.startswith("cased") or "_cased" in name or "-cased" in name:
    return False
  return None


def _model_from_flags():
  """The Model the flags describe; raises ValueError naming a bad flag."""
  bert_dir = FLAGS.bert_dir or ""
  def pick(value, name, flag):
    if value is not None:
      return value
    if not bert_dir:
      raise ValueError("Set --bert_dir (or --%s)." % flag)
    return os.path.join(bert_dir, name)
  model = plan.Model(
      os.path.abspath(pick(FLAGS.bert_config_file, "bert_config.json",
                           "bert_config_file")),
      os.path.abspath(pick(FLAGS.vocab_file, "vocab.txt", "vocab_file")),
      pick(FLAGS.init_checkpoint, "bert_model.ckpt", "init_checkpoint"),
      FLAGS.do_lower_case)
  for path, flag in ((model.bert_config_file, "bert_config_file"),
                     (model.vocab_file, "vocab_file")):
    if not os.path.isfile(path):
      raise ValueError("%s does not exist; check --bert_dir or --%s." %
                       (path, flag))
  checkpoint = model.init_checkpoint
  if checkpoint:
    checkpoint = os.path.abspath(checkpoint)
    if not os.path.isfile(checkpoint + ".index"):
      raise ValueError("%s.index does not exist; check --bert_dir or "
                       "--init_checkpoint." % checkpoint)
  lower = model.do_lower_case
  if lower is None:
    lower = _casing_from_name(os.path.dirname(checkpoint) or bert_dir)
  if lower is None:
    raise ValueError("Cannot tell the casing from the model folder's name; "
                     "pass --do_lower_case=true or --do_lower_case=false.")
  # pylint: disable=g-import-not-at-top
  # Before TensorFlow: it imports TensorFlow without the CPU start-up noise.
  from userio import quiet_tensorflow  # pylint: disable=unused-import
  import tokenization
  # pylint: enable=g-import-not-at-top
  tokenization.validate_case_matches_checkpoint(lower, checkpoint)
  tokenization.validate_case_matches_vocab(
      lower, tokenization.load_vocab(model.vocab_file),
      "--vocab_file=" + model.vocab_file)
  return plan.Model(model.bert_config_file, model.vocab_file,
                              checkpoint, lower)


def _model_description(model, config):
  text = "L=%d, H=%d, A=%d (%s), %s" % (
      config["num_hidden_layers"], config["hidden_size"],
      config["num_attention_heads"], model.bert_config_file,
      "uncased" if model.do_lower_case else "cased")
  return text + (", " + model.init_checkpoint if model.init_checkpoint
                 else ", random initialization")


# ------------------------------------------------------------------- tasks


def _check_lengths(tasks, config, config_file):
  """Refuses a sequence length flag of the chosen tasks beyond the model's
  position embeddings, which every cell of those tasks would fail on."""
  # run_swag.py runs at its own default length (plan.cell_step).
  flag_of_kind = {"glue": "max_seq_length", "ner": "ner_max_seq_length",
                  "squad": "squad_max_seq_length"}
  most = config["max_position_embeddings"]
  # A --max_seq_length in --extra_flags comes last on every cell's command
  # line, so the scripts take it instead.
  given = [arg.split("=", 1)[1] for arg in shlex.split(FLAGS.extra_flags)
           if arg.startswith("--max_seq_length=")]
  for task in tasks:
    flag = flag_of_kind.get(plan.TASKS[task].kind)
    if flag is None:
      continue
    if given:
      flag = "extra_flags's --max_seq_length"
      try:
        value = int(given[-1])
      except ValueError:
        raise ValueError("--extra_flags: --max_seq_length=%s is not a whole "
                         "number of tokens." % given[-1]) from None
    else:
      value = FLAGS[flag].value
    if value > most:
      raise ValueError(
          "--%s=%d is longer than the model's position embeddings "
          "(max_position_embeddings=%d in %s) that %s runs with; lower it "
          "to at most %d." % (flag, value, most, config_file, task, most))


def _tasks_from_flags():
  names = {name.lower(): name for name in plan.TASKS}
  tasks = []
  for entry in FLAGS.tasks:
    if entry.lower() == "all":
      tasks += plan.ALL_TASKS
    elif entry.lower() == "table7":
      tasks += plan.TABLE7_TASKS
    elif entry.lower() in names:
      tasks.append(names[entry.lower()])
    else:
      raise ValueError("--tasks: unknown task %r; choose all or some of %s."
                       % (entry, ", ".join(plan.TASKS)))
  return list(dict.fromkeys(tasks))


def _processor(task):
  from tasks import glue  # pylint: disable=g-import-not-at-top
  return glue.PROCESSORS[task.lower()]()


def _glue_data(task, output_dir):
  """(data folder the cells read, training examples in the task's file).

  Reading the files here checks every line before anything runs.
  """
  if not FLAGS.glue_dir:
    raise ValueError("--tasks includes %s: set --glue_dir." % task)
  source = os.path.join(FLAGS.glue_dir, task)
  processor = _processor(task)
  num_train = len(processor.get_train_examples(source))
  processor.get_dev_examples(source)
  if FLAGS.max_train_examples is None:
    return os.path.abspath(source), num_train
  target = os.path.join(output_dir, "data", task)
  plan.subset_glue_dir(
      source, target, processor.file_names["train"],
      processor.layouts["train"].has_header, FLAGS.max_train_examples)
  return os.path.abspath(target), num_train


def _swag_data(task, output_dir):
  """(data folder the cells read, training questions in train.csv).

  Reading the files here checks every line before anything runs.
  """
  from tasks import swag  # pylint: disable=g-import-not-at-top
  if not FLAGS.swag_dir:
    raise ValueError("--tasks includes %s: set --swag_dir." % task)
  source = FLAGS.swag_dir
  num_train = len(swag.read_examples(swag.data_file(source, "train"),
                                     "train", needs_label=True))
  swag.read_examples(swag.data_file(source, "dev"), "dev", needs_label=True)
  if FLAGS.max_train_examples is None:
    return os.path.abspath(source), num_train
  target = os.path.join(output_dir, "data", task)
  plan.subset_csv_dir(source, target, swag.FILE_NAMES["train"],
                      FLAGS.max_train_examples)
  return os.path.abspath(target), num_train


def _read_json(path):
  if not os.path.isfile(path):
    raise ValueError("%s does not exist; check --squad_dir." % path)
  with open(path, encoding="utf-8") as f:
    try:
      return json.load(f)
    except ValueError as e:
      raise ValueError("%s is not valid JSON (%s)." % (path, e)) from None


def _squad_data(task, output_dir):
  """((train file, predict file), training questions) for a SQuAD task."""
  if not FLAGS.squad_dir:
    raise ValueError("--tasks includes %s: set --squad_dir." % task)
  train_name, dev_name = plan.SQUAD_FILES[task]
  dev_file = os.path.abspath(os.path.join(FLAGS.squad_dir, dev_name))
  folder = os.path.join(output_dir, "data", task)
  if FLAGS.squad_split_articles:
    train, dev = plan.split_squad_articles(
        _read_json(dev_file), FLAGS.squad_split_articles)
    dev_file = os.path.join(folder, "eval.json")
    plan.write_squad_json(dev_file, dev)
  else:
    train_file = os.path.join(FLAGS.squad_dir, train_name)
    train = _read_json(train_file)
    _read_json(dev_file)
  num_train = plan.count_squad_questions(train)
  if FLAGS.squad_split_articles or FLAGS.max_train_examples is not None:
    if FLAGS.max_train_examples is not None:
      train = plan.first_squad_questions(train,
                                                   FLAGS.max_train_examples)
    train_file = os.path.join(folder, "train.json")
    plan.write_squad_json(train_file, train)
  return (os.path.abspath(train_file), dev_file), num_train


def _conll_data(output_dir):
  """(CoNLL-2003 folder the cells read, training sentences), every file
  read and checked here before anything runs."""
  from tasks import conll  # pylint: disable=g-import-not-at-top
  if not FLAGS.conll_dir:
    raise ValueError("--tasks includes a CoNLL-2003 task: set --conll_dir.")
  sentences = {}
  for set_type in conll.DATA_FILES:
    path = conll.find_data_file(FLAGS.conll_dir, set_type)
    documents, _ = conll.read_file(path, FLAGS.conll_tag_scheme)
    sentences[set_type] = (path, documents)
  path, documents = sentences["train"]
  num_train = len(conll.sentences_of(documents))
  if FLAGS.max_train_examples is None:
    return os.path.abspath(FLAGS.conll_dir), num_train
  target = os.path.join(output_dir, "data", plan.NER_TASK)
  plan.subset_conll_dir(FLAGS.conll_dir, target, os.path.basename(path),
                        FLAGS.max_train_examples)
  return os.path.abspath(target), num_train


# -------------------------------------------------------------------- grid


def _numbers(values, kind, flag):
  try:
    return tuple(kind(value) for value in values)
  except ValueError:
    raise ValueError("--%s=%s: expected numbers, e.g. --%s=%s." % (
        flag, ",".join(values), flag,
        {"seeds": "1,2,3", "batch_sizes": "16,32", "epochs": "3",
         "learning_rates": "2e-5,3e-5"}[flag])) from None


def _grid_overrides():
  return plan.Grid(
      _numbers(FLAGS.batch_sizes, int, "batch_sizes"),
      _numbers(FLAGS.learning_rates, float, "learning_rates"),
      _numbers(FLAGS.epochs, float, "epochs"))


def _check_grid(task, grid):
  missing = [name for name, values in zip(grid._fields, grid) if not values]
  if missing:
    raise ValueError("--preset=%s gives %s no %s; set --%s." % (
        FLAGS.preset, task, " or ".join(missing), "/--".join(missing)))


def _orders():
  allowed = shared_flags.TRAIN_EXAMPLE_ORDERS
  for order in FLAGS.train_example_orders:
    if order not in allowed:
      raise ValueError("--train_example_orders: %r is not one of %s." % (
          order, ", ".join(allowed)))
  return tuple(dict.fromkeys(FLAGS.train_example_orders))


def _cells(tasks, num_train, references):
  """All training cells, task by task; seeds per the restart rule."""
  seeds = _numbers(FLAGS.seeds, int, "seeds")
  if not seeds:
    raise ValueError("--seeds is empty; give at least one seed.")
  overrides = _grid_overrides()
  cells = []
  for task in tasks:
    grid = plan.grid_for(task, FLAGS.preset, overrides, references)
    _check_grid(task, grid)
    # The paper's NER numbers are means of 5 restarts (Table 7).
    restart = (FLAGS.restart_tasks == "all" or
               num_train[task] < plan.SMALL_TASK_EXAMPLES or
               plan.TASKS[task].kind == "ner")
    cells += plan.cells_for(task, grid,
                                      seeds if restart else seeds[:1],
                                      _orders())
  return cells


def _reduced_notes(tasks, model, references):
  """What makes this run differ from the published protocol."""
  notes = []
  overrides = _grid_overrides()
  for task in tasks:
    base = plan.grid_for(task, FLAGS.preset,
                                   plan.NO_GRID, references)
    used = plan.grid_for(task, FLAGS.preset, overrides, references)
    if FLAGS.preset == "custom":
      notes.append("%s: custom grid %s (no published protocol)" % (
          task, _grid_text(used)))
    elif used != base:
      notes.append("%s: grid %s instead of the published %s" % (
          task, _grid_text(used), _grid_text(base)))
  if FLAGS.max_train_examples is not None:
    notes.append("training sets cut to %d examples" %
                 FLAGS.max_train_examples)
  if FLAGS.max_seq_length != plan.GLUE_MAX_SEQ_LENGTH:
    notes.append("GLUE sequence length %d (published: %d)" % (
        FLAGS.max_seq_length, plan.GLUE_MAX_SEQ_LENGTH))
  if FLAGS.squad_max_seq_length != plan.SQUAD_MAX_SEQ_LENGTH:
    notes.append("SQuAD sequence length %d (published: %d)" % (
        FLAGS.squad_max_seq_length, plan.SQUAD_MAX_SEQ_LENGTH))
  if FLAGS.squad_split_articles:
    notes.append("SQuAD trained on the first %d articles of the dev file "
                 "and evaluated on the rest, not trained on the training "
                 "file and evaluated on all of dev" %
                 FLAGS.squad_split_articles)
  if not model.init_checkpoint:
    notes.append("no pretrained checkpoint: random initialization")
  if FLAGS.extra_flags:
    notes.append("extra flags for every script: " + FLAGS.extra_flags)
  return notes


def _grid_text(grid):
  return "batch {%s}, learning rate {%s}, epochs {%s}" % tuple(
      ", ".join("%g" % v for v in values) for values in grid)


# ----------------------------------------------------------------- running


def _check_devices():
  """Refuses a --devices entry that is neither cpu nor a GPU as
  CUDA_VISIBLE_DEVICES names one (an index, or a GPU-/MIG- UUID)."""
  for device in FLAGS.devices or ():
    if not (device == scheduler.CPU or device.isdigit() or
            device.startswith(("GPU-", "MIG-"))):
      raise ValueError("--devices=%s: %r is not a GPU index (0, 1, ...) nor "
                       "cpu; pass e.g. --devices=0,1 or --devices=cpu." % (
                           ",".join(FLAGS.devices), device))


def _devices():
  if not FLAGS.devices:
    return scheduler.detect_devices()
  return list(dict.fromkeys(FLAGS.devices))


def _log(message):
  print("reproduce: " + message, flush=True)


def _cell_metrics(cells, steps, outcomes):
  """cell name -> metrics, for the cells whose step is done."""
  metrics = {}
  for cell, step in zip(cells, steps):
    if outcomes[step.name].status in ("done", "skipped"):
      metrics[cell.name] = report.read_cell_metrics(
          cell, step.output_dir)
  return metrics


def _prediction_steps(setup, cells, summaries):
  """Test-set predictions of each GLUE task's selected cell.

  MNLI's model also predicts (and evaluates) MNLI-mm's mismatched sets.
  Returns [(step, task its files are for)].
  """
  from checkpoints import checkpoint_checks  # pylint: disable=g-import-not-at-top
  by_name = {cell.name: cell for cell in cells}
  steps = []
  for task, summary in summaries.items():
    cell = by_name.get(summary["selected_cell"])
    if cell is None or plan.TASKS[cell.task].kind != "glue":
      continue
    checkpoint = checkpoint_checks.latest_checkpoint(
        plan.cell_dir(setup.output_dir, cell))
    names = [(cell.task, False)] + ([("MNLI-mm", True)]
                                    if cell.task == "MNLI" else [])
    for task_name, evaluate in names:
      processor = _processor(task_name)
      test_file = processor.get_data_files(setup.data[cell.task], "test")[0]
      if checkpoint and os.path.isfile(test_file):
        steps.append(plan.prediction_step(
            setup, cell, checkpoint, task_name, processor.submission_name,
            evaluate))
  return steps


def _submission(steps, outcomes, output_dir):
  """Zips the finished prediction steps' submission files."""
  from tasks import glue  # pylint: disable=g-import-not-at-top
  files = {}
  for step in steps:
    if outcomes[step.name].status in ("done", "skipped"):
      name = step.done_files[0]
      files[name] = os.path.join(step.output_dir, name)
  expected = [p.submission_name + ".tsv"
              for p in (c() for c in glue.PROCESSORS.values())
              if p.submission_name] + ["AX.tsv"]
  zip_path = os.path.join(output_dir, "glue_submission.zip")
  if files:
    report.write_submission_zip(zip_path, files)
  return {"zip": zip_path if files else None, "files": sorted(files),
          "missing": [n for n in dict.fromkeys(expected) if n not in files]}


def _cells_info(cells, steps, outcomes, metrics, python):
  info = []
  for cell, step in zip(cells, steps):
    outcome = outcomes[step.name]
    info.append({"name": cell.name, "hparams": cell.hparams(),
                 "command": " ".join(shlex.quote(a)
                                     for a in [python] + list(step.args)),
                 "status": outcome.status, "exit_status": outcome.exit_status,
                 "last_stderr_line": outcome.last_stderr_line,
                 "wall_seconds": outcome.wall_seconds,
                 "metrics": metrics.get(cell.name)})
  return info


def run(setup, cells, references, reference_model, description, notes,
        devices, python=sys.executable, stop_requested=None):
  """Runs the grid and the predictions; writes and returns the results.

  `stop_requested`: see scheduler.run_steps.
  """
  steps = [plan.cell_step(setup, cell) for cell in cells]
  outcomes = scheduler.run_steps(steps, python, devices, log=_log,
                                 stop_requested=stop_requested)
  metrics = _cell_metrics(cells, steps, outcomes)
  summaries = {}
  for task in dict.fromkeys(cell.task for cell in cells):
    summaries[report.result_task(task)] = (
        report.summarize_task(
            task, [c for c in cells if c.task == task], metrics))
  submission = None
  # A run without GLUE tasks (SQuAD alone) has nothing to submit.
  if FLAGS.glue_submission and any(
      plan.TASKS[cell.task].kind == "glue" for cell in cells):
    predictions = _prediction_steps(setup, cells, summaries)
    outcomes.update(scheduler.run_steps(
        predictions, python, devices, log=_log, what="test predictions",
        stop_requested=stop_requested))
    for step in predictions:
      # Only MNLI-mm's prediction step evaluates (MNLI's model on its dev).
      if "eval_results.txt" in step.done_files and outcomes[
          step.name].status in ("done", "skipped"):
        summaries["MNLI-mm"] = report.single_run_summary(
            "MNLI-m", report.read_classifier_metrics(
                step.output_dir), step.name)
    submission = _submission(predictions, outcomes, setup.output_dir)
  results = {
      "generated": datetime.datetime.now().isoformat(timespec="seconds"),
      "command": " ".join(shlex.quote(a) for a in sys.argv),
      "machine": "%s, %s, devices %s" % (platform.node(), platform.processor()
                                         or platform.machine(),
                                         ",".join(devices)),
      "preset": FLAGS.preset, "seeds": FLAGS.seeds,
      "train_example_orders": FLAGS.train_example_orders,
      "reduced": notes, "model": {"description": description},
      "reference_model": reference_model, "tasks": summaries,
      "comparison": report.comparison_rows(summaries, references,
                                           reference_model),
      "cells": _cells_info(cells, steps, outcomes, metrics, python),
      "submission": submission}
  report.write_atomically(
      os.path.join(setup.output_dir, "results.json"),
      json.dumps(results, indent=2) + "\n")
  report.write_atomically(
      os.path.join(setup.output_dir, "results.md"),
      report.results_markdown(results))
  report.write_hparams_summaries(
      os.path.join(setup.output_dir, "tensorboard"), cells, metrics)
  return results


def _plan():
  """Checks the flags and data, writes data subsets; returns run()'s args."""
  if not FLAGS.output_dir:
    raise ValueError("Set --output_dir (where cells and results go).")
  output_dir = os.path.abspath(FLAGS.output_dir)
  if os.path.exists(output_dir) and not os.path.isdir(output_dir):
    raise ValueError("--output_dir=%s is a file; pass a folder." %
                     FLAGS.output_dir)
  if FLAGS.max_train_examples is not None and FLAGS.max_train_examples < 1:
    raise ValueError("--max_train_examples=%d: must be at least 1 (or unset "
                     "for the whole training sets)." %
                     FLAGS.max_train_examples)
  _check_devices()
  references = plan.load_references()
  model = _model_from_flags()
  with open(model.bert_config_file) as f:
    config = json.load(f)
  tasks = _tasks_from_flags()
  _check_lengths(tasks, config, model.bert_config_file)
  data, num_train = {}, {}
  for task in tasks:
    if plan.TASKS[task].kind == "glue":
      data[task], num_train[task] = _glue_data(task, output_dir)
    elif plan.TASKS[task].kind == "swag":
      data[task], num_train[task] = _swag_data(task, output_dir)
    elif plan.TASKS[task].kind == "ner":
      data[task], num_train[task] = _conll_data(output_dir)
    else:
      data[task], num_train[task] = _squad_data(task, output_dir)
  setup = plan.Setup(
      ROOT, model, data, output_dir, FLAGS.max_seq_length,
      FLAGS.squad_max_seq_length, tuple(shlex.split(FLAGS.extra_flags)),
      FLAGS.ner_max_seq_length, FLAGS.conll_tag_scheme)
  cells = _cells(tasks, num_train, references)
  reference_model = (FLAGS.reference_model or
                     report.reference_model_for(references, config)
                     or "BERT-Base")
  if reference_model not in references["models"]:
    raise ValueError("--reference_model=%s is not one of %s." % (
        reference_model, ", ".join(references["models"])))
  return (setup, cells, references, reference_model,
          _model_description(model, config),
          _reduced_notes(tasks, model, references), _devices())


class _Interrupt(object):
  """SIGTERM's handler: it only remembers that the signal came. The grid
  stops as on Ctrl-C when the scheduler next looks (`stop_requested`),
  stopping the running cells; raised by the handler wherever the signal
  lands, the KeyboardInterrupt could come out of TensorFlow's C code
  (writing the report's summaries) as another error, with a traceback."""

  def __init__(self):
    self.received = False

  def __call__(self, signum, frame):
    del signum, frame
    self.received = True


def _interrupted():
  _log("interrupted; the running cells were stopped. Run the same "
       "command again to resume.")
  return cli.INTERRUPTED_STATUS


def main(argv):
  if len(argv) > 1:
    raise app.UsageError("Unexpected arguments: %s" % " ".join(argv[1:]))
  try:
    args = _plan()
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  setup, cells, _, _, _, notes, devices = args
  _log("%d cells on %s; output in %s" % (len(cells), ",".join(devices),
                                         setup.output_dir))
  for note in notes:
    _log("REDUCED: " + note)
  if FLAGS.dry_run:
    for cell in cells:
      step = plan.cell_step(setup, cell)
      print(" ".join(shlex.quote(a) for a in [sys.executable] + list(
          step.args)))
    return 0
  interrupt = _Interrupt()
  signal.signal(signal.SIGTERM, interrupt)
  try:
    results = run(*args, stop_requested=lambda: interrupt.received)
  except KeyboardInterrupt:
    return _interrupted()
  if interrupt.received:
    return _interrupted()
  _log("results in %s" % os.path.join(setup.output_dir, "results.md"))
  failed = [c for c in results["cells"] if c["status"] == "failed"]
  if failed:
    _log("%d of %d cells failed: %s" % (len(failed), len(results["cells"]),
                                        ", ".join(c["name"] for c in failed)))
    return 1
  return 0


if __name__ == "__main__":
  define_flags()
  cli.run(main)
