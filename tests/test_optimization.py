"""Tests of optimization.py against NumPy re-derivations of Google's math.

The model is tiny: h = x @ dense/kernel + dense/bias,
out = (h * dense/LayerNorm/gamma) @ output/kernel, and the loss is the batch
mean of 0.5 * ||out - y||^2. Its gradients are derived by hand in NumPy below,
so the optimizer is checked end to end (gradients, clipping, schedule, weight
decay exclusions, slots).
"""
import math
import threading

import numpy as np
import pytest
import tensorflow as tf

import optimization

SHAPES = {
    "dense/kernel": (4, 3),
    "dense/bias": (3,),
    "dense/LayerNorm/gamma": (3,),
    "output/kernel": (3, 2),
}
# Google's exclusions: only the two kernels get weight decay.
DECAYED = {"dense/kernel", "output/kernel"}
B1, B2, EPS, WD = 0.9, 0.999, 1e-6, 0.01


def _initial_params():
  """Float64 starting values; the bias starts at 0 (LAMB's ||p|| = 0 case)."""
  rng = np.random.RandomState(0)
  params = {name: rng.normal(0.0, 0.5, shape) for name, shape in SHAPES.items()}
  params["dense/bias"] = np.zeros(3)
  return params


def _batches(num, batch_size, seed=1, y_scale=3.0):
  """`num` (x [batch, 4], y [batch, 2]) float32 batches."""
  rng = np.random.RandomState(seed)
  return [(rng.normal(size=(batch_size, 4)).astype(np.float32),
           (y_scale * rng.normal(size=(batch_size, 2))).astype(np.float32))
          for _ in range(num)]


def _np_grads(p, x, y):
  """Hand-derived gradients of the model's loss, float64."""
  x, y = x.astype(np.float64), y.astype(np.float64)
  h = x @ p["dense/kernel"] + p["dense/bias"]
  hg = h * p["dense/LayerNorm/gamma"]
  d_out = (hg @ p["output/kernel"] - y) / x.shape[0]
  d_hg = d_out @ p["output/kernel"].T
  d_h = d_hg * p["dense/LayerNorm/gamma"]
  return {"output/kernel": hg.T @ d_out,
          "dense/LayerNorm/gamma": (d_hg * h).sum(0),
          "dense/kernel": x.T @ d_h,
          "dense/bias": d_h.sum(0)}


def _np_lr(step, init_lr, num_train_steps, num_warmup_steps):
  """Google's schedule, written from its formula."""
  if step < num_warmup_steps:
    return init_lr * step / num_warmup_steps
  return init_lr * (1.0 - min(step, num_train_steps) / num_train_steps)


def _np_train(batches, init_lr, num_train_steps, num_warmup_steps, lamb=False):
  """NumPy AdamWeightDecay (or LAMB) run; returns (params, slots, clipped)."""
  p = _initial_params()
  m = {k: np.zeros_like(v) for k, v in p.items()}
  v = {k: np.zeros_like(val) for k, val in p.items()}
  clipped = []
  for step, (x, y) in enumerate(batches):
    lr = _np_lr(step, init_lr, num_train_steps, num_warmup_steps)
    g = _np_grads(p, x, y)
    norm = math.sqrt(sum((gv**2).sum() for gv in g.values()))
    clipped.append(norm > 1.0)
    for k in p:
      gk = g[k] / max(norm, 1.0)
      m[k] = B1 * m[k] + (1 - B1) * gk
      v[k] = B2 * v[k] + (1 - B2) * gk**2
      if lamb:
        t = step + 1
        r = (m[k] / (1 - B1**t)) / (np.sqrt(v[k] / (1 - B2**t)) + EPS)
      else:
        r = m[k] / (np.sqrt(v[k]) + EPS)
      if k in DECAYED:
        r = r + WD * p[k]
      if lamb:
        pn, rn = np.linalg.norm(p[k]), np.linalg.norm(r)
        r = r * (pn / rn if pn > 0 and rn > 0 else 1.0)
      p[k] = p[k] - lr * r
  return p, m, v, clipped


