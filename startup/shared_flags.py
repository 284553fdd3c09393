# coding=utf-8
"""The flags shared by the training scripts: their definitions, and the one
place their parsed values are read.

The original scripts each defined these flags; here they are defined once,
in groups a script picks from (a fine-tuning script takes all of them
through `define_common_flags`). Nothing is parsed at import time.
A script's `main` hands its parsed flags to `read`, which returns a
`SharedFlags`: the values of exactly these flags, field by field, which the
script passes on to startup/run_setup.py (what the values make of a run:
checks, strategy, memory settings, RunConfig). Library code never reads the
absl flags itself. This module loads no TensorFlow, so a script can answer
--help before it imports TensorFlow (userio/cli.py).
"""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function

import dataclasses
from typing import FrozenSet, Optional, Tuple

from absl import flags

from engine import optimizer_names
from hardware import cpu
from memory import memory_model

DISTRIBUTIONS = ("none", "mirrored", "multi_worker")
# Accepted for compatibility with Google's commands, without effect here.
COMPATIBILITY_FLAGS = ("master", "tpu_zone", "gcp_project", "num_tpu_cores",
                       "iterations_per_loop")
# Values of a script's --train_example_order: the training set permuted
# with --seed before its features are written, or in its file's order.
TRAIN_EXAMPLE_ORDERS = ("shuffled", "file")


def define_model_flags(max_seq_length_default, fv=flags.FLAGS):
  """--bert_config_file, --output_dir, --init_checkpoint, --max_seq_length."""
  flags.DEFINE_string(
      "bert_config_file", None,
      "The bert_config.json of the pre-trained model; it gives the model's "
      "size and shape.", flag_values=fv)
  flags.DEFINE_string(
      "output_dir", None,
      "Directory for checkpoints, summaries and predictions; a run finding "
      "a checkpoint here resumes from it.", flag_values=fv)
  flags.DEFINE_string(
      "init_checkpoint", None,
      "Checkpoint prefix to start from, usually the pre-trained model's "
      "bert_model.ckpt, or a Hugging Face model folder (converted into "
      "--output_dir); applied only when a run starts fresh.",
      flag_values=fv)
  flags.DEFINE_integer(
      "max_seq_length", max_seq_length_default,
      "Longest input in WordPiece tokens after tokenization; longer inputs "
      "are truncated, shorter ones padded.", flag_values=fv)


def define_vocab_flags(fv=flags.FLAGS):
  """--vocab_file, --spm_model_file and --do_lower_case."""
  flags.DEFINE_string(
      "vocab_file", None,
      "The vocab.txt (WordPiece) the model was pre-trained with; not needed "
      "with --spm_model_file.", flag_values=fv)
  flags.DEFINE_string(
      "spm_model_file", None,
      "A SentencePiece .model file (ALBERT-style vocabularies); replaces "
      "WordPiece tokenization and --vocab_file.", flag_values=fv)
  flags.DEFINE_bool(
      "do_lower_case", True,
      "Lower-case the input text; True for uncased models, False for cased "
      "ones.", flag_values=fv)


def define_training_flags(fv=flags.FLAGS):
  """The flags of any training run: batch, learning rate, checkpoints, ..."""
  flags.DEFINE_bool("do_train", False, "Whether to train.", flag_values=fv)
  flags.DEFINE_integer("train_batch_size", 32,
                       "Examples per optimizer update.", flag_values=fv)
  flags.DEFINE_float("learning_rate", 5e-5,
                     "Peak learning rate of Adam (or LAMB).", flag_values=fv)
  flags.DEFINE_integer("save_checkpoints_steps", 1000,
                       "Save a checkpoint every this many updates.",
                       flag_values=fv)
  flags.DEFINE_float(
      "save_checkpoints_secs", 300.0,
      "Also save a checkpoint at the first update boundary this many seconds "
      "after the last one, so an interrupted run loses little; 0 turns the "
      "time-based checkpoints off. Ctrl-C and SIGTERM always save one.",
      flag_values=fv)
  flags.DEFINE_integer(
      "num_accumulation_steps", 1,
      "Split each --train_batch_size batch into this many micro-batches and "
      "accumulate their gradients: one update per batch, the same result as "
      "the whole batch at once, less memory.", flag_values=fv)
  flags.DEFINE_enum("optimizer", "adamw", list(optimizer_names.OPTIMIZERS),
                    "adamw (Google's Adam with decoupled weight decay) or "
                    "lamb (layer-wise adaptive, for large batches).",
                    flag_values=fv)
  flags.DEFINE_integer(
      "seed", 12345,
      "Seed for initialization, shuffling and dropout; the same seed and "
      "flags give the same run.", flag_values=fv)
  flags.DEFINE_integer("keep_checkpoint_max", 5,
                       "How many of the newest checkpoints to keep.",
                       flag_values=fv)
  flags.DEFINE_integer(
      "log_step_count_steps", 100,
      "Log a progress line (step, loss, examples/sec, time left) every this "
      "many updates, and at least every 30 seconds.", flag_values=fv)
  flags.DEFINE_integer(
      "save_summary_steps", 100,
      "Write the TensorBoard scalars (loss, learning rate, examples/sec) to "
      "--output_dir every this many updates.", flag_values=fv)


