# coding=utf-8
"""The words of every out-of-memory failure, in one place.

The runner (runner/estimator.py) catches TensorFlow's
ResourceExhaustedError and raises `estimator.OutOfMemoryError` with what
`message` makes of what it knows: the activity, its batch size and, while
training, the accumulation steps or the advice of `training_advice_fn`.
That advice, made by startup/run_setup.py for the training scripts, names
the model, the memory setting that failed, the planner's estimate and the
flags the planner finds to fit (memory/memory_settings.py,
memory/memory_model.py). Every message ends with the line that says what
TensorFlow could not allocate, and with the cap on TensorFlow's CPU
allocator when one is set.
"""

import os

from userio import cli
from memory import memory_settings
from userio import units

TRAINING = "Training"
EVALUATION = "Evaluation"
PREDICTION = "Prediction"
# The flag that sets the batch of each inference activity.
_BATCH_FLAGS = {EVALUATION: "--eval_batch_size",
                PREDICTION: "--predict_batch_size"}


def oom_line(error):
  """The line of a ResourceExhaustedError that says what could not be
  allocated.

  Session errors start with "Graph execution error:" and the node's stack;
  the allocator's "OOM when allocating tensor ..." (or a MemoryError raised
  in Python) comes later, before the hints that also mention OOM.
  """
  lines = [line.strip() for line in error.message.splitlines()
           if line.strip()]
  for line in lines:
    if "OOM" in line or "MemoryError" in line:
      return line
  return lines[0] if lines else type(error).__name__


def cpu_allocator_cap_line(environ):
  """A line naming TF_MKL_ALLOC_MAX_BYTES when `environ` sets it, else None:
  the cap may be why TensorFlow ran out of memory."""
  value = environ.get(cli.CPU_ALLOCATOR_CAP)
  if not value:
    return None
  try:
    size = " (%.2f GiB)" % (int(value) / units.GIB)
  except ValueError:
    size = ""
  return ("%s=%s%s caps what TensorFlow's CPU allocator may reserve: raise "
          "or unset it if the machine has more RAM." % (
              cli.CPU_ALLOCATOR_CAP, value, size))


def message(error, activity, *, batch_size, num_accumulation_steps=1,
            training_advice=None, environ=None):
  """The message of an OutOfMemoryError.

  Args:
    error: the tf.errors.ResourceExhaustedError.
    activity: TRAINING, EVALUATION or PREDICTION.
    batch_size: the activity's batch size (--train_batch_size while
      training).
    num_accumulation_steps: micro-batches per update (training).
    training_advice: None, or callable(error) -> str that words the advice
      for a training run itself (`training_advice_fn`).
    environ: the environment to look for a cap on the CPU allocator in
      (default os.environ).

  Returns:
    The advice for `activity`, then the cap's line if a cap is set.
  """
  if activity in _BATCH_FLAGS:
    text = ("Out of memory in batches of %s examples: lower %s or "
            "--max_seq_length.\nTensorFlow said: %s" % (
                batch_size, _BATCH_FLAGS[activity], oom_line(error)))
  elif training_advice is not None:
    text = training_advice(error)
  else:
    text = (
        "Out of memory while training with --train_batch_size=%s and "
        "--num_accumulation_steps=%d (micro-batch %d). Raise "
        "--num_accumulation_steps (same results, smaller micro-batches), "
        "lower --train_batch_size, or lower --max_seq_length.\n"
        "TensorFlow said: %s" % (batch_size, num_accumulation_steps,
                                 batch_size // num_accumulation_steps,
                                 oom_line(error)))
  cap = cpu_allocator_cap_line(os.environ if environ is None else environ)
  return text if cap is None else text + "\n" + cap


# ------------------------------------------- a training script's advice


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


def _fitting_flags(model, settings, train_batch_size, budget):
  """Advice: the plan for `budget` bytes per replica at this precision, and
  the one in bf16 when the planner ranks it first (memory_model.fastest)."""
  def plan_for(precision):
    return memory_settings.plan_for_replicas(
        model, train_batch_size, settings.replicas, budget, precision,
        allow_checkpointing=True, kind=settings.device_kind)

  options = []
  same = plan_for(settings.precision)
  if same is not None:
    options.append(_changed_flags(same, settings))
  if settings.precision == "fp32":
    half = plan_for("bf16")
    # bf16 is offered when the planner ranks its plan first.
    if half is not None and memory_settings.fastest_for_replicas(
        model, [same, half], settings.replicas,
        settings.device_kind) is half:
      options.append(_changed_flags(half, settings))
  per_replica = " per replica" if settings.replicas.total > 1 else ""
  if not options:
    return ("Nothing fits %.2f GiB%s, even one example per micro-batch with "
            "gradient checkpointing in half precision: lower "
            "--max_seq_length or use a smaller model." % (
                budget / units.GIB, per_replica))
  return "Flags that fit %.2f GiB%s: %s." % (
      budget / units.GIB, per_replica, "; or ".join(options))


def training_advice(model, settings, train_batch_size, error):
  """The advice for a training script's run: the setting, the planner's
  estimate and the flags that fit.

  Args:
    model: the step's memory model (memory_model.BertMemory or an object
      with its methods).
    settings: the run's memory_settings.MemorySettings.
    train_batch_size: --train_batch_size.
    error: the tf.errors.ResourceExhaustedError.
  """
  estimate = memory_settings.estimate_bytes(model, settings)
  lines = ["Out of memory training %s and --train_batch_size=%d: %s." % (
      model.describe(), train_batch_size, settings.describe())]
  per_replica = " per replica" if settings.replicas.total > 1 else ""
  if settings.device is None:
    lines.append("The memory planner estimates %.2f GiB%s for it. The "
                 "device's memory is unknown: pass --device_memory_gb for "
                 "flags that fit, or use --micro_batch_size=auto with it." %
                 (estimate / units.GIB, per_replica))
  else:
    budget = settings.replica_memory_bytes
    lines.append("The memory planner estimates %.2f GiB%s for it; %s has "
                 "%s." % (estimate / units.GIB, per_replica,
                          "each replica" if per_replica else "the device",
                          memory_settings.describe_memory(
                              settings.replica_memory)))
    if estimate < budget:
      lines.append("As the estimate fits, something else holds memory; the "
                   "flags below are planned for less than the failed "
                   "setting.")
    # The error proves the failed setting does not fit, whatever the estimate.
    lines.append(_fitting_flags(model, settings, train_batch_size,
                                min(budget, estimate - 1)))
  lines.append("TensorFlow said: %s" % oom_line(error))
  return "\n".join(lines)


def training_advice_fn(model, settings, train_batch_size):
  """callable(ResourceExhaustedError) -> str: `training_advice` for
  estimator.RunConfig's oom_message_fn."""
  return lambda error: training_advice(model, settings, train_batch_size,
                                       error)