def _model_loss(x, y, init, dropout_rate):
  """The tiny model's mean loss; `init` maps names to values (else random)."""
  def var(name):
    if init is None:
      initializer = tf.compat.v1.random_normal_initializer(stddev=0.5)
    else:
      initializer = tf.compat.v1.constant_initializer(init[name])
    return tf.compat.v1.get_variable(name, SHAPES[name], tf.float32,
                                     initializer=initializer)
  h = tf.matmul(x, var("dense/kernel")) + var("dense/bias")
  if dropout_rate:
    h = tf.nn.dropout(h, rate=dropout_rate)
  out = tf.matmul(h * var("dense/LayerNorm/gamma"), var("output/kernel"))
  return 0.5 * tf.reduce_mean(tf.reduce_sum(tf.square(out - y), axis=1))


def _train(batches, factors=None, init="default", dropout_rate=0.0, seed=None,
           **optimizer_kwargs):
  """Runs the train op once per batch in a fresh graph.

  Returns:
    list with, per run, {"lr": fetched learning rate, "vars": {name: value}
    of all global variables after the run}.
  """
  if isinstance(init, str):
    init = _initial_params()
  with tf.Graph().as_default():
    if seed is not None:
      tf.compat.v1.set_random_seed(seed)
    x = tf.compat.v1.placeholder(tf.float32, [None, 4])
    y = tf.compat.v1.placeholder(tf.float32, [None, 2])
    factor = tf.compat.v1.placeholder_with_default(1.0, [])
    loss = _model_loss(x, y, init, dropout_rate) * factor
    train_op = optimization.create_optimizer(loss, **optimizer_kwargs)
    learning_rate, = tf.compat.v1.get_collection("learning_rate")
    variables = tf.compat.v1.global_variables()
    history = []
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      for i, (bx, by) in enumerate(batches):
        feed = {x: bx, y: by, factor: 1.0 if factors is None else factors[i]}
        _, lr = sess.run([train_op, learning_rate], feed)
        values = sess.run(variables)
        history.append({"lr": lr, "vars": {v.op.name: val for v, val in
                                           zip(variables, values)}})
  return history


def _assert_params_close(got, want, rtol=1e-6, atol=1e-7):
  for name in SHAPES:
    np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=atol,
                               err_msg=name)


def test_adamw_matches_numpy_reference():
  batches = _batches(7, 8)
  kw = dict(init_lr=0.05, num_train_steps=8, num_warmup_steps=2)
  history = _train(batches, **kw)
  p, m, v, clipped = _np_train(batches, **kw)
  # Both regimes of the global-norm clip are exercised.
  assert any(clipped) and not all(clipped)
  final = history[-1]["vars"]
  _assert_params_close(final, p)
  for name in SHAPES:
    np.testing.assert_allclose(final[name + "/adam_m"], m[name], rtol=1e-5,
                               atol=1e-7)
    np.testing.assert_allclose(final[name + "/adam_v"], v[name], rtol=1e-5,
                               atol=1e-9)
  assert [h["vars"]["global_step"] for h in history] == list(range(1, 8))
  # Warmup: the first update has rate 0, so only the slots moved.
  np.testing.assert_array_equal(history[0]["vars"]["dense/kernel"],
                                _initial_params()["dense/kernel"].astype(
                                    np.float32))
  assert np.abs(history[0]["vars"]["dense/kernel/adam_m"]).max() > 0


@pytest.mark.parametrize("num_warmup_steps", [0, 3])
def test_learning_rate_follows_schedule(num_warmup_steps):
  history = _train(_batches(12, 2), init_lr=0.1, num_train_steps=10,
                   num_warmup_steps=num_warmup_steps)
  want = [_np_lr(step, 0.1, 10, num_warmup_steps) for step in range(12)]
  np.testing.assert_allclose([h["lr"] for h in history], want, rtol=1e-6,
                             atol=1e-9)
  assert want[-1] == 0.0 and want[1] != 0.0


