# coding=utf-8
"""From the shared flags' values to what a training script runs with.

A training script (run_classifier.py, run_squad.py, run_pretraining.py)
defines its flags with runner/shared_flags.py and its `main` does:

    shared, bert_config, tokenizer = startup.start(
        shared_flags.read(FLAGS), do_train=FLAGS.do_train,
        min_seq_length=...)
    record = run_info.make_record(...)
    startup.check_output_dir(shared.output_dir, record,
                             do_train=FLAGS.do_train)
    ... read and check the script's own data files ...
    setup = startup.set_up(shared, bert_config, do_train=FLAGS.do_train,
                           record=...)
    estimator = estimator_lib.Estimator(model_fn, config=setup.run_config,
                                        ...)

`start` checks everything that costs nothing (flag values and
combinations, the config, the vocabulary against the config and the
casing) and returns the flags with a Hugging Face --init_checkpoint
replaced by its conversion; `check_output_dir` refuses an --output_dir
whose run_info.json contradicts this run; `set_up` makes the output
directory, takes its lock for the rest of the run (`lock_output_dir`: a
second run into the same folder is refused; in a multi-worker cluster only
the chief, which writes there, takes it), checks the checkpoints and makes
the `RunSetup`: distribution strategy,
memory settings (micro-batch, accumulation steps, checkpointing,
precision), the out-of-memory advice and the `estimator.RunConfig`, which
carries the accumulation steps to the Estimator and, through its params,
to the model_fn. They raise cli.UserError for bad input and never exit.
Flags a script does not define are None in its `SharedFlags` and skipped,
so a script with fewer flags (pretraining has no vocabulary) uses the same
functions.
"""

import collections
import dataclasses
import math
import os
import tempfile

from absl import logging
import tensorflow as tf

from checkpoints import checkpoint_checks
from userio import cli
from userio import folder_lock
from checkpoints import conversion
from runner import distribution as distribution_lib
from runner import estimator
from runner import memory_model
from runner import memory_settings
import modeling
from runner import out_of_memory
from checkpoints import run_info
from tasks import text_pair
from engine import tf_internals
import tokenization
from hardware import cpu
from userio import quiet_tensorflow
from userio import verbosity


class RunSetup(collections.namedtuple(
    "RunSetup", ["distribution", "memory", "run_config", "oom_message_fn",
                 "lock"], defaults=(None,))):
  """What the flags make of a run.

  Fields:
    distribution: the tf.distribute strategy, or None for one device.
    memory: memory_settings.MemorySettings (precision, micro_batch_size,
      num_accumulation_steps, gradient_checkpointing, device, replicas).
    run_config: the estimator.RunConfig (its num_accumulation_steps is
      memory.num_accumulation_steps).
    oom_message_fn: callable(ResourceExhaustedError) -> the out-of-memory
      advice (also in run_config).
    lock: the folder_lock.FolderLock of --output_dir (None on a worker that
      is not the chief); the run keeps it by keeping this RunSetup.
  """

  @property
  def num_accumulation_steps(self):
    return self.memory.num_accumulation_steps

  @property
  def gradient_checkpointing(self):
    return self.memory.gradient_checkpointing

  @property
  def compute_dtype(self):
    return self.memory.compute_dtype


class Start(collections.namedtuple(
    "Start", ["flags", "bert_config", "tokenizer"])):
  """What `start` returns.

  Fields:
    flags: the shared_flags.SharedFlags to run with (a Hugging Face
      --init_checkpoint replaced by its conversion).
    bert_config: modeling.BertConfig of --bert_config_file.
    tokenizer: tokenization.FullTokenizer of the vocabulary flags, or None
      for a script without them.
  """


# ------------------------------------------------------------------ flags


