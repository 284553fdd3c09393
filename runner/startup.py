# coding=utf-8
"""From the parsed flags to what a training script runs with, in one place.

A training script (run_classifier.py, run_squad.py, run_pretraining.py)
defines its flags with runner/shared_flags.py and its `main` does:

    bert_config, tokenizer = startup.start(FLAGS, do_train=FLAGS.do_train,
                                             min_seq_length=...)
    record = run_info.make_record(...)
    startup.check_output_dir(FLAGS, record, do_train=FLAGS.do_train)
    ... read and check the script's own data files ...
    setup = startup.set_up(FLAGS, bert_config, do_train=FLAGS.do_train,
                             record=...)
    estimator = estimator_lib.Estimator(model_fn, config=setup.run_config,
                                        ...)

`start` checks everything that costs nothing (flag values and
combinations, the config, the vocabulary against the config and the
casing); `check_output_dir` refuses an --output_dir whose run_info.json
contradicts this run; `set_up` checks the checkpoints and the output
directory and makes the `RunSetup`: distribution strategy, memory
settings (micro-batch, accumulation steps, checkpointing, precision), the
out-of-memory advice and the `estimator.RunConfig`. They raise
cli.UserError for bad input and never exit. Flags a script does not
define are skipped, so a script with fewer flags (pretraining has no
vocabulary) uses the same functions.
"""

import collections
import json
import math
import os
import tempfile

from absl import logging
import tensorflow as tf

from checkpoints import checkpoint_checks
from userio import cli
from checkpoints import conversion
from runner import estimator
from runner import memory_settings
import modeling
from checkpoints import run_info
from runner import shared_flags
from tasks import text_pair
from engine import tf_internals
import tokenization

_TF_CONFIG_EXAMPLE = (
    '{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
    '"task": {"type": "worker", "index": 0}}')