def test_slot_names_and_plain_path_has_no_accumulators():
  final = _train(_batches(1, 2), init_lr=0.1, num_train_steps=10,
                 num_warmup_steps=0)[-1]["vars"]
  # The train op counts its runs in micro_step (dropout masks read it).
  want = {"global_step", "micro_step"} | set(SHAPES)
  want |= {n + s for n in SHAPES for s in ("/adam_m", "/adam_v")}
  assert set(final) == want
  assert final["micro_step"] == final["global_step"]
  with tf.Graph().as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 4])
    y = tf.compat.v1.placeholder(tf.float32, [None, 2])
    optimization.create_optimizer(_model_loss(x, y, None, 0.0), 0.1, 10, 1)
    assert sorted(v.op.name for v in tf.compat.v1.trainable_variables()) == (
        sorted(SHAPES))


def test_lamb_matches_numpy_reference():
  batches = _batches(6, 8)
  kw = dict(init_lr=0.02, num_train_steps=10, num_warmup_steps=1)
  history = _train(batches, optimizer="lamb", **kw)
  p, m, v, _ = _np_train(batches, lamb=True, **kw)
  final = history[-1]["vars"]
  _assert_params_close(final, p)
  for name in SHAPES:
    np.testing.assert_allclose(final[name + "/lamb_m"], m[name], rtol=1e-5,
                               atol=1e-7)
    np.testing.assert_allclose(final[name + "/lamb_v"], v[name], rtol=1e-5,
                               atol=1e-9)
  assert not any(name.endswith("adam_m") for name in final)


def _same_state(variables):
  """The variable names two runs of the same updates must agree on: all
  but micro_step, which counts runs (k per update with accumulation)."""
  return [name for name in variables if name != "micro_step"]


@pytest.mark.parametrize("kw", [
    dict(optimizer="adamw"),
    dict(optimizer="lamb", num_accumulation_steps=2, loss_scale="dynamic"),
])
def test_repeat_run_is_bit_identical(kw):
  def run():
    return _train(_batches(6, 4), init=None, dropout_rate=0.2, seed=7,
                  init_lr=0.05, num_train_steps=5, num_warmup_steps=1,
                  **kw)[-1]["vars"]
  first, second = run(), run()
  assert first.keys() == second.keys()
  for name in first:
    np.testing.assert_array_equal(first[name], second[name], err_msg=name)
  assert first["global_step"] == 6 // kw.get("num_accumulation_steps", 1)


