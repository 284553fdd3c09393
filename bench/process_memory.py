# coding=utf-8
"""Whole-process peak memory of BERT training steps, ours and transformers'.

Each run is a fresh child process timed by `/usr/bin/time -v`; its
"Maximum resident set size" (start to exit: imports, graph, initialisation
and every step) is the figure reported, the way peers are usually measured.
Both sides run the same step: BERT with random weights, a 2-label classifier
on the pooled output, dropout 0.1, an Adam-style update with global-norm
clipping at 1.0, a fixed random batch.

  ours          modeling.BertModel + optimization.create_optimizer in a plain
                tf.compat.v1.Session: the library path of a user who builds
                the graph as with Google's code (no runner, no estimator)
  transformers  BertForSequenceClassification (PyTorch, CPU) + AdamW; with
                --checkpointing its gradient_checkpointing_enable()
  tfm, khub     tf-models-official's and KerasHub's classifiers, built and
                stepped by bench/throughput.py's step functions (their
                random weights and padded batch; Google's AdamW recipe);
                no checkpointing (neither offers it)

    python -m bench.process_memory --impl=ours --model=large --seq=512 \
        --batch=2 --checkpointing=false,true
    bench/.venv/bin/python -m bench.process_memory --impl=transformers ...
    bench/.venv/bin/python -m bench.process_memory --impl=tfm \
        --checkpointing=false                 # khub: in bench/.venv-kerashub

The batch is a graph constant (and BertModel makes the input mask) unless
--inputs=fed (ours), which feeds the batch and an input mask of ones
through placeholders, as a user's input pipeline would.

--phases also prints where the memory went: the resident set and its
high-water mark after the imports, the graph (or model), the
initialisation and each step (Linux's /proc/self/status). --forward_first
(ours) runs the loss alone once before the steps, as a phase "forward": the
forward pass's own rise over the initialised process.

transformers needs bench/.venv (bash bench/setup_bench_env.sh).
"""

import argparse
import json
import os
import re
import subprocess
import time

import bench

MODELS = {"base": (12, 768), "large": (24, 1024)}
MAX_POSITIONS = 512
TIMEOUT_SECONDS = 3600
# Peers stepped by bench/throughput.py's step functions.
PEERS = ("tfm", "khub")


class Phases(object):
  """Resident set and high-water mark (GiB) at the end of named phases."""

  def __init__(self):
    self.start = time.monotonic()
    self.rows = []

  def mark(self, name):
    fields = {}
    with open("/proc/self/status") as status:
      for line in status:
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
          fields[key] = int(value.split()[0]) / 2**20
    self.rows.append([name, fields.get("VmRSS"), fields.get("VmHWM"),
                      time.monotonic() - self.start])


def model_config(model):
  """BertConfig fields of `model` ("base" or "large") for the runs here."""
  layers, hidden = MODELS[model]
  return dict(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers,
              num_attention_heads=hidden // 64, intermediate_size=4 * hidden,
              hidden_act="gelu", hidden_dropout_prob=0.1,
              attention_probs_dropout_prob=0.1,
              max_position_embeddings=MAX_POSITIONS,
              type_vocab_size=2, initializer_range=0.02)


def random_batch(batch, seq):
  """(ids [batch, seq], labels [batch]): the same for both implementations."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.RandomState(1)
  ids = rng.randint(1000, 30000, [batch, seq]).astype(np.int64)
  labels = np.arange(batch) % 2
  return ids, labels


def library_step(config_values, ids, labels, checkpointing, fed=False):
  """(train_op, loss, feed_dict) of our library path, built in the default
  graph.

  Args:
    config_values: dict of BertConfig fields (`model_config`).
    ids: int array [batch, seq]; labels: int array [batch] (`random_batch`).
    checkpointing: bool, BertModel's gradient_checkpointing.
    fed: the batch and its input mask (all ones) enter through
      placeholders and the returned feed_dict, as from a user's input
      pipeline. Otherwise the batch is a graph constant and BertModel makes
      the input mask, so TensorFlow's graph optimizer may fold what depends
      on them into constants.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import modeling  # pylint: disable=g-import-not-at-top
  import optimization  # pylint: disable=g-import-not-at-top
  config = modeling.BertConfig.from_dict(config_values)
  if fed:
    input_ids = tf.compat.v1.placeholder(tf.int32, ids.shape, "input_ids")
    label_ids = tf.compat.v1.placeholder(tf.int32, labels.shape, "labels")
    input_mask = tf.compat.v1.placeholder(tf.int32, ids.shape, "input_mask")
    feed_dict = {input_ids: ids, label_ids: labels,
                 input_mask: np.ones_like(ids)}
  else:
    input_ids = tf.constant(ids, tf.int32)
    label_ids = tf.constant(labels, tf.int32)
    input_mask, feed_dict = None, {}
  model = modeling.BertModel(config, True, input_ids, input_mask=input_mask,
                             gradient_checkpointing=checkpointing)
  weights = tf.compat.v1.get_variable(
      "output_weights", [2, config.hidden_size],
      initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.02))
  logits = tf.matmul(model.get_pooled_output(), weights, transpose_b=True)
  loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=label_ids, logits=logits))
  return (optimization.create_optimizer(loss, 2e-5, 1000, 100), loss,
          feed_dict)


