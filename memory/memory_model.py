# coding=utf-8
"""Plans GPU memory for training BERT: largest micro-batch, accumulation.

Google's README lists the largest batch that fits a 12 GB GPU for each
sequence length. This module predicts that number for any BertConfig, GPU
size, precision and gradient-checkpointing setting, and turns a wanted
`--train_batch_size` into micro-batch x accumulation steps:

    python memory_plan.py --bert_config_file=$BERT/bert_config.json \
        --max_seq_length=128,256,384,512 --gpu_memory_gb=12 \
        --train_batch_size=32 --precision=all --gradient_checkpointing=auto

(add --max_predictions_per_seq=20 to plan for pretraining's heads at 128
tokens, 80 at 512).

The estimate is a sum of terms (weights, gradients, optimizer slots,
accumulators, per-example activations, pretraining's masked-LM head, a
fixed workspace) scaled by the factors of a `Calibration`: the default one is
fitted to Google's table, `CPU_MEASURED` to allocator peaks measured on CPU.
docs/memory.md states every term and how the factors were fitted.

A setting fits when its estimate, with `SAFETY_MARGIN` added to everything
but the workspace, is at most the device's memory (`planned_bytes`).

Among the plans that fit, `plan` takes the one with the lowest predicted
time per update (`update_time`) on a kind of device, `GPU` (the default) or
`CPU`: (1 + n_half / n) x (CHECKPOINTING_TIME_FACTOR with checkpointing),
n the tokens of a micro-batch and n_half = HALF_THROUGHPUT_TOKENS[device].
The model, its constants and why they are what they are: docs/memory.md
("How a plan is picked"). Planned, not measured on a GPU.

`BertMemory` is one model's estimate and plan as a run's memory settings
(memory/memory_settings.py) ask for them; this module calls nothing there.
"""

import collections
import dataclasses

from engine import optimizer_names
from userio import units

PRECISIONS = ("fp32", "fp16", "bf16")

# Bytes per parameter of each term.
WEIGHT_BYTES = 4
CAST_BYTES = 2
GRADIENT_BYTES = 4
CLIPPED_GRADIENT_BYTES = 4
SLOT_BYTES = 2 * 4
UPDATE_TEMPORARY_BYTES = 4
ACCUMULATION_BYTES = 4

# The planner adds this fraction to the estimate of everything but the
# workspace before comparing it with a device's memory. The default
# calibration's estimate of BERT-Large at 384 tokens with one example is 11.0
# GiB, yet Google measured that it does not fit a 12 GB GPU: the estimate
# can be at least 9% low (10.5 GiB of tensors estimated, more than 11.5
# GiB needed). 12.5% is also the largest error of the term model against
# the allocator peaks measured on CPU (`CPU_MEASURED`).
SAFETY_MARGIN = 0.125

# The kinds of device the time model knows (module docstring).
GPU = "gpu"
CPU = "cpu"

# Tokens per micro-batch at which a device is assumed to reach half its
# throughput, per kind (docs/memory.md): a GPU 80% at 8 x 512 tokens; a
# CPU is busy at any micro-batch.
HALF_THROUGHPUT_TOKENS = {GPU: 1024, CPU: 0}

# Gradient checkpointing's step time over a plain step: a step is forward +
# backward = 3 forward passes; recomputation adds one (docs/memory.md).
CHECKPOINTING_TIME_FACTOR = 4 / 3

# Shapes of the activation tensors, per example.
HIDDEN = "hidden"              # [S, H]
INTERMEDIATE = "intermediate"  # [S, I]
ATTENTION = "attention"        # [A, S, S]

Tensors = collections.namedtuple("Tensors", ["name", "shape", "count", "mask"])