# Without the clip, Adam's v slot shows whether the mean (not the sum) of the
# micro-batch gradients was applied.
@pytest.mark.parametrize("k, clip_norm", [(2, 1.0), (4, 1.0), (4, None)])
def test_accumulation_matches_one_big_batch(k, clip_norm):
  micro, updates = 2, 3
  big = _batches(updates, k * micro, seed=3)
  small = [(bx[i * micro:(i + 1) * micro], by[i * micro:(i + 1) * micro])
           for bx, by in big for i in range(k)]
  # The first gradient has a global norm above 1, so clipping is active.
  first_grads = _np_grads(_initial_params(), *big[0])
  assert math.sqrt(sum((g**2).sum() for g in first_grads.values())) > 1.0
  kw = dict(init_lr=0.05, num_train_steps=10, num_warmup_steps=1,
            clip_norm=clip_norm)
  want = _train(big, **kw)[-1]["vars"]
  history = _train(small, num_accumulation_steps=k, **kw)
  got = history[-1]["vars"]
  for name in _same_state(want):
    np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-8,
                               err_msg=name)
  assert [h["vars"]["global_step"] for h in history] == [
      (i + 1) // k for i in range(k * updates)]
  assert got["micro_step"] == k * updates
  for name in SHAPES:
    assert not got[name + "/accum_grad"].any()
  # Mid-window the accumulator holds the sum of the micro-batch gradients.
  np.testing.assert_allclose(
      history[0]["vars"]["dense/kernel/accum_grad"],
      _np_grads(_initial_params(), *small[0])["dense/kernel"], rtol=1e-5,
      atol=1e-7)


def test_dynamic_loss_scale_skips_overflow_and_grows():
  batches = _batches(6, 4)
  factors = [1.0, np.inf, 1.0, 1.0, 1e38, 1.0]
  kw = dict(init_lr=0.05, num_train_steps=10, num_warmup_steps=0)
  history = _train(batches, factors=factors, loss_scale="dynamic",
                   loss_scale_growth_interval=2, **kw)
  state = [h["vars"] for h in history]
  assert [s["global_step"] for s in state] == [1, 1, 2, 3, 3, 4]
  assert [s["loss_scale"] for s in state] == [2.0**15, 2.0**14, 2.0**14,
                                              2.0**15, 2.0**14, 2.0**14]
  assert [s["loss_scale_good_steps"] for s in state] == [1, 0, 1, 0, 0, 1]
  # A skipped update leaves every weight and slot as the run before left it.
  for skipped in (1, 4):
    for name in _same_state(state[skipped]):
      if not name.startswith(("global_step", "loss_scale")):
        np.testing.assert_array_equal(state[skipped][name],
                                      state[skipped - 1][name], err_msg=name)
  # The applied steps equal a run without scaling that never saw the overflows.
  want = _train([batches[i] for i in (0, 2, 3, 5)], **kw)[-1]["vars"]
  for name in _same_state(want):
    np.testing.assert_allclose(state[-1][name], want[name], rtol=1e-6,
                               err_msg=name)


def test_loss_scale_with_accumulation_and_floor():
  batches = _batches(2 * 17, 2)
  factors = [1.0, np.inf] + [np.inf, 1.0] * 16
  history = _train(batches, factors=factors, loss_scale="dynamic",
                   num_accumulation_steps=2, init_lr=0.05, num_train_steps=10,
                   num_warmup_steps=0)
  skipped = history[1]["vars"]
  assert skipped["global_step"] == 0
  assert skipped["loss_scale"] == 2.0**14
  assert not any(skipped[n + "/accum_grad"].any() for n in SHAPES)
  assert not any(skipped[n + "/adam_m"].any() for n in SHAPES)
  np.testing.assert_array_equal(skipped["dense/kernel"],
                                history[0]["vars"]["dense/kernel"])
  final = history[-1]["vars"]
  # 17 skipped updates: 15 halvings reach the floor of 1.0, which holds.
  assert final["loss_scale"] == 1.0 and final["global_step"] == 0


def test_loss_scale_variable_in_collection():
  with tf.Graph().as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 4])
    y = tf.compat.v1.placeholder(tf.float32, [None, 2])
    optimization.create_optimizer(_model_loss(x, y, None, 0.0), 0.1, 10, 1,
                                  loss_scale="dynamic")
    scale, = tf.compat.v1.get_collection("loss_scale")
    assert scale.op.name == "loss_scale"
    names = {v.op.name for v in tf.compat.v1.global_variables()}
    assert {"loss_scale", "loss_scale_good_steps"} <= names


@pytest.mark.parametrize("kw, words", [
    (dict(optimizer="sgd"), ["--optimizer", "adamw", "lamb"]),
    (dict(num_accumulation_steps=0), ["--num_accumulation_steps"]),
    (dict(loss_scale="static"), ["loss_scale", "dynamic"]),
    (dict(num_train_steps=0), ["--num_train_epochs"]),
])
def test_bad_arguments_name_the_fix(kw, words):
  args = dict(init_lr=0.1, num_train_steps=10, num_warmup_steps=1)
  args.update(kw)
  with tf.Graph().as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 4])
    y = tf.compat.v1.placeholder(tf.float32, [None, 2])
    with pytest.raises(ValueError) as error:
      optimization.create_optimizer(_model_loss(x, y, None, 0.0), **args)
  for word in words:
    assert word in str(error.value)


def _layered_update(num_layers):
  """One AdamW update of variables named like BERT's layers and embeddings.

  The loss is sum(w * target) per variable, so each gradient is its target.

  Returns:
    (graph, {name: (initial, target, value after the update)}).
  """
  rng = np.random.RandomState(3)
  names = ["bert/embeddings/word_embeddings", "output/bias"] + [
      "bert/encoder/layer_%d/%s" % (i, part) for i in range(num_layers)
      for part in ("attention/kernel", "attention/bias")]
  shapes = {name: (5,) if name.endswith("bias") else (4, 5) for name in names}
  shapes["bert/embeddings/word_embeddings"] = (6, 5)
  init = {n: rng.normal(size=shapes[n]).astype(np.float32) for n in names}
  target = {n: rng.normal(size=shapes[n]).astype(np.float32) for n in names}
  with tf.Graph().as_default() as graph:
    variables = {n: tf.compat.v1.get_variable(
        n, initializer=tf.constant(init[n])) for n in names}
    loss = tf.add_n([tf.reduce_sum(variables[n] * target[n]) for n in names])
    train_op = optimization.create_optimizer(loss, init_lr=0.1,
                                             num_train_steps=10,
                                             num_warmup_steps=0)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      sess.run(train_op)
      after = sess.run(variables)
  return graph, {n: (init[n], target[n], after[n]) for n in names}


