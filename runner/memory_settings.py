# coding=utf-8
"""Precision, checkpointing and micro-batch of a training run, and its advice.

`resolve` turns the flags that runner/shared_flags.py defines (--precision,
--gradient_checkpointing, --micro_batch_size, --device_memory_gb,
--num_accumulation_steps) into the `MemorySettings` a run uses, asking the
model's memory estimate (`BertMemory`, memory_plan.py's term model) when
--micro_batch_size=auto; `accumulation_steps` is the one place where the
accumulation steps are derived and checked. `oom_message_fn` words the
out-of-memory advice the runner raises. runner/startup.py calls these; ending
the program is userio/cli.py's business, not this module's.
"""

import collections
import math

from absl import logging
import tensorflow as tf

from userio import cli
from runner import estimator
from runner import memory_model
from engine import tf_internals

AUTO = "auto"
MEMINFO = "/proc/meminfo"
_COMPUTE_DTYPES = {"fp32": tf.float32, "fp16": tf.float16,
                   "bf16": tf.bfloat16}

DeviceMemory = collections.namedtuple("DeviceMemory", ["bytes", "source"])


class Replicas(collections.namedtuple("Replicas",
                                     ["total", "local", "per_memory"])):
  """How the replicas of a data-parallel run share memory.

  Fields:
    total: replicas training in sync, over all workers; each holds its own
      copy of the weights, gradients and optimizer slots, and 1/total of
      every micro-batch.
    local: the replicas of this process (fewer than `total` with
      multi_worker).
    per_memory: replicas of this process that share one memory: the
      logical CPU devices of a process share its RAM, every GPU has its own
      (1).
  """


ONE_DEVICE = Replicas(1, 1, 1)


def replicas_of(distribution):
  """Replicas of a tf.distribute strategy (ONE_DEVICE for None)."""
  if distribution is None:
    return ONE_DEVICE
  devices = distribution.extended.worker_devices
  cpus = sum(1 for device in devices
             if tf.DeviceSpec.from_string(device).device_type == "CPU")
  return Replicas(distribution.num_replicas_in_sync, len(devices),
                  max(1, cpus))


class MemorySettings(collections.namedtuple(
    "MemorySettings", ["precision", "micro_batch_size",
                       "num_accumulation_steps", "gradient_checkpointing",
                       "device", "replicas"], defaults=(ONE_DEVICE,))):
  """What a run uses.

  Fields:
    precision: "fp32", "fp16" or "bf16".
    micro_batch_size: examples per session.run of the train op, over all
      replicas.
    num_accumulation_steps: micro-batches per optimizer update.
    gradient_checkpointing: bool.
    device: DeviceMemory (bytes, where the number comes from) or None when
      it could not be found out. The bytes are shared by
      `replicas.per_memory` replicas.
    replicas: Replicas of the run (ONE_DEVICE by default).
  """

  @property
  def replica_micro_batch_size(self):
    """Examples of a micro-batch on one replica."""
    return self.micro_batch_size // self.replicas.total

  @property
  def replica_memory(self):
    """DeviceMemory one replica may use, or None when unknown."""
    if self.device is None:
      return None
    return _replica_memory(self.device, self.replicas)

  @property
  def replica_memory_bytes(self):
    """The bytes of `replica_memory`, or None when unknown."""
    memory = self.replica_memory
    return None if memory is None else memory.bytes

  @property
  def compute_dtype(self):
    """The tf.DType of BERT's activations."""
    return _COMPUTE_DTYPES[self.precision]

  def describe(self):
    """E.g. "micro-batch 4 x 8 accumulation steps, --precision=fp32, ..."."""
    steps = self.num_accumulation_steps
    split = ""
    if self.replicas.total > 1:
      split = " (%d per replica on %d replicas)" % (
          self.replica_micro_batch_size, self.replicas.total)
    return ("micro-batch %d%s x %d accumulation step%s, --precision=%s, "
            "gradient checkpointing %s" % (
                self.micro_batch_size, split, steps,
                "" if steps == 1 else "s", self.precision,
                "on" if self.gradient_checkpointing else "off"))