class RunSetup(collections.namedtuple(
    "RunSetup", ["distribution", "memory", "run_config", "oom_message_fn"])):
  """What the flags make of a run.

  Fields:
    distribution: the tf.distribute strategy, or None for one device.
    memory: memory_settings.MemorySettings (precision, micro_batch_size,
      num_accumulation_steps, gradient_checkpointing, device, replicas).
    run_config: the estimator.RunConfig.
    oom_message_fn: callable(ResourceExhaustedError) -> the out-of-memory
      advice (also in run_config).
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


def _flag(flag_obj, name):
  """The value of flag `name`, or None when the script does not define it."""
  return getattr(flag_obj, name, None)


# ------------------------------------------------------------------ flags


def check_tpu_flags(flag_obj):
  """Refuses --use_tpu / --tpu_name; says once that the other TPU flags,
  when set, do nothing."""
  if _flag(flag_obj, "use_tpu") or _flag(flag_obj, "tpu_name"):
    raise cli.UserError("--use_tpu/--tpu_name: no TPU support in this build; "
                        "run on CPU/GPU without them")
  ignored = ["--%s=%s" % (name, flag_obj[name].value)
             for name in shared_flags.COMPATIBILITY_FLAGS
             if name in flag_obj and
             flag_obj[name].value != flag_obj[name].default]
  if ignored:
    logging.info("%s: accepted for compatibility with Google's commands; "
                 "without effect on CPU/GPU.", ", ".join(ignored))


def _check_at_least(flag_obj, name, minimum):
  value = _flag(flag_obj, name)
  if value is not None and value < minimum:
    raise cli.UserError("--%s=%s must be at least %d." % (name, value,
                                                         minimum))


def _check_positive_float(flag_obj, name, fix):
  value = _flag(flag_obj, name)
  if value is not None and not (math.isfinite(value) and value > 0):
    raise cli.UserError("--%s=%s must be a positive number; %s" % (
        name, value, fix))


def _check_training_values(flag_obj):
  """The values that matter only when the run trains."""
  _check_positive_float(flag_obj, "learning_rate",
                        "BERT fine-tunes with 1e-5 to 5e-5 and pre-trains "
                        "with about 1e-4.")
  _check_positive_float(flag_obj, "num_train_epochs",
                        "e.g. --num_train_epochs=3.")
  warmup = _flag(flag_obj, "warmup_proportion")
  if warmup is not None and not 0 <= warmup <= 1:
    raise cli.UserError(
        "--warmup_proportion=%s must be between 0 and 1 (the fraction of "
        "the training steps that warm up, e.g. 0.1)." % warmup)
  _check_at_least(flag_obj, "save_checkpoints_steps", 1)
  secs = _flag(flag_obj, "save_checkpoints_secs")
  if secs is not None and not (math.isfinite(secs) and secs >= 0):
    raise cli.UserError("--save_checkpoints_secs=%s must be 0 (off) or a "
                        "positive number of seconds, e.g. 300." % secs)
  _check_at_least(flag_obj, "keep_checkpoint_max", 0)
  _check_at_least(flag_obj, "log_step_count_steps", 1)


def _check_precision(flag_obj):
  """fp16 has no fast kernels on CPUs: refused unless a GPU is present."""
  if _flag(flag_obj, "precision") != "fp16":
    return
  if tf_internals.gpu_memory_limits() == {}:  # None: a GPU of unknown size.
    raise cli.UserError(
        "--precision=fp16 on a machine without a GPU: CPUs run float16 far "
        "slower than float32. Use --precision=bf16 (fast on CPUs with "
        "AVX-512 or AMX) or --precision=fp32.")


def _check_output_dir_flag(flag_obj):
  output_dir = _flag(flag_obj, "output_dir")
  if output_dir is None:
    return
  if not output_dir:
    raise cli.UserError("--output_dir is required: the folder for "
                        "checkpoints and results.")
  if tf.io.gfile.exists(output_dir) and not tf.io.gfile.isdir(output_dir):
    raise cli.UserError("--output_dir=%s is a file, not a directory; pass a "
                        "directory (it is created if missing)." % output_dir)


def check_flags(flag_obj, *, do_train, min_seq_length=text_pair.MIN_SEQ_LENGTH_ONE_TEXT):
  """Checks the shared flags' values and combinations; reads no file.

  Args:
    flag_obj: parsed absl FlagValues.
    do_train: whether the run trains.
    min_seq_length: the shortest --max_seq_length that leaves room for the
      script's input (3 for one sentence, 5 for a pair).

  Raises:
    cli.UserError naming the flag and the fix.
  """
  check_tpu_flags(flag_obj)
  for name in ("train_batch_size", "eval_batch_size", "predict_batch_size"):
    _check_at_least(flag_obj, name, 1)
  max_seq_length = _flag(flag_obj, "max_seq_length")
  if max_seq_length is not None and max_seq_length < min_seq_length:
    raise cli.UserError(
        "--max_seq_length=%d leaves no room for the text: [CLS], [SEP] and "
        "at least one token of each text need %d; use e.g. 128." %
        (max_seq_length, min_seq_length))
  if do_train:
    _check_training_values(flag_obj)
  _check_output_dir_flag(flag_obj)
  if "do_lower_case" in flag_obj:
    tokenization.validate_case_matches_checkpoint(
        flag_obj.do_lower_case, _flag(flag_obj, "init_checkpoint"))
  gb = _flag(flag_obj, "device_memory_gb")
  if gb is not None:
    memory_settings.device_memory(gb)
  micro = memory_settings.parse_micro_batch_size(
      _flag(flag_obj, "micro_batch_size"))
  if do_train and "train_batch_size" in flag_obj:
    memory_settings.accumulation_steps(
        flag_obj.train_batch_size, micro if isinstance(micro, int) else None,
        memory_settings.explicit_steps(flag_obj))
  _check_precision(flag_obj)
  if "distribution" in flag_obj:
    check_distribution_flags(flag_obj)


# ------------------------------------------------------------------ files


def _check_file(flag_name, path):
  if not path:
    raise cli.UserError("--%s is required." % flag_name)
  if not tf.io.gfile.exists(path):
    raise cli.UserError("--%s=%s: file not found." % (flag_name, path))


def check_required_files(flag_obj, do_train):
  """The files a run needs exist, before anything reads them.

  --vocab_file (or --spm_model_file, which replaces it) and
  --bert_config_file must exist; --init_checkpoint, when given, must be a
  checkpoint prefix (its `.index` file must exist). Without training,
  something must supply the weights: a checkpoint in --output_dir or
  --init_checkpoint.

  Raises:
    cli.UserError naming the flag and the fix.
  """
  if _flag(flag_obj, "spm_model_file"):
    _check_file("spm_model_file", flag_obj.spm_model_file)
  elif "vocab_file" in flag_obj:
    if not flag_obj.vocab_file:
      raise cli.UserError("--vocab_file is required (or --spm_model_file "
                          "for a SentencePiece vocabulary).")
    _check_file("vocab_file", flag_obj.vocab_file)
  _check_file("bert_config_file", flag_obj.bert_config_file)
  init_checkpoint = _flag(flag_obj, "init_checkpoint")
  if init_checkpoint:
    checkpoint_checks.check_checkpoint_prefix(init_checkpoint)
  if do_train or init_checkpoint or checkpoint_checks.latest_checkpoint(
      flag_obj.output_dir):
    return
  raise cli.UserError(
      "Nothing to evaluate or predict with: --output_dir=%s holds no "
      "checkpoint and --init_checkpoint is not set. Add --do_train, point "
      "--output_dir at a trained run, or set --init_checkpoint." %
      flag_obj.output_dir)


def use_hf_init_checkpoint(flag_obj, work_dir):
  """Lets --init_checkpoint name a Hugging Face model folder.

  The folder is converted once into `work_dir` (conversion.s
  resolve_init_checkpoint caches it by content) and --init_checkpoint is
  pointed at the converted checkpoint. --bert_config_file and --vocab_file,
  when not given, become the converted ones; --do_lower_case, when not given
  on the command line, becomes the model's casing. Anything else leaves the
  flags alone.
  """
  path = _flag(flag_obj, "init_checkpoint")
  if not path or not conversion.is_hf_folder(path):
    return
  prepare_output_dir(work_dir)
  prefix = conversion.resolve_init_checkpoint(path, work_dir)
  folder = os.path.dirname(prefix)
  flag_obj.init_checkpoint = prefix
  if not _flag(flag_obj, "bert_config_file"):
    flag_obj.bert_config_file = os.path.join(folder, run_info.CONFIG_FILE)
  if "vocab_file" in flag_obj and not (
      flag_obj.vocab_file or _flag(flag_obj, "spm_model_file")):
    flag_obj.vocab_file = os.path.join(folder, conversion.VOCAB_FILE)
  if "do_lower_case" in flag_obj and not flag_obj["do_lower_case"].present:
    flag_obj.do_lower_case = run_info.read(folder)["do_lower_case"]
  logging.info("--init_checkpoint=%s is a Hugging Face model: using its "
               "conversion %s.", path, prefix)


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


def make_tokenizer(flag_obj):
  """The FullTokenizer of the vocabulary flags (None without them)."""
  spm_model_file = _flag(flag_obj, "spm_model_file")
  vocab_file = _flag(flag_obj, "vocab_file")
  if not (spm_model_file or vocab_file):
    return None
  flag = ("--spm_model_file=%s" % spm_model_file if spm_model_file else
          "--vocab_file=%s" % vocab_file)
  try:
    return tokenization.FullTokenizer(
        vocab_file=vocab_file, do_lower_case=flag_obj.do_lower_case,
        spm_model_file=spm_model_file)
  except UnicodeDecodeError as e:
    raise cli.UserError("%s is not UTF-8 text (%s); pass the vocab.txt of "
                        "the checkpoint." % (flag, e)) from None
  except (RuntimeError, OSError) as e:
    raise cli.UserError("%s is not a SentencePiece model (%s); pass the "
                        ".model file of the checkpoint." % (flag, e)
                        ) from None


def check_vocab(flag_obj, bert_config, tokenizer):
  """The vocabulary fits the config's embeddings and --do_lower_case."""
  flag = ("--spm_model_file=%s" % flag_obj.spm_model_file
          if _flag(flag_obj, "spm_model_file") else
          "--vocab_file=%s" % flag_obj.vocab_file)
  if len(tokenizer.vocab) > bert_config.vocab_size:
    raise cli.UserError(
        "%s has %d tokens, more than the vocab_size=%d of "
        "--bert_config_file=%s, so its last ids have no embedding; pass the "
        "vocabulary that belongs to the model." % (
            flag, len(tokenizer.vocab), bert_config.vocab_size,
            flag_obj.bert_config_file))
  tokenization.validate_case_matches_vocab(flag_obj.do_lower_case,
                                           tokenizer.vocab, flag)


