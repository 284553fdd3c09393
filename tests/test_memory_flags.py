"""Tests for memory/memory_settings.py, memory/out_of_memory.py and their
wiring into the training scripts.

Flags --precision, --gradient_checkpointing, --micro_batch_size,
--device_memory_gb and --spm_model_file; the automatic plan; the
out-of-memory message; ending a run on a non-finite loss with one message.
"""
import json
import logging as std_logging
import os
import random

from absl import flags
import numpy as np
import pytest
import tensorflow as tf

from engine import tf_internals
from userio import cli
from runner import estimator
from memory import memory_settings
from memory import memory_model
import modeling
from memory import out_of_memory
import run_classifier
from startup import checks
from startup import run_setup
import run_squad
import tokenization
from startup import shared_flags
from userio import units

LARGE = modeling.BertConfig.from_dict(memory_model.BERT_LARGE)
BASE = modeling.BertConfig.from_dict(memory_model.BERT_BASE)
# BERT-Large plus a 2-label head, counted by hand:
#   embeddings (30522 + 512 + 2) * 1024 + 2 * 1024          =  31,782,912
#   24 layers * (4 * (1024^2 + 1024) + 2 * 1024
#                + 1024 * 4096 + 4096 + 4096 * 1024 + 1024
#                + 2 * 1024)                                = 302,309,376
#   pooler 1024^2 + 1024 = 1,049,600; head 2 * 1024 + 2 = 2,050
#   total 335,143,938
LARGE_PARAMS = "335.1M parameters"


@pytest.fixture
def fv():
  """parse(*argv): the SharedFlags of run_classifier.py's shared flags."""
  values = flags.FlagValues()
  shared_flags.define_common_flags(128, flag_values=values)

  def parse(*argv):
    values.unparse_flags()
    values(["prog"] + list(argv))
    return shared_flags.read(values)
  return parse


def _training_advice(config, shared, settings, error):
  """out_of_memory's advice for a run of the classifier of `config`."""
  return out_of_memory.training_advice_fn(
      memory_model.BertMemory(config, shared.max_seq_length,
                              shared.optimizer),
      settings, shared.train_batch_size)(error)


# ---------------------------------------------------------------- flags


def test_flag_defaults_and_choices(fv):
  values = fv()
  assert values.precision == "fp32"
  assert values.gradient_checkpointing is False
  assert values.micro_batch_size == ""
  assert values.device_memory_gb is None and values.spm_model_file is None
  assert fv("--precision=bf16", "--gradient_checkpointing").precision == "bf16"
  with pytest.raises(flags.IllegalFlagValueError):
    fv("--precision=fp8")


def test_settings_without_micro_batch_flag(fv):
  settings = run_setup.resolve_memory(fv("--device_memory_gb=8"), BASE, True)
  assert settings[:4] == ("fp32", 32, 1, False)
  assert settings.compute_dtype == tf.float32
  settings = run_setup.resolve_memory(
      fv("--num_accumulation_steps=4", "--precision=fp16",
         "--gradient_checkpointing", "--device_memory_gb=8"), BASE, True)
  assert settings[:4] == ("fp16", 8, 4, True)
  assert settings.compute_dtype == tf.float16
  assert run_setup.resolve_memory(fv("--precision=bf16"), BASE,
                                True).compute_dtype == tf.bfloat16


def test_integer_micro_batch_sets_accumulation(fv):
  settings = run_setup.resolve_memory(
      fv("--train_batch_size=24", "--micro_batch_size=6"), BASE, True)
  assert (settings.micro_batch_size, settings.num_accumulation_steps) == (6, 4)
  # An explicit --num_accumulation_steps that agrees is fine.
  settings = run_setup.resolve_memory(
      fv("--train_batch_size=24", "--micro_batch_size=6",
         "--num_accumulation_steps=4"), BASE, True)
  assert settings.num_accumulation_steps == 4