def test_each_layer_updates_in_one_shared_compiled_kernel():
  graph, values = _layered_update(num_layers=3)
  calls = [op for op in graph.get_operations()
           if op.type == "StatefulPartitionedCall"
           and op.get_attr("_XlaMustCompile")]
  # One call per layer and one for the other variables; the layers share
  # one function (one compilation), the rest has its own.
  assert len(calls) == 4
  assert len({op.get_attr("f").name for op in calls}) == 2
  norm = math.sqrt(sum((t.astype(np.float64)**2).sum()
                       for _, t, _ in values.values()))
  for name, (init, target, after) in values.items():
    g = target / max(norm, 1.0)
    m, v = (1 - B1) * g, (1 - B2) * g**2
    update = m / (np.sqrt(v) + EPS)
    if not name.endswith("bias"):
      update = update + WD * init
    np.testing.assert_allclose(after, init - 0.1 * update, rtol=1e-6,
                               atol=1e-7, err_msg=name)


def test_graph_size_is_linear_in_the_number_of_variables():
  # The update waits for the whole backward pass; n gradients each waiting
  # on all n directly would make the graph quadratic in n (150 k edges for
  # BERT-Large's 393 variables), copied into every graph a session makes.
  def control_edges(num_layers):
    graph, values = _layered_update(num_layers)
    return len(values), sum(len(op.control_inputs)
                            for op in graph.get_operations())

  few_vars, few_edges = control_edges(num_layers=4)
  many_vars, many_edges = control_edges(num_layers=16)
  assert many_edges / few_edges < 1.5 * many_vars / few_vars


# A lookup table trained through tf.gather, as BERT's word embeddings: ids
# repeat within a batch, as [CLS], [SEP] and common words do.
VOCAB, WIDTH = 5, 3


def _lookup_batches(num, batch_size, seed=5):
  """`num` (ids [batch, 4] with repeats, y [batch, 2]) batches."""
  rng = np.random.RandomState(seed)
  return [(rng.randint(0, VOCAB, size=(batch_size, 4)).astype(np.int32),
           (3.0 * rng.normal(size=(batch_size, 2))).astype(np.float32))
          for _ in range(num)]


def _lookup_initial_params():
  rng = np.random.RandomState(2)
  return {"embeddings/word_embeddings": rng.normal(0.0, 0.5, (VOCAB, WIDTH)),
          "output/kernel": rng.normal(0.0, 0.5, (WIDTH, 2))}


def _np_lookup_train(batches, init_lr):
  """NumPy AdamWeightDecay of Google's code for the lookup model.

  The model: f = sum over the 4 positions of table[id], out = f @ kernel,
  loss = batch mean of 0.5 * ||out - y||^2. Google's clip counts each
  looked-up row's gradient (tf.clip_by_global_norm of an IndexedSlices reads
  its values); the update applies the rows summed per id.

  Returns:
    (params after the run, per update the relative difference of the clip
    factor 1 / max(norm, 1) to the one of the dense gradient's norm).
  """
  p = _lookup_initial_params()
  m = {k: np.zeros_like(val) for k, val in p.items()}
  v = {k: np.zeros_like(val) for k, val in p.items()}
  differs = []
  for step, (ids, y) in enumerate(batches):
    lr = init_lr * (1.0 - step / 10.0)
    f = p["embeddings/word_embeddings"][ids].sum(axis=1)
    d_out = (f @ p["output/kernel"] - y) / ids.shape[0]
    d_f = d_out @ p["output/kernel"].T
    rows = np.repeat(d_f, ids.shape[1], axis=0)  # One per looked-up id.
    table_grad = np.zeros((VOCAB, WIDTH))
    np.add.at(table_grad, ids.reshape(-1), rows)
    g = {"embeddings/word_embeddings": table_grad,
         "output/kernel": f.T @ d_out}
    kernel_sq = (g["output/kernel"]**2).sum()
    norm = math.sqrt((rows**2).sum() + kernel_sq)
    dense_norm = math.sqrt((table_grad**2).sum() + kernel_sq)
    differs.append(max(norm, 1.0) / max(dense_norm, 1.0) - 1.0)
    for k in p:
      gk = g[k] / max(norm, 1.0)
      m[k] = B1 * m[k] + (1 - B1) * gk
      v[k] = B2 * v[k] + (1 - B2) * gk**2
      r = m[k] / (np.sqrt(v[k]) + EPS) + WD * p[k]
      p[k] = p[k] - lr * r
  return p, differs