def check_max_seq_length(flag_obj, bert_config):
  """Refuses a --max_seq_length beyond the model's position embeddings."""
  if flag_obj.max_seq_length > bert_config.max_position_embeddings:
    raise cli.UserError(
        "--max_seq_length=%d is longer than the model's position "
        "embeddings (max_position_embeddings=%d in --bert_config_file=%s); "
        "lower --max_seq_length to at most %d."
        % (flag_obj.max_seq_length, bert_config.max_position_embeddings,
           _flag(flag_obj, "bert_config_file"),
           bert_config.max_position_embeddings))


def start(flag_obj, *, do_train, min_seq_length=text_pair.MIN_SEQ_LENGTH_ONE_TEXT):
  """Logging on; flags, files, config and vocabulary checked.

  Reads the config and the vocabulary, nothing bigger.

  Returns:
    (bert_config, tokenizer): the modeling.BertConfig of --bert_config_file
    and the tokenization.FullTokenizer of the vocabulary flags (None for a
    script without them).
  """
  logging.set_verbosity(logging.INFO)
  check_flags(flag_obj, do_train=do_train, min_seq_length=min_seq_length)
  use_hf_init_checkpoint(flag_obj, flag_obj.output_dir)
  check_required_files(flag_obj, do_train)
  bert_config = load_bert_config(flag_obj.bert_config_file)
  check_max_seq_length(flag_obj, bert_config)
  tokenizer = make_tokenizer(flag_obj)
  if tokenizer is not None:
    check_vocab(flag_obj, bert_config, tokenizer)
  return bert_config, tokenizer


