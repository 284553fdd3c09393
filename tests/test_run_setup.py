"""Tests for startup/shared_flags.py (definitions, reading the values) and
startup/ (what the flags make of a run: checks, strategy, memory
settings, RunConfig)."""
import logging as std_logging
import os

from absl import flags
import pytest
import tensorflow as tf

from userio import cli
from memory import memory_settings
from memory import memory_model
import modeling
from startup import checks
from startup import run_setup
from startup import shared_flags
from tasks import task as task_lib
from tasks import text_pair
from engine import tf_internals
from userio import units

TINY_CONFIG = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "sample_data", "tiny_bert_config.json")


@pytest.fixture
def fv():
  values = flags.FlagValues()
  shared_flags.define_common_flags(128, flag_values=values)
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


def _check_tpu_flags(values):
  shared = shared_flags.read(values)
  checks.check_tpu_flags(shared.use_tpu, shared.tpu_name,
                          shared.changed_compatibility_flags)


def test_read_gives_the_values_and_what_the_command_line_set(fv):
  fv(["prog", "--num_accumulation_steps=1", "--master=grpc://x",
      "--devices=/cpu:0,/cpu:1"])
  shared = shared_flags.read(fv)
  assert (shared.max_seq_length, shared.train_batch_size) == (128, 32)
  assert shared.devices == ("/cpu:0", "/cpu:1")
  assert shared.explicit_accumulation_steps == 1
  assert shared.explicit_gradient_checkpointing is None
  assert shared.changed_compatibility_flags == ("--master=grpc://x",)
  assert "vocab_file" in shared.defined and shared.vocab_file is None
  # A script without the vocabulary flags: None, and not defined.
  values = flags.FlagValues()
  shared_flags.define_model_flags(128, values)
  values(["prog"])
  shared = shared_flags.read(values)
  assert shared.vocab_file is None and "vocab_file" not in shared.defined
  assert shared.do_lower_case is None and shared.train_batch_size is None


def test_check_tpu_flags(fv):
  fv(["prog"])
  _check_tpu_flags(fv)
  for argv in (["--use_tpu"], ["--tpu_name=grpc://10.0.0.2"]):
    fv.unparse_flags()
    fv(["prog"] + argv)
    with pytest.raises(ValueError) as info:
      _check_tpu_flags(fv)
    assert str(info.value) == ("--use_tpu/--tpu_name: no TPU support in "
                               "this build; run on CPU/GPU without them")


def test_num_train_and_warmup_steps():
  # MRPC: 3668 training examples, batch 32, 3 epochs -> 343 steps, 34 warmup.
  assert task_lib.num_train_and_warmup_steps(3668, 32, 3.0, 0.1) == (343, 34)
  # int(100 / 24 * 2) = int(8.33) = 8; int(8 * 0.25) = 2.
  assert task_lib.num_train_and_warmup_steps(100, 24, 2.0, 0.25) == (8, 2)


def test_make_run_config(fv, tmp_path):
  fv(["prog", "--output_dir=%s" % tmp_path, "--seed=3",
      "--num_accumulation_steps=4", "--save_checkpoints_steps=50",
      "--keep_checkpoint_max=2", "--log_step_count_steps=10"])
  shared = shared_flags.read(fv)
  config = run_setup.make_run_config(shared, run_setup.resolve_memory(
      shared, modeling.BertConfig(vocab_size=30), do_train=True))
  assert config.model_dir == str(tmp_path)
  assert (config.tf_random_seed, config.num_accumulation_steps) == (3, 4)
  assert (config.save_checkpoints_steps, config.keep_checkpoint_max,
          config.log_step_count_steps) == (50, 2, 10)