def _replica_memory(device, replicas):
  """DeviceMemory of one replica: the device's own, or its share of the RAM
  that the CPU replicas of a process share."""
  if replicas.per_memory == 1:
    return device
  return DeviceMemory(
      device.bytes / replicas.per_memory,
      "%s, %.2f GiB shared by %d CPU replicas" % (
          device.source, device.bytes / memory_model.GIB, replicas.per_memory))


class BertMemory(object):
  """What a training step of BERT with its heads keeps in memory.

  The estimates are memory_plan.py's: a classifier head by default, or with
  `max_predictions_per_seq` > 0 pretraining's masked-LM and next-sentence
  heads (run_pretraining.py). A script whose model needs other memory
  passes an object with the same methods to `resolve` and `oom_message_fn`.
  """

  def __init__(self, bert_config, seq_length, optimizer="adamw",
               max_predictions_per_seq=0):
    self.bert_config = bert_config
    self.seq_length = seq_length
    self.optimizer = optimizer
    self.max_predictions_per_seq = max_predictions_per_seq

  def describe(self):
    """E.g. "BERT with 24 layers, hidden size 1024 (335.1M parameters) at
    --max_seq_length=512"; pretraining adds the masked positions."""
    config = self.bert_config
    params = memory_model.num_params(config)
    heads = ""
    if self.max_predictions_per_seq:
      params += memory_model.masked_lm_params(config)
      heads = (" and the pretraining heads at --max_predictions_per_seq=%d"
               % self.max_predictions_per_seq)
    return ("BERT with %d layers, hidden size %d (%.1fM parameters) at "
            "--max_seq_length=%d%s" % (
                config.num_hidden_layers, config.hidden_size, params / 1e6,
                self.seq_length, heads))

  def estimate_bytes(self, micro_batch, precision, gradient_checkpointing,
                     num_accumulation_steps):
    """The planner's peak bytes for one replica running `micro_batch`."""
    return memory_model.estimate_bytes(
        self.bert_config, self.seq_length, micro_batch, precision,
        gradient_checkpointing, num_accumulation_steps,
        self.optimizer,
        max_predictions_per_seq=self.max_predictions_per_seq)["total"]

  def plan(self, batch_size, memory_bytes, precision, allow_checkpointing):
    """memory_model.Plan for `batch_size` examples per update on one replica
    with `memory_bytes`, or None when not even one example fits."""
    return memory_model.plan(
        self.bert_config, self.seq_length, batch_size, memory_bytes,
        precisions=(precision,), allow_checkpointing=allow_checkpointing,
        optimizer=self.optimizer,
        max_predictions_per_seq=self.max_predictions_per_seq)


def _memory_model(bert_config, flag_obj, step_memory):
  """`step_memory`, or BertMemory of the config and the flags."""
  if step_memory is not None:
    return step_memory
  return BertMemory(bert_config, flag_obj.max_seq_length, flag_obj.optimizer)


def _describe_memory(memory):
  """E.g. "12.00 GiB (--device_memory_gb=12)"."""
  return "%.2f GiB (%s)" % (memory.bytes / memory_model.GIB, memory.source)


# ------------------------------------------------------------ device memory


def available_ram(meminfo_path=MEMINFO):
  """DeviceMemory of MemAvailable in `meminfo_path`, or None if unreadable."""
  try:
    with open(meminfo_path) as f:
      for line in f:
        key, _, value = line.partition(":")
        if key == "MemAvailable":
          # /proc/meminfo counts in KiB although it writes "kB".
          return DeviceMemory(
              int(value.split()[0]) * 1024,
              "no GPU: the RAM available now, MemAvailable in %s" %
              meminfo_path)
  except (OSError, ValueError, IndexError):
    return None
  return None


def _smallest_gpu_memory():
  """The GPU with the least memory bounds what every replica may use."""
  limits = tf_internals.gpu_memory_limits()
  if not limits:
    return None
  name = min(limits, key=limits.get)
  return DeviceMemory(
      limits[name],
      "GPU %s, the memory TensorFlow may allocate on it%s" % (
          name, " (the smallest of %d GPUs)" % len(limits)
          if len(limits) > 1 else ""))


