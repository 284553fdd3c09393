"""Tests for runner_flags.py (definitions) and run_setup.py (what the flags
make of a run: checks, strategy, memory settings, RunConfig)."""
import json
import logging as std_logging
import os

from absl import flags
import pytest
import tensorflow as tf

import cli
import memory_flags
import memory_plan
import modeling
import run_setup
import runner_flags
import tf_internals

TINY_CONFIG = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "sample_data", "tiny_bert_config.json")


@pytest.fixture
def fv():
  values = flags.FlagValues()
  runner_flags.define_common_flags(128, flag_values=values)
  return values


def test_flag_defaults(fv):
  fv(["prog"])
  assert fv.max_seq_length == 128
  assert fv.do_lower_case is True
  assert (fv.train_batch_size, fv.predict_batch_size) == (32, 8)
  assert (fv.learning_rate, fv.num_train_epochs) == (5e-5, 3.0)
  assert (fv.warmup_proportion, fv.save_checkpoints_steps) == (0.1, 1000)
  assert (fv.iterations_per_loop, fv.num_tpu_cores) == (1000, 8)
  assert fv.use_tpu is False and fv.tpu_name is None
  assert (fv.num_accumulation_steps, fv.optimizer, fv.seed) == (1, "adamw",
                                                                12345)
  assert (fv.keep_checkpoint_max, fv.log_step_count_steps) == (5, 100)
  with pytest.raises(flags.IllegalFlagValueError):
    fv(["prog", "--optimizer=sgd"])


def test_check_tpu_flags(fv):
  fv(["prog"])
  run_setup.check_tpu_flags(fv)
  for argv in (["--use_tpu"], ["--tpu_name=grpc://10.0.0.2"]):
    fv.unparse_flags()
    fv(["prog"] + argv)
    with pytest.raises(ValueError) as info:
      run_setup.check_tpu_flags(fv)
    assert str(info.value) == ("--use_tpu/--tpu_name: no TPU support in "
                               "this build; run on CPU/GPU without them")


def test_num_train_and_warmup_steps(fv):
  # MRPC: 3668 training examples, batch 32, 3 epochs -> 343 steps, 34 warmup.
  fv(["prog"])
  assert run_setup.num_train_and_warmup_steps(3668, fv) == (343, 34)
  fv.unparse_flags()
  fv(["prog", "--train_batch_size=24", "--num_train_epochs=2.0",
      "--warmup_proportion=0.25"])
  # int(100 / 24 * 2) = int(8.33) = 8; int(8 * 0.25) = 2.
  assert run_setup.num_train_and_warmup_steps(100, fv) == (8, 2)


def test_make_run_config(fv, tmp_path):
  fv(["prog", "--output_dir=%s" % tmp_path, "--seed=3",
      "--num_accumulation_steps=4", "--save_checkpoints_steps=50",
      "--keep_checkpoint_max=2", "--log_step_count_steps=10"])
  config = run_setup.make_run_config(fv)
  assert config.model_dir == str(tmp_path)
  assert (config.tf_random_seed, config.num_accumulation_steps) == (3, 4)
  assert (config.save_checkpoints_steps, config.keep_checkpoint_max,
          config.log_step_count_steps) == (50, 2, 10)


def test_check_required_files(fv, tmp_path, minilm_dir):
  good = ["prog", "--vocab_file=%s/vocab.txt" % minilm_dir,
          "--bert_config_file=%s/bert_config.json" % minilm_dir,
          "--output_dir=%s" % tmp_path]
  fv(good + ["--init_checkpoint=%s/bert_model.ckpt" % minilm_dir])
  run_setup.check_required_files(fv, do_train=True)
  run_setup.check_required_files(fv, do_train=False)

  cases = [
      (["--vocab_file=%s/nope.txt" % minilm_dir], "--vocab_file=.*not found"),
      (["--bert_config_file="], "--bert_config_file is required"),
      (["--init_checkpoint=%s" % minilm_dir],
       "--init_checkpoint=.*index not found.*prefix"),
  ]
  for extra, pattern in cases:
    fv.unparse_flags()
    fv(good + extra)
    with pytest.raises(ValueError, match=pattern):
      run_setup.check_required_files(fv, do_train=True)
  fv.unparse_flags()
  fv(good)
  run_setup.check_required_files(fv, do_train=True)
  with pytest.raises(ValueError, match="--output_dir=.*no checkpoint"):
    run_setup.check_required_files(fv, do_train=False)