LAYER_TENSORS = (
    Tensors("query, key, value projections", HIDDEN, 3, False),
    Tensors("attention scores", ATTENTION, 1, False),
    Tensors("attention probabilities", ATTENTION, 1, False),
    Tensors("dropout mask on the probabilities", ATTENTION, 1, True),
    Tensors("dropped-out probabilities", ATTENTION, 1, False),
    Tensors("context", HIDDEN, 1, False),
    Tensors("attention output dense", HIDDEN, 1, False),
    Tensors("attention output dropout mask", HIDDEN, 1, True),
    Tensors("attention residual sum", HIDDEN, 1, False),
    Tensors("attention LayerNorm normalized", HIDDEN, 1, False),
    Tensors("attention LayerNorm output", HIDDEN, 1, False),
    Tensors("intermediate dense (pre-GELU)", INTERMEDIATE, 1, False),
    Tensors("GELU tanh and cdf", INTERMEDIATE, 2, False),
    Tensors("intermediate output (post-GELU)", INTERMEDIATE, 1, False),
    Tensors("output dense", HIDDEN, 1, False),
    Tensors("output dropout mask", HIDDEN, 1, True),
    Tensors("output residual sum", HIDDEN, 1, False),
    Tensors("output LayerNorm normalized", HIDDEN, 1, False),
    Tensors("layer output", HIDDEN, 1, False),
)

EMBEDDING_TENSORS = (
    Tensors("embedding sum", HIDDEN, 1, False),
    Tensors("embedding LayerNorm normalized", HIDDEN, 1, False),
    Tensors("embedding LayerNorm output", HIDDEN, 1, False),
    Tensors("embedding dropout mask", HIDDEN, 1, True),
    Tensors("dropped embeddings", HIDDEN, 1, False),
)

BACKWARD_TENSORS = (
    Tensors("gradients of probabilities and softmax", ATTENTION, 2, False),
    Tensors("gradients of intermediate activations", INTERMEDIATE, 2, False),
    Tensors("gradients of hidden states", HIDDEN, 2, False),
)

# Pretraining's masked-LM head, per example and masked position: shapes
# [V] ("vocabulary", the logits of one position) and [H] ("hidden", one
# gathered row), counted as float32 at their exact size (no calibration
# factor): exact in fp32, an upper bound in bf16/fp16, where the logits and
# most rows are 2-byte. See docs/memory.md.
VOCABULARY = "vocabulary"
HEAD_BYTES = 4
MASKED_LM_TENSORS = (
    Tensors("logits, which the cross-entropy keeps for its gradient",
            VOCABULARY, 1, False),
    Tensors("gradient of the logits", VOCABULARY, 1, False),
    Tensors("gathered rows, transform before and after its activation, "
            "LayerNorm normalized and output", HIDDEN, 5, False),
)

# Kept per layer under gradient checkpointing: where its recomputation
# starts, the sum the previous layer's last LayerNorm normalizes.
CHECKPOINT_TENSORS = (
    Tensors("sum entering the layer's recomputation", HIDDEN, 1, False),
)

_BERT_COMMON = {
    "vocab_size": 30522,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "initializer_range": 0.02,
}
BERT_BASE = dict(_BERT_COMMON, hidden_size=768, num_hidden_layers=12,
                 num_attention_heads=12, intermediate_size=3072)
BERT_LARGE = dict(_BERT_COMMON, hidden_size=1024, num_hidden_layers=24,
                  num_attention_heads=16, intermediate_size=4096)

_CONFIG_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers",
                "num_attention_heads", "intermediate_size",
                "max_position_embeddings", "type_vocab_size")

Plan = collections.namedtuple(
    "Plan", ["micro_batch", "accumulation_steps", "precision",
             "gradient_checkpointing"])


@dataclasses.dataclass(frozen=True)
class Calibration:
  """Adjustable factors of the term model (see the module docstring).

  Attributes:
    state_factor: multiplies every per-parameter term.
    linear_factor: multiplies the [S, H] and [S, I] activation counts.
    quadratic_factor: multiplies the [A, S, S] activation counts.
    workspace_gb: fixed margin in GiB for the CUDA context, cuBLAS workspace
      and allocator slack.
    boolean_dropout_mask: True when dropout keeps a 1-byte boolean mask,
      False when it keeps a mask of the activation dtype (Google's code).
  """
  # Fitted to Google's 12 GB table: TensorFlow keeps about 10% more than the
  # per-parameter count (allocator slack) and 65% more [S, H] / [S, I] data
  # than the enumeration (reshape / transpose copies, LayerNorm and dropout
  # internals), and frees some attention scores early.
  state_factor: float = 1.1
  linear_factor: float = 1.65
  quadratic_factor: float = 0.85
  workspace_gb: float = 0.5
  boolean_dropout_mask: bool = True