def device_memory(device_memory_gb=None):
  """The memory of a device: --device_memory_gb, the GPUs', or the RAM.

  Returns:
    DeviceMemory(bytes, source) or None when it cannot be found out.
  """
  if device_memory_gb is not None:
    if not (math.isfinite(device_memory_gb) and device_memory_gb > 0):
      raise cli.UserError("--device_memory_gb=%s must be positive (GiB of the "
                       "device, e.g. 12 or 16)." % device_memory_gb)
    return DeviceMemory(int(device_memory_gb * memory_model.GIB),
                        "--device_memory_gb=%g" % device_memory_gb)
  if tf.config.list_physical_devices("GPU"):
    return _smallest_gpu_memory()
  return available_ram()


# ------------------------------------------------------------------ resolve


def parse_micro_batch_size(value):
  """None (flag empty), AUTO, or a positive int; UserError otherwise."""
  text = (value or "").strip().lower()
  if not text:
    return None
  if text == AUTO:
    return AUTO
  if not text.isdigit() or int(text) < 1:
    raise cli.UserError("--micro_batch_size=%s must be empty, a positive "
                        "integer or auto." % value)
  return int(text)


def explicit_steps(flag_obj):
  """--num_accumulation_steps when the command line set it, else None."""
  if flag_obj["num_accumulation_steps"].present:
    return flag_obj.num_accumulation_steps
  return None


def accumulation_steps(train_batch_size, micro_batch_size=None,
                       num_accumulation_steps=None, replicas=ONE_DEVICE):
  """The accumulation steps of a run; the one place they are derived.

  Args:
    train_batch_size: --train_batch_size, examples per update over all
      replicas.
    micro_batch_size: examples per micro-batch (--micro_batch_size, or the
      planner's choice), or None to take --num_accumulation_steps.
    num_accumulation_steps: --num_accumulation_steps if the command line set
      it, else None (1).
    replicas: Replicas of the run.

  Returns:
    int k >= 1 with train_batch_size = k * micro-batch, the micro-batch
    splitting evenly over the replicas.

  Raises:
    cli.UserError naming the flags to change.
  """
  batch = train_batch_size
  if batch < 1:
    raise cli.UserError("--train_batch_size=%d must be at least 1." % batch)
  if micro_batch_size is None:
    steps = 1 if num_accumulation_steps is None else num_accumulation_steps
    if steps < 1:
      raise cli.UserError("--num_accumulation_steps=%d must be at least 1."
                          % steps)
    if batch % steps:
      raise cli.UserError(
          "--train_batch_size=%d is not a multiple of "
          "--num_accumulation_steps=%d; choose accumulation steps that "
          "divide the batch." % (batch, steps))
  else:
    if batch % micro_batch_size:
      raise cli.UserError(
          "--micro_batch_size=%d does not divide --train_batch_size=%d; "
          "choose a divisor of --train_batch_size." % (micro_batch_size,
                                                       batch))
    steps = batch // micro_batch_size
    if num_accumulation_steps is not None and num_accumulation_steps != steps:
      raise cli.UserError(
          "--micro_batch_size=%d with --train_batch_size=%d means %d "
          "accumulation steps, but --num_accumulation_steps=%d was given; "
          "drop one of the two flags." % (micro_batch_size, batch, steps,
                                         num_accumulation_steps))
  micro = batch // steps
  if micro % replicas.total:
    raise cli.UserError(
        "A micro-batch of %d examples (--train_batch_size=%d / %d "
        "accumulation steps) does not split evenly over the %d replicas of "
        "--distribution; make the micro-batch a multiple of %d." % (
            micro, batch, steps, replicas.total, replicas.total))
  return steps


def _replica_batch_size(flag_obj, replicas):
  """--train_batch_size / replicas; UserError when it does not split."""
  if flag_obj.train_batch_size % replicas.total:
    raise cli.UserError(
        "--train_batch_size=%d does not split evenly over the %d replicas "
        "of --distribution; choose a multiple of %d." % (
            flag_obj.train_batch_size, replicas.total, replicas.total))
  return flag_obj.train_batch_size // replicas.total


