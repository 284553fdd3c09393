# coding=utf-8
"""Peak memory and step time of BERT fine-tuning steps, one process per run.

Each run builds BertModel + a 2-label classifier head on the pooled output +
optimization.create_optimizer (AdamWeightDecay, clip 1.0), feeds a fixed
synthetic batch through a dataset iterator with dropout 0.1 on, and runs
`--steps` training steps in a child process. The child reports

  baseline   RSS after importing TensorFlow and the modules, before any graph
  init       RSS after building the graph and initializing the variables
             (weights and optimizer slots are resident, no step has run)
  peak       the peak RSS (VmHWM) of the steps alone: the kernel's high-water
             mark is reset (/proc/self/clear_refs) after initialization
  after      RSS after the last step: what the allocator kept of the peak
  heap       glibc's malloc heap after the steps (JSON only): bytes in use
             (graph, session, executors, compiled kernels) and bytes freed
             (resident unless handed back, see --release_freed_heap); the
             tensor allocator's pool is not in it
  process    ru_maxrss of the whole child (what `/usr/bin/time` reports)
  faults     median minor page faults of the steps after the first (memory
             handed back to the system and touched again costs one per
             4 KiB page)
  step time  median of the steps after the first (warm-up) step
  allocator  the bytes TensorFlow's BFC allocator held after initialization
             and at its peak during the steps (children run with
             TF_CPU_ALLOCATOR_USE_BFC=true unless --allocator=default): the
             tensors alone, as a GPU's allocator would count them, without
             the runtime, the Python heap or malloc's fragmentation

and the activation memory peak - (init + gradients), from RSS and from the
allocator, where gradients are 4 bytes per parameter: init already holds the
weights and both Adam slots (RSS also the baseline).

    python -m bench.memory --configs=base:128,base:512,large:512 --batch=2 \
        --precisions=fp32,bf16 --checkpointing=false,true --steps=4

A config is MODEL:SEQ[:BATCH], MODEL one of base, large or LnHm (n layers,
hidden m, m/64 heads, intermediate 4m, BERT's vocabulary). Runs go one at a
time; before each the parent waits until the free memory (MemAvailable)
covers the planner's estimate, and it kills a child that drives free memory
below `--min_free_gb`. Results: JSON (`--output_json`) and a Markdown table
(`--output_md`), by default under bench/out/.
"""

import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags
from absl import logging
import numpy as np

import bench
from engine import host_memory
from memory import memory_model
from userio import units

CPU_DEVICE = "CPU:0"
# With this set, TensorFlow serves CPU tensors from its BFC allocator, the
# allocator a GPU uses, which counts the bytes it hands out.
BFC_ENV = "TF_CPU_ALLOCATOR_USE_BFC"
RESULT_MARKER = "MEMBENCH_RESULT "
_NAMED_MODELS = {"base": memory_model.BERT_BASE, "large": memory_model.BERT_LARGE}

FLAGS = flags.FLAGS
flags.DEFINE_list("configs", ["base:128", "base:512", "large:512"],
                  "Runs as MODEL:SEQ[:BATCH]; MODEL is base, large or LnHm "
                  "(e.g. L4H256).")
flags.DEFINE_integer("batch", 2, "Batch size of configs that name none.")
flags.DEFINE_list("precisions", ["fp32", "bf16"],
                  "Compute precisions to run: fp32, fp16, bf16.")
flags.DEFINE_list("checkpointing", ["false", "true"],
                  "Gradient checkpointing settings to run.")
flags.DEFINE_integer("steps", 4, "Training steps per run; the first is "
                     "warm-up and excluded from the median step time.")
flags.DEFINE_integer("intra_op_threads", 2, "intra_op_parallelism_threads.")
flags.DEFINE_integer("inter_op_threads", 0,
                     "inter_op_parallelism_threads (0: TensorFlow's choice).")
flags.DEFINE_enum("memory_optimization", "default",
                  ["default", "off", "manual", "heuristics",
                   "swapping_heuristics", "recomputation_heuristics",
                   "scheduling_heuristics"],
                  "Grappler's memory optimizer (RewriterConfig."
                  "memory_optimization) for the child sessions.")
flags.DEFINE_enum("allocator", "bfc", ["bfc", "default"],
                  "CPU tensor allocator of the children: bfc (TensorFlow's "
                  "best-fit allocator, as on a GPU; its peak is reported as "
                  "the allocator peak) or default (what the training "
                  "scripts get: with oneDNN on, oneDNN's CPU allocator, a "
                  "pool that keeps freed memory; only RSS is measured).")