# Fitted to bench/memory.py's allocator peaks on CPU (26 runs: BERT-Large at
# 512 tokens with batch 2 and 8, BERT-Base at 512 and 128, 4- and 6-layer
# models; fp32 and bf16; with and without checkpointing) by
# bench/fit_memory_calibration.py: every estimate within 12.4%, and within
# 12.5% for those and 8 runs at 384 tokens (docs/memory.md).
CPU_MEASURED = Calibration(state_factor=0.58, linear_factor=0.39,
                           quadratic_factor=0.1, workspace_gb=0.05)


def _dims(config):
  """The sizes the model needs, from a BertConfig or a dict."""
  get = config.get if isinstance(config, dict) else (
      lambda key: getattr(config, key, None))
  missing = [key for key in _CONFIG_KEYS if get(key) is None]
  if missing:
    raise ValueError("The BERT config lacks %s; a bert_config.json holds all "
                     "of %s." % (", ".join(missing), ", ".join(_CONFIG_KEYS)))
  return {key: int(get(key)) for key in _CONFIG_KEYS}


def num_params(config, num_labels=2):
  """Number of trainable parameters of BERT plus a classifier head.

  Args:
    config: a modeling.BertConfig or a dict with the bert_config.json keys.
    num_labels: classes of the head (2*H+2 parameters for 2); 0 counts only
      the variables under bert/ (what a pretrained checkpoint holds).

  Returns:
    int, the exact count.
  """
  d = _dims(config)
  h, i = d["hidden_size"], d["intermediate_size"]
  embeddings = (d["vocab_size"] + d["max_position_embeddings"] +
                d["type_vocab_size"]) * h + 2 * h
  attention = 4 * (h * h + h) + 2 * h
  feed_forward = (h * i + i) + (i * h + h) + 2 * h
  pooler = h * h + h
  head = num_labels * h + num_labels
  return (embeddings + d["num_hidden_layers"] * (attention + feed_forward) +
          pooler + head)


def masked_lm_params(config):
  """Parameters of pretraining's masked-LM head beyond BERT's own: the
  transform's dense layer (H*H + H) and LayerNorm (2H) and the output bias
  (V); its output projection is the word embedding table."""
  d = _dims(config)
  h = d["hidden_size"]
  return h * h + h + 2 * h + d["vocab_size"]


def masked_lm_bytes_per_example(config, max_predictions_per_seq):
  """Bytes pretraining's masked-LM head adds per example at the peak of the
  backward pass (0 for max_predictions_per_seq=0, a fine-tuning head)."""
  d = _dims(config)
  if max_predictions_per_seq < 0:
    raise ValueError("--max_predictions_per_seq=%d must be >= 0 (0: no "
                     "masked-LM head)." % max_predictions_per_seq)
  width = {VOCABULARY: d["vocab_size"], HIDDEN: d["hidden_size"]}
  return sum(HEAD_BYTES * max_predictions_per_seq * t.count * width[t.shape]
             for t in MASKED_LM_TENSORS)


def _check_choice(name, value, choices):
  if value not in choices:
    raise ValueError("%s=%r is not one of %s." %
                     (name, value, ", ".join(choices)))


def _activation_bytes(precision):
  _check_choice("precision", precision, PRECISIONS)
  return 4 if precision == "fp32" else 2