def _plan_for_replicas(model, flag_obj, replicas, memory_bytes, precision,
                       allow_checkpointing):
  """The model's plan for one replica, its micro-batch made global."""
  found = model.plan(_replica_batch_size(flag_obj, replicas), memory_bytes,
                     precision, allow_checkpointing)
  if found is None:
    return None
  return found._replace(micro_batch=found.micro_batch * replicas.total)


def _estimate_bytes(model, settings):
  """The model's peak for one replica of `settings`."""
  return model.estimate_bytes(
      settings.replica_micro_batch_size, settings.precision,
      settings.gradient_checkpointing, settings.num_accumulation_steps)


def _auto(flag_obj, model, device, replicas):
  """The planner's settings for the device (never changing the precision).

  Each replica plans for its share of the micro-batch in its share of the
  memory: a GPU's own, or the RAM divided by the CPU replicas sharing it.
  """
  if explicit_steps(flag_obj) is not None:
    raise cli.UserError(
        "--micro_batch_size=auto chooses the accumulation steps; drop "
        "--num_accumulation_steps=%d or give --micro_batch_size as an "
        "integer." % flag_obj.num_accumulation_steps)
  if device is None:
    raise cli.UserError(
        "--micro_batch_size=auto needs the device's memory, which could not "
        "be found out (no GPU and no readable %s); pass --device_memory_gb."
        % MEMINFO)
  if (replicas.total > replicas.local and flag_obj.device_memory_gb is None
      and not tf.config.list_physical_devices("GPU")):
    raise cli.UserError(
        "--micro_batch_size=auto with --distribution=multi_worker on CPUs "
        "needs --device_memory_gb, the same on every worker: the free RAM "
        "differs from machine to machine, and workers whose plans differ "
        "cannot train together.")
  # An explicit --nogradient_checkpointing is honoured; otherwise the planner
  # turns checkpointing on when nothing fits without it.
  allow_checkpointing = (flag_obj.gradient_checkpointing or
                         not flag_obj["gradient_checkpointing"].present)
  memory = _replica_memory(device, replicas)
  found = _plan_for_replicas(model, flag_obj, replicas, memory.bytes,
                             flag_obj.precision, allow_checkpointing)
  if found is None:
    raise cli.UserError(
        "--micro_batch_size=auto: not even one example of --max_seq_length="
        "%d fits %s in --precision=%s%s. Lower --max_seq_length, use half "
        "precision or a smaller model, or set --device_memory_gb." %
        (flag_obj.max_seq_length, _describe_memory(memory),
         flag_obj.precision, " with gradient checkpointing"
         if allow_checkpointing else ""))
  steps = accumulation_steps(flag_obj.train_batch_size, found.micro_batch,
                             None, replicas)
  settings = MemorySettings(
      flag_obj.precision, found.micro_batch, steps,
      found.gradient_checkpointing or flag_obj.gradient_checkpointing,
      device, replicas)
  logging.info("--micro_batch_size=auto: %s; planned peak %.2f GiB%s of "
               "%s.", settings.describe(), _estimate_bytes(model, settings) /
               memory_model.GIB, " per replica" if replicas.total > 1 else "",
               _describe_memory(memory))
  return settings


def resolve(flag_obj, bert_config, do_train, distribution=None,
            step_memory=None):
  """The MemorySettings the flags ask for.

  Args:
    flag_obj: parsed absl FlagValues with the shared flags.
    bert_config: modeling.BertConfig of the model.
    do_train: whether the run trains (--micro_batch_size=auto plans only
      then).
    distribution: the run's tf.distribute strategy (startup.
      make_distribution), or None for one device.
    memory_model: what a training step keeps (see BertMemory, the default).

  Returns:
    MemorySettings; micro_batch_size * num_accumulation_steps equals
    --train_batch_size.

  Raises:
    cli.UserError naming the flags to fix.
  """
  device = device_memory(flag_obj.device_memory_gb)
  replicas = replicas_of(distribution)
  requested = parse_micro_batch_size(flag_obj.micro_batch_size)
  if requested == AUTO and do_train:
    return _auto(flag_obj, _memory_model(bert_config, flag_obj,
                                         step_memory), device, replicas)
  steps = accumulation_steps(
      flag_obj.train_batch_size,
      requested if isinstance(requested, int) else None,
      explicit_steps(flag_obj), replicas if do_train else ONE_DEVICE)
  return MemorySettings(flag_obj.precision,
                        flag_obj.train_batch_size // steps, steps,
                        flag_obj.gradient_checkpointing, device, replicas)