def _run_ours(args, phases):
  """[float]: the losses of `args.steps` steps through the library path."""
  from userio import quiet_tensorflow  # pylint: disable=g-import-not-at-top,unused-import
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  ids, labels = random_batch(args.batch, args.seq)
  losses = []
  phases.mark("imports")
  with tf.Graph().as_default():
    # Seeded like transformers' side: the same weights and dropout masks in
    # every run, so runs' losses can be compared too.
    tf.compat.v1.set_random_seed(1)
    train_op, loss, feed_dict = library_step(
        model_config(args.model), ids, labels, args.checkpointing == "true",
        fed=args.inputs == "fed")
    phases.mark("graph")
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      phases.mark("initialisation")
      if args.forward_first:
        session.run(loss, feed_dict)
        phases.mark("forward")
      for step in range(args.steps):
        losses.append(float(session.run([train_op, loss], feed_dict)[1]))
        phases.mark("step %d" % (step + 1))
  return losses


def _run_transformers(args, phases):
  """[float]: the losses of `args.steps` steps of transformers' model."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  phases.mark("imports")
  torch.manual_seed(1)
  values = model_config(args.model)
  values["hidden_act"] = "gelu_new"  # The tanh GELU, as Google's.
  config = transformers.BertConfig(num_labels=2, **values)
  model = transformers.BertForSequenceClassification(config)
  if args.checkpointing == "true":
    model.gradient_checkpointing_enable()
  model.train()
  optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5,
                                weight_decay=0.01)
  phases.mark("model")
  ids, labels = random_batch(args.batch, args.seq)
  ids, labels = torch.from_numpy(ids), torch.from_numpy(labels)
  losses = []
  for _ in range(args.steps):
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    losses.append(float(loss))
    phases.mark("step %d" % len(losses))
  return losses


def _run_peer(args, phases):
  """[float]: the losses of `args.steps` training steps of the tfm or khub
  classifier of bench/throughput.py, in fp32."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
  from bench import throughput  # pylint: disable=g-import-not-at-top
  phases.mark("imports")  # TensorFlow's, as the other sides count theirs
  step = throughput.STEP_FNS[args.impl](dict(
      impl=args.impl, model=args.model, seq_length=args.seq,
      batch_size=args.batch, training=True, dtype="fp32", xla=False,
      checkpointing=False, threads=2, head=throughput.CLASSIFIER,
      skip_padding=False))
  phases.mark("model")
  losses = []
  for _ in range(args.steps):
    # tfm's step returns the loss, KerasHub's [loss] (and its metrics).
    losses.append(float(np.ravel(step())[0]))
    phases.mark("step %d" % len(losses))
  return losses


def _child(args):
  run = {"ours": _run_ours, "transformers": _run_transformers}.get(
      args.impl, _run_peer)
  phases = Phases()
  losses = run(args, phases)
  print(json.dumps({"losses": losses, "phases": phases.rows}))


def _max_rss_gib(time_output):
  kib = re.search(r"Maximum resident set size \(kbytes\): (\d+)",
                  time_output)
  return int(kib.group(1)) / 2**20