# ------------------------------------------------------------ checkpoints


def check_checkpoints(flag_obj, bert_config, *, do_train, heads=()):
  return checkpoint_checks.check_checkpoints(
      flag_obj.output_dir, _flag(flag_obj, "init_checkpoint"), bert_config,
      flag_obj.bert_config_file, do_train=do_train, heads=heads)


# ------------------------------------------------------------- output_dir


def check_output_dir(flag_obj, record, *, do_train):
  """Refuses to continue a run in --output_dir that `record` contradicts
  (another task, labels, casing, config, vocabulary; or, when training,
  another --max_seq_length). See checkpoints/run_info.py."""
  run_info.check(
      flag_obj.output_dir, record,
      has_checkpoint=bool(checkpoint_checks.latest_checkpoint(flag_obj.output_dir)),
      do_train=do_train)


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


# --------------------------------------------------------------- strategy


def make_distribution(flag_obj):
  """The tf.distribute strategy --distribution asks for, or None.

  Raises:
    cli.UserError naming the flag (or TF_CONFIG) and the fix.
  """
  check_distribution_flags(flag_obj)
  if flag_obj.distribution == "none":
    return None
  if flag_obj.distribution == "mirrored":
    return tf.compat.v1.distribute.MirroredStrategy(
        devices=_mirrored_devices(flag_obj.devices))
  return tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy()


def check_distribution_flags(flag_obj):
  """--distribution, --devices and TF_CONFIG agree (nothing is started)."""
  if flag_obj.distribution == "none":
    if flag_obj.devices:
      raise cli.UserError("--devices=%s needs --distribution=mirrored." %
                          ",".join(flag_obj.devices))
  elif flag_obj.distribution == "multi_worker":
    if flag_obj.devices:
      raise cli.UserError("--devices applies to --distribution=mirrored "
                          "only; multi_worker uses each worker's default "
                          "device.")
    _check_tf_config(os.environ.get("TF_CONFIG"))