# What the export's serving_default signature reads, as the --export_dir
# help says it for a model of one text or pair per example.
SEQUENCE_INPUTS = ("int32 input_ids, input_mask and segment_ids [batch, "
                   "length], any length up to --max_seq_length")


def define_fine_tuning_flags(fv=flags.FLAGS, *,
                             serving_inputs=SEQUENCE_INPUTS,
                             serving_outputs="the predictions",
                             text_inputs=None):
  """Epochs, warm-up, prediction and export of the fine-tuning scripts.

  `serving_inputs` and `serving_outputs` say, in --export_dir's help, what
  the script's exported signature takes and returns; `text_inputs`, the
  strings its "text" signature takes (None: it has none).
  """
  text_help = "" if text_inputs is None else (
      " Its \"text\" signature takes %s instead "
      "(raw strings; needs tensorflow-text; docs/serving.md)." % text_inputs)
  flags.DEFINE_bool("do_predict", False,
                    "Whether to predict on the test/predict set.",
                    flag_values=fv)
  flags.DEFINE_integer("predict_batch_size", 8,
                       "Examples per prediction batch.", flag_values=fv)
  flags.DEFINE_float("num_train_epochs", 3.0,
                     "How many passes over the training data to make.",
                     flag_values=fv)
  flags.DEFINE_float(
      "warmup_proportion", 0.1,
      "Fraction of the training steps spent raising the learning rate "
      "linearly from 0 to its peak, e.g. 0.1 = first 10%.", flag_values=fv)
  flags.DEFINE_string(
      "export_dir", None,
      "After the other actions, write the fine-tuned model (the latest "
      "checkpoint in --output_dir) as a SavedModel for serving into "
      "<export_dir>/<unix time>, with bert_config.json, the vocabulary and "
      "run_info.json (casing, labels, max_seq_length) in its assets.extra. "
      "Its serving_default signature takes %s and returns %s.%s" % (
          serving_inputs, serving_outputs, text_help), flag_values=fv)


def define_tpu_flags(fv=flags.FLAGS):
  """Google's TPU flags: --use_tpu and --tpu_name are refused, the rest
  (COMPATIBILITY_FLAGS) are accepted and do nothing."""
  flags.DEFINE_bool("use_tpu", False,
                    "Run on a TPU (not supported by this build).",
                    flag_values=fv)
  flags.DEFINE_string("tpu_name", None,
                      "Name or address of the Cloud TPU (not supported).",
                      flag_values=fv)
  flags.DEFINE_string("tpu_zone", None,
                      "GCE zone of the Cloud TPU (not supported).",
                      flag_values=fv)
  flags.DEFINE_string("gcp_project", None,
                      "GCP project of the Cloud TPU (not supported).",
                      flag_values=fv)
  flags.DEFINE_string("master", None,
                      "TensorFlow master address (TPU only, not supported).",
                      flag_values=fv)
  flags.DEFINE_integer("num_tpu_cores", 8,
                       "TPU cores to use (TPU only, not supported).",
                       flag_values=fv)
  flags.DEFINE_integer(
      "iterations_per_loop", 1000,
      "TPU steps per host loop; accepted for compatibility, unused on "
      "CPU/GPU.", flag_values=fv)