def _measure(args, checkpointing):
  """(peak GiB, elapsed text, losses, phases) of one child process."""
  from bench import throughput  # pylint: disable=g-import-not-at-top
  python, missing = throughput.impl_python(args.impl)
  if missing:
    raise SystemExit(missing)
  command = ["/usr/bin/time", "-v"] + bench.child_command("process_memory", [
      "--child", "--impl=%s" % args.impl, "--model=%s" % args.model,
      "--seq=%d" % args.seq, "--batch=%d" % args.batch,
      "--steps=%d" % args.steps, "--checkpointing=%s" % checkpointing],
                                                          python=python)
  env = dict(os.environ, KERAS_BACKEND="tensorflow")  # khub's backend
  if args.forward_first:
    command.append("--forward_first")
  if args.inputs != "constant":
    command.append("--inputs=%s" % args.inputs)
  done = subprocess.run(command, capture_output=True, text=True,
                        cwd=bench.REPO_ROOT, env=env,
                        timeout=TIMEOUT_SECONDS, check=False)
  if done.returncode != 0:
    raise SystemExit("child failed (%d): %s" % (done.returncode,
                                                 done.stderr[-2000:]))
  elapsed = re.search(r"Elapsed \(wall clock\) time.*: (\S+)", done.stderr)
  result = json.loads(done.stdout.strip().splitlines()[-1])
  return (_max_rss_gib(done.stderr), elapsed.group(1), result["losses"],
          result["phases"])


def int_in(low, high):
  """argparse type: an int in [low, high], else the flag's one-line error."""
  def parse(text):
    try:
      value = int(text)
    except ValueError:
      value = None
    if value is None or not low <= value <= high:
      raise argparse.ArgumentTypeError(
          "%r: give a whole number from %d to %d" % (text, low, high))
    return value
  return parse


def _false_true_list(text):
  """argparse type: a comma list of "false" and "true", kept as text."""
  if not text or set(text.split(",")) - {"false", "true"}:
    raise argparse.ArgumentTypeError(
        "%r: give false, true or a comma list of them" % text)
  return text


def add_step_arguments(parser, batch):
  """--model, --seq and --batch (default `batch`) of the step here."""
  parser.add_argument("--model", choices=sorted(MODELS), default="large")
  parser.add_argument("--seq", type=int_in(1, MAX_POSITIONS), default=512,
                      help="tokens per example, at most %d" % MAX_POSITIONS)
  parser.add_argument("--batch", type=int_in(1, 4096), default=batch)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--impl", choices=("ours", "transformers") + PEERS,
                      default="ours")
  add_step_arguments(parser, batch=2)
  parser.add_argument("--steps", type=int_in(1, 1000), default=2)
  parser.add_argument("--checkpointing", type=_false_true_list,
                      default="false,true", help="comma list of false/true")
  parser.add_argument("--phases", action="store_true",
                      help="also print each run's memory after each phase")
  parser.add_argument("--forward_first", action="store_true",
                      help="(ours) run the forward pass alone once before "
                      "the steps")
  parser.add_argument("--inputs", choices=("constant", "fed"),
                      default="constant",
                      help="(ours) the batch as graph constants or fed "
                      "through placeholders")
  parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.forward_first and args.impl != "ours":
    parser.error("--forward_first: only with --impl=ours")
  if args.inputs != "constant" and args.impl != "ours":
    parser.error("--inputs: only with --impl=ours")
  if args.impl in PEERS and "true" in args.checkpointing.split(","):
    parser.error("--checkpointing=true: %s has none; pass "
                 "--checkpointing=false" % args.impl)
  if args.child:
    _child(args)
    return
  print("| impl | model | seq | batch | inputs | checkpointing | "
        "peak RSS GiB | wall time | losses |")
  print("|---|---|---:|---:|---|---|---:|---:|---|")
  inputs = "fed" if args.impl == "transformers" else args.inputs
  all_phases = []
  for checkpointing in args.checkpointing.split(","):
    peak, elapsed, losses, phases = _measure(args, checkpointing)
    all_phases.append((checkpointing, phases))
    print("| %s | %s | %d | %d | %s | %s | %.2f | %s | %s |" % (
        args.impl, args.model, args.seq, args.batch, inputs, checkpointing,
        peak, elapsed, ", ".join("%.4f" % x for x in losses)), flush=True)
  if args.phases:
    print("\n| checkpointing | after | resident GiB | high-water GiB | "
          "seconds |\n|---|---|---:|---:|---:|")
    for checkpointing, phases in all_phases:
      for name, rss, hwm, seconds in phases:
        print("| %s | %s | %.2f | %.2f | %.0f |" % (checkpointing, name, rss,
                                                    hwm, seconds))


if __name__ == "__main__":
  main()
