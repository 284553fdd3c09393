# coding=utf-8
"""Flags shared by run_classifier.py and run_squad.py, and helpers on them.

The original scripts each defined these flags; here they are defined once.
Nothing is parsed at import time: a script calls `define_common_flags` and
then `absl.app.run(main)`.
"""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function

import json
import os

from absl import flags
from absl import logging
import tensorflow as tf

import estimator
import memory_plan

OPTIMIZERS = ("adamw", "lamb")
DISTRIBUTIONS = ("none", "mirrored", "multi_worker")
_TF_CONFIG_EXAMPLE = (
    '{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
    '"task": {"type": "worker", "index": 0}}')


def _define_model_flags(max_seq_length_default, fv):
  flags.DEFINE_string(
      "bert_config_file", None,
      "The bert_config.json of the pre-trained model; it gives the model's "
      "size and shape.", flag_values=fv)
  flags.DEFINE_string(
      "vocab_file", None,
      "The vocab.txt (WordPiece) the model was pre-trained with; not needed "
      "with --spm_model_file.", flag_values=fv)
  flags.DEFINE_string(
      "spm_model_file", None,
      "A SentencePiece .model file (ALBERT-style vocabularies); replaces "
      "WordPiece tokenization and --vocab_file.", flag_values=fv)
  flags.DEFINE_string(
      "output_dir", None,
      "Directory for checkpoints, summaries and predictions; a run finding "
      "a checkpoint here resumes from it.", flag_values=fv)
  flags.DEFINE_string(
      "init_checkpoint", None,
      "Checkpoint prefix to start from, usually the pre-trained model's "
      "bert_model.ckpt (applied only when a run starts fresh).",
      flag_values=fv)
  flags.DEFINE_bool(
      "do_lower_case", True,
      "Lower-case the input text; True for uncased models, False for cased "
      "ones.", flag_values=fv)
  flags.DEFINE_integer(
      "max_seq_length", max_seq_length_default,
      "Longest input in WordPiece tokens after tokenization; longer inputs "
      "are truncated, shorter ones padded.", flag_values=fv)


def _define_run_flags(fv):
  flags.DEFINE_bool("do_train", False, "Whether to fine-tune.",
                    flag_values=fv)
  flags.DEFINE_bool("do_predict", False,
                    "Whether to predict on the test/predict set.",
                    flag_values=fv)
  flags.DEFINE_integer("train_batch_size", 32,
                       "Examples per optimizer update.", flag_values=fv)
  flags.DEFINE_integer("predict_batch_size", 8,
                       "Examples per prediction batch.", flag_values=fv)
  flags.DEFINE_float("learning_rate", 5e-5,
                     "Peak learning rate of Adam (or LAMB).", flag_values=fv)
  flags.DEFINE_float("num_train_epochs", 3.0,
                     "How many passes over the training data to make.",
                     flag_values=fv)
  flags.DEFINE_float(
      "warmup_proportion", 0.1,
      "Fraction of the training steps spent raising the learning rate "
      "linearly from 0 to its peak, e.g. 0.1 = first 10%.", flag_values=fv)
  flags.DEFINE_integer("save_checkpoints_steps", 1000,
                       "Save a checkpoint every this many updates.",
                       flag_values=fv)
  flags.DEFINE_integer(
      "iterations_per_loop", 1000,
      "TPU steps per host loop; accepted for compatibility, unused on "
      "CPU/GPU.", flag_values=fv)


def _define_tpu_flags(fv):
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


def _define_new_flags(fv):
  flags.DEFINE_integer(
      "num_accumulation_steps", 1,
      "Split each --train_batch_size batch into this many micro-batches and "
      "accumulate their gradients: one update per batch, the same result as "
      "the whole batch at once, less memory.", flag_values=fv)
  flags.DEFINE_enum("optimizer", "adamw", list(OPTIMIZERS),
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
      "many updates.", flag_values=fv)
  flags.DEFINE_string(
      "export_dir", None,
      "After the other actions, write the fine-tuned model (the latest "
      "checkpoint in --output_dir) as a SavedModel for serving into "
      "<export_dir>/<unix time>. Its serving_default signature takes int32 "
      "input_ids, input_mask and segment_ids [batch, max_seq_length] and "
      "returns the predictions (classifier: probabilities, or predictions "
      "for regression; SQuAD: start_logits and end_logits).",
      flag_values=fv)


def _define_memory_flags(fv):
  flags.DEFINE_enum(
      "precision", "fp32", list(memory_plan.PRECISIONS),
      "Activation precision: fp32, or fp16 / bf16 (half the activation "
      "memory; weights, optimizer state and checkpoints stay float32). fp16 "
      "uses dynamic loss scaling.", flag_values=fv)
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