@pytest.mark.parametrize("argv, pattern", [
    (["--micro_batch_size=5"],
     "--micro_batch_size=5 does not divide --train_batch_size=32"),
    (["--micro_batch_size=8", "--num_accumulation_steps=2"],
     "means 4 accumulation steps, but --num_accumulation_steps=2"),
    (["--micro_batch_size=0"], "--micro_batch_size=0 must be empty, a "
     "positive integer or auto"),
    (["--micro_batch_size=four"], "--micro_batch_size=four must be"),
    (["--micro_batch_size=auto", "--num_accumulation_steps=2"],
     "auto chooses the accumulation steps; drop --num_accumulation_steps=2"),
    (["--device_memory_gb=0"], "--device_memory_gb=0.0 must be positive"),
    (["--micro_batch_size=auto", "--device_memory_gb=1",
      "--max_seq_length=512"],
     "not even one example of --max_seq_length=512 fits 1.00 GiB"),
])
def test_bad_memory_flags_are_refused(fv, argv, pattern):
  with pytest.raises(ValueError, match=pattern):
    run_setup.resolve_memory(fv(*argv), LARGE, True)


def test_check_required_files_accepts_spm_model_instead_of_vocab(fv,
                                                                 tmp_path):
  config = tmp_path / "bert_config.json"
  config.write_text(json.dumps(memory_model.BERT_BASE))
  spm_model = tmp_path / "spm.model"
  spm_model.write_bytes(b"model")
  base = ["--bert_config_file=%s" % config, "--output_dir=%s" % tmp_path]
  checks.check_required_files(
      fv(*base, "--spm_model_file=%s" % spm_model), do_train=True)
  with pytest.raises(ValueError, match="--spm_model_file=.*not found"):
    checks.check_required_files(
        fv(*base, "--spm_model_file=%s" % (tmp_path / "none.model")), True)
  with pytest.raises(ValueError,
                     match="--vocab_file is required .or --spm_model_file"):
    checks.check_required_files(fv(*base), do_train=True)


@pytest.mark.parametrize("script", [run_classifier, run_squad])
def test_scripts_pass_spm_model_file_to_the_tokenizer(script, tmp_path,
                                                      monkeypatch):
  _, config_file = _write_model_files(str(tmp_path))
  spm_model = tmp_path / "spm.model"
  spm_model.write_bytes(b"model")
  seen = {}

  class Stop(Exception):
    pass

  def fake_tokenizer(**kwargs):
    seen.update(kwargs)
    raise Stop()

  monkeypatch.setattr(tokenization, "FullTokenizer", fake_tokenizer)
  values = flags.FlagValues()
  script.define_flags(values)
  argv = ["prog", "--do_train", "--spm_model_file=%s" % spm_model,
          "--bert_config_file=%s" % config_file, "--max_seq_length=32",
          "--output_dir=%s" % (tmp_path / "out")]
  if script is run_classifier:
    argv += ["--task_name=MRPC", "--data_dir=%s" % tmp_path]
  else:
    argv += ["--train_file=%s" % (tmp_path / "train.json"),
             "--max_query_length=8", "--doc_stride=8"]
  values(argv)
  with pytest.raises(Stop):
    script.main([], flag_values=values)
  assert seen["spm_model_file"] == str(spm_model)
  assert seen["vocab_file"] is None


# --------------------------------------------------------- device memory


def test_device_memory_override_and_meminfo(tmp_path):
  override = memory_settings.device_memory(1.5)
  assert override.bytes == 3 * 2**29
  assert "--device_memory_gb=1.5" in override.source
  meminfo = tmp_path / "meminfo"
  meminfo.write_text("MemTotal:       32000000 kB\n"
                     "MemFree:         1000000 kB\n"
                     "MemAvailable:   20000000 kB\n")
  ram = memory_settings.available_ram(str(meminfo))
  assert ram.bytes == 20000000 * 1024
  assert "MemAvailable" in ram.source
  assert memory_settings.available_ram(str(tmp_path / "missing")) is None


def test_device_memory_without_gpu_is_available_ram():
  if tf.config.list_physical_devices("GPU"):
    pytest.skip("this machine has a GPU")
  with open("/proc/meminfo") as f:
    available = next(int(line.split()[1]) * 1024 for line in f
                     if line.startswith("MemAvailable:"))
  found = memory_settings.device_memory()
  assert "no GPU" in found.source and "MemAvailable" in found.source
  # Other processes allocate and free memory between the two reads.
  assert found.bytes == pytest.approx(available, rel=0.2)