def define_memory_flags(fv=flags.FLAGS):
  """--precision, --gradient_checkpointing, --micro_batch_size, ..."""
  flags.DEFINE_enum(
      "precision", cpu.DEFAULT_PRECISION,
      list(memory_model.PRECISIONS) + [cpu.AUTO_PRECISION],
      "Activation precision: fp32, or fp16 / bf16 (half the activation "
      "memory; weights, optimizer state and checkpoints stay float32). fp16 "
      "uses dynamic loss scaling. auto: bf16 where the hardware computes it "
      "natively (CPU with AVX512_BF16 or AMX, GPU of compute capability "
      "8.0+), else fp32. Unset, a run that does not train computes as its "
      "--output_dir's model was trained, where that is fast here.",
      flag_values=fv)
  flags.DEFINE_bool(
      "gradient_checkpointing", False,
      "Recompute each transformer layer in the backward pass instead of "
      "keeping its activations: much less memory, a fifth to a third more "
      "step time, same gradients.", flag_values=fv)
  flags.DEFINE_string(
      "micro_batch_size", "",
      "Examples per micro-batch: empty = --train_batch_size / "
      "--num_accumulation_steps; an integer dividing --train_batch_size "
      "(sets the accumulation steps); or auto: the memory planner picks "
      "micro-batch, accumulation and, if needed, gradient checkpointing for "
      "the device's memory.", flag_values=fv)
  flags.DEFINE_float(
      "device_memory_gb", None,
      "Memory in GiB of each device to plan for (--micro_batch_size=auto "
      "and out-of-memory advice); default: the smallest GPU's memory, else "
      "the available RAM, which the CPU devices of --devices share.",
      flag_values=fv)


def define_scale_flags(fv=flags.FLAGS):
  """--distribution, --devices, --worker_wait_secs and --use_xla."""
  flags.DEFINE_enum(
      "distribution", "none", list(DISTRIBUTIONS),
      "Data-parallel training: none (one device), mirrored (the devices of "
      "--devices on this machine) or multi_worker (one process per machine, "
      "cluster given by the TF_CONFIG environment variable). "
      "--train_batch_size stays the global batch. Evaluation and prediction "
      "run on one device.", flag_values=fv)
  flags.DEFINE_list(
      "devices", None,
      "Devices for --distribution=mirrored, e.g. /gpu:0,/gpu:1 or "
      "/cpu:0,/cpu:1 (CPUs beyond /cpu:0 are made by splitting the CPU); "
      "default: all local GPUs.", flag_values=fv)
  flags.DEFINE_integer(
      "worker_wait_secs", 300,
      "With --distribution=multi_worker: how long a worker waits for the "
      "others of TF_CONFIG to start before it stops with one line.",
      flag_values=fv)
  flags.DEFINE_bool(
      "use_xla", False,
      "Compile the model (training and inference) with XLA.",
      flag_values=fv)


def define_evaluation_flags(fv=flags.FLAGS, *, best_metric_default,
                            epochs=True):
  """The flags of evaluation during training, of the best checkpoint and of
  scoring a folder's checkpoints (driver/training.py), for a script that
  has --do_eval.

  Args:
    fv: where to define them.
    best_metric_default: what --best_metric's help names as the script's
      default, e.g. "f1".
    epochs: whether the script counts epochs (--eval_every_epochs).
  """
  flags.DEFINE_integer(
      "eval_every_steps", 0,
      "With --do_train and --do_eval: also evaluate on the dev set after "
      "every this many updates (a checkpoint is saved for each), not only "
      "after the last; 0: only after the last. Each evaluation is one line, "
      "a row of eval_history.jsonl and TensorBoard scalars in eval/.",
      flag_values=fv)
  if epochs:
    flags.DEFINE_float(
        "eval_every_epochs", 0.0,
        "As --eval_every_steps, counted in epochs: 1 evaluates at the end of "
        "every epoch, 0.5 twice per epoch; 0: off. Both flags may be given.",
        flag_values=fv)
  flags.DEFINE_string(
      "best_metric", None,
      "The metric whose best value picks the best checkpoint of the "
      "evaluations, kept in --output_dir/best/ and recorded in "
      "run_info.json; lower is better for a loss, higher for the others. "
      "Default: %s." % best_metric_default, flag_values=fv)
  flags.DEFINE_integer(
      "early_stopping_patience", 0,
      "End training after this many evaluations in a row without an "
      "improvement of --best_metric (the learning-rate schedule is not "
      "changed); 0: never.", flag_values=fv)
  flags.DEFINE_float(
      "early_stopping_min_delta", 0.0,
      "What --early_stopping_patience counts as an improvement: a gain of "
      "more than this on the best value so far.", flag_values=fv)
  flags.DEFINE_string(
      "use_checkpoint", "best",
      "The checkpoint that --do_eval, --do_predict and --export_dir use: "
      "best (the best evaluated one recorded in run_info.json; without "
      "one, the newest), latest, a step (e.g. 2000) or a checkpoint "
      "prefix.", flag_values=fv)
  flags.DEFINE_bool(
      "eval_all_checkpoints", False,
      "With --do_eval and without --do_train: score every checkpoint of "
      "--output_dir that eval_history.jsonl does not hold yet, oldest "
      "first, and keep the best (train with --keep_checkpoint_max=0 to "
      "keep them all).", flag_values=fv)
  flags.DEFINE_bool(
      "wait_for_checkpoints", False,
      "With --eval_all_checkpoints: then go on scoring new checkpoints as "
      "a training run in --output_dir saves them, until it has saved its "
      "last one, it has stopped, or --eval_timeout_secs pass without a new "
      "one.", flag_values=fv)
  flags.DEFINE_integer(
      "eval_timeout_secs", 3600,
      "With --wait_for_checkpoints: stop waiting after this many seconds "
      "without a new checkpoint.", flag_values=fv)