def _tensor_bytes(tensors, d, seq_length, b, cal):
  """Bytes of one example's `tensors` at sequence length `seq_length`."""
  s = seq_length
  elements = {HIDDEN: s * d["hidden_size"],
              INTERMEDIATE: s * d["intermediate_size"],
              ATTENTION: d["num_attention_heads"] * s * s}
  factor = {HIDDEN: cal.linear_factor, INTERMEDIATE: cal.linear_factor,
            ATTENTION: cal.quadratic_factor}
  mask_bytes = 1 if cal.boolean_dropout_mask else b
  total = 0.0
  for t in tensors:
    size = mask_bytes if t.mask else b
    total += factor[t.shape] * t.count * elements[t.shape] * size
  return total


def activation_bytes_per_example(config, seq_length, precision="fp32",
                                 gradient_checkpointing=False,
                                 calibration=None):
  """Activation bytes one example adds at the peak of the backward pass."""
  cal = calibration or Calibration()
  d = _dims(config)
  _check_seq_length(d, seq_length)
  b = _activation_bytes(precision)
  one_layer = _tensor_bytes(LAYER_TENSORS, d, seq_length, b, cal)
  once = (_tensor_bytes(EMBEDDING_TENSORS, d, seq_length, b, cal) +
          _tensor_bytes(BACKWARD_TENSORS, d, seq_length, b, cal))
  layers = d["num_hidden_layers"]
  if gradient_checkpointing:
    inputs = _tensor_bytes(CHECKPOINT_TENSORS, d, seq_length, b, cal)
    return layers * inputs + one_layer + once
  return layers * one_layer + once


def _check_seq_length(d, seq_length):
  if not 1 <= seq_length <= d["max_position_embeddings"]:
    raise ValueError(
        "--max_seq_length=%d must be in [1, %d], the max_position_embeddings "
        "of the BERT config." % (seq_length, d["max_position_embeddings"]))


def estimate_bytes(config, seq_length, micro_batch, precision="fp32",
                   gradient_checkpointing=False, num_accumulation_steps=1,
                   optimizer="adamw", calibration=None,
                   max_predictions_per_seq=0, sequences_per_example=1):
  """Peak training memory, as a breakdown of the terms in the docstring.

  Args:
    config: a modeling.BertConfig or a dict with the bert_config.json keys.
    seq_length: int S.
    micro_batch: int N, examples per session.run of the train op.
    precision: "fp32", "fp16" or "bf16" (activation dtype; master weights,
      gradients and slots stay float32).
    gradient_checkpointing: bool, recompute each layer in the backward pass.
    num_accumulation_steps: int; > 1 adds the accumulators.
    optimizer: "adamw" or "lamb" (both keep two slots per parameter).
    calibration: a Calibration, default `Calibration()`.
    max_predictions_per_seq: 0 for a fine-tuning head; M > 0 for
      pretraining's heads with M masked positions per example (its
      parameters and `masked_lm_bytes_per_example`).
    sequences_per_example: sequences of seq_length one example is (4 for
      run_swag.py, one per choice); the activations count each.

  Returns:
    dict of bytes (floats): weights, gradients, optimizer, accumulation,
    activations, masked_lm_head, workspace, total.
  """
  cal = calibration or Calibration()
  _check_choice("optimizer", optimizer, optimizer_names.OPTIMIZERS)
  if micro_batch < 0 or num_accumulation_steps < 1:
    raise ValueError("micro_batch=%r must be >= 0 and num_accumulation_steps"
                     "=%r >= 1." % (micro_batch, num_accumulation_steps))
  b = _activation_bytes(precision)
  if max_predictions_per_seq > seq_length:
    raise ValueError("--max_predictions_per_seq=%d cannot exceed "
                     "--max_seq_length=%d." % (max_predictions_per_seq,
                                               seq_length))
  params = num_params(config)
  if max_predictions_per_seq:
    params += masked_lm_params(config)
  p = params * cal.state_factor
  cast = CAST_BYTES if b == 2 else 0
  accumulation = ACCUMULATION_BYTES if num_accumulation_steps > 1 else 0
  sequences = micro_batch * sequences_per_example
  breakdown = {
      "weights": p * (WEIGHT_BYTES + cast),
      "gradients": p * (GRADIENT_BYTES + CLIPPED_GRADIENT_BYTES),
      "optimizer": p * (SLOT_BYTES + UPDATE_TEMPORARY_BYTES),
      "accumulation": p * accumulation,
      "activations": sequences * activation_bytes_per_example(
          config, seq_length, precision, gradient_checkpointing, cal),
      "masked_lm_head": sequences * masked_lm_bytes_per_example(
          config, max_predictions_per_seq),
      "workspace": cal.workspace_gb * units.GIB,
  }
  breakdown["total"] = sum(breakdown.values())
  return breakdown