def check_tpu_flags(use_tpu, tpu_name, changed_compatibility_flags=()):
  """Refuses --use_tpu / --tpu_name; says once that the other TPU flags,
  when set (`changed_compatibility_flags`, "--name=value" each), do
  nothing."""
  if use_tpu or tpu_name:
    raise cli.UserError("--use_tpu/--tpu_name: no TPU support in this build; "
                        "run on CPU/GPU without them")
  if changed_compatibility_flags:
    logging.info("%s: accepted for compatibility with Google's commands; "
                 "without effect on CPU/GPU.",
                 ", ".join(changed_compatibility_flags))


def _check_at_least(name, value, minimum):
  """--name=value, unless None (not defined), is at least `minimum`."""
  if value is not None and value < minimum:
    raise cli.UserError("--%s=%s must be at least %d." % (name, value,
                                                         minimum))


def _check_positive_float(name, value, fix):
  if value is not None and not (math.isfinite(value) and value > 0):
    raise cli.UserError("--%s=%s must be a positive number; %s" % (
        name, value, fix))


def _check_training_values(shared):
  """The values that matter only when the run trains."""
  _check_positive_float("learning_rate", shared.learning_rate,
                        "BERT fine-tunes with 1e-5 to 5e-5 and pre-trains "
                        "with about 1e-4.")
  _check_positive_float("num_train_epochs", shared.num_train_epochs,
                        "e.g. --num_train_epochs=3.")
  warmup = shared.warmup_proportion
  if warmup is not None and not 0 <= warmup <= 1:
    raise cli.UserError(
        "--warmup_proportion=%s must be between 0 and 1 (the fraction of "
        "the training steps that warm up, e.g. 0.1)." % warmup)
  _check_at_least("save_checkpoints_steps", shared.save_checkpoints_steps, 1)
  secs = shared.save_checkpoints_secs
  if secs is not None and not (math.isfinite(secs) and secs >= 0):
    raise cli.UserError("--save_checkpoints_secs=%s must be 0 (off) or a "
                        "positive number of seconds, e.g. 300." % secs)
  _check_at_least("keep_checkpoint_max", shared.keep_checkpoint_max, 0)
  _check_at_least("log_step_count_steps", shared.log_step_count_steps, 1)
  _check_at_least("save_summary_steps", shared.save_summary_steps, 1)


# Training logs a progress line at least this often (seconds), also between
# the --log_step_count_steps updates: an update of a large model on a CPU
# takes seconds, and a hundred of them would pass without a line.
TRAINING_PROGRESS_SECS = 30.0
# The compute capability from which a GPU has bfloat16 tensor cores
# (Ampere); --precision=auto picks bf16 there.
BF16_GPU_CAPABILITY = (8, 0)


def precision_note(precision, features):
  """One line when --precision has no fast path on a CPU with `features`
  (hardware/cpu.cpu_features), naming the faster precision; None otherwise
  (fp32 is always fast; fp16 on a CPU is refused by `check_flags`)."""
  if precision == "bf16" and not cpu.native_bf16_features(features):
    return ("Note: this CPU has no fast bfloat16 path (no AVX512_BF16 or "
            "AMX in %s), so --precision=bf16 runs slower here than "
            "--precision=fp32, which would be faster; bf16 still halves the "
            "activation memory." % cpu.CPUINFO_FILE)
  return None


def _note_slow_precision(precision):
  """Logs `precision_note` for a run on the CPU (no GPU visible)."""
  if precision != "bf16" or tf.config.list_physical_devices("GPU"):
    return
  note = precision_note(precision, cpu.cpu_features())
  if note:
    logging.info("%s", note)


def resolve_precision(precision, features, gpus):
  """--precision with auto resolved: bf16 where the hardware has a native
  bfloat16 path, else fp32.

  Args:
    precision: the flag's value (fp32, fp16, bf16 or auto).
    features: the CPU's feature flags (hardware/cpu.cpu_features).
    gpus: the (major, minor) compute capabilities of the visible GPUs
      (gpu_capabilities(); empty: none); with GPUs they decide, all of them
      at least BF16_GPU_CAPABILITY for bf16.

  Returns:
    (precision, reason): the precision to run with and, for auto, why it
    was chosen (e.g. "AVX512_BF16"); reason is None for the other values.
  """
  if precision != cpu.AUTO_PRECISION:
    return precision, None
  if not gpus:
    return cpu.auto_precision(features)
  lowest = min(gpus)
  if lowest >= BF16_GPU_CAPABILITY:
    return "bf16", "GPU compute capability %d.%d" % lowest
  return "fp32", "GPU compute capability %d.%d, below %d.%d" % (
      lowest + BF16_GPU_CAPABILITY)


