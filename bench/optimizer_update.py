# coding=utf-8
"""Time and peak memory of one optimizer update over BERT's variables.

Builds float32 variables with the names and shapes of BERT-Base or
BERT-Large (`--model`), gradients read from variables of the same shapes
(times 1.0, so each step makes fresh gradient tensors), and one update:

  library  what optimization.py does (`training_step.update`: the global-norm
           clip's factor and AdamWeightDecay, Google's hyperparameters)
  ops      Google's original formulation: tf.clip_by_global_norm, then for
           each variable next_m, next_v, the update and the new value as
           separate TensorFlow ops, and three assigns

and prints one JSON line: median and fastest update seconds over `--steps`
timed steps (after 2 untimed ones, which include any XLA compilation), and
the process's peak RSS (ru_maxrss). One variant per process:

    python -m bench.optimizer_update --model=base --update=library
    python -m bench.optimizer_update --model=base --update=ops

Run it from another checkout's root to time that checkout's `library`
update.
"""

import json
import resource
import statistics
import time

from absl import app
from absl import flags

import tensorflow as tf

from engine import training_step
import modeling
import optimization
from memory import memory_model

FLAGS = flags.FLAGS
flags.DEFINE_enum("model", "base", ["base", "large"], "BERT size.")
flags.DEFINE_enum("update", "library", ["library", "ops"],
                  "library: optimization.py's update; ops: Google's "
                  "op-by-op formulation.")
flags.DEFINE_integer("steps", 8, "Timed updates.")
flags.DEFINE_integer("threads", 2, "Intra-op threads (inter-op: 1).")


def _variable_shapes(model):
  """[(name, shape)] of BertModel's trainable variables."""
  with tf.Graph().as_default():
    sizes = {"base": memory_model.BERT_BASE, "large": memory_model.BERT_LARGE}
    config = modeling.BertConfig(**sizes[model])
    input_ids = tf.compat.v1.placeholder(tf.int32, [1, 8])
    modeling.BertModel(config, False, input_ids)
    return [(v.op.name, v.shape.as_list())
            for v in tf.compat.v1.trainable_variables()]


def _ops_update(opt, grads, tvars, global_step):
  """Google's AdamWeightDecay update, one TensorFlow op per formula term."""
  clipped, _ = tf.clip_by_global_norm(grads, clip_norm=1.0)
  assigns = []
  for grad, param in zip(clipped, tvars):
    m, v = opt._slot_pair(param)  # pylint: disable=protected-access
    next_m = opt.beta_1 * m + (1.0 - opt.beta_1) * grad
    next_v = opt.beta_2 * v + (1.0 - opt.beta_2) * tf.square(grad)
    update = next_m / (tf.sqrt(next_v) + opt.epsilon)
    if opt._do_use_weight_decay(param.op.name):  # pylint: disable=protected-access
      update += opt.weight_decay_rate * param
    assigns += [param.assign(param - opt.learning_rate * update),
                m.assign(next_m), v.assign(next_v)]
  with tf.control_dependencies(assigns):
    return global_step.assign_add(1)


def _build(shapes, update):
  """The update op over fresh variables of `shapes`."""
  initializer = tf.compat.v1.random_normal_initializer(stddev=0.02)
  tvars = [tf.compat.v1.get_variable(name, shape, initializer=initializer)
           for name, shape in shapes]
  grads = [tf.compat.v1.get_variable(name + "_grad", shape,
                                     initializer=initializer,
                                     trainable=False).read_value() * 1.0
           for name, shape in shapes]
  global_step = tf.compat.v1.train.get_or_create_global_step()
  opt = optimization.AdamWeightDecayOptimizer(
      tf.constant(1e-4), weight_decay_rate=0.01,
      exclude_from_weight_decay=optimization.EXCLUDE_FROM_WEIGHT_DECAY)
  opt.create_slots(tvars)
  if update == "ops":
    return _ops_update(opt, grads, tvars, global_step)
  return training_step.update(opt, grads, tvars, global_step, 1.0, None)


def main(argv):
  del argv
  tf.compat.v1.disable_eager_execution()
  shapes = _variable_shapes(FLAGS.model)
  with tf.Graph().as_default():
    update_op = _build(shapes, FLAGS.update)
    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=FLAGS.threads,
        inter_op_parallelism_threads=1)
    with tf.compat.v1.Session(config=config) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      for _ in range(2):
        sess.run(update_op)
      seconds = []
      for _ in range(FLAGS.steps):
        start = time.perf_counter()
        sess.run(update_op)
        seconds.append(time.perf_counter() - start)
  print(json.dumps({
      "model": FLAGS.model, "update": FLAGS.update,
      "parameters": sum(int(tf.TensorShape(s).num_elements())
                        for _, s in shapes),
      "median_s": round(statistics.median(seconds), 4),
      "fastest_s": round(min(seconds), 4),
      "peak_rss_gib": round(resource.getrusage(
          resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}))


if __name__ == "__main__":
  app.run(main)