flags.DEFINE_bool("release_freed_heap", True,
                  "Run the steps as the training scripts do: build the "
                  "step's executors first and hand the heap memory freed by "
                  "that and by the first step back to the system "
                  "(engine/host_memory.py). False: plain Session.run.")
flags.DEFINE_list("child_env", [],
                  "NAME=VALUE pairs added to the children's environment, "
                  "e.g. MALLOC_ARENA_MAX=2.")
flags.DEFINE_string("output_json",
                    os.path.join(bench.REPO_ROOT, "bench", "out",
                                 "memory.json"),
                    "Where to write the results as JSON.")
flags.DEFINE_string("output_md",
                    os.path.join(bench.REPO_ROOT, "bench", "out", "memory.md"),
                    "Where to write the Markdown table.")
flags.DEFINE_float("min_free_gb", 1.0,
                   "Kill a child when MemAvailable falls below this (GiB).")
flags.DEFINE_float("wait_minutes", 20.0,
                   "How long to wait for enough free memory before a run.")
flags.DEFINE_integer("timeout_minutes", 60, "Limit of one child run.")
# Set by the parent for the child process only.
flags.DEFINE_string("child", None, "Internal: run one config, as JSON.")


def parse_config(text, default_batch):
  """'large:512:2' -> dict(model, seq, batch, bert) (bert: config dict)."""
  parts = text.split(":")
  if len(parts) not in (2, 3):
    raise ValueError("--configs entry %r must be MODEL:SEQ[:BATCH], e.g. "
                     "large:512:2." % text)
  model, seq = parts[0], parts[1]
  batch = parts[2] if len(parts) == 3 else str(default_batch)
  if not (seq.isdigit() and batch.isdigit()):
    raise ValueError("--configs entry %r: SEQ and BATCH must be integers."
                     % text)
  return {"model": model, "seq": int(seq), "batch": int(batch),
          "bert": model_config(model)}


def model_config(name):
  """bert_config.json values of `name`: base, large or LnHm."""
  if name in _NAMED_MODELS:
    return dict(_NAMED_MODELS[name])
  match = re.fullmatch(r"L(\d+)H(\d+)", name)
  if not match or int(match.group(2)) % 64:
    raise ValueError("Model %r in --configs must be base, large or LnHm with "
                     "m a multiple of 64 (e.g. L4H256)." % name)
  layers, hidden = int(match.group(1)), int(match.group(2))
  return dict(memory_model.BERT_BASE, num_hidden_layers=layers,
              hidden_size=hidden, num_attention_heads=hidden // 64,
              intermediate_size=4 * hidden)


def _proc_status_kib(pid="self"):
  """{'VmRSS': kib, 'VmHWM': kib} of a process."""
  with open("/proc/%s/status" % pid) as f:
    text = f.read()
  return {key: int(value) * 1024 for key, value in
          re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", text, re.M)}


def _mem_available():
  """Bytes the kernel reports as available for new allocations."""
  with open("/proc/meminfo") as f:
    match = re.search(r"^MemAvailable:\s+(\d+) kB", f.read(), re.M)
  return int(match.group(1)) * 1024


# ---------------------------------------------------------------------------
# Child: one run in this process.
# ---------------------------------------------------------------------------


def _classifier_loss(tf, modeling, model, labels, compute_dtype):
  """Mean cross-entropy of a 2-label head on the pooled output (float32)."""
  pooled = model.get_pooled_output()
  hidden = pooled.shape[-1]
  output_weights = tf.compat.v1.get_variable(
      "output_weights", [2, hidden],
      initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.02))
  output_bias = tf.compat.v1.get_variable(
      "output_bias", [2], initializer=tf.compat.v1.zeros_initializer())
  with tf.compat.v1.variable_scope("loss"):
    pooled = modeling.dropout(pooled, 0.1)
    logits = tf.matmul(pooled, tf.cast(output_weights, compute_dtype),
                       transpose_b=True)
    logits = tf.nn.bias_add(logits, tf.cast(output_bias, compute_dtype))
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    one_hot = tf.one_hot(labels, depth=2, dtype=tf.float32)
    return tf.reduce_mean(-tf.reduce_sum(one_hot * log_probs, axis=-1))