def gpu_capabilities():
  """The (major, minor) compute capability of each visible GPU ((0, 0)
  where TensorFlow does not say)."""
  return [tuple(tf.config.experimental.get_device_details(gpu).get(
      "compute_capability") or (0, 0))
          for gpu in tf.config.list_physical_devices("GPU")]


def _resolve_auto_precision(shared):
  """`shared` with --precision=auto replaced by what it resolves to here,
  and the reason kept in its auto_precision field."""
  precision, reason = resolve_precision(shared.precision, cpu.cpu_features(),
                                        gpu_capabilities())
  if reason is None:
    return shared
  return dataclasses.replace(shared, precision=precision,
                             auto_precision=reason)


def _check_cpu_kernels(precision):
  """Refuses bf16 where the environment turned on CPU kernels that abort
  on it (hardware/cpu.conflict); a run on GPUs is not concerned."""
  if precision != "bf16" or tf.config.list_physical_devices("GPU"):
    return
  problem = cpu.conflict(cpu.cpu_features(), precision, os.environ)
  if problem:
    raise cli.UserError(problem)


def _log_cpu_kernels():
  """Logs the line of the CPU kernels this process loaded TensorFlow with
  (userio/quiet_tensorflow.py), when it chose them."""
  if quiet_tensorflow.CPU_KERNELS is not None:
    logging.info("%s", quiet_tensorflow.CPU_KERNELS.line)


def _check_precision(precision):
  """fp16 has no fast kernels on CPUs: refused unless a GPU is present."""
  if precision != "fp16":
    return
  if tf_internals.gpu_memory_limits() == {}:  # None: a GPU of unknown size.
    raise cli.UserError(
        "--precision=fp16 on a machine without a GPU: CPUs run float16 far "
        "slower than float32. Use --precision=bf16 (fast on CPUs with "
        "AVX-512 or AMX) or --precision=fp32.")


def _check_output_dir_flag(output_dir):
  """--output_dir (None: not defined) is given and not a file."""
  if output_dir is None:
    return
  if not output_dir:
    raise cli.UserError("--output_dir is required: the folder for "
                        "checkpoints and results.")
  if tf.io.gfile.exists(output_dir) and not tf.io.gfile.isdir(output_dir):
    raise cli.UserError("--output_dir=%s is a file, not a directory; pass a "
                        "directory (it is created if missing)." % output_dir)


def _check_memory_flags(shared, do_train):
  """--device_memory_gb, --micro_batch_size and the accumulation steps."""
  if shared.device_memory_gb is not None:
    memory_settings.device_memory(shared.device_memory_gb)
  micro = memory_settings.parse_micro_batch_size(shared.micro_batch_size)
  if do_train and shared.train_batch_size is not None:
    memory_settings.accumulation_steps(
        shared.train_batch_size, micro if isinstance(micro, int) else None,
        shared.explicit_accumulation_steps)


