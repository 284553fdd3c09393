# coding=utf-8
"""Stateless dropout masks: a function of (graph seed, site, update, example).

A mask is drawn by a compiled counter-based generator
(`xla_kernels.keep_mask_16bit`) from a seed made of
  * the graph-level seed (`tf.compat.v1.set_random_seed`),
  * the site: the variable scope and name of the dropout call, made unique
    within the graph (a second call at the same site, such as a second tower
    sharing the first one's variables, gets a site of its own; the replicas
    of a tf.distribute strategy each count their own calls, so the same
    call of every replica has the same site),
  * the update: `global_step` and the updates begun, `micro_step` // k
    (engine/graph_keys.py; k is the accumulation steps,
    `record_accumulation_steps`), so every update draws new masks, and so
    does the update that follows one loss scaling skipped;
and from the position of the run's tensor in the update's whole batch. The
update's batch is k micro-batches, one per run, each split evenly over the
R replicas; the tensors a dropout call masks (leading dimension the
examples, or examples x positions, example-major) are concatenations of
those equal shares. Share j = (micro_step % k) * R + replica index takes
the generator's values from offset j * (the share's element count): its
mask is exactly its slice of the mask that one run of the whole batch would
draw. So k micro-batches of b examples draw the masks of one batch of
k * b, on any number of replicas. Without accumulation on one device the
offset is 0 and the step word micro_step + global_step * 2**32.

Because a mask is a function of its seed and offset, it can be drawn again
instead of kept: a backward pass that needs it redraws it, and a layer
recomputed for gradient checkpointing, or the pooler's first-token pass over
the last layer, replays the sites of the layer it repeats
(`recording_sites`, `replaying_sites`) and so draws exactly that layer's
masks.

The sites of a graph are kept in a registry in the graph collection
graph_keys.DROPOUT_SITES, so two graphs never share state.
"""

import collections
import contextlib
import zlib

import tensorflow as tf

from engine import graph_keys
from engine import graph_order
from engine import xla_kernels

# The graph collection holding the accumulation steps of the graph's train
# op (`record_accumulation_steps`).
_ACCUMULATION_STEPS = "dropout_accumulation_steps"


def check_prob(dropout_prob):
  """False for no dropout (None or 0), True for a probability in (0, 1).

  Raises:
    ValueError: for any other value.
  """
  if dropout_prob is None or dropout_prob == 0.0:
    return False
  if not 0.0 < dropout_prob < 1.0:
    raise ValueError("dropout_prob must be in [0, 1), got %r (check "
                     "hidden_dropout_prob / attention_probs_dropout_prob in "
                     "the BERT config)." % (dropout_prob,))
  return True


def ensure_counters():
  """Creates the step counters the masks read, if the graph lacks them.

  Call outside any tf.custom_gradient function (a variable created inside
  one would count as a variable it differentiates).
  """
  graph_keys.get_or_create_global_step()
  graph_keys.get_or_create_micro_step()


class _SiteRegistry(object):
  """The dropout sites claimed in one graph.

  `counts[replica, site]` is how often `site` was claimed outside a replay
  by the replica of that index. Claims
  are also appended to every open recording (site -> keys in claim order);
  inside a replay, a claim takes the next recorded key of its site instead.
  """

  def __init__(self):
    self.counts = collections.Counter()
    self.recordings = []
    self.replays = []

  def claim(self, site):
    """The key of `site` for its next call in this replica."""
    if self.replays:
      keys = self.replays[-1].get(site)
      if not keys:
        raise RuntimeError("Dropout site %s was not recorded by the layer "
                           "being replayed." % site)
      return keys.pop(0)
    count_key = (_replica()[0], site)
    count = self.counts[count_key]
    self.counts[count_key] += 1
    key = site if count == 0 else "%s#%d" % (site, count)
    for recording in self.recordings:
      recording.setdefault(site, []).append(key)
    return key


def _registry():
  """The default graph's _SiteRegistry (created on first use)."""
  graph = tf.compat.v1.get_default_graph()
  found = graph.get_collection_ref(graph_keys.DROPOUT_SITES)
  if not found:
    found.append(_SiteRegistry())
  return found[0]


@contextlib.contextmanager
def recording_sites():
  """Records the sites claimed inside; yields the recording (a dict)."""
  registry = _registry()
  recording = {}
  registry.recordings.append(recording)
  try:
    yield recording
  finally:
    registry.recordings.remove(recording)


@contextlib.contextmanager
def replaying_sites(recording):
  """Inside, dropout calls draw the masks of the recorded calls at their
  sites (each site's calls in their recorded order)."""
  registry = _registry()
  registry.replays.append({site: list(keys)
                           for site, keys in recording.items()})
  try:
    yield
  finally:
    registry.replays.pop()


def _site_seed(name):
  """Non-negative int64: graph seed (high 32 bits), site key (low 32)."""
  graph_seed = tf.compat.v1.get_default_graph().seed or 0
  site = "%s/%s" % (tf.compat.v1.get_variable_scope().name,
                    name or "dropout")
  site_key = zlib.crc32(_registry().claim(site).encode("utf-8"))
  return ((graph_seed & 0x7FFFFFFF) << 32) | site_key


