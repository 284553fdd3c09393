# coding=utf-8
"""One vector per text from BERT's hidden states, written as a NumPy file.

extract_features.py's `--pooling` uses this module; it is kept free of
flags and of the model so that a sharded run can pool and write each shard
with the same functions.

Pooling (per example, over the layers chosen, in their order):

  * "cls": the [CLS] token's hidden state.
  * "mean": the average over the example's real tokens (input_mask 1),
    [CLS] and [SEP] included, as sentence-transformers' mean pooling does.

With several layers, the per-layer vectors are concatenated in the order
given, so a vector has len(layers) * hidden_size values; reshaping
`embeddings` to [n, len(layers), hidden_size] gives each layer's back.

The file is a NumPy `.npz` (a zip of `.npy` arrays, no pickled objects):

  embeddings  float32 [n, len(layers) * hidden_size]
  ids         int64 [n], the example ids (extract_features.py: the input
              line's 0-based index, its "linex_index")
  layers      int32 [len(layers)], the layer indexes, in concatenation order

`numpy.load(path)` reads it (allow_pickle may stay False). The zip entries
carry a fixed time stamp, so the same arrays always give the same bytes.
"""

import zipfile

import numpy as np
import tensorflow as tf

from userio import cli
from userio import output_files

NONE = "none"
CLS = "cls"
MEAN = "mean"
POOLINGS = (NONE, CLS, MEAN)
NPZ_SUFFIX = ".npz"

# Zip's earliest time: an entry's stamp, fixed so the bytes are repeatable.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def check_output(pooling, output_file, *, pooling_flag="--pooling",
                 output_flag="--output_file"):
  """Refuses a pooling and output file that do not go together.

  Pooled vectors go to a `.npz` file and per-token values (pooling "none")
  to JSON lines, so the file's name says what it holds.

  Raises:
    cli.UserError naming the flags and the fix.
  """
  if pooling not in POOLINGS:
    raise cli.UserError("%s=%s: expected one of %s." % (
        pooling_flag, pooling, ", ".join(POOLINGS)))
  is_npz = output_file.endswith(NPZ_SUFFIX)
  if pooling == NONE and is_npz:
    raise cli.UserError(
        "%s=%s is a NumPy file, which holds one vector per line; set "
        "%s=cls or %s=mean, or name a .jsonl file for the per-token "
        "values." % (output_flag, output_file, pooling_flag, pooling_flag))
  if pooling != NONE and not is_npz:
    raise cli.UserError(
        "%s=%s writes a NumPy file; name %s ending in .npz (it was %s)." % (
            pooling_flag, pooling, output_flag, output_file))


def pool(layer_values, pooling):
  """One example's vector.

  Args:
    layer_values: per chosen layer, float32 [num_tokens, hidden_size], the
      example's real tokens only ([CLS] first, padding left out).
    pooling: "cls" or "mean".

  Returns:
    float32 [len(layer_values) * hidden_size], the layers' pooled vectors
    concatenated in order. The mean is summed in float64, then rounded once
    to float32.
  """
  if pooling == CLS:
    parts = [values[0] for values in layer_values]
  elif pooling == MEAN:
    parts = [np.mean(values, axis=0, dtype=np.float64)
             for values in layer_values]
  else:
    raise ValueError("pooling must be %r or %r, not %r" % (CLS, MEAN,
                                                           pooling))
  return np.concatenate(parts).astype(np.float32)


def pool_all(examples, pooling, on_example=None):
  """Pools every example of `examples`, an iterable of (id, layer_values)
  as `pool` takes them.

  Args:
    on_example: called with no argument after each example (progress).

  Returns:
    (ids int64 [n], embeddings float32 [n, width]).
  Raises:
    ValueError: `examples` is empty (no width to give the array).
  """
  ids, vectors = [], []
  for example_id, layer_values in examples:
    ids.append(example_id)
    vectors.append(pool(layer_values, pooling))
    if on_example:
      on_example()
  if not vectors:
    raise ValueError("no examples to pool")
  return np.asarray(ids, dtype=np.int64), np.stack(vectors)


def write_npz(path, ids, embeddings, layer_indexes, *, flag=None):
  """Writes the arrays of the module's docstring to `path` atomically.

  Args:
    path: the `.npz` file, on any file system tf.io.gfile knows.
    ids: int [n].
    embeddings: float [n, width]; written as float32.
    layer_indexes: the layers pooled, in concatenation order.
    flag: the flag naming `path`, for a full-disk message.
  """
  arrays = {
      "embeddings": np.asarray(embeddings, dtype=np.float32),
      "ids": np.asarray(ids, dtype=np.int64),
      "layers": np.asarray(layer_indexes, dtype=np.int32),
  }
  size = sum(array.nbytes for array in arrays.values())
  with output_files.replacing(path, size=size, flag=flag) as temporary:
    with tf.io.gfile.GFile(temporary, "wb") as writer:
      _write_zip(_Stream(writer), arrays)


class _Stream(object):
  """A file that is only written to, front to back: zipfile then writes
  each entry's sizes after its data instead of seeking back (a GFile being
  written cannot seek), so the arrays stream to any file system."""

  def __init__(self, writer):
    self._writer = writer

  def write(self, data):
    """Writes bytes-like `data`; returns its length (GFile returns None)."""
    self._writer.write(data)
    return memoryview(data).nbytes

  def flush(self):
    self._writer.flush()


def _write_zip(stream, arrays):
  """Writes `arrays` (name -> ndarray) as np.savez would, to the binary
  `stream`, with repeatable entry time stamps."""
  with zipfile.ZipFile(stream, "w", zipfile.ZIP_STORED,
                       allowZip64=True) as archive:
    for name, array in arrays.items():
      info = zipfile.ZipInfo(name + ".npy", date_time=_ZIP_TIME)
      with archive.open(info, "w", force_zip64=True) as entry:
        np.lib.format.write_array(entry, array, allow_pickle=False)