def check_flags(shared, *, do_train,
                min_seq_length=text_pair.MIN_SEQ_LENGTH_ONE_TEXT):
  """Checks the shared flags' values and combinations; reads no file.

  Args:
    shared: shared_flags.SharedFlags.
    do_train: whether the run trains.
    min_seq_length: the shortest --max_seq_length that leaves room for the
      script's input (tasks/text_pair.py: one text or a pair).

  Raises:
    cli.UserError naming the flag and the fix.
  """
  check_tpu_flags(shared.use_tpu, shared.tpu_name,
                  shared.changed_compatibility_flags)
  for name in ("train_batch_size", "eval_batch_size", "predict_batch_size"):
    _check_at_least(name, getattr(shared, name), 1)
  max_seq_length = shared.max_seq_length
  if max_seq_length is not None and max_seq_length < min_seq_length:
    raise cli.UserError(
        "--max_seq_length=%d leaves no room for the text: [CLS], [SEP] and "
        "at least one token of each text need %d; use e.g. 128." %
        (max_seq_length, min_seq_length))
  if do_train:
    _check_training_values(shared)
  _check_output_dir_flag(shared.output_dir)
  if shared.do_lower_case is not None:
    tokenization.validate_case_matches_checkpoint(shared.do_lower_case,
                                                  shared.init_checkpoint)
  _check_memory_flags(shared, do_train)
  _check_precision(shared.precision)
  if shared.distribution is not None:
    distribution_lib.check_flags(shared.distribution, shared.devices)


# ------------------------------------------------------------------ files


# The file a flag's folder usually holds, suggested when a folder is given.
_FILE_IN_FOLDER = {"vocab_file": run_info.WORDPIECE_VOCAB_FILE,
                   "bert_config_file": run_info.CONFIG_FILE}


def check_not_folder(flag_name, path, expected_name=None):
  """Refuses a folder as the file --flag_name names; points at the file
  `expected_name` in it when there is one (e.g. vocab.txt)."""
  if not path or not tf.io.gfile.isdir(path):
    return
  inside = os.path.join(path, expected_name) if expected_name else None
  hint = (" (e.g. --%s=%s)" % (flag_name, inside)
          if inside and tf.io.gfile.exists(inside) else "")
  raise cli.UserError("--%s=%s is a folder; pass the file itself%s." % (
      flag_name, path, hint))


def _check_file(flag_name, path):
  if not path:
    raise cli.UserError("--%s is required." % flag_name)
  if not tf.io.gfile.exists(path):
    raise cli.UserError("--%s=%s: file not found." % (flag_name, path))
  check_not_folder(flag_name, path, _FILE_IN_FOLDER.get(flag_name))


def check_required_files(shared, do_train, vocab_required=True):
  """The files a run needs exist, before anything reads them.

  --vocab_file (or --spm_model_file, which replaces it; unless
  `vocab_required` is False, when only a given one must exist) and
  --bert_config_file must exist; --init_checkpoint, when given, must be a
  checkpoint prefix (its `.index` file must exist). Without training,
  something must supply the weights: a checkpoint in --output_dir or
  --init_checkpoint.

  Raises:
    cli.UserError naming the flag and the fix.
  """
  if shared.spm_model_file:
    _check_file("spm_model_file", shared.spm_model_file)
  elif "vocab_file" in shared.defined and (shared.vocab_file or
                                           vocab_required):
    if not shared.vocab_file:
      raise cli.UserError("--vocab_file is required (or --spm_model_file "
                          "for a SentencePiece vocabulary).")
    _check_file("vocab_file", shared.vocab_file)
  _check_file("bert_config_file", shared.bert_config_file)
  if shared.init_checkpoint:
    checkpoint_checks.check_checkpoint_prefix(shared.init_checkpoint)
  if do_train or shared.init_checkpoint or checkpoint_checks.latest_checkpoint(
      shared.output_dir):
    return
  raise cli.UserError(
      "Nothing to evaluate or predict with: --output_dir=%s holds no "
      "checkpoint and --init_checkpoint is not set. Add --do_train, point "
      "--output_dir at a trained run, or set --init_checkpoint." %
      shared.output_dir)