def test_check_required_files(fv, tmp_path, minilm_dir):
  good = ["prog", "--vocab_file=%s/vocab.txt" % minilm_dir,
          "--bert_config_file=%s/bert_config.json" % minilm_dir,
          "--output_dir=%s" % tmp_path]
  fv(good + ["--init_checkpoint=%s/bert_model.ckpt" % minilm_dir])
  checks.check_required_files(shared_flags.read(fv), do_train=True)
  checks.check_required_files(shared_flags.read(fv), do_train=False)

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
      checks.check_required_files(shared_flags.read(fv), do_train=True)
  fv.unparse_flags()
  fv(good)
  checks.check_required_files(shared_flags.read(fv), do_train=True)
  with pytest.raises(ValueError, match="--output_dir=.*no checkpoint"):
    checks.check_required_files(shared_flags.read(fv), do_train=False)


# ---------------------------------------------------- the shared set-up


def _parsed(*argv):
  """The SharedFlags of a command line of run_classifier.py's flags."""
  values = flags.FlagValues()
  shared_flags.define_common_flags(128, flag_values=values)
  values(["prog"] + list(argv))
  return shared_flags.read(values)


@pytest.mark.parametrize("batch, micro, steps, replicas, expected", [
    (32, None, None, 1, 1),
    (32, None, 4, 1, 4),
    (32, 8, None, 1, 4),
    (32, 8, 4, 1, 4),
    (32, 8, None, 2, 4),
])
def test_accumulation_steps_derived(batch, micro, steps, replicas, expected):
  found = memory_settings.accumulation_steps(
      batch, micro, steps, memory_settings.Replicas(replicas, replicas, 1))
  assert found == expected
  assert batch % found == 0


@pytest.mark.parametrize("batch, micro, steps, replicas, pattern", [
    (0, None, None, 1, "--train_batch_size=0 must be at least 1"),
    (32, None, 0, 1, "--num_accumulation_steps=0 must be at least 1"),
    (32, None, 3, 1, "--train_batch_size=32 is not a multiple of "
     "--num_accumulation_steps=3"),
    (32, 5, None, 1, "--micro_batch_size=5 does not divide"),
    (32, 8, 2, 1, "means 4 accumulation steps, but --num_accumulation_steps"
     "=2"),
    (6, 3, None, 2, "A micro-batch of 3 examples .* does not split evenly "
     "over the 2 replicas"),
    (6, None, 2, 2, "--train_batch_size=6 / --num_accumulation_steps=2 gives "
     "micro-batches of 3 examples, which do not split evenly over the 2 "
     "replicas"),
])
def test_accumulation_steps_refused(batch, micro, steps, replicas, pattern):
  with pytest.raises(cli.UserError, match=pattern):
    memory_settings.accumulation_steps(
        batch, micro, steps, memory_settings.Replicas(replicas, replicas, 1))


def test_compatibility_flags_are_named_once(caplog):
  caplog.set_level(std_logging.INFO)
  shared = _parsed("--master=grpc://x", "--tpu_zone=z",
                   "--iterations_per_loop=7")
  checks.check_tpu_flags(shared.use_tpu, shared.tpu_name,
                          shared.changed_compatibility_flags)
  lines = [r.getMessage() for r in caplog.records
           if "compatibility" in r.getMessage()]
  assert lines == ["--master=grpc://x, --tpu_zone=z, --iterations_per_loop=7: "
                   "accepted for compatibility with Google's commands; "
                   "without effect on CPU/GPU."]
  caplog.clear()
  checks.check_tpu_flags(False, None, _parsed().changed_compatibility_flags)
  assert not [r for r in caplog.records if "compatibility" in r.getMessage()]