# ------------------------------------------------------------ out of memory


def _changed_flags(found, settings):
  """The flags that turn `settings` into the plan `found`."""
  parts = []
  if found.precision != settings.precision:
    # fp16 needs the same memory as bf16; older GPUs only have fp16.
    parts.append("--precision=%s%s" % (
        found.precision, " (or fp16)" if found.precision == "bf16" else ""))
  if found.micro_batch != settings.micro_batch_size:
    steps = found.accumulation_steps
    parts.append("--micro_batch_size=%d (%s)" % (
        found.micro_batch,
        "accumulation %d" % steps if steps > 1 else "no accumulation"))
  if found.gradient_checkpointing != settings.gradient_checkpointing:
    parts.append("--gradient_checkpointing" if found.gradient_checkpointing
                 else "--nogradient_checkpointing")
  return " ".join(parts)


def _fitting_flags(model, flag_obj, settings, budget):
  """Advice: the plans for `budget` bytes per replica, at this precision and
  in bf16."""
  def plan_for(precision):
    return _plan_for_replicas(model, flag_obj, settings.replicas, budget,
                              precision, allow_checkpointing=True)

  def cost(found):  # The planner's own preference order.
    return (found.gradient_checkpointing, found.accumulation_steps)

  options = []
  same = plan_for(settings.precision)
  if same is not None:
    options.append(_changed_flags(same, settings))
  if settings.precision == "fp32":
    half = plan_for("bf16")
    if half is not None and (same is None or cost(half) < cost(same)):
      options.append(_changed_flags(half, settings))
  per_replica = " per replica" if settings.replicas.total > 1 else ""
  if not options:
    return ("Nothing fits %.2f GiB%s, even one example per micro-batch with "
            "gradient checkpointing in half precision: lower "
            "--max_seq_length or use a smaller model." % (budget / memory_model.GIB,
                                                           per_replica))
  return "Flags that fit %.2f GiB%s: %s." % (budget / memory_model.GIB, per_replica,
                                             "; or ".join(options))


def oom_message(bert_config, flag_obj, settings, error, step_memory=None):
  """The out-of-memory message: the setting, the estimate, fitting flags."""
  model = _memory_model(bert_config, flag_obj, step_memory)
  estimate = _estimate_bytes(model, settings)
  lines = ["Out of memory training %s and --train_batch_size=%d: %s." % (
      model.describe(), flag_obj.train_batch_size, settings.describe())]
  per_replica = " per replica" if settings.replicas.total > 1 else ""
  if settings.device is None:
    lines.append("The memory planner estimates %.2f GiB%s for it. The "
                 "device's memory is unknown: pass --device_memory_gb for "
                 "flags that fit, or use --micro_batch_size=auto with it." %
                 (estimate / memory_model.GIB, per_replica))
  else:
    budget = settings.replica_memory_bytes
    lines.append("The memory planner estimates %.2f GiB%s for it; %s has "
                 "%s." % (estimate / memory_model.GIB, per_replica,
                          "each replica" if per_replica else "the device",
                          _describe_memory(settings.replica_memory)))
    if estimate < budget:
      lines.append("As the estimate fits, something else holds memory; the "
                   "flags below are planned for less than the failed "
                   "setting.")
    # The error proves the failed setting does not fit, whatever the estimate.
    lines.append(_fitting_flags(model, flag_obj, settings,
                                min(budget, estimate - 1)))
  lines.append("TensorFlow said: %s" % estimator.oom_line(error))
  return "\n".join(lines)


def oom_message_fn(bert_config, flag_obj, settings, step_memory=None):
  """callable(ResourceExhaustedError) -> str for estimator.RunConfig."""
  return lambda error: oom_message(bert_config, flag_obj, settings, error,
                                   step_memory)