def use_hf_init_checkpoint(shared, work_dir):
  """The flags with a Hugging Face model folder as --init_checkpoint
  replaced by its conversion.

  The folder is converted once into `work_dir` (conversion.
  resolve_init_checkpoint caches it by content) and --init_checkpoint
  becomes the converted checkpoint. --bert_config_file and --vocab_file,
  when not given, become the converted ones; --do_lower_case, when not given
  on the command line, becomes the model's casing. Anything else returns
  `shared` unchanged.

  Returns:
    shared_flags.SharedFlags.
  """
  path = shared.init_checkpoint
  if not path or not conversion.is_hf_folder(path):
    return shared
  prepare_output_dir(work_dir)
  prefix = conversion.resolve_init_checkpoint(path, work_dir)
  folder = os.path.dirname(prefix)
  changes = {"init_checkpoint": prefix}
  if not shared.bert_config_file:
    changes["bert_config_file"] = os.path.join(folder, run_info.CONFIG_FILE)
  if "vocab_file" in shared.defined and not (
      shared.vocab_file or shared.spm_model_file):
    changes["vocab_file"] = os.path.join(folder, conversion.VOCAB_FILE)
  if ("do_lower_case" in shared.defined and
      "do_lower_case" not in shared.given):
    changes["do_lower_case"] = run_info.read(folder)["do_lower_case"]
  logging.info("--init_checkpoint=%s is a Hugging Face model: using its "
               "conversion %s.", path, prefix)
  return dataclasses.replace(shared, **changes)


def load_bert_config(bert_config_file):
  """modeling.BertConfig of --bert_config_file; UserError naming the file."""
  _check_file("bert_config_file", bert_config_file)
  try:
    return modeling.BertConfig.from_json_file(bert_config_file)
  except cli.UserError:
    raise
  except (ValueError, TypeError, KeyError, AttributeError) as e:
    raise cli.UserError("--bert_config_file=%s is not a valid BERT config: "
                        "%s" % (bert_config_file, e)) from None


def _vocabulary_flag(vocab_file, spm_model_file):
  """How messages name the vocabulary: its flag and path."""
  return ("--spm_model_file=%s" % spm_model_file if spm_model_file else
          "--vocab_file=%s" % vocab_file)


def make_tokenizer(vocab_file, do_lower_case, spm_model_file=None):
  """The FullTokenizer of --vocab_file (or --spm_model_file, which replaces
  it) and --do_lower_case; None when neither file is given."""
  if not (spm_model_file or vocab_file):
    return None
  flag = _vocabulary_flag(vocab_file, spm_model_file)
  if spm_model_file:
    check_not_folder("spm_model_file", spm_model_file)
  else:
    check_not_folder("vocab_file", vocab_file,
                     _FILE_IN_FOLDER["vocab_file"])
  try:
    return tokenization.FullTokenizer(
        vocab_file=vocab_file, do_lower_case=do_lower_case,
        spm_model_file=spm_model_file)
  except UnicodeDecodeError as e:
    raise cli.UserError("%s is not UTF-8 text (%s); pass the vocab.txt of "
                        "the checkpoint." % (flag, e)) from None
  except (RuntimeError, OSError) as e:
    raise cli.UserError("%s is not a SentencePiece model (%s); pass the "
                        ".model file of the checkpoint." % (flag, e)
                        ) from None


def check_vocab(tokenizer, bert_config, *, vocab_file, spm_model_file,
                do_lower_case, bert_config_file):
  """The vocabulary fits the config's embeddings and --do_lower_case.

  Args:
    tokenizer: the FullTokenizer of `make_tokenizer`.
    bert_config: modeling.BertConfig of `bert_config_file`.
    vocab_file, spm_model_file, do_lower_case, bert_config_file: the
      flags' values, named in messages; do_lower_case None for a script
      that reads token ids, not text (no casing to check).
  """
  flag = _vocabulary_flag(vocab_file, spm_model_file)
  if len(tokenizer.vocab) > bert_config.vocab_size:
    raise cli.UserError(
        "%s has %d tokens, more than the vocab_size=%d of "
        "--bert_config_file=%s, so its last ids have no embedding; pass the "
        "vocabulary that belongs to the model." % (
            flag, len(tokenizer.vocab), bert_config.vocab_size,
            bert_config_file))
  if do_lower_case is not None:
    tokenization.validate_case_matches_vocab(do_lower_case, tokenizer.vocab,
                                             flag)