def record_accumulation_steps(num_accumulation_steps):
  """Records that the default graph's train op applies an update every
  `num_accumulation_steps` runs (micro-batches), so that the dropout calls
  built afterwards draw, for each micro-batch, its part of the masks of the
  update's whole batch. Without a record an update is one run."""
  if num_accumulation_steps < 1 or int(num_accumulation_steps) != (
      num_accumulation_steps):
    raise ValueError("num_accumulation_steps must be a whole number >= 1, "
                     "got %r." % (num_accumulation_steps,))
  steps = tf.compat.v1.get_collection_ref(_ACCUMULATION_STEPS)
  del steps[:]
  steps.append(int(num_accumulation_steps))


def _accumulation_steps():
  """The default graph's recorded accumulation steps (1 if none)."""
  steps = tf.compat.v1.get_collection(_ACCUMULATION_STEPS)
  return steps[0] if steps else 1


def _replica():
  """(index, count) of the replica the caller builds, (0, 1) outside a
  tf.distribute strategy's replica context."""
  context = tf.distribute.get_replica_context()
  if context is None or context.num_replicas_in_sync == 1:
    return 0, 1
  return (int(tf.get_static_value(context.replica_id_in_sync_group)),
          context.num_replicas_in_sync)


def _update_and_share():
  """int64 scalars (update word, share index): the update word is
  micro_step // k + global_step * 2**32 (the updates begun and the updates
  applied), and the share of the update's batch that this run's tensors
  hold is (micro_step % k) * replicas + replica index."""
  k = _accumulation_steps()
  replica, replicas = _replica()
  micro_step = tf.cast(graph_keys.get_or_create_micro_step(), tf.int64)
  global_step = tf.cast(graph_keys.get_or_create_global_step(), tf.int64)
  update = micro_step // k + global_step * (1 << 32)
  if k == 1 and replicas == 1:
    return update, tf.constant(0, tf.int64)
  return update, (micro_step % k) * replicas + replica


def drop_threshold_16bit(dropout_prob):
  """Python int t: a uniform 16-bit value below t drops (rate t / 65536).

  The drop rate is `dropout_prob` rounded to a multiple of 1/65536 (0.1 ->
  0.100006); the kept values are still scaled by 1 / (1 - dropout_prob).
  """
  return int(round(dropout_prob * 65536))


def keep_mask_drawer(shape, dropout_prob, name=None, drawn_rows=None):
  """A function `draw(after)` -> bool keep mask of `shape`.

  Claims the site (current variable scope, `name`) once; every call draws
  the same mask, once the tensor (or nested structure) `after` exists:
  the tensor the mask applies to, or one computed just before it. A draw
  that waited for nothing would run when the step starts, so every layer's
  masks would be alive at once; a backward pass redraws a mask after its
  incoming gradient instead of keeping it.

  The mask's leading dimension is the run's examples, or its examples x
  positions in example-major order (the rows of `reshape_to_matrix`): the
  run's tensor is then one share of the update's whole batch (see the
  module docstring).

  Args:
    shape: int Tensor or list [batch, ..., rows, columns], the mask's shape
      (a list with `drawn_rows`).
    dropout_prob: float in (0, 1).
    name: (optional) distinguishes sites within one variable scope.
    drawn_rows: (optional) draw the mask for this many rows and return its
      first `rows` (attention's first query positions, whose masks are
      those of the whole sequence's).
  """
  drawn_shape = shape
  if drawn_rows is not None:
    drawn_shape = list(shape[:-2]) + [drawn_rows, shape[-1]]
  update, share = _update_and_share()
  seed = tf.stack([tf.constant(_site_seed(name), tf.int64), update])
  threshold = tf.constant(drop_threshold_16bit(dropout_prob), tf.uint16)
  drawn_shape = tf.cast(drawn_shape, tf.int64)
  offset = share * tf.reduce_prod(drawn_shape)

  def draw(after):
    mask = xla_kernels.keep_mask_16bit(
        drawn_shape, graph_order.after(after, seed), threshold, offset)
    return mask if drawn_rows is None else mask[..., :shape[-2], :]

  return draw


def keep_mask(shape, dropout_prob, name=None, *, after):
  """bool Tensor of `shape`, True where a value is kept (one new site),
  drawn once the tensor `after` exists (see keep_mask_drawer)."""
  return keep_mask_drawer(shape, dropout_prob, name)(after)


def zero_dropped(input_tensor, keep):
  """`input_tensor` with 0 where the bool Tensor `keep` is False."""
  return tf.where(keep, input_tensor, tf.zeros([], dtype=input_tensor.dtype))


def apply_keep_mask(input_tensor, keep, dropout_prob):
  """Zeroes `input_tensor` where `keep` is False and scales the rest up."""
  scale = tf.cast(1.0 / (1.0 - dropout_prob), input_tensor.dtype)
  return zero_dropped(input_tensor * scale, keep)