# ------------------------------------------------------------ auto plan


def test_auto_fits_bert_large_512_on_12_gib(fv, caplog):
  caplog.set_level(std_logging.INFO)
  settings = run_setup.resolve_memory(
      fv("--micro_batch_size=auto", "--max_seq_length=512",
         "--device_memory_gb=12"), LARGE, True)
  # Google's README: no batch of BERT-Large at 512 fits 12 GB without help.
  assert settings.num_accumulation_steps > 1
  assert settings.micro_batch_size * settings.num_accumulation_steps == 32
  assert settings.precision == "fp32"
  assert (settings.micro_batch_size, settings.num_accumulation_steps,
          settings.gradient_checkpointing) == tuple(memory_model.plan(
              LARGE, 512, 32, 12 * units.GIB,
              precisions=("fp32",))[:2]) + (True,)
  assert memory_model.estimate_bytes(
      LARGE, 512, settings.micro_batch_size, "fp32", True,
      settings.num_accumulation_steps)["total"] <= 12 * units.GIB
  lines = [r.getMessage() for r in caplog.records
           if "--micro_batch_size=auto" in r.getMessage()]
  assert len(lines) == 1
  assert ("micro-batch %d x %d accumulation steps, --precision=fp32, "
          "gradient checkpointing on" % (
              settings.micro_batch_size, settings.num_accumulation_steps)
          in lines[0])
  assert "of 12.00 GiB (--device_memory_gb=12)" in lines[0]


def test_auto_keeps_precision_and_explicit_no_checkpointing(fv):
  # 16 GiB: on 12 the half-precision weight copy, the accumulators and the
  # safety margin leave BERT-Large no room for an example.
  half = run_setup.resolve_memory(
      fv("--micro_batch_size=auto", "--max_seq_length=512",
         "--device_memory_gb=16", "--precision=bf16"), LARGE, True)
  full = run_setup.resolve_memory(
      fv("--micro_batch_size=auto", "--max_seq_length=512",
         "--device_memory_gb=16"), LARGE, True)
  assert half.precision == "bf16"
  # Half the activation bytes: at least as large a micro-batch.
  assert half.micro_batch_size >= full.micro_batch_size
  with pytest.raises(ValueError, match=r"not even one example .* fits "
                     r"12.00 GiB .* in --precision=fp32\. Lower"):
    run_setup.resolve_memory(
        fv("--micro_batch_size=auto", "--max_seq_length=512",
           "--device_memory_gb=12", "--nogradient_checkpointing"), LARGE,
        True)
  # Predict-only runs do not plan.
  settings = run_setup.resolve_memory(
      fv("--micro_batch_size=auto", "--device_memory_gb=1"), LARGE, False)
  assert settings.num_accumulation_steps == 1


class _Strategy:
  """What memory_flags reads of a tf.distribute strategy: the replicas in
  sync and this worker's devices (a real MirroredStrategy over two CPUs is
  checked in tests/test_distribution.py)."""

  def __init__(self, num_replicas_in_sync, worker_devices):
    self.num_replicas_in_sync = num_replicas_in_sync
    self.extended = type("Extended", (), {"worker_devices": worker_devices})


FOUR_GPUS = _Strategy(4, ["/job:localhost/replica:0/task:0/device:GPU:%d" % i
                          for i in range(4)])
TWO_CPUS = _Strategy(2, ["/job:localhost/replica:0/task:0/device:CPU:%d" % i
                         for i in range(2)])
# Two machines with one CPU each (multi_worker): each has its own RAM.
TWO_WORKERS = _Strategy(2, ["/job:worker/replica:0/task:0/device:CPU:0"])


def test_replicas_of_strategies():
  replicas = memory_settings.Replicas
  assert memory_settings.replicas_of(None) == replicas(1, 1, 1)
  assert memory_settings.replicas_of(FOUR_GPUS) == replicas(4, 4, 1)
  assert memory_settings.replicas_of(TWO_CPUS) == replicas(2, 2, 2)
  assert memory_settings.replicas_of(TWO_WORKERS) == replicas(2, 1, 1)


