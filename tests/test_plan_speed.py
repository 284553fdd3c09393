"""Tests of the planner's choice by predicted time and of its safety margin.

The time model is an assumption (memory/memory_model.py's docstring): these
tests check that the planner follows the stated model, re-deriving its
numbers from the stated formula, never that a GPU runs that fast. No test
here times anything.
"""
import pytest

from memory import memory_model as mp
from userio import units

GIB12 = 12 * units.GIB
GIB16 = 16 * units.GIB


def _stated_time(micro_batch, seq_length, checkpointing):
  """The docstring's model, written out: throughput u(n) = n / (n + 1024)
  for n tokens per micro-batch, so time per example is proportional to
  1 / u(n); a step is forward + backward = 1 + 2 forward passes, and
  checkpointing runs the forward once more."""
  n = micro_batch * seq_length
  per_example = 1 / (n / (n + 1024))
  return per_example * ((1 + 2 + 1) / (1 + 2) if checkpointing else 1)


def test_the_stated_assumption_80_percent_at_8_by_512():
  # u = 0.8 at a micro-batch of 8 examples of 512 tokens.
  found = mp.Plan(8, 4, "fp32", False)
  assert 1 / mp.update_time(found, 512) == pytest.approx(0.8)


@pytest.mark.parametrize("seq_length", [128, 384, 512])
def test_time_per_example_does_not_rise_with_the_micro_batch(seq_length):
  batch = 96
  divisors = [d for d in range(1, batch + 1) if batch % d == 0]
  for checkpointing in (False, True):
    times = [mp.update_time(mp.Plan(d, batch // d, "fp32", checkpointing),
                            seq_length) for d in divisors]
    assert all(a >= b for a, b in zip(times, times[1:])), times
    assert times == pytest.approx(
        [_stated_time(d, seq_length, checkpointing) for d in divisors])
  # Sequences of several examples count as tokens of the micro-batch.
  four = mp.update_time(mp.Plan(2, 48, "fp32", False), seq_length,
                        sequences_per_example=4)
  assert four == pytest.approx(_stated_time(8, seq_length, False))


def test_checkpointing_costs_one_more_forward_pass():
  for micro, seq_length in ((1, 128), (16, 384), (32, 512)):
    plain = mp.update_time(mp.Plan(micro, 1, "fp32", False), seq_length)
    recomputed = mp.update_time(mp.Plan(micro, 1, "fp32", True), seq_length)
    # Forward 1 + backward 2 = 3 passes; recomputation makes 4.
    assert recomputed / plain == pytest.approx(4 / 3)
  assert mp.CHECKPOINTING_TIME_FACTOR == pytest.approx(4 / 3)


def test_large_384_on_16_gib_checkpoints_at_16_rather_than_32_steps_of_1():
  # Without checkpointing one example fits (with the accumulators), with it
  # sixteen: 16 x 2 at (1 + 1024/6144) * 4/3 = 1.56 beats 1 x 32 at
  # 1 + 1024/384 = 3.67.
  found = mp.plan(mp.BERT_LARGE, 384, 32, GIB16)
  assert found == mp.Plan(16, 2, "fp32", True)
  plain = mp.plan(mp.BERT_LARGE, 384, 32, GIB16, allow_checkpointing=False)
  assert plain == mp.Plan(1, 32, "fp32", False)
  assert mp.update_time(found, 384) == pytest.approx(
      _stated_time(16, 384, True))
  assert mp.update_time(found, 384) < mp.update_time(plain, 384)


def test_large_384_on_12_gib_checkpoints_rather_than_one_example_steps():
  # On the bare estimate (no margin) one half-precision example fits without
  # checkpointing, 1 x 32; checkpointing fits 8 x 4 and is predicted
  # faster: (1 + 1024/3072) * 4/3 = 1.78 against 3.67.
  both = ("fp32", "bf16")
  bare = mp.plan(mp.BERT_LARGE, 384, 32, GIB12, precisions=both, margin=0)
  assert bare == mp.Plan(8, 4, "fp32", True)
  assert mp.plan(mp.BERT_LARGE, 384, 32, GIB12, precisions=both, margin=0,
                 allow_checkpointing=False) == mp.Plan(1, 32, "bf16", False)
  # With the margin nothing fits without checkpointing; it plans the largest
  # micro-batch that does, more than one example.
  found = mp.plan(mp.BERT_LARGE, 384, 32, GIB12, precisions=both)
  assert found.gradient_checkpointing and found.micro_batch > 1
  assert mp.plan(mp.BERT_LARGE, 384, 32, GIB12, precisions=both,
                 allow_checkpointing=False) is None


def test_no_checkpointing_when_its_micro_batch_keeps_the_gpu_busy():
  # Base at 128 on 12 GiB: 16 x 2 without checkpointing (1.5) against
  # 32 x 1 with it (1.67): checkpointing's extra forward pass costs more
  # than the larger micro-batch gains.
  found = mp.plan(mp.BERT_BASE, 128, 32, GIB12)
  assert found == mp.Plan(16, 2, "fp32", False)
  assert mp.update_time(found, 128) == pytest.approx(
      _stated_time(16, 128, False))
  assert _stated_time(32, 128, True) > _stated_time(16, 128, False)


def _with_margin(breakdown):
  """The fit rule of docs/memory.md: the workspace, plus the rest and 12.5%
  of it."""
  rest = breakdown["total"] - breakdown["workspace"]
  return breakdown["workspace"] + 1.125 * rest


def test_margin_keeps_googles_zero_at_large_384_on_12_gb():
  # Google's README: no example of BERT-Large at 384 tokens fits a 12 GB
  # GPU with Adam. The bare estimate of one is 11.0 GiB, under 12; with the
  # margin it is above.
  one = mp.estimate_bytes(mp.BERT_LARGE, 384, 1)
  assert one["total"] < GIB12 < _with_margin(one)
  assert mp.max_micro_batch(mp.BERT_LARGE, 384, GIB12, margin=0) == 1
  assert mp.max_micro_batch(mp.BERT_LARGE, 384, GIB12) == 0
  assert mp.max_micro_batch(mp.BERT_LARGE, 512, GIB12) == 0
  assert mp.SAFETY_MARGIN == 0.125


def _fits16(micro_batch, config, seq_length, precision, checkpointing):
  return _with_margin(mp.estimate_bytes(
      config, seq_length, micro_batch, precision, checkpointing)) <= GIB16


@pytest.mark.parametrize("config", [mp.BERT_BASE, mp.BERT_LARGE])
def test_margin_is_the_largest_count_that_clears_it(config):
  for seq_length in (128, 384, 512):
    for checkpointing in (False, True):
      n = mp.max_micro_batch(config, seq_length, GIB16, "fp32",
                             checkpointing)
      assert n <= mp.max_micro_batch(config, seq_length, GIB16, "fp32",
                                     checkpointing, margin=0)
      setting = (config, seq_length, "fp32", checkpointing)
      assert n >= 1 and _fits16(n, *setting) and not _fits16(n + 1, *setting)


def test_table_shows_each_plan_with_its_time_and_the_pick():
  table = mp.format_table(mp.BERT_LARGE, [384], GIB16, precisions=("fp32",),
                          train_batch_size=32, name="large")
  lines = table.splitlines()
  assert "safety margin 12.5% of the rest" in lines[0]
  assert "| 384 | 1 x 32: 3.67 | 16 x 2: 1.56 |" in lines
  assert ("train_batch_size=32 at seq length 384: micro-batch 16 x 2 "
          "accumulation steps (fp32, gradient checkpointing), time / update "
          "1.56, the lowest of the plans that fit (best without "
          "checkpointing: 1 x 32, 3.67)") in lines


# ------------------------------------------------------------- on a CPU


def test_on_a_cpu_the_micro_batch_does_not_change_the_time():
  # The CPU model: no utilization penalty, u(n) = 1 at every micro-batch,
  # so 1 per example, and 4/3 with the recomputed forward pass.
  assert mp.HALF_THROUGHPUT_TOKENS[mp.CPU] == 0
  for micro in (1, 2, 16, 32):
    for seq_length in (128, 512):
      found = mp.Plan(micro, 32 // micro, "fp32", False)
      assert mp.update_time(found, seq_length, device=mp.CPU) == 1
      assert mp.update_time(found._replace(gradient_checkpointing=True),
                            seq_length, device=mp.CPU) == pytest.approx(4 / 3)


def test_a_cpu_plan_with_room_does_not_checkpoint():
  # Large at 384 on 16 GiB: one example fits without checkpointing. A GPU
  # checkpoints at 16 x 2 (1.56 against 3.67, above); on a CPU every plan
  # without recomputation takes 1 and checkpointing 4/3, so 1 x 32 wins.
  on_cpu = mp.plan(mp.BERT_LARGE, 384, 32, GIB16, device=mp.CPU)
  assert on_cpu == mp.Plan(1, 32, "fp32", False)
  on_gpu = mp.plan(mp.BERT_LARGE, 384, 32, GIB16, device=mp.GPU)
  assert on_gpu == mp.Plan(16, 2, "fp32", True)
  assert on_gpu == mp.plan(mp.BERT_LARGE, 384, 32, GIB16)
  assert _stated_time(16, 384, True) < _stated_time(1, 384, False)
  # Base at 128 on 12 GiB, no checkpointing on either: on a CPU the same
  # largest micro-batch (ties go to fewer accumulation steps).
  assert mp.plan(mp.BERT_BASE, 128, 32, GIB12, device=mp.CPU) == mp.Plan(
      16, 2, "fp32", False)


def test_a_cpu_checkpoints_only_when_nothing_fits_without_it():
  # Large at 512 on 12 GiB: nothing fits without checkpointing (Google's
  # README), so the CPU plan checkpoints, at the largest micro-batch that
  # fits and divides the batch.
  assert mp.plan(mp.BERT_LARGE, 512, 32, GIB12,
                 allow_checkpointing=False, device=mp.CPU) is None
  found = mp.plan(mp.BERT_LARGE, 512, 32, GIB12, device=mp.CPU)
  largest = mp.max_micro_batch(mp.BERT_LARGE, 512, GIB12, "fp32", True,
                               num_accumulation_steps=2)
  assert found.gradient_checkpointing and found.micro_batch >= 1
  assert found.micro_batch == max(d for d in range(1, largest + 1)
                                  if 32 % d == 0)


def test_the_table_names_the_gpu_time_model():
  table = mp.format_table(mp.BERT_BASE, [128], GIB12, precisions=("fp32",),
                          train_batch_size=32)
  assert ("Plans for train_batch_size=32 with the GPU time model (half the "
          "throughput at 1024 tokens per micro-batch)") in table