def planned_bytes(breakdown, margin=SAFETY_MARGIN):
  """What the planner requires of a device for an `estimate_bytes`
  breakdown: the workspace, plus every other term and `margin` of it."""
  workspace = breakdown["workspace"]
  return workspace + (1 + margin) * (breakdown["total"] - workspace)


def max_micro_batch(config, seq_length, memory_bytes, precision="fp32",
                    gradient_checkpointing=False, num_accumulation_steps=1,
                    optimizer="adamw", calibration=None,
                    max_predictions_per_seq=0, sequences_per_example=1,
                    margin=SAFETY_MARGIN):
  """Largest micro-batch whose `planned_bytes` fit `memory_bytes`; 0 if none.

  margin=0 gives the bare estimate's capacity, what the default calibration
  was fitted to.
  """
  args = (config, seq_length)
  kwargs = dict(precision=precision,
                gradient_checkpointing=gradient_checkpointing,
                num_accumulation_steps=num_accumulation_steps,
                optimizer=optimizer, calibration=calibration,
                max_predictions_per_seq=max_predictions_per_seq,
                sequences_per_example=sequences_per_example)
  fixed = planned_bytes(estimate_bytes(*args, micro_batch=0, **kwargs),
                        margin)
  per_example = planned_bytes(
      estimate_bytes(*args, micro_batch=1, **kwargs), margin) - fixed
  return max(0, int((memory_bytes - fixed) // per_example))


def update_time(found, seq_length, sequences_per_example=1, device=GPU):
  """Predicted time of one update with Plan `found` on a `device` (GPU or
  CPU), relative to the same examples on that device fully busy without
  recomputation (module docstring).

  Per example the time is 1 + HALF_THROUGHPUT_TOKENS[device] / n for the n
  tokens of a micro-batch, times CHECKPOINTING_TIME_FACTOR with
  checkpointing; the batch size cancels, as every plan of a batch updates on
  the same examples.
  """
  tokens = found.micro_batch * sequences_per_example * seq_length
  if tokens < 1:
    raise ValueError("A plan needs a micro-batch of at least one example of "
                     "at least one token; got %d x %d tokens." %
                     (found.micro_batch, seq_length))
  time = 1 + HALF_THROUGHPUT_TOKENS[device] / tokens
  if found.gradient_checkpointing:
    time *= CHECKPOINTING_TIME_FACTOR
  return time


def _largest_divisor_at_most(n, limit):
  return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def _candidate(config, seq_length, train_batch_size, memory_bytes, precision,
               checkpointing, optimizer, calibration,
               max_predictions_per_seq, sequences_per_example=1,
               margin=SAFETY_MARGIN):
  """Fastest (micro, accumulation) for one setting, or None if nothing fits:
  the largest micro-batch that fits and divides the batch, since the
  predicted time per update falls as the micro-batch grows."""
  kwargs = dict(precision=precision, gradient_checkpointing=checkpointing,
                optimizer=optimizer, calibration=calibration,
                max_predictions_per_seq=max_predictions_per_seq,
                sequences_per_example=sequences_per_example, margin=margin)
  whole = max_micro_batch(config, seq_length, memory_bytes, **kwargs)
  if whole >= train_batch_size:
    return Plan(train_batch_size, 1, precision, checkpointing)
  # Smaller micro-batches need the accumulators, which take memory too.
  limit = max_micro_batch(config, seq_length, memory_bytes,
                          num_accumulation_steps=2, **kwargs)
  if limit < 1:
    return None
  micro = _largest_divisor_at_most(train_batch_size, limit)
  return Plan(micro, train_batch_size // micro, precision, checkpointing)


def candidates(config, seq_length, train_batch_size, memory_bytes,
               precisions=("fp32",), checkpointing_options=(False, True),
               optimizer="adamw", calibration=None, max_predictions_per_seq=0,
               sequences_per_example=1, margin=SAFETY_MARGIN):
  """The fastest plan of every (precision, checkpointing) setting, in the
  order of `precisions` then `checkpointing_options`: a list of
  ((precision, checkpointing), Plan or None when nothing fits)."""
  if train_batch_size < 1:
    raise ValueError("--train_batch_size=%d must be >= 1." % train_batch_size)
  return [((precision, checkpointing),
           _candidate(config, seq_length, train_batch_size, memory_bytes,
                      precision, checkpointing, optimizer, calibration,
                      max_predictions_per_seq, sequences_per_example, margin))
          for precision in precisions
          for checkpointing in checkpointing_options]


def fastest(found_plans, seq_length, sequences_per_example=1, device=GPU):
  """The plan of `found_plans` (Plans or None, in order of preference) with
  the lowest `update_time` on `device`; on a tie the one without
  checkpointing, then with fewer accumulation steps, then the earlier. None
  if all are None."""
  ranked = [((update_time(found, seq_length, sequences_per_example, device),
              found.gradient_checkpointing, found.accumulation_steps, order),
             found)
            for order, found in enumerate(found_plans) if found]
  if not ranked:
    return None
  return min(ranked, key=lambda r: r[0])[1]


def plan(config, seq_length, train_batch_size, memory_bytes,
         precisions=("fp32",), allow_checkpointing=True, optimizer="adamw",
         calibration=None, max_predictions_per_seq=0,
         sequences_per_example=1, margin=SAFETY_MARGIN, device=GPU):
  """Micro-batch x accumulation steps for `train_batch_size` examples/update.

  Of the settings (each precision, with and without checkpointing) the
  plan takes the one predicted fastest on `device` (`update_time`, ties as
  `fastest` breaks them; on a CPU checkpointing only when nothing fits
  without it), each at the largest micro-batch whose `planned_bytes` fit
  `memory_bytes` and that divides the batch. `max_predictions_per_seq` > 0
  plans for pretraining's heads, `sequences_per_example` > 1 for examples of
  several sequences (see `estimate_bytes`).

  Returns:
    Plan(micro_batch, accumulation_steps, precision, gradient_checkpointing)
    with micro_batch * accumulation_steps == train_batch_size, or None when
    not even one example fits.
  """
  options = (False, True) if allow_checkpointing else (False,)
  found = candidates(config, seq_length, train_batch_size, memory_bytes,
                     precisions, options, optimizer, calibration,
                     max_predictions_per_seq, sequences_per_example, margin)
  return fastest([f for _, f in found], seq_length, sequences_per_example,
                 device)


def _precision_columns(precisions):
  """Distinct activation sizes to show; fp16 and bf16 share a column."""
  columns = []
  low = [p for p in PRECISIONS[1:] if p in precisions]
  if "fp32" in precisions:
    columns.append(("fp32", "fp32"))
  if low:
    columns.append((low[0], "/".join(low)))
  return columns


def _setting_label(precision, checkpointing, precisions):
  return "%s%s" % (dict(_precision_columns(precisions))[precision],
                   " + checkpointing" if checkpointing else "")


def _plan_cell(found, seq_length):
  """E.g. "16 x 2: 1.56" (micro-batch x steps: time / update), or "-"."""
  if found is None:
    return "-"
  return "%d x %d: %.2f" % (found.micro_batch, found.accumulation_steps,
                            update_time(found, seq_length))


def _describe(found, seq_length, settings, precisions):
  """The plan line's words: the picked plan, its time, and the best plan
  with the other checkpointing setting, what it was weighed against."""
  if found is None:
    return "does not fit, even one example per micro-batch"
  steps = found.accumulation_steps
  text = "micro-batch %d x %d accumulation step%s (%s, %s), time / update " \
         "%.2f, the lowest of the plans that fit" % (
             found.micro_batch, steps, "" if steps == 1 else "s",
             dict(_precision_columns(precisions))[found.precision],
             "gradient checkpointing" if found.gradient_checkpointing
             else "no checkpointing", update_time(found, seq_length))
  other = not found.gradient_checkpointing
  options = {checkpointing for (_, checkpointing), _ in settings}
  if other not in options:
    return text
  rival = fastest([f for (_, ckpt), f in settings if ckpt == other],
                  seq_length)
  label = "with checkpointing" if other else "without checkpointing"
  if rival is None:
    return text + " (nothing fits %s)" % label
  return text + " (best %s: %d x %d, %.2f)" % (
      label, rival.micro_batch, rival.accumulation_steps,
      update_time(rival, seq_length))


def format_table(config, seq_lengths, memory_bytes, precisions=PRECISIONS,
                 checkpointing_options=(False, True), train_batch_size=None,
                 optimizer="adamw", calibration=None, name="model",
                 max_predictions_per_seq=0):
  """Markdown tables of the largest micro-batch and, given a batch, of the
  plans with their predicted time per update, and the plan per length.

  Args:
    config: a modeling.BertConfig or a dict.
    seq_lengths: list of int sequence lengths (rows).
    memory_bytes: device memory in bytes.
    precisions: precisions to show; fp16 and bf16 share one column.
    checkpointing_options: tuple of bools, columns without / with
      checkpointing.
    train_batch_size: int or None; when given, the plans' table and a plan
      line per length.
    optimizer: "adamw" or "lamb".
    calibration: a Calibration, default `Calibration()`.
    name: model name for the title line.
    max_predictions_per_seq: > 0 plans for pretraining's heads with that
      many masked positions per sequence (see `estimate_bytes`).

  Returns:
    str, the tables and plan lines, newline-terminated.
  """
  cal = calibration or Calibration()
  params = num_params(config)
  if max_predictions_per_seq:
    params += masked_lm_params(config)
    name += (" with the pretraining heads (%d masked positions per "
             "sequence)" % max_predictions_per_seq)
  heads = dict(max_predictions_per_seq=max_predictions_per_seq)
  chosen = [p for p, _ in _precision_columns(precisions)]
  columns = [(precision, ckpt) for precision in chosen
             for ckpt in checkpointing_options]
  header = ["seq length"] + [_setting_label(precision, ckpt, precisions)
                             for precision, ckpt in columns]
  rule = ["| " + " | ".join(header) + " |",
          "|" + "|".join("---:" for _ in header) + "|"]
  lines = ["Largest micro-batch for %s on a %.4g GiB GPU (%s, workspace "
           "margin %.4g GiB, safety margin %.3g%% of the rest, %d "
           "parameters):" % (
               name, memory_bytes / units.GIB, optimizer, cal.workspace_gb,
               100 * SAFETY_MARGIN, params), ""] + rule
  for seq_length in seq_lengths:
    cells = [str(max_micro_batch(config, seq_length, memory_bytes, precision,
                                 ckpt, optimizer=optimizer, calibration=cal,
                                 **heads))
             for precision, ckpt in columns]
    lines.append("| " + " | ".join([str(seq_length)] + cells) + " |")
  if train_batch_size:
    lines += _plan_lines(config, seq_lengths, memory_bytes, precisions,
                         checkpointing_options, train_batch_size, optimizer,
                         cal, rule, heads)
  return "\n".join(lines) + "\n"


def _plan_lines(config, seq_lengths, memory_bytes, precisions,
                checkpointing_options, train_batch_size, optimizer, cal,
                rule, heads):
  """`format_table`'s plans: a table of every setting's fastest plan with
  its time per update, then the picked plan per length."""
  chosen = [p for p, _ in _precision_columns(precisions)]
  lines = ["", "Plans for train_batch_size=%d with the GPU time model "
           "(half the throughput at %d tokens per micro-batch): micro-batch "
           "x accumulation steps: predicted time / update, relative to the "
           "same examples on a fully busy GPU without recomputation "
           "(planned, not measured on a GPU; \"-\": nothing fits):" % (
               train_batch_size, HALF_THROUGHPUT_TOKENS[GPU]), ""] + rule
  picks = []
  for seq_length in seq_lengths:
    settings = candidates(config, seq_length, train_batch_size,
                          memory_bytes, chosen, checkpointing_options,
                          optimizer, cal, **heads)
    lines.append("| " + " | ".join(
        [str(seq_length)] + [_plan_cell(found, seq_length)
                             for _, found in settings]) + " |")
    found = fastest([f for _, f in settings], seq_length)
    picks.append("train_batch_size=%d at seq length %d: %s" % (
        train_batch_size, seq_length,
        _describe(found, seq_length, settings, precisions)))
  return lines + [""] + picks


class BertMemory(object):
  """What a training step of BERT with its heads keeps in memory, as the
  run-time settings (memory/memory_settings.py) ask it.

  The estimates are this module's: a classifier head by default, or with
  `max_predictions_per_seq` > 0 pretraining's masked-LM and next-sentence
  heads (run_pretraining.py). An example is `sequences_per_example`
  sequences (run_swag.py: one per choice), so a micro-batch of N examples
  holds the activations of N times that many. A script whose model needs
  other memory passes an object with the same four methods instead.
  """

  def __init__(self, bert_config, seq_length, optimizer="adamw",
               max_predictions_per_seq=0, sequences_per_example=1):
    self.bert_config = bert_config
    self.seq_length = seq_length
    self.optimizer = optimizer
    self.max_predictions_per_seq = max_predictions_per_seq
    self.sequences_per_example = sequences_per_example

  def describe(self):
    """E.g. "BERT with 24 layers, hidden size 1024 (335.1M parameters) at
    --max_seq_length=512"; pretraining adds the masked positions."""
    config = self.bert_config
    params = num_params(config)
    heads = ""
    if self.max_predictions_per_seq:
      params += masked_lm_params(config)
      heads = (" and the pretraining heads at --max_predictions_per_seq=%d"
               % self.max_predictions_per_seq)
    if self.sequences_per_example > 1:
      heads += (", %d sequences per example" % self.sequences_per_example)
    return ("BERT with %d layers, hidden size %d (%.1fM parameters) at "
            "--max_seq_length=%d%s" % (
                config.num_hidden_layers, config.hidden_size, params / 1e6,
                self.seq_length, heads))

  def estimate_bytes(self, micro_batch, precision, gradient_checkpointing,
                     num_accumulation_steps):
    """The planner's peak bytes for one replica running `micro_batch`."""
    return estimate_bytes(
        self.bert_config, self.seq_length, micro_batch, precision,
        gradient_checkpointing, num_accumulation_steps, self.optimizer,
        max_predictions_per_seq=self.max_predictions_per_seq,
        sequences_per_example=self.sequences_per_example)["total"]

  def plan(self, batch_size, memory_bytes, precision, allow_checkpointing,
           device=GPU):
    """Plan for `batch_size` examples per update on one replica with
    `memory_bytes`, the one predicted fastest on `device` (GPU or CPU), or
    None when not even one example fits."""
    return plan(
        self.bert_config, self.seq_length, batch_size, memory_bytes,
        precisions=(precision,), allow_checkpointing=allow_checkpointing,
        optimizer=self.optimizer,
        max_predictions_per_seq=self.max_predictions_per_seq,
        sequences_per_example=self.sequences_per_example, device=device)

  def fastest(self, found_plans, device=GPU):
    """`fastest` of one replica's Plans (or None) on `device`: how the
    planner ranks plans, for advice that weighs several."""
    return fastest(found_plans, self.seq_length, self.sequences_per_example,
                   device)