def check_max_seq_length(max_seq_length, bert_config, bert_config_file):
  """Refuses a --max_seq_length beyond the model's position embeddings."""
  if max_seq_length > bert_config.max_position_embeddings:
    raise cli.UserError(
        "--max_seq_length=%d is longer than the model's position "
        "embeddings (max_position_embeddings=%d in --bert_config_file=%s); "
        "lower --max_seq_length to at most %d."
        % (max_seq_length, bert_config.max_position_embeddings,
           bert_config_file, bert_config.max_position_embeddings))


def start(shared, *, do_train,
          min_seq_length=text_pair.MIN_SEQ_LENGTH_ONE_TEXT,
          vocab_required=True):
  """Logging on; flags, files, config and vocabulary checked.

  Reads the config and the vocabulary, nothing bigger (a Hugging Face
  --init_checkpoint is converted first).

  Args:
    shared: shared_flags.SharedFlags of the command line.
    do_train: whether the run trains.
    min_seq_length: see `check_flags`.
    vocab_required: False for a script whose --vocab_file is optional
      (run_pretraining.py reads token ids; a vocabulary given is checked
      against the config all the same).

  Returns:
    Start(flags, bert_config, tokenizer).
  """
  verbosity.start_logging()
  check_flags(shared, do_train=do_train, min_seq_length=min_seq_length)
  shared = _resolve_auto_precision(shared)
  _check_cpu_kernels(shared.precision)
  _note_slow_precision(shared.precision)
  shared = use_hf_init_checkpoint(shared, shared.output_dir)
  check_required_files(shared, do_train, vocab_required)
  bert_config = load_bert_config(shared.bert_config_file)
  check_max_seq_length(shared.max_seq_length, bert_config,
                       shared.bert_config_file)
  tokenizer = make_tokenizer(shared.vocab_file, shared.do_lower_case,
                             shared.spm_model_file)
  if tokenizer is not None:
    check_vocab(tokenizer, bert_config, vocab_file=shared.vocab_file,
                spm_model_file=shared.spm_model_file,
                do_lower_case=shared.do_lower_case,
                bert_config_file=shared.bert_config_file)
  return Start(shared, bert_config, tokenizer)


# ------------------------------------------------------------- output_dir


def check_output_dir(output_dir, record, *, do_train):
  """Refuses to continue a run in `output_dir` that `record` contradicts
  (another task, labels, casing, config, vocabulary; or, when training,
  another --max_seq_length). See checkpoints/run_info.py."""
  run_info.check(
      output_dir, record,
      has_checkpoint=bool(checkpoint_checks.latest_checkpoint(output_dir)),
      do_train=do_train)


def lock_output_dir(output_dir):
  """Takes the lock of --output_dir (userio/folder_lock.py); the folder must
  exist (prepare_output_dir).

  Returns:
    The FolderLock, held while the caller keeps it.

  Raises:
    cli.UserError naming the run that holds it.
  """
  return folder_lock.hold(output_dir, flag="--output_dir")


def prepare_output_dir(output_dir, flag="--output_dir"):
  """Creates the folder and makes sure this process can write there.

  Args:
    output_dir: the folder.
    flag: how messages name it (e.g. "the folder of --output_file=...").
  """
  try:
    tf.io.gfile.makedirs(output_dir)
  except (tf.errors.OpError, OSError) as e:
    raise cli.UserError("%s=%s cannot be created (%s); pass a folder you can "
                        "write to." % (flag, output_dir,
                                       " ".join(str(e).split()))) from None
  if "://" in output_dir:
    return  # Remote file systems report their own errors on writing.
  try:
    with tempfile.TemporaryFile(dir=output_dir):
      pass
  except OSError as e:
    raise cli.UserError("%s=%s is not writable (%s); pass a folder you can "
                        "write to." % (flag, output_dir, e.strerror)
                        ) from None