def test_auto_on_cpu_workers_needs_the_same_memory_on_each(fv):
  with pytest.raises(ValueError, match=r"multi_worker on CPUs needs "
                     r"--device_memory_gb, the same on every worker"):
    run_setup.resolve_memory(fv("--micro_batch_size=auto"), BASE, True,
                           TWO_WORKERS)
  settings = run_setup.resolve_memory(
      fv("--micro_batch_size=auto", "--device_memory_gb=16"), BASE, True,
      TWO_WORKERS)
  # Each machine has its own 16 GiB and 16 examples of every batch.
  assert settings.replica_memory_bytes == 16 * units.GIB
  assert settings.replica_micro_batch_size * 2 == settings.micro_batch_size


def test_auto_plans_each_gpu_for_its_share(fv, caplog):
  caplog.set_level(std_logging.INFO)
  values = fv("--micro_batch_size=auto", "--max_seq_length=512",
              "--device_memory_gb=12")
  one = run_setup.resolve_memory(values, LARGE, True)
  four = run_setup.resolve_memory(values, LARGE, True, FOUR_GPUS)
  # Each of the 4 GPUs holds a whole model and 32 / 4 = 8 examples of the
  # batch, so its plan is one GPU's plan for a batch of 8.
  alone = memory_model.plan(LARGE, 512, 8, 12 * units.GIB,
                            precisions=("fp32",))
  assert four.micro_batch_size == 4 * alone.micro_batch
  assert four.replica_micro_batch_size == alone.micro_batch
  assert four.num_accumulation_steps == alone.accumulation_steps
  assert four.micro_batch_size * four.num_accumulation_steps == 32
  assert four.num_accumulation_steps < one.num_accumulation_steps
  assert memory_model.estimate_bytes(
      LARGE, 512, alone.micro_batch, "fp32", four.gradient_checkpointing,
      four.num_accumulation_steps)["total"] <= 12 * units.GIB
  line = [r.getMessage() for r in caplog.records
          if "auto" in r.getMessage()][-1]
  assert ("micro-batch %d (%d per replica on 4 replicas) x %d accumulation "
          "step" % (four.micro_batch_size, alone.micro_batch,
                    alone.accumulation_steps)) in line
  assert "GiB per replica of 12.00 GiB (--device_memory_gb=12)" in line


def test_auto_splits_ram_between_cpu_replicas(fv, caplog):
  caplog.set_level(std_logging.INFO)
  settings = run_setup.resolve_memory(
      fv("--micro_batch_size=auto", "--max_seq_length=512",
         "--device_memory_gb=24"), LARGE, True, TWO_CPUS)
  # Two CPU replicas in one process: two copies of the weights, gradients
  # and slots in the same 24 GiB, 16 examples of the batch each.
  alone = memory_model.plan(LARGE, 512, 16, 12 * units.GIB,
                            precisions=("fp32",))
  assert (settings.replica_micro_batch_size,
          settings.num_accumulation_steps) == tuple(alone[:2])
  assert settings.replica_memory_bytes == 12 * units.GIB
  assert ("of 12.00 GiB (--device_memory_gb=24, 24.00 GiB shared by 2 CPU "
          "replicas)") in caplog.records[-1].getMessage()


def test_device_kind_of_strategies():
  assert memory_settings.device_kind(FOUR_GPUS) == memory_model.GPU
  assert memory_settings.device_kind(TWO_CPUS) == memory_model.CPU
  assert memory_settings.device_kind(TWO_WORKERS) == memory_model.CPU