def _define_scale_flags(fv):
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
  flags.DEFINE_bool(
      "use_xla", False,
      "Compile the model (training and inference) with XLA.",
      flag_values=fv)


def define_common_flags(max_seq_length_default, flag_values=flags.FLAGS):
  """Defines the flags shared by the training scripts.

  Args:
    max_seq_length_default: the script's default --max_seq_length (128 for
      run_classifier.py, 384 for run_squad.py, as in the original).
    flag_values: where to define them (absl's global FLAGS by default).
  """
  _define_model_flags(max_seq_length_default, flag_values)
  _define_run_flags(flag_values)
  _define_tpu_flags(flag_values)
  _define_new_flags(flag_values)
  _define_memory_flags(flag_values)
  _define_scale_flags(flag_values)


def check_tpu_flags(flag_obj):
  """Refuses --use_tpu / --tpu_name, which this build cannot honour."""
  if flag_obj.use_tpu or flag_obj.tpu_name:
    raise ValueError("--use_tpu/--tpu_name: no TPU support in this build; "
                     "run on CPU/GPU without them")


def make_run_config(flag_obj, oom_message_fn=None,
                    num_accumulation_steps=None, distribution=None):
  """The estimator.RunConfig the flags ask for.

  Args:
    flag_obj: parsed flags.
    oom_message_fn: optional callable(ResourceExhaustedError) -> str.
    num_accumulation_steps: the accumulation steps to use when they were
      derived from --micro_batch_size; default --num_accumulation_steps.
    distribution: the strategy `make_distribution(flag_obj)` made, when the
      caller needed it first (for memory_flags.resolve); default: made here.
  """
  if num_accumulation_steps is None:
    num_accumulation_steps = flag_obj.num_accumulation_steps
  if distribution is None:
    distribution = make_distribution(flag_obj)
  return estimator.RunConfig(
      model_dir=flag_obj.output_dir,
      save_checkpoints_steps=flag_obj.save_checkpoints_steps,
      keep_checkpoint_max=flag_obj.keep_checkpoint_max,
      log_step_count_steps=flag_obj.log_step_count_steps,
      tf_random_seed=flag_obj.seed,
      num_accumulation_steps=num_accumulation_steps,
      oom_message_fn=oom_message_fn,
      distribution=distribution,
      use_xla=flag_obj.use_xla)


def make_distribution(flag_obj):
  """The tf.distribute strategy --distribution asks for, or None.

  Raises:
    ValueError naming the flag (or TF_CONFIG) and the fix.
  """
  if flag_obj.distribution == "none":
    if flag_obj.devices:
      raise ValueError("--devices=%s needs --distribution=mirrored." %
                       ",".join(flag_obj.devices))
    return None
  if flag_obj.distribution == "mirrored":
    return tf.compat.v1.distribute.MirroredStrategy(
        devices=_mirrored_devices(flag_obj.devices))
  if flag_obj.devices:
    raise ValueError("--devices applies to --distribution=mirrored only; "
                     "multi_worker uses each worker's default device.")
  _check_tf_config(os.environ.get("TF_CONFIG"))
  return tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy()


def _mirrored_devices(devices):
  """--devices checked against this machine (default: all local GPUs).

  CPUs /cpu:1, /cpu:2, ... do not exist by default; asking for them splits
  the one physical CPU into that many logical devices, which TensorFlow
  allows only before it first runs anything.
  """
  if not devices:
    devices = [d.name for d in tf.config.list_logical_devices("GPU")]
    if len(devices) < 2:
      raise ValueError(
          "--distribution=mirrored found %d GPU(s); pass --devices (e.g. "
          "--devices=/cpu:0,/cpu:1) or use --distribution=none." %
          len(devices))
    return devices
  specs = [_device_spec("devices", d) for d in devices]
  cpus = [spec for spec in specs if spec.device_type == "CPU"]
  if len(cpus) > 1:
    _split_cpu(max(spec.device_index or 0 for spec in cpus) + 1)
  known = {(spec.device_type, spec.device_index) for spec in
           (tf.DeviceSpec.from_string(d.name)
            for d in tf.config.list_logical_devices())}
  missing = [d for d, spec in zip(devices, specs)
             if (spec.device_type, spec.device_index or 0) not in known]
  if missing:
    raise ValueError(
        "--devices: %s not found on this machine (it has %s)." %
        (", ".join(missing),
         ", ".join(d.name for d in tf.config.list_logical_devices())))
  return devices