def define_skip_padding_flag(fv=flags.FLAGS):
  """--skip_padding of the fine-tuning scripts that read the encoder's
  real tokens only (startup/run_setup.py's `skip_padding` applies it). A
  script defines it before it adopts this module's key flags, so that its
  --help lists it."""
  flags.DEFINE_bool(
      "skip_padding", True,
      "Run the encoder's feed-forward layers, LayerNorms and dropout on the "
      "real (non-padding) tokens of each batch only; attention still covers "
      "all positions. The same results, faster the more padding a batch "
      "has. Off with --use_xla, which compiles graphs of fixed shapes.",
      flag_values=fv)


def define_common_flags(max_seq_length_default, flag_values=flags.FLAGS,
                        **serving):
  """Defines every flag above: those of a fine-tuning script.

  Args:
    max_seq_length_default: the script's default --max_seq_length (128 for
      run_classifier.py, 384 for run_squad.py, as in the original).
    flag_values: where to define them (absl's global FLAGS by default).
    **serving: `define_fine_tuning_flags`' serving_inputs,
      serving_outputs and text_inputs.
  """
  define_model_flags(max_seq_length_default, flag_values)
  define_vocab_flags(flag_values)
  define_training_flags(flag_values)
  define_fine_tuning_flags(flag_values, **serving)
  define_tpu_flags(flag_values)
  define_memory_flags(flag_values)
  define_scale_flags(flag_values)