def test_auto_on_cpus_checkpoints_only_when_nothing_fits_without_it(fv):
  # BERT-Large at 384 tokens with 16 GiB per replica and 32 examples each:
  # one example fits without checkpointing. The GPU time model checkpoints
  # at 16 x 2 (tests/test_plan_speed.py); on CPUs the micro-batch does not
  # change the time per example, so recomputation only costs.
  values = fv("--micro_batch_size=auto", "--max_seq_length=384",
              "--device_memory_gb=32", "--train_batch_size=64")
  cpus = run_setup.resolve_memory(values, LARGE, True, TWO_CPUS)
  assert cpus.device_kind == memory_model.CPU
  assert (cpus.replica_micro_batch_size, cpus.num_accumulation_steps,
          cpus.gradient_checkpointing) == (1, 32, False)
  values = fv("--micro_batch_size=auto", "--max_seq_length=384",
              "--device_memory_gb=16", "--train_batch_size=128")
  gpus = run_setup.resolve_memory(values, LARGE, True, FOUR_GPUS)
  assert gpus.device_kind == memory_model.GPU
  assert (gpus.replica_micro_batch_size, gpus.num_accumulation_steps,
          gpus.gradient_checkpointing) == (16, 2, True)
  # Where nothing fits without it, CPUs checkpoint too.
  values = fv("--micro_batch_size=auto", "--max_seq_length=512",
              "--device_memory_gb=24")
  assert run_setup.resolve_memory(values, LARGE, True,
                                TWO_CPUS).gradient_checkpointing


def test_fastest_for_replicas_ranks_each_replicas_share():
  model = memory_model.BertMemory(LARGE, 384)
  # Global micro-batches of 4 replicas: 64 x 2 with checkpointing is 16 per
  # replica, (1 + 1024/6144) * 4/3 = 1.56; 4 x 32 without is 1 per replica,
  # 1 + 1024/384 = 3.67 (the time model's formula).
  plain = memory_model.Plan(4, 32, "fp32", False)
  recomputed = memory_model.Plan(64, 2, "fp32", True)
  four = memory_settings.Replicas(4, 4, 1)
  assert memory_settings.fastest_for_replicas(
      model, [plain, recomputed], four, memory_model.GPU) is recomputed
  assert memory_settings.fastest_for_replicas(
      model, [plain, recomputed], four, memory_model.CPU) is plain
  assert memory_settings.fastest_for_replicas(
      model, [None, None], four) is None


def test_auto_refuses_a_batch_the_replicas_cannot_split(fv):
  with pytest.raises(ValueError, match=r"--train_batch_size=30 does not "
                     r"split evenly over the 4 replicas of --distribution; "
                     r"choose a multiple of 4\."):
    run_setup.resolve_memory(
        fv("--micro_batch_size=auto", "--train_batch_size=30",
           "--device_memory_gb=12"), LARGE, True, FOUR_GPUS)


def test_oom_message_with_replicas_plans_per_replica(fv):
  values = fv("--max_seq_length=512", "--device_memory_gb=12",
              "--train_batch_size=64", "--gradient_checkpointing")
  settings = run_setup.resolve_memory(values, LARGE, True, FOUR_GPUS)
  assert settings.replica_micro_batch_size == 16
  message = _training_advice(LARGE, values, settings, _oom_error())
  estimate = memory_model.estimate_bytes(LARGE, 512, 16, "fp32",
                                        True)["total"] / units.GIB
  fit = memory_model.plan(LARGE, 512, 16, 12 * units.GIB,
                          precisions=("fp32",))
  # A smaller micro-batch, not just checkpointing, is what fits.
  assert fit.gradient_checkpointing and fit.accumulation_steps > 1
  for part in ("micro-batch 64 (16 per replica on 4 replicas) x 1 "
               "accumulation step,",
               "estimates %.2f GiB per replica for it; each replica has "
               "12.00 GiB (--device_memory_gb=12)" % estimate,
               "Flags that fit 12.00 GiB per replica: --micro_batch_size=%d "
               "(accumulation %d)" % (4 * fit.micro_batch,
                                       fit.accumulation_steps)):
    assert part in message, (part, message)


# ---------------------------------------------------------- out of memory


def _oom_error(text="OOM when allocating tensor with shape[32,16,512,512]"):
  return tf.errors.ResourceExhaustedError(None, None, text + "\n[[node x]]")