def _device_spec(flag_name, device):
  """tf.DeviceSpec of a device name like /gpu:0 (type upper-cased)."""
  try:
    spec = tf.DeviceSpec.from_string(device)
  except ValueError as e:
    raise ValueError("--%s: %r is not a device name like /gpu:0 or /cpu:1." %
                     (flag_name, device)) from e
  if not spec.device_type:
    raise ValueError("--%s: %r is not a device name like /gpu:0 or /cpu:1." %
                     (flag_name, device))
  return spec.replace(device_type=spec.device_type.upper())


def _split_cpu(count):
  """Makes `count` logical CPU devices (if there are fewer)."""
  cpu = tf.config.list_physical_devices("CPU")[0]
  configured = tf.config.get_logical_device_configuration(cpu) or [None]
  if len(configured) >= count:
    return
  try:
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * count)
  except RuntimeError as e:
    raise ValueError(
        "--devices asks for %d CPUs, but TensorFlow was initialized before "
        "the CPU could be split: %s" % (count, e)) from e


def _check_tf_config(tf_config):
  """Validates the TF_CONFIG environment variable for multi_worker."""
  fix = ("Set TF_CONFIG on every worker to JSON like %s, with this worker's "
         "own task index." % _TF_CONFIG_EXAMPLE)
  if not tf_config:
    raise ValueError("--distribution=multi_worker needs the TF_CONFIG "
                     "environment variable. " + fix)
  try:
    config = json.loads(tf_config)
    cluster, task = config["cluster"], config["task"]
    workers = list(cluster.get("chief", [])) + list(cluster.get("worker", []))
    task_type, index = task["type"], int(task["index"])
    addresses = cluster[task_type]
    address = addresses[index]
  except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
    raise ValueError("TF_CONFIG=%s is malformed (%s: %s). %s" %
                     (tf_config, type(e).__name__, e, fix)) from e
  if task_type not in ("chief", "worker") or not workers or ":" not in str(
      address):
    raise ValueError("TF_CONFIG=%s: the task must be a \"chief\" or "
                     "\"worker\" with a host:port address. %s" %
                     (tf_config, fix))


def _check_file(flag_name, path):
  if not path:
    raise ValueError("--%s is required." % flag_name)
  if not tf.io.gfile.exists(path):
    raise ValueError("--%s=%s: file not found." % (flag_name, path))


def check_required_files(flag_obj, do_train):
  """Checks the input files exist before any slow work starts.

  --vocab_file (or --spm_model_file, which replaces it) and
  --bert_config_file must exist; --init_checkpoint, when given, must be a
  checkpoint prefix (its `.index` file must exist). Without
  training, something must supply the weights: a checkpoint in --output_dir
  or --init_checkpoint.

  Args:
    flag_obj: parsed flags (absl FLAGS or any object with the attributes).
    do_train: whether this run trains.

  Raises:
    ValueError naming the flag and the fix.
  """
  if flag_obj.spm_model_file:
    _check_file("spm_model_file", flag_obj.spm_model_file)
  elif not flag_obj.vocab_file:
    raise ValueError("--vocab_file is required (or --spm_model_file for a "
                     "SentencePiece vocabulary).")
  else:
    _check_file("vocab_file", flag_obj.vocab_file)
  _check_file("bert_config_file", flag_obj.bert_config_file)
  init_checkpoint = flag_obj.init_checkpoint
  if init_checkpoint and not tf.io.gfile.exists(init_checkpoint + ".index"):
    raise ValueError(
        "--init_checkpoint=%s: %s.index not found. Pass the checkpoint "
        "prefix (e.g. /path/to/bert_model.ckpt), not a directory or one of "
        "its files (.index, .data-*)." % (init_checkpoint, init_checkpoint))
  if do_train:
    if not init_checkpoint:
      logging.warning("No --init_checkpoint: training starts from random "
                      "weights, not from a pre-trained model.")
    return
  if not init_checkpoint and not (
      estimator.latest_checkpoint(flag_obj.output_dir)):
    raise ValueError(
        "Nothing to evaluate or predict with: --output_dir=%s holds no "
        "checkpoint and --init_checkpoint is not set. Add --do_train, point "
        "--output_dir at a trained run, or set --init_checkpoint." %
        flag_obj.output_dir)


def num_train_and_warmup_steps(num_examples, flag_obj):
  """(num_train_steps, num_warmup_steps) computed as the original does."""
  num_train_steps = int(
      num_examples / flag_obj.train_batch_size * flag_obj.num_train_epochs)
  num_warmup_steps = int(num_train_steps * flag_obj.warmup_proportion)
  return num_train_steps, num_warmup_steps