@dataclasses.dataclass(frozen=True)
class SharedFlags:
  """The values of the shared flags on one command line.

  Each value field holds the flag of its name (see the definitions above
  for what each means and its default), or None when the script does not
  define that flag; a script with fewer flags (run_pretraining.py has no
  vocabulary, extract_features.py only the model files and TPU flags) gets
  None for the others, and the checks skip them.

  Fields:
    bert_config_file, output_dir, init_checkpoint: paths (str); the last
      also names a Hugging Face model folder until startup/run_setup.py's
      `use_hf_init_checkpoint` replaces it with its conversion.
    max_seq_length: int, tokens per example.
    vocab_file, spm_model_file: paths (str), either may be None.
    do_lower_case: bool.
    do_train: bool.
    train_batch_size: int, examples per update over all replicas.
    learning_rate: float.
    save_checkpoints_steps: int; save_checkpoints_secs: float (0 = off).
    num_accumulation_steps: int, the flag's value (default 1); see
      `explicit_accumulation_steps` for whether the command line set it.
    optimizer: one of optimizer_names.OPTIMIZERS.
    seed: int.
    keep_checkpoint_max, log_step_count_steps, save_summary_steps: int.
    do_eval: bool; eval_batch_size: int: defined by the commands that
      evaluate, each with its own help (eval_batch_size is checked with
      the other batch sizes).
    do_predict: bool.
    predict_batch_size: int.
    num_train_epochs, warmup_proportion: float.
    export_dir: path (str) or None.
    use_tpu: bool; tpu_name: str or None (both refused when set).
    changed_compatibility_flags: tuple of "--name=value" for the flags of
      COMPATIBILITY_FLAGS the command line changed from their defaults
      (accepted, without effect).
    precision: one of memory_model.PRECISIONS, or "auto" until
      startup/run_setup.py's `start` resolves it.
    precision_reason: why `start` settled the precision as it did (e.g.
      "auto: AVX512_BF16", "as trained"); None when the flag decided alone.
    gradient_checkpointing: bool, the flag's value; see
      `explicit_gradient_checkpointing`.
    micro_batch_size: str as typed: "", an integer or "auto".
    device_memory_gb: float or None.
    distribution: one of DISTRIBUTIONS.
    devices: tuple of device names (--devices), or None.
    worker_wait_secs: int, how long a multi_worker task waits for the
      others.
    use_xla: bool.
    skip_padding: bool (define_skip_padding_flag).
    eval_every_steps, eval_every_epochs, best_metric,
      early_stopping_patience, early_stopping_min_delta, use_checkpoint,
      eval_all_checkpoints, wait_for_checkpoints, eval_timeout_secs:
      define_evaluation_flags' (eval_every_epochs None in a script that
      counts no epochs).
    defined: frozenset of the names of the shared flags the script defines.
    given: frozenset of the names of those the command line set.
  """
  bert_config_file: Optional[str] = None
  output_dir: Optional[str] = None
  init_checkpoint: Optional[str] = None
  max_seq_length: Optional[int] = None
  vocab_file: Optional[str] = None
  spm_model_file: Optional[str] = None
  do_lower_case: Optional[bool] = None
  do_train: Optional[bool] = None
  train_batch_size: Optional[int] = None
  learning_rate: Optional[float] = None
  save_checkpoints_steps: Optional[int] = None
  save_checkpoints_secs: Optional[float] = None
  num_accumulation_steps: Optional[int] = None
  optimizer: Optional[str] = None
  seed: Optional[int] = None
  keep_checkpoint_max: Optional[int] = None
  log_step_count_steps: Optional[int] = None
  save_summary_steps: Optional[int] = None
  do_eval: Optional[bool] = None
  do_predict: Optional[bool] = None
  predict_batch_size: Optional[int] = None
  eval_batch_size: Optional[int] = None
  num_train_epochs: Optional[float] = None
  warmup_proportion: Optional[float] = None
  export_dir: Optional[str] = None
  use_tpu: Optional[bool] = None
  tpu_name: Optional[str] = None
  changed_compatibility_flags: Tuple[str, ...] = ()
  precision: Optional[str] = None
  precision_reason: Optional[str] = None
  gradient_checkpointing: Optional[bool] = None
  micro_batch_size: Optional[str] = None
  device_memory_gb: Optional[float] = None
  distribution: Optional[str] = None
  devices: Optional[Tuple[str, ...]] = None
  worker_wait_secs: Optional[int] = None
  use_xla: Optional[bool] = None
  skip_padding: Optional[bool] = None
  eval_every_steps: Optional[int] = None
  eval_every_epochs: Optional[float] = None
  best_metric: Optional[str] = None
  early_stopping_patience: Optional[int] = None
  early_stopping_min_delta: Optional[float] = None
  use_checkpoint: Optional[str] = None
  eval_all_checkpoints: Optional[bool] = None
  wait_for_checkpoints: Optional[bool] = None
  eval_timeout_secs: Optional[int] = None
  defined: FrozenSet[str] = frozenset()
  given: FrozenSet[str] = frozenset()

  @property
  def explicit_accumulation_steps(self):
    """--num_accumulation_steps when the command line set it, else None."""
    if "num_accumulation_steps" in self.given:
      return self.num_accumulation_steps
    return None

  @property
  def explicit_gradient_checkpointing(self):
    """--[no]gradient_checkpointing when the command line set it (True or
    False), else None: off unless --micro_batch_size=auto needs it."""
    if "gradient_checkpointing" in self.given:
      return self.gradient_checkpointing
    return None


# The fields of SharedFlags that hold a flag of the same name.
_VALUE_FIELDS = tuple(
    field.name for field in dataclasses.fields(SharedFlags)
    if field.name not in ("changed_compatibility_flags", "precision_reason",
                          "defined", "given"))


def read(flag_values=flags.FLAGS):
  """The SharedFlags of parsed absl `flag_values`: the one place the shared
  flags' parsed values are read."""
  defined = frozenset(name for name in _VALUE_FIELDS if name in flag_values)
  values = {name: flag_values[name].value for name in defined}
  if values.get("devices") is not None:
    values["devices"] = tuple(values["devices"])
  changed = tuple(
      "--%s=%s" % (name, flag_values[name].value)
      for name in COMPATIBILITY_FLAGS if name in flag_values and
      flag_values[name].value != flag_values[name].default)
  return SharedFlags(
      changed_compatibility_flags=changed, defined=defined,
      given=frozenset(name for name in defined
                      if flag_values[name].present),
      **values)