def test_oom_message_names_setting_estimate_and_fitting_flags(fv):
  values = fv("--max_seq_length=512", "--device_memory_gb=13")
  settings = run_setup.resolve_memory(values, LARGE, True)
  message = _training_advice(LARGE, values, settings, _oom_error())
  estimate = (memory_model.estimate_bytes(LARGE, 512, 32)["total"] /
              units.GIB)
  for part in ("24 layers", "hidden size 1024", LARGE_PARAMS,
               "--max_seq_length=512", "--train_batch_size=32",
               "micro-batch 32 x 1 accumulation step,", "--precision=fp32",
               "gradient checkpointing off",
               "estimates %.2f GiB" % estimate,
               "the device has 13.00 GiB (--device_memory_gb=13)",
               # With the safety margin 4 x 8 with checkpointing fits; bf16
               # fits the same, no faster, so it is not offered.
               "Flags that fit 13.00 GiB: --micro_batch_size=4 "
               "(accumulation 8) --gradient_checkpointing.",
               "TensorFlow said: OOM when allocating tensor with "
               "shape[32,16,512,512]"):
    assert part in message, (part, message)
  assert "[[node x]]" not in message


def test_oom_message_when_the_estimate_fits_plans_for_less(fv):
  # BERT-Base at 128 with batch 32 is estimated at 10.9 GiB, under 12 GiB:
  # the OOM proves the estimate low here, so the advice must be smaller.
  values = fv("--device_memory_gb=12")
  settings = run_setup.resolve_memory(values, BASE, True)
  message = _training_advice(BASE, values, settings, _oom_error())
  assert "something else holds memory" in message
  assert "--micro_batch_size=16 (accumulation 2)" in message
  assert "--precision=bf16 (or fp16)." in message


def test_oom_message_without_device_memory(fv):
  values = fv()
  settings = run_setup.resolve_memory(values, BASE, True)._replace(device=None)
  message = _training_advice(BASE, values, settings, _oom_error())
  assert "pass --device_memory_gb" in message
  assert "Flags that fit" not in message


def _oom_model_fn(features, labels, mode, params):
  """A linear model whose loss fails like an out-of-memory allocation."""
  del labels, mode, params
  w = tf.compat.v1.get_variable("w", [2], initializer=tf.zeros_initializer())
  loss = tf.reduce_mean(tf.linalg.matvec(features["x"], w))

  def allocate():
    raise MemoryError("simulated: cannot allocate the activations")
  loss += tf.numpy_function(allocate, [], tf.float32)
  train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
      loss, global_step=tf.compat.v1.train.get_global_step())
  return estimator.EstimatorSpec(estimator.ModeKeys.TRAIN, loss=loss,
                                 train_op=train_op)


def test_runner_out_of_memory_error_carries_the_message(fv, tmp_path, capsys):
  values = fv("--output_dir=%s" % tmp_path, "--train_batch_size=4",
              "--max_seq_length=512", "--device_memory_gb=12")
  settings = run_setup.resolve_memory(values, LARGE, True)
  config = run_setup.make_run_config(
      values, settings, oom_message_fn=out_of_memory.training_advice_fn(
          memory_model.BertMemory(LARGE, 512), settings, 4))
  est = estimator.Estimator(_oom_model_fn, config, train_batch_size=4)

  def input_fn(params):
    return tf.data.Dataset.from_tensor_slices(
        {"x": np.ones([8, 2], np.float32)}).batch(params["batch_size"])

  with pytest.raises(estimator.OutOfMemoryError) as info:
    est.train(input_fn, max_steps=1)
  message = str(info.value)
  assert message.startswith("Out of memory training BERT with 24 layers")
  assert "micro-batch 4 x 1 accumulation step," in message
  assert "Flags that fit 12.00 GiB:" in message
  assert "simulated: cannot allocate" in message
  # The command line ends with the advice alone (userio/cli.py).
  with pytest.raises(SystemExit) as stop:
    cli.call(_raise, info.value)
  assert stop.value.code == cli.FAILURE_STATUS
  assert capsys.readouterr().err == "Training stopped. " + message + "\n"


def _raise(error):
  raise error