@pytest.mark.parametrize("argv, pattern", [
    (["--learning_rate=0"], "--learning_rate=0.0 must be a positive"),
    (["--num_train_epochs=inf"], "--num_train_epochs=inf must be a positive"),
    (["--warmup_proportion=1.5"], "--warmup_proportion=1.5 must be between"),
    (["--max_seq_length=2"], "--max_seq_length=2 leaves no room"),
    (["--predict_batch_size=0"], "--predict_batch_size=0 must be at least 1"),
    (["--keep_checkpoint_max=-1"], "--keep_checkpoint_max=-1 must be at "
     "least 0"),
    (["--device_memory_gb=inf"], "--device_memory_gb=inf must be positive"),
    (["--devices=/cpu:0"], "--devices=/cpu:0 needs --distribution=mirrored"),
])
def test_check_flags_refuses(argv, pattern):
  with pytest.raises(cli.UserError, match=pattern):
    checks.check_flags(_parsed(*argv), do_train=True,
                       min_seq_length=text_pair.MIN_SEQ_LENGTH_ONE_TEXT)


def test_fp16_needs_a_gpu():
  values = _parsed("--precision=fp16")
  if tf_internals.gpu_memory_limits() == {}:
    with pytest.raises(cli.UserError, match="--precision=bf16"):
      checks.check_flags(values, do_train=True,
                       min_seq_length=text_pair.MIN_SEQ_LENGTH_ONE_TEXT)
  else:
    checks.check_flags(values, do_train=True,
                       min_seq_length=text_pair.MIN_SEQ_LENGTH_ONE_TEXT)
  checks.check_flags(_parsed("--precision=bf16"), do_train=True,
                     min_seq_length=text_pair.MIN_SEQ_LENGTH_ONE_TEXT)


def test_set_up_makes_one_consistent_object(tmp_path):
  values = _parsed("--output_dir=%s" % tmp_path, "--train_batch_size=24",
                   "--micro_batch_size=6", "--precision=bf16", "--seed=5",
                   "--gradient_checkpointing", "--device_memory_gb=4")
  config = modeling.BertConfig.from_json_file(TINY_CONFIG)
  setup = run_setup.set_up(values, config, do_train=True)
  assert setup.distribution is None
  assert (setup.memory.micro_batch_size, setup.num_accumulation_steps) == (
      6, 4)
  assert setup.gradient_checkpointing and setup.compute_dtype == tf.bfloat16
  assert setup.run_config.num_accumulation_steps == 4
  assert setup.run_config.tf_random_seed == 5
  assert setup.run_config.model_dir == str(tmp_path)
  message = setup.oom_message_fn(tf.errors.ResourceExhaustedError(
      None, None, "OOM when allocating tensor"))
  assert message.startswith("Out of memory training BERT with 2 layers, "
                            "hidden size 64")
  assert "micro-batch 6 x 4 accumulation steps, --precision=bf16" in message


def test_set_up_takes_a_script_s_own_memory_model(tmp_path):
  """A script whose model needs more memory per example than the config's
  BERT (here: a model twice as wide) passes its own memory model."""
  config = modeling.BertConfig.from_json_file(TINY_CONFIG)
  values = _parsed("--output_dir=%s" % tmp_path, "--micro_batch_size=auto",
                   "--device_memory_gb=0.7", "--train_batch_size=32")
  plain = run_setup.set_up(values, config, do_train=True)
  wider = modeling.BertConfig.from_dict(dict(
      config.to_dict(), hidden_size=128, intermediate_size=512))
  own = run_setup.set_up(values, config, do_train=True,
                       step_memory=memory_model.BertMemory(wider, 128))
  # Planned by the time model of the device the run trains on.
  kind = plain.memory.device_kind
  assert own.memory.device_kind == kind
  expected = memory_model.plan(wider, 128, 32, 0.7 * units.GIB, device=kind)
  assert plain.memory.micro_batch_size == memory_model.plan(
      config, 128, 32, 0.7 * units.GIB, device=kind).micro_batch
  assert (own.memory.micro_batch_size, own.num_accumulation_steps) == (
      expected.micro_batch, expected.accumulation_steps)
  assert own.memory.micro_batch_size < plain.memory.micro_batch_size
  assert "hidden size 128" in own.oom_message_fn(
      tf.errors.ResourceExhaustedError(None, None, "OOM"))