# ------------------------------------------------------------------ setup


def resolve_memory(shared, bert_config, do_train, distribution=None,
                   step_memory=None):
  """The memory_settings.MemorySettings of the memory flags.

  Args:
    shared: shared_flags.SharedFlags.
    bert_config: modeling.BertConfig of the model.
    do_train: whether the run trains.
    distribution: the strategy of distribution.make_distribution, or None.
    step_memory: what a training step keeps in memory (default:
      memory_model.BertMemory of the config, --max_seq_length and
      --optimizer).
  """
  return memory_settings.resolve(
      _step_memory(shared, bert_config, step_memory),
      train_batch_size=shared.train_batch_size,
      micro_batch_size=shared.micro_batch_size,
      num_accumulation_steps=shared.explicit_accumulation_steps,
      precision=shared.precision,
      gradient_checkpointing=shared.explicit_gradient_checkpointing,
      device_memory_gb=shared.device_memory_gb,
      max_seq_length=shared.max_seq_length, do_train=do_train,
      distribution=distribution)


def _step_memory(shared, bert_config, step_memory):
  """`step_memory`, or the BertMemory of the config and the flags."""
  if step_memory is not None:
    return step_memory
  return memory_model.BertMemory(bert_config, shared.max_seq_length,
                                 shared.optimizer)


def make_run_config(shared, memory=None, distribution=None,
                    oom_message_fn=None):
  """The estimator.RunConfig of the flags and the resolved settings.

  Args:
    shared: shared_flags.SharedFlags.
    memory: memory_settings.MemorySettings; default: --num_accumulation_steps
      checked by memory_settings.accumulation_steps.
    distribution: the strategy of distribution.make_distribution (None: one
      device).
    oom_message_fn: callable(ResourceExhaustedError) -> str, or None.
  """
  if memory is None:
    steps = memory_settings.accumulation_steps(
        shared.train_batch_size, None, shared.num_accumulation_steps)
  else:
    steps = memory.num_accumulation_steps
  return estimator.RunConfig(
      model_dir=shared.output_dir,
      save_checkpoints_steps=shared.save_checkpoints_steps,
      save_checkpoints_secs=shared.save_checkpoints_secs or None,
      keep_checkpoint_max=shared.keep_checkpoint_max,
      log_step_count_steps=shared.log_step_count_steps,
      log_step_count_secs=TRAINING_PROGRESS_SECS,
      save_summary_steps=shared.save_summary_steps,
      tf_random_seed=shared.seed,
      num_accumulation_steps=steps,
      oom_message_fn=oom_message_fn,
      distribution=distribution,
      use_xla=shared.use_xla)


def skip_padding(requested, use_xla):
  """Whether the model skips the padding tokens (modeling.BertModel's
  `skip_padding`): as --skip_padding asks, but never under XLA, which
  compiles the graph for fixed shapes while the number of real tokens
  changes from batch to batch. Saying so when it turns the request down.

  Args:
    requested: bool, --skip_padding (or what a script without that flag
      always asks for).
    use_xla: bool, --use_xla (False for a script that never compiles with
      XLA).

  Returns:
    bool.
  """
  if requested and use_xla:
    logging.info("--skip_padding is off with --use_xla: XLA compiles the "
                 "graph for fixed shapes, and the number of real tokens "
                 "changes from batch to batch.")
    return False
  return bool(requested)