def _synthetic_features(config, batch, seq):
  """One batch of full-length examples as numpy int32 arrays: random ids,
  mask all ones, the second half of each sequence segment 1, random labels."""
  rng = np.random.RandomState(1)
  segment_ids = np.zeros([batch, seq], np.int32)
  segment_ids[:, seq // 2:] = 1
  return {"input_ids": rng.randint(0, config.vocab_size, [batch, seq],
                                   dtype=np.int32),
          "input_mask": np.ones([batch, seq], np.int32),
          "segment_ids": segment_ids,
          "label_ids": rng.randint(0, 2, [batch], dtype=np.int32)}


def _build(tf, modeling, optimization, run):
  """Training graph of `run` in the default graph; returns (train_op, loss)."""
  dtype = {"fp32": tf.float32, "fp16": tf.float16,
           "bf16": tf.bfloat16}[run["precision"]]
  config = modeling.BertConfig.from_dict(run["bert"])
  batch, seq = run["batch"], run["seq"]
  # Created first so that dropout draws stateless masks keyed by the step.
  tf.compat.v1.train.get_or_create_global_step()
  # The batches come from a dataset iterator, as the training scripts' do:
  # inputs written as graph constants would let TensorFlow fold the
  # attention mask into a [batch, 1, seq, seq] float32 constant per layer
  # (48 MiB for BERT-Large at 512 tokens, batch 2, with checkpointing), held
  # by the graph and its executors, which a real run never has.
  dataset = tf.data.Dataset.from_tensors(
      _synthetic_features(config, batch, seq)).repeat()
  features = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
  model = modeling.BertModel(
      config, is_training=True, input_ids=features["input_ids"],
      input_mask=features["input_mask"],
      token_type_ids=features["segment_ids"],
      gradient_checkpointing=run["checkpointing"], compute_dtype=dtype)
  loss = _classifier_loss(tf, modeling, model, features["label_ids"], dtype)
  train_op = optimization.create_optimizer(
      loss, 2e-5, num_train_steps=1000, num_warmup_steps=100,
      loss_scale="dynamic" if run["precision"] == "fp16" else None)
  return train_op, loss


def _session_config(tf, run):
  from tensorflow.core.protobuf import rewriter_config_pb2  # pylint: disable=g-import-not-at-top
  config = tf.compat.v1.ConfigProto(
      intra_op_parallelism_threads=run["intra_op_threads"],
      inter_op_parallelism_threads=run["inter_op_threads"])
  setting = run["memory_optimization"]
  if setting != "default":
    rewrite = config.graph_options.rewrite_options
    rewrite.memory_optimization = getattr(
        rewriter_config_pb2.RewriterConfig,
        "NO_MEM_OPT" if setting == "off" else setting.upper())
  return config


def _step_fn(sess, train_op, loss, release_freed_heap):
  """A function that runs a training step and returns the loss.

  With `release_freed_heap`, as the training scripts run their steps
  (estimator.make_step_callable): the step's executors are built first, and
  the heap memory their construction and the first run freed is handed
  back.
  """
  if not release_freed_heap:
    return lambda: sess.run([train_op, loss])[1]
  from runner import estimator  # pylint: disable=g-import-not-at-top
  step = estimator.make_step_callable(sess, train_op, {"loss": loss})
  return lambda: step()["loss"]


def run_child(run):
  """Runs one config in this process; returns the measurements (a dict)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import modeling  # pylint: disable=g-import-not-at-top
  import optimization  # pylint: disable=g-import-not-at-top
  baseline = _proc_status_kib()["VmRSS"]
  with tf.Graph().as_default() as graph:
    tf.compat.v1.set_random_seed(12345)
    train_op, loss = _build(tf, modeling, optimization, run)
    num_params = sum(v.shape.num_elements()
                     for v in tf.compat.v1.trainable_variables())
    init_op = tf.compat.v1.global_variables_initializer()
    graph.finalize()
    with tf.compat.v1.Session(config=_session_config(tf, run)) as sess:
      sess.run(init_op)
      init = _proc_status_kib()["VmRSS"]
      init_hwm = _proc_status_kib()["VmHWM"]
      allocator_init = _allocator_bytes(tf)["current"]
      with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # Resets VmHWM to the current RSS.
      tf.config.experimental.reset_memory_stats(CPU_DEVICE)
      step = _step_fn(sess, train_op, loss, run["release_freed_heap"])
      times, losses, faults = [], [], []
      for _ in range(run["steps"]):
        faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        value = step()
        times.append(time.perf_counter() - start)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt -
                      faults_before)
        losses.append(float(value))
      status = _proc_status_kib()
      peak, after = status["VmHWM"], status["VmRSS"]
      heap = host_memory.heap_bytes()
      allocator_peak = _allocator_bytes(tf)["peak"]
  process = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
  gradients = 4 * num_params
  return {
      "num_params": num_params,
      "baseline_bytes": baseline,
      "init_bytes": init,
      "init_peak_bytes": init_hwm,
      "peak_bytes": peak,
      "after_steps_bytes": after,
      "malloc_heap_in_use_bytes": heap.get("in_use"),
      "malloc_heap_free_bytes": heap.get("free"),
      "page_faults_per_step": statistics.median(faults[1:] or faults),
      "process_peak_bytes": process,
      "activation_bytes": peak - init - gradients,
      "allocator_init_bytes": allocator_init,
      "allocator_peak_bytes": allocator_peak,
      "allocator_activation_bytes": allocator_peak - allocator_init - gradients,
      "step_seconds": times,
      "median_step_seconds": statistics.median(times[1:] or times),
      "losses": losses,
  }


def _allocator_bytes(tf):
  """{'current', 'peak'} bytes of the CPU tensor allocator.

  Only a BFC allocator keeps these statistics: the parent starts children
  with TF_CPU_ALLOCATOR_USE_BFC=true unless --allocator=default.
  """
  if os.environ.get(BFC_ENV, "").lower() != "true":
    return {"current": 0, "peak": 0}
  return tf.config.experimental.get_memory_info(CPU_DEVICE)


# ---------------------------------------------------------------------------
# Parent: one child per run, results to JSON and Markdown.
# ---------------------------------------------------------------------------


def planned_bytes(run, calibration):
  """The planner's estimate of the run's peak, breakdown dict."""
  return memory_model.estimate_bytes(
      run["bert"], run["seq"], run["batch"], run["precision"],
      run["checkpointing"], calibration=calibration)


def _wait_for_memory(needed, wait_minutes):
  """Waits until `needed` bytes are available; False if they are not
  within `wait_minutes`."""
  deadline = time.time() + 60 * wait_minutes
  while _mem_available() < needed:
    if time.time() > deadline:
      return False
    logging.info("Waiting for %.1f GiB free (MemAvailable %.1f GiB).",
                 needed / units.GIB, _mem_available() / units.GIB)
    time.sleep(30)
  return True


def _child_env(allocator, child_env):
  """The children's environment: this one's, TensorFlow's C++ logs quiet,
  the `allocator` ("bfc" or "default") chosen and the NAME=VALUE pairs of
  `child_env` added.

  Raises:
    app.UsageError: an entry of `child_env` is not NAME=VALUE.
  """
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  env[BFC_ENV] = "true" if allocator == "bfc" else "false"
  for item in child_env:
    name, sep, value = item.partition("=")
    if not sep or not name:
      raise app.UsageError("--child_env entry %r must be NAME=VALUE." % item)
    env[name] = value
  return env


def _watch(proc, min_free_gb, timeout_minutes):
  """Waits for `proc`; kills it when free memory falls below `min_free_gb`
  GiB or after `timeout_minutes`, and returns why (None: it ended)."""
  deadline = time.time() + 60 * timeout_minutes
  while proc.poll() is None:
    if _mem_available() < min_free_gb * units.GIB:
      proc.kill()
      return "killed: MemAvailable fell below %.1f GiB" % min_free_gb
    if time.time() > deadline:
      proc.kill()
      return "killed: no result within %d minutes" % timeout_minutes
    time.sleep(0.5)
  return None


def run_parent(run, calibration, env, min_free_gb, wait_minutes,
               timeout_minutes):
  """Runs `run` in a child process; returns the run dict with results.

  Args:
    run: one of _runs' dicts.
    calibration: the planner's calibration, for the estimate of the peak.
    env: the child's environment (_child_env).
    min_free_gb: GiB of free memory to keep: the run waits until the
      estimate and this much are free, and the child is killed when less
      than this is.
    wait_minutes: how long to wait for that memory before skipping.
    timeout_minutes: the child is killed after this long.
  """
  estimate = planned_bytes(run, calibration)["total"]
  record = dict(run, planned_bytes=estimate,
                load_average=os.getloadavg()[0])
  if not _wait_for_memory(estimate + min_free_gb * units.GIB, wait_minutes):
    record["error"] = "skipped: not enough free memory"
    return record
  cmd = bench.child_command("memory", ["--child=" + json.dumps(run)])
  with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        text=True, env=env, cwd=bench.REPO_ROOT) as proc:
    # The child prints little; reading after exit cannot block on a pipe.
    killed = _watch(proc, min_free_gb, timeout_minutes)
    stdout, stderr = proc.communicate()
  lines = [l for l in stdout.splitlines() if l.startswith(RESULT_MARKER)]
  if killed or proc.returncode or not lines:
    record["error"] = killed or "exit %s: %s" % (proc.returncode,
                                                 stderr.strip()[-2000:])
    return record
  record.update(json.loads(lines[-1][len(RESULT_MARKER):]))
  return record


def _runs(configs, batch, precisions, checkpointing, common):
  """The runs: the cross product of `configs` (MODEL:SEQ[:BATCH], `batch`
  where none is given), `precisions` and `checkpointing` ("false",
  "true"), each with the entries of `common`.

  Raises:
    app.UsageError: an entry of the lists is malformed or unknown.
  """
  for precision in precisions:
    if precision not in memory_model.PRECISIONS:
      raise app.UsageError("--precisions entry %r is not one of %s." %
                           (precision, ", ".join(memory_model.PRECISIONS)))
  settings = []
  for item in checkpointing:
    if item not in ("false", "true"):
      raise app.UsageError("--checkpointing entries must be false or true, "
                           "got %r." % item)
    settings.append(item == "true")
  for text in configs:
    try:
      config = parse_config(text, batch)
    except ValueError as e:
      raise app.UsageError(str(e)) from e
    for precision in precisions:
      for checkpointing in settings:
        yield dict(config, precision=precision, checkpointing=checkpointing,
                   **common)


def _gib(value):
  return "%.2f" % (value / units.GIB)


def markdown(records):
  """The results as a Markdown table (GiB; seconds)."""
  header = ("| model | seq | batch | precision | checkpointing | baseline | "
            "init | peak | after steps | activations | allocator peak | "
            "allocator activations | planned | step s | page faults per "
            "step |")
  lines = [header, "|" + "---|" * 5 + "---:|" * 10]
  for r in records:
    cells = [r["model"], str(r["seq"]), str(r["batch"]), r["precision"],
             "on" if r["checkpointing"] else "off"]
    if "error" in r:
      cells += [r["error"]] + [""] * 9
    else:
      cells += [_gib(r["baseline_bytes"]), _gib(r["init_bytes"]),
                _gib(r["peak_bytes"]), _gib(r["after_steps_bytes"]),
                _gib(r["activation_bytes"]),
                _gib(r["allocator_peak_bytes"]),
                _gib(r["allocator_activation_bytes"]),
                _gib(r["planned_bytes"]), "%.2f" % r["median_step_seconds"],
                "%.0f" % r["page_faults_per_step"]]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def _write(path, text):
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w") as f:
    f.write(text)


def main(argv):
  del argv  # Unused.
  if FLAGS.child:
    print(RESULT_MARKER + json.dumps(run_child(json.loads(FLAGS.child))),
          flush=True)
    return
  calibration = memory_model.CPU_MEASURED
  common = {"steps": FLAGS.steps, "intra_op_threads": FLAGS.intra_op_threads,
            "inter_op_threads": FLAGS.inter_op_threads,
            "memory_optimization": FLAGS.memory_optimization,
            "release_freed_heap": FLAGS.release_freed_heap}
  runs = list(_runs(FLAGS.configs, FLAGS.batch, FLAGS.precisions,
                    FLAGS.checkpointing, common))
  env = _child_env(FLAGS.allocator, FLAGS.child_env)
  records = []
  for run in runs:
    logging.info("Running %s:%d:%d %s checkpointing=%s", run["model"],
                 run["seq"], run["batch"], run["precision"],
                 run["checkpointing"])
    records.append(run_parent(
        run, calibration, env, min_free_gb=FLAGS.min_free_gb,
        wait_minutes=FLAGS.wait_minutes,
        timeout_minutes=FLAGS.timeout_minutes))
    logging.info("%s", json.dumps({k: v for k, v in records[-1].items()
                                   if k != "bert"}))
  command = bench.typed_command("memory", sys.argv[1:])
  _write(FLAGS.output_json, json.dumps(
      {"command": command, "runs": records}, indent=1) + "\n")
  _write(FLAGS.output_md, markdown(records))
  print(markdown(records), end="")


if __name__ == "__main__":
  app.run(main)