def _mirrored_devices(devices):
  """--devices checked against this machine (default: all local GPUs).

  CPUs /cpu:1, /cpu:2, ... do not exist by default; asking for them splits
  the one physical CPU into that many logical devices, which TensorFlow
  allows only before it first runs anything.
  """
  if not devices:
    devices = [d.name for d in tf.config.list_logical_devices("GPU")]
    if len(devices) < 2:
      raise cli.UserError(
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
    raise cli.UserError(
        "--devices: %s not found on this machine (it has %s)." %
        (", ".join(missing),
         ", ".join(d.name for d in tf.config.list_logical_devices())))
  return devices


def _device_spec(flag_name, device):
  """tf.DeviceSpec of a device name like /gpu:0 (type upper-cased)."""
  try:
    spec = tf.DeviceSpec.from_string(device)
  except ValueError:
    spec = None
  if spec is None or not spec.device_type:
    raise cli.UserError("--%s: %r is not a device name like /gpu:0 or "
                        "/cpu:1." % (flag_name, device))
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
    raise cli.UserError(
        "--devices asks for %d CPUs, but TensorFlow was initialized before "
        "the CPU could be split: %s" % (count, e)) from None


def _check_tf_config(tf_config):
  """Validates the TF_CONFIG environment variable for multi_worker."""
  fix = ("Set TF_CONFIG on every worker to JSON like %s, with this worker's "
         "own task index." % _TF_CONFIG_EXAMPLE)
  if not tf_config:
    raise cli.UserError("--distribution=multi_worker needs the TF_CONFIG "
                        "environment variable. " + fix)
  try:
    config = json.loads(tf_config)
    cluster, task = config["cluster"], config["task"]
    workers = list(cluster.get("chief", [])) + list(cluster.get("worker", []))
    task_type, index = task["type"], int(task["index"])
    addresses = cluster[task_type]
    address = addresses[index]
  except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
    raise cli.UserError("TF_CONFIG=%s is malformed (%s: %s). %s" %
                        (tf_config, type(e).__name__, e, fix)) from None
  if task_type not in ("chief", "worker") or not workers or ":" not in str(
      address):
    raise cli.UserError("TF_CONFIG=%s: the task must be a \"chief\" or "
                        "\"worker\" with a host:port address. %s" %
                        (tf_config, fix))


# ------------------------------------------------------------------ setup


def make_run_config(flag_obj, memory=None, distribution=None,
                    oom_message_fn=None):
  """The estimator.RunConfig of the flags and the resolved settings.

  Args:
    flag_obj: parsed flags.
    memory: memory_settings.MemorySettings; default: --num_accumulation_steps
      checked by memory_settings.accumulation_steps.
    distribution: the strategy of `make_distribution` (None: one device).
    oom_message_fn: callable(ResourceExhaustedError) -> str, or None.
  """
  if memory is None:
    steps = memory_settings.accumulation_steps(
        flag_obj.train_batch_size, None, flag_obj.num_accumulation_steps)
  else:
    steps = memory.num_accumulation_steps
  return estimator.RunConfig(
      model_dir=flag_obj.output_dir,
      save_checkpoints_steps=flag_obj.save_checkpoints_steps,
      save_checkpoints_secs=flag_obj.save_checkpoints_secs or None,
      keep_checkpoint_max=flag_obj.keep_checkpoint_max,
      log_step_count_steps=flag_obj.log_step_count_steps,
      tf_random_seed=flag_obj.seed,
      num_accumulation_steps=steps,
      oom_message_fn=oom_message_fn,
      distribution=distribution,
      use_xla=flag_obj.use_xla)


def set_up(flag_obj, bert_config, *, do_train, record=None,
           memory_model=None, heads=()):
  """Checks checkpoints and output_dir, then makes the run's settings.

  Args:
    flag_obj: parsed flags, checked by `start`.
    bert_config: modeling.BertConfig of the model.
    do_train: whether the run trains.
    record: the run_info.json of this run (run_info.make_record), which
      `check_output_dir` compared with the stored one; a training run
      writes it (with copies of the config and the vocabulary). None: no
      record.
    memory_model: what a training step keeps in memory (default:
      memory_settings.BertMemory of the config); a script whose model adds
      heads passes its own.
    heads: (name, shape) of the variables the script's model adds to BERT
      that --init_checkpoint may lack (they then start fresh, which is
      logged), e.g. checkpoint_checks.pretraining_head_shapes; a present one
      must have the shape, and a checkpoint a run resumes from must hold
      them all.

  Returns:
    RunSetup.
  """
  output_dir = flag_obj.output_dir
  check_checkpoints(flag_obj, bert_config, do_train=do_train, heads=heads)
  prepare_output_dir(output_dir)
  distribution = make_distribution(flag_obj)
  memory = memory_settings.resolve(flag_obj, bert_config, do_train,
                                distribution, memory_model)
  oom_message_fn = memory_settings.oom_message_fn(bert_config, flag_obj, memory,
                                               memory_model)
  run_config = make_run_config(flag_obj, memory, distribution, oom_message_fn)
  if do_train and record is not None:
    run_info.write(output_dir, record, flag_obj.bert_config_file,
                     _flag(flag_obj, "vocab_file"),
                     _flag(flag_obj, "spm_model_file"))
  return RunSetup(distribution, memory, run_config, oom_message_fn)


def num_train_and_warmup_steps(num_examples, flag_obj, data_file=None):
  """(num_train_steps, num_warmup_steps) computed as the original does.

  Raises:
    cli.UserError when the flags and data give no training step.
  """
  num_train_steps = int(
      num_examples / flag_obj.train_batch_size * flag_obj.num_train_epochs)
  if num_train_steps < 1:
    raise cli.UserError(
        "%d training examples%s / --train_batch_size=%d x "
        "--num_train_epochs=%s gives no training step; raise "
        "--num_train_epochs or lower --train_batch_size." % (
            num_examples, " in %s" % data_file if data_file else "",
            flag_obj.train_batch_size, flag_obj.num_train_epochs))
  num_warmup_steps = int(num_train_steps * flag_obj.warmup_proportion)
  return num_train_steps, num_warmup_steps