def set_up(shared, bert_config, *, do_train, record=None, step_memory=None,
           heads=()):
  """Locks output_dir (the chief of a multi-worker cluster alone: the
  workers share it), checks the checkpoints, then makes the run's settings.

  Args:
    shared: shared_flags.SharedFlags, as `start` returned them.
    bert_config: modeling.BertConfig of the model.
    do_train: whether the run trains.
    record: the run_info.json of this run (run_info.make_record), which
      `check_output_dir` compared with the stored one; a training run
      writes it (with copies of the config and the vocabulary). None: no
      record.
    step_memory: what a training step keeps in memory (default:
      memory_model.BertMemory of the config); a script whose model adds
      heads passes its own.
    heads: (name, shape) of the variables the script's model adds to BERT
      that --init_checkpoint may lack (they then start fresh, which is
      logged), e.g. checkpoint_checks.pretraining_head_shapes; a present one
      must have the shape, and a checkpoint a run resumes from must hold
      them all.

  Returns:
    RunSetup.
  """
  output_dir = shared.output_dir
  prepare_output_dir(output_dir)
  distribution = distribution_lib.make_distribution(shared.distribution,
                                                    shared.devices)
  # Before the checkpoints are read: another run may be writing them.
  lock = (lock_output_dir(output_dir) if estimator.is_chief(distribution)
          else None)
  checkpoint_checks.check_checkpoints(
      output_dir, shared.init_checkpoint, bert_config,
      shared.bert_config_file, do_train=do_train, heads=heads)
  model = _step_memory(shared, bert_config, step_memory)
  memory = resolve_memory(shared, bert_config, do_train, distribution, model)
  oom_message_fn = out_of_memory.training_advice_fn(model, memory,
                                                    shared.train_batch_size)
  run_config = make_run_config(shared, memory, distribution, oom_message_fn)
  for line in settings_lines(shared, bert_config, memory, do_train=do_train):
    logging.info("%s", line)
  _log_cpu_kernels()
  if do_train and record is not None:
    run_info.write(output_dir, record, shared.bert_config_file,
                   shared.vocab_file, shared.spm_model_file)
  return RunSetup(distribution, memory, run_config, oom_message_fn, lock)


def settings_lines(shared, bert_config, memory, *, do_train):
  """The run's settings in a few lines, for the start of its log.

  Args:
    shared: shared_flags.SharedFlags of the run.
    bert_config: modeling.BertConfig of the model.
    memory: memory_settings.MemorySettings the run resolved.
    do_train: whether the run trains.

  Returns:
    list of str.
  """
  latest = checkpoint_checks.latest_checkpoint(shared.output_dir)
  weights = (latest or shared.init_checkpoint or
             "random initialization (no --init_checkpoint)")
  lines = ["Model: %s (%d layers, hidden size %d); weights: %s." % (
      shared.bert_config_file, bert_config.num_hidden_layers,
      bert_config.hidden_size, weights)]
  settings = "Settings: max_seq_length=%s, precision=%s" % (
      shared.max_seq_length, memory.precision)
  if shared.auto_precision:
    settings += " (auto: %s)" % shared.auto_precision
  if do_train and shared.train_batch_size is not None:
    settings += ", train_batch_size=%d (%d micro-batch%s of %d per update)" % (
        shared.train_batch_size, memory.num_accumulation_steps,
        "" if memory.num_accumulation_steps == 1 else "es",
        memory.micro_batch_size)
    if memory.gradient_checkpointing:
      settings += ", gradient checkpointing"
  lines.append(settings + ".")
  lines.append("Output: %s" % shared.output_dir)
  return lines


def num_train_and_warmup_steps(num_examples, train_batch_size,
                               num_train_epochs, warmup_proportion,
                               data_file=None):
  """(num_train_steps, num_warmup_steps) computed as the original does.

  Args:
    num_examples: training examples.
    train_batch_size, num_train_epochs, warmup_proportion: the flags.
    data_file: the file the examples came from, named in the message.

  Raises:
    cli.UserError when the flags and data give no training step.
  """
  num_train_steps = int(num_examples / train_batch_size * num_train_epochs)
  if num_train_steps < 1:
    raise cli.UserError(
        "%d training examples%s / --train_batch_size=%d x "
        "--num_train_epochs=%s gives no training step; raise "
        "--num_train_epochs or lower --train_batch_size." % (
            num_examples, " in %s" % data_file if data_file else "",
            train_batch_size, num_train_epochs))
  num_warmup_steps = int(num_train_steps * warmup_proportion)
  return num_train_steps, num_warmup_steps