def test_cli_ends_training_failures_with_their_advice(capsys):
  with pytest.raises(SystemExit) as stop:
    cli.call(_raise, estimator.NonFiniteLossError("Loss is nan at step 3"))
  assert stop.value.code == cli.FAILURE_STATUS
  err = capsys.readouterr().err
  assert err == "Training stopped. Loss is nan at step 3\n"
  assert "Traceback" not in err
  with pytest.raises(SystemExit) as stop:
    cli.call(_raise, estimator.OutOfMemoryError("Lower --eval_batch_size.",
                                                "Evaluation"))
  assert stop.value.code == cli.FAILURE_STATUS
  assert capsys.readouterr().err == (
      "Evaluation stopped. Lower --eval_batch_size.\n")


# ------------------------------------------------ run_classifier end to end

WORDS = ("apple river stone cloud green house light music paper planet "
         "silver engine doctor forest island").split()
TINY = {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "hidden_size": 32,
        "initializer_range": 0.02, "intermediate_size": 64,
        "max_position_embeddings": 64, "num_attention_heads": 2,
        "num_hidden_layers": 2, "type_vocab_size": 2}
SEQ_LENGTH = 32
NUM_TRAIN = 16
BATCH = 4


def _write_model_files(directory):
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."] + WORDS
  vocab_file = os.path.join(directory, "vocab.txt")
  with open(vocab_file, "w") as f:
    f.write("".join(token + "\n" for token in vocab))
  config_file = os.path.join(directory, "bert_config.json")
  with open(config_file, "w") as f:
    json.dump(dict(TINY, vocab_size=len(vocab)), f)
  return vocab_file, config_file


def _write_mrpc_train(data_dir):
  rng = random.Random(0)
  os.makedirs(data_dir, exist_ok=True)

  def sentence():
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 6))) + "."
  with open(os.path.join(data_dir, "train.tsv"), "w") as f:
    f.write("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
    for i in range(NUM_TRAIN):
      f.write("%d\t%d\t%d\t%s\t%s\n" % (i % 2, 2 * i, 2 * i + 1, sentence(),
                                        sentence()))


@pytest.fixture(scope="module")
def mrpc_files(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("mrpc"))
  vocab_file, config_file = _write_model_files(root)
  _write_mrpc_train(os.path.join(root, "data"))
  return {"root": root, "vocab_file": vocab_file, "config_file": config_file,
          "data_dir": os.path.join(root, "data")}


def _args(files, output_dir, **overrides):
  values = {"task_name": "MRPC", "data_dir": files["data_dir"],
            "vocab_file": files["vocab_file"],
            "bert_config_file": files["config_file"],
            "output_dir": output_dir, "max_seq_length": SEQ_LENGTH,
            "train_batch_size": BATCH, "learning_rate": 1e-3,
            "num_train_epochs": 2, "save_checkpoints_steps": 1000,
            "log_step_count_steps": 1000, "seed": 7, "do_train": True}
  values.update(overrides)
  return ["--%s=%s" % item for item in sorted(values.items())]


def _run_main(monkeypatch, argv):
  values = flags.FlagValues()
  run_classifier.define_flags(values)
  values(["run_classifier.py"] + argv)
  run_classifier.main([], flag_values=values)


def _counters(output_dir):
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(output_dir))
  return {name: int(reader.get_tensor(name))
          for name in ("global_step", "micro_step")}, reader


def _last_progress(caplog):
  """("step i/n (p%)", "lr = x") of the last progress line."""
  line = [r.getMessage() for r in caplog.records
          if r.getMessage().startswith("step ")][-1]
  parts = line.split(", ")
  return parts[0], next(part for part in parts if part.startswith("lr = "))