def _lookup_train(batches, **optimizer_kwargs):
  """The lookup model trained by create_optimizer; final variables."""
  init = _lookup_initial_params()
  with tf.Graph().as_default():
    ids = tf.compat.v1.placeholder(tf.int32, [None, 4])
    y = tf.compat.v1.placeholder(tf.float32, [None, 2])
    table, kernel = (tf.compat.v1.get_variable(
        name, initializer=tf.constant(init[name], tf.float32))
                     for name in sorted(init))
    f = tf.reduce_sum(tf.gather(table, ids), axis=1)
    loss = 0.5 * tf.reduce_mean(
        tf.reduce_sum(tf.square(tf.matmul(f, kernel) - y), axis=1))
    train_op = optimization.create_optimizer(
        loss, init_lr=0.05, num_train_steps=10, num_warmup_steps=0,
        **optimizer_kwargs)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      for bx, by in batches:
        sess.run(train_op, {ids: bx, y: by})
      return {v.op.name: val for v, val in zip(
          tf.compat.v1.global_variables(),
          sess.run(tf.compat.v1.global_variables()))}


def test_lookup_table_clip_counts_each_looked_up_row():
  batches = _lookup_batches(4, 6)
  got = _lookup_train(batches)
  want, differs = _np_lookup_train(batches, init_lr=0.05)
  # Repeated ids make the first clip factor differ from the dense gradient's
  # by far more than the tolerance, so the test tells the two apart.
  assert abs(differs[0]) > 0.05
  for name, value in want.items():
    np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-7,
                               err_msg=name)


@pytest.mark.parametrize("k", [2, 3])
def test_lookup_table_accumulation_matches_one_big_batch(k):
  micro = 2
  big = _lookup_batches(3, k * micro, seed=8)
  small = [(ids[i * micro:(i + 1) * micro], y[i * micro:(i + 1) * micro])
           for ids, y in big for i in range(k)]
  want = _lookup_train(big)
  got = _lookup_train(small, num_accumulation_steps=k)
  for name in _same_state(want):
    np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-7,
                               err_msg=name)
  assert got["embeddings/word_embeddings/accum_half_squared_norm"] == 0.0


def _releasing_threads():
  return {thread for thread in threading.enumerate()
          if thread.name == "release_freed_heap" and thread.is_alive()}


@pytest.mark.parametrize("release", [True, False])
def test_train_op_hands_back_the_first_runs_freed_memory(release):
  """The train op ends with one Python call counting its runs for a
  host_memory.FirstRunsReleaser, whose thread runs from the graph's
  construction to the end of its second run (none when asked not to).
  Threads of other tests' graphs may end meanwhile (when those graphs are
  collected), so the test follows the threads that started here."""
  before = _releasing_threads()
  with tf.Graph().as_default() as graph:
    w = tf.compat.v1.get_variable("w", [3], initializer=tf.ones_initializer())
    train_op = optimization.create_optimizer(
        tf.reduce_sum(tf.square(w)), 0.1, 10, 0,
        release_host_memory=release)
    calls = [op for op in graph.get_operations()
             if op.type in ("PyFunc", "PyFuncStateless")]
    started = _releasing_threads() - before
    assert len(started) == (1 if release else 0)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      for _ in range(2):
        sess.run(train_op)
      assert not any(thread.is_alive() for thread in started)
      sess.run(train_op)
  assert len(calls) == (1 if release else 0)