@pytest.mark.slow
def test_auto_accumulates_with_the_updates_of_one_big_batch(
    mrpc_files, tmp_path, monkeypatch, caplog):
  caplog.set_level(std_logging.INFO)
  # A device that holds the fixed memory and 2.5 examples, but not 4, in
  # the planner's fit (the estimate with its safety margin): auto must
  # split each batch of 4 into 2 micro-batches of 2. Without checkpointing,
  # so that the plan is the same whatever device's time model ranks it.
  config = modeling.BertConfig.from_json_file(mrpc_files["config_file"])

  def planned(micro_batch):
    return memory_model.planned_bytes(memory_model.estimate_bytes(
        config, SEQ_LENGTH, micro_batch, "fp16", num_accumulation_steps=2))
  fixed = planned(0)
  device_gb = (fixed + 2.5 * (planned(1) - fixed)) / units.GIB

  plain_dir = str(tmp_path / "plain")
  _run_main(monkeypatch, _args(mrpc_files, plain_dir))
  plain_progress = _last_progress(caplog)
  caplog.clear()
  # startup refuses fp16 without a GPU (it is slow on CPUs); what this run
  # checks, accumulation and loss scaling, does not depend on the device.
  monkeypatch.setattr(tf_internals, "gpu_memory_limits",
                      lambda: {"/device:GPU:0": 16 * units.GIB})
  auto_dir = str(tmp_path / "auto")
  _run_main(monkeypatch, _args(
      mrpc_files, auto_dir, micro_batch_size="auto", precision="fp16",
      device_memory_gb=repr(device_gb), gradient_checkpointing=False))
  auto_progress = _last_progress(caplog)
  plan_lines = [r.getMessage() for r in caplog.records
                if r.getMessage().startswith("--micro_batch_size=auto")]
  assert len(plan_lines) == 1
  assert ("micro-batch 2 x 2 accumulation steps, --precision=fp16, "
          "gradient checkpointing off" in plan_lines[0])

  # 16 examples / batch 4 * 2 epochs = 8 updates in both runs; the auto run
  # consumed two micro-batches per update.
  updates = NUM_TRAIN // BATCH * 2
  plain, plain_reader = _counters(plain_dir)
  auto, auto_reader = _counters(auto_dir)
  assert plain == {"global_step": updates, "micro_step": updates}
  assert auto == {"global_step": updates, "micro_step": 2 * updates}
  # Same schedule: the last progress line shows the same step and rate.
  assert plain_progress[0] == "step %d/%d (100.0%%)" % (updates, updates)
  assert auto_progress == plain_progress
  # fp16 trained with a loss scale; fp32 did not.
  assert auto_reader.has_tensor("loss_scale")
  assert not plain_reader.has_tensor("loss_scale")


def _all_finite(checkpoint):
  reader = tf.train.load_checkpoint(checkpoint)
  return all(np.all(np.isfinite(reader.get_tensor(name)))
             for name in reader.get_variable_to_dtype_map())


@pytest.mark.slow
def test_non_finite_loss_ends_the_run_with_one_message(mrpc_files, tmp_path,
                                                       monkeypatch, run_script):
  output_dir = str(tmp_path / "out")
  # Two sane updates, each checkpointed.
  _run_main(monkeypatch, _args(mrpc_files, output_dir, num_train_epochs=0.5,
                               save_checkpoints_steps=1))
  sane = tf.train.latest_checkpoint(output_dir)
  before = {name: tf.train.load_checkpoint(sane).get_tensor(name)
            for name in tf.train.load_checkpoint(
                sane).get_variable_to_dtype_map()}
  assert sane.endswith("-2")

  # Resume with a learning rate that sends the weights to ~1e30: the loss
  # of a following step overflows to NaN.
  result = run_script("run_classifier.py", _args(
      mrpc_files, output_dir, num_train_epochs=3, save_checkpoints_steps=1,
      learning_rate=1e30), 300)
  assert result.returncode != 0
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith("Training stopped. Loss is nan at step "), (
      result.stderr[-3000:])
  assert "--learning_rate" in last and "--precision=fp32" in last
  assert "Traceback" not in result.stderr + result.stdout

  failed_step = int(last.split(" at step ")[1].split()[0])
  state = tf.train.get_checkpoint_state(output_dir)
  for checkpoint in state.all_model_checkpoint_paths:
    assert _all_finite(checkpoint), checkpoint
  latest = tf.train.latest_checkpoint(output_dir)
  assert int(latest.rsplit("-", 1)[1]) < failed_step
  assert latest in last  # the message names the checkpoint a rerun uses
  after = tf.train.load_checkpoint(sane)
  for name, value in before.items():
    np.testing.assert_array_equal(after.get_tensor(name), value)
