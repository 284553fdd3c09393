"""Runs whose every path is remote, as TPU users keep them on gs://.

TensorFlow's in-memory file system (ram://, one per process) stands in for
Cloud Storage: data, vocabulary, config, init checkpoint, --output_dir and
--export_dir all live there, and main() runs in this process. The reference
is the same run on local paths (same seed, so the same numbers): the remote
run must write the same results, and its export the same weights.
"""
import importlib.util
import json
import logging
import os
import re
import sys
import uuid

import numpy as np
import pytest
import tensorflow as tf
from absl import flags
from safetensors import numpy as safetensors_numpy

from checkpoints import checkpoint_checks
from checkpoints import conversion
import modeling
import run_classifier
import run_ner
import run_swag
import test_convert_checkpoint
import test_run_classifier
import test_run_ner
import test_run_swag
from tasks import conll
from tasks import glue
from tasks import labeled_files
from tasks import pretraining
from tasks import swag
from tasks import task as task_lib
from userio import cli
from userio import file_systems
from userio import folder_lock
from userio import output_files


def _ram_root():
  """A ram:// folder no other test of this process uses."""
  return "ram://%s" % uuid.uuid4().hex


def _copy_tree(source, target):
  """Copies local folder `source` to `target` (any file system)."""
  for folder, _, names in os.walk(source):
    relative = os.path.relpath(folder, source)
    inside = target if relative == "." else os.path.join(target, relative)
    tf.io.gfile.makedirs(inside)
    for name in names:
      tf.io.gfile.copy(os.path.join(folder, name), os.path.join(inside, name))


def _read(path):
  with tf.io.gfile.GFile(path) as reader:
    return reader.read()


def _results(path):
  """eval_results.txt as {key: float}."""
  return {key: float(value) for key, value in (
      line.split(" = ") for line in _read(path).splitlines())}


def _table(path):
  return [line.split("\t") for line in _read(path).splitlines()]


def _write_init_checkpoint(config_file, prefix):
  """A pre-trained-looking checkpoint: BERT's variables of the config,
  freshly initialized with a fixed seed."""
  config = modeling.BertConfig.from_json_file(config_file)
  with tf.Graph().as_default():
    tf.compat.v1.set_random_seed(11)
    modeling.BertModel(config, is_training=False,
                       input_ids=tf.zeros([1, 8], tf.int32))
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      tf.compat.v1.train.Saver().save(sess, prefix, write_meta_graph=False,
                                      write_state=False)


def _run(script, args):
  flag_values = flags.FlagValues()
  script.define_flags(flag_values)
  flag_values([script.__name__ + ".py"] + args)
  script.main([], flag_values=flag_values)


def _only_export(export_dir):
  (name,) = [name.rstrip("/") for name in tf.io.gfile.listdir(export_dir)]
  return os.path.join(export_dir, name)


def _export_weights(export_dir):
  reader = checkpoint_checks.reader_of(os.path.join(
      _only_export(export_dir), "variables", "variables"))
  return {name: reader.get_tensor(name)
          for name in reader.get_variable_to_shape_map()}


def _classifier_here_and_on_ram(local, remote, actions, export=False,
                                extra=()):
  """Copies local's files to `remote`, then runs run_classifier.py on MRPC
  with `actions` (and an export) in each root: out/ (and export/)."""
  _copy_tree(local, remote)
  for root in (local, remote):
    exports = ["export_dir=" + os.path.join(root, "export")] if export else []
    _run(run_classifier, test_run_classifier._command(  # pylint: disable=protected-access
        "MRPC", os.path.join(root, "data"), os.path.join(root, "vocab.txt"),
        os.path.join(root, "bert_config.json"), os.path.join(root, "out"),
        2, list(actions) + exports) + list(extra))


@pytest.fixture(scope="module")
def classifier_runs(tmp_path_factory):
  """An MRPC train/eval/predict/export run with an init checkpoint, once
  on local paths and once with every other path on ram://; returns both
  roots. (TensorFlow's init_from_checkpoint cannot read a checkpoint on
  ram://: see test_ram_takes_a_checkpoint_prefix_for_a_folder.)"""
  local = str(tmp_path_factory.mktemp("remote_classifier"))
  test_run_classifier._write_mrpc_data(os.path.join(local, "data"), seed=3)  # pylint: disable=protected-access
  _, config_file = test_run_classifier._write_model_files(local)  # pylint: disable=protected-access
  _write_init_checkpoint(config_file, os.path.join(local, "init",
                                                   "bert_model.ckpt"))
  remote = _ram_root()
  _classifier_here_and_on_ram(
      local, remote, ["do_train", "do_eval", "do_predict"], export=True,
      extra=["--init_checkpoint=" + os.path.join(local, "init",
                                                 "bert_model.ckpt")])
  yield local, remote
  tf.io.gfile.rmtree(remote)


@pytest.mark.slow
def test_classifier_on_ram_matches_the_local_run(classifier_runs):
  local, remote = classifier_runs
  expected = _results(os.path.join(local, "out", "eval_results.txt"))
  found = _results(os.path.join(remote, "out", "eval_results.txt"))
  assert sorted(found) == sorted(expected)
  for key, value in expected.items():
    assert found[key] == pytest.approx(value, rel=1e-6, abs=1e-7), key
  np.testing.assert_allclose(
      np.array(_table(os.path.join(remote, "out", "test_results.tsv")),
               np.float64),
      np.array(_table(os.path.join(local, "out", "test_results.tsv")),
               np.float64), rtol=1e-6, atol=1e-7)
  assert _table(os.path.join(remote, "out", "MRPC.tsv")) == _table(
      os.path.join(local, "out", "MRPC.tsv"))
  for name in ("run_info.json", "bert_config.json", "vocab.txt"):
    assert tf.io.gfile.exists(os.path.join(remote, "out", name)), name


def test_ram_takes_a_checkpoint_prefix_for_a_folder():
  """Why --init_checkpoint cannot be on ram:// (it can on gs://): ram://
  calls any path that begins a stored name a folder, so a checkpoint
  prefix is one, and tf.train.load_checkpoint (init_from_checkpoint,
  list_variables) looks in it for a `checkpoint` file. The project's own
  reads take the prefix as it is (checkpoint_checks.reader_of)."""
  prefix = os.path.join(_ram_root(), "bert_model.ckpt")
  with tf.Graph().as_default():
    tf.compat.v1.Variable([1.0, 2.0], name="w")
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      tf.compat.v1.train.Saver().save(sess, prefix, write_meta_graph=False,
                                      write_state=False)
  assert tf.io.gfile.isdir(prefix)
  with pytest.raises(ValueError, match="Couldn't find 'checkpoint' file"):
    tf.train.load_checkpoint(prefix)
  np.testing.assert_array_equal(
      checkpoint_checks.reader_of(prefix).get_tensor("w"), [1.0, 2.0])


@pytest.mark.slow
def test_classifier_resumes_from_its_checkpoint_on_ram(classifier_runs):
  """A later run evaluates the checkpoint the ram:// run left there."""
  _, remote = classifier_runs
  expected = _results(os.path.join(remote, "out", "eval_results.txt"))
  tf.io.gfile.remove(os.path.join(remote, "out", "eval_results.txt"))
  _run(run_classifier, test_run_classifier._command(  # pylint: disable=protected-access
      "MRPC", os.path.join(remote, "data"), os.path.join(remote, "vocab.txt"),
      os.path.join(remote, "bert_config.json"),
      os.path.join(remote, "out"), 2, ["do_eval"]))
  found = _results(os.path.join(remote, "out", "eval_results.txt"))
  assert found == pytest.approx(expected, rel=1e-6, abs=1e-7)


@pytest.mark.slow
def test_classifier_export_on_ram_is_whole(classifier_runs):
  """The export moved into place on ram:// holds the local export's files
  and weights, and nothing is left of its temporary folder."""
  local, remote = classifier_runs
  names = lambda root: sorted(
      os.path.relpath(os.path.join(folder, name), root)
      for folder, _, files in tf.io.gfile.walk(root) for name in files)
  local_export, remote_export = (_only_export(os.path.join(root, "export"))
                                 for root in (local, remote))
  assert names(remote_export) == names(local_export)
  assert "assets.extra/vocab.txt" in names(remote_export)
  expected = _export_weights(os.path.join(local, "export"))
  found = _export_weights(os.path.join(remote, "export"))
  assert sorted(found) == sorted(expected)
  for name, value in expected.items():
    np.testing.assert_allclose(found[name], value, rtol=1e-6, atol=1e-7,
                               err_msg=name)


def test_remote_folder_is_not_locked_and_says_so_once(tmp_path, caplog):
  """flock means nothing on ram://: hold takes no lock and notes it in one
  line; claim still probes that the remote outputs can be written."""
  remote = _ram_root()
  caplog.set_level(logging.INFO)
  assert folder_lock.hold(remote + "/out") is None
  with output_files.claim([("--output_file", remote + "/out/a.txt")],
                          [str(tmp_path / "input.txt")]):
    pass
  notes = [r.getMessage() for r in caplog.records
           if r.getMessage().startswith("Note: ")]
  assert notes == ["Note: %s/out is not a local folder: a second run "
                   "writing there at the same time is not detected." %
                   remote] * 2
  assert not tf.io.gfile.exists(remote + "/out/a.txt.tmp")


def test_move_folder_on_ram_moves_every_file():
  """ram:// renames a folder's own entry only; move_folder moves its files."""
  remote = _ram_root()
  for name in ("a", "sub/b", "sub/deeper/c"):
    tf.io.gfile.makedirs(os.path.dirname(remote + "/1.incomplete/" + name))
    with tf.io.gfile.GFile(remote + "/1.incomplete/" + name, "w") as f:
      f.write(name)
  file_systems.move_folder(remote + "/1.incomplete", remote + "/1")
  for name in ("a", "sub/b", "sub/deeper/c"):
    assert _read(remote + "/1/" + name) == name
  assert tf.io.gfile.listdir(remote) == ["1"]


def test_glue_files_read_the_same_from_ram(assets_dir):
  """MRPC's real files (a BOM in the header) read from ram:// give the
  examples they give locally."""
  local = os.path.join(assets_dir, "glue", "MRPC")
  remote = _ram_root()
  _copy_tree(local, remote)
  processor = run_classifier.MrpcProcessor()
  for read in (processor.get_dev_examples, processor.get_test_examples):
    expected, found = read(local), read(remote)
    assert [(e.guid, e.text_a, e.text_b, e.label) for e in found] == [
        (e.guid, e.text_a, e.text_b, e.label) for e in expected]


BAD_FILES = [
    # (reader, file name, bytes): each error names the file and line.
    (lambda path: glue.MrpcProcessor()._read_tsv(path), "dev.tsv",  # pylint: disable=protected-access
     b"\xef\xbb\xbfQuality\tA\n1\tok\n0\t\xff\n"),
    (lambda path: swag.read_examples(path, "test", False), "test.csv",
     b"video-id,fold-ind,startphrase\n0,v,\"unclosed\n"),
    (lambda path: conll.read_file(path, "iob1"), "train.txt",
     b"anna NNP I-NP I-PER\nwent VBD I-VP\n"),
    (lambda path: labeled_files.read_rows(
        path, labeled_files.Columns("text", None, "label", None)),
     "own.jsonl",
     b'{"text": "a"}\n{"text": \n'),
]


@pytest.mark.parametrize("read, name, data", BAD_FILES)
def test_bad_files_on_ram_are_named_as_locally(tmp_path, read, name, data):
  """The same one-line error for the same bad bytes, local or remote, but
  for the path."""
  remote = _ram_root()
  messages = []
  for root in (str(tmp_path), remote):
    path = os.path.join(root, name)
    with tf.io.gfile.GFile(path, "wb") as writer:
      writer.write(data)
    with pytest.raises(cli.UserError) as error:
      read(path)
    messages.append(cli.error_line(error.value).replace(root, "<root>"))
  assert messages[0] == messages[1]
  assert "<root>/%s:" % name in messages[0]


def test_pretraining_input_globs_on_ram():
  """run_pretraining.py's --input_file patterns match remote files, sorted,
  without sidecars or folders."""
  remote = _ram_root()
  for name in ("b.tfrecord", "a.tfrecord", "a.tfrecord.meta.json",
               "other.txt"):
    with tf.io.gfile.GFile(os.path.join(remote, name), "w") as writer:
      writer.write("x")
  assert pretraining.expand_input_files(
      "%s/*.tfrecord*, %s/other.txt" % (remote, remote)) == [
          remote + "/a.tfrecord", remote + "/b.tfrecord",
          remote + "/other.txt"]
  with pytest.raises(cli.UserError, match="matches no file"):
    pretraining.expand_input_files(remote + "/c*")


def test_s3_paths_need_tensorflow_io():
  """s3:// and hdfs:// come with tensorflow-io: imported when an argument
  names such a path, else one line naming the argument."""
  file_systems.load_file_systems(["x.py", "--data_dir=gs://b/d", "ram://x"])
  argv = ["run_classifier.py", "--do_train", "--data_dir=s3://bucket/mrpc"]
  if importlib.util.find_spec("tensorflow_io") is None:
    with pytest.raises(cli.UserError, match=r"^--data_dir=s3://bucket/mrpc: "
                       r"TensorFlow reads s3:// paths through the "
                       r"tensorflow-io package"):
      file_systems.load_file_systems(argv)
  else:
    file_systems.load_file_systems(argv)
    assert "tensorflow_io" in sys.modules


def test_missing_remote_files_are_named():
  remote = _ram_root()
  with pytest.raises(cli.UserError, match="ram://.*/dev.tsv does not exist"):
    glue.MrpcProcessor().get_dev_examples(remote)
  with pytest.raises(cli.UserError, match="is not a directory"):
    task_lib.check_data_dir(remote + "/nothing", "point it elsewhere.")
  with pytest.raises(cli.UserError, match="ram://.*/x: cannot be read"):
    file_systems.read_bytes(remote + "/x")


def _local_and_ram_runs(tmp_path, script, write_inputs, command):
  """Runs `script` with command(root, output_dir) on local inputs written
  by write_inputs(root), then on their copy on ram://; returns the roots."""
  local = str(tmp_path)
  write_inputs(local)
  remote = _ram_root()
  _copy_tree(local, remote)
  for root in (local, remote):
    _run(script, command(root, os.path.join(root, "out")))
  return local, remote


def _assert_same_outputs(local, remote):
  """The results and predictions of the two runs agree: metrics and
  probabilities to float tolerance, predicted labels exactly."""
  names = sorted(name for name in os.listdir(os.path.join(local, "out"))
                 if re.search(r"(results|predictions)\.(txt|tsv|csv)$",
                              name))
  assert names
  for name in names:
    expected, found = (os.path.join(root, "out", name)
                       for root in (local, remote))
    if name.endswith("results.txt"):
      assert _results(found) == pytest.approx(_results(expected), rel=1e-6,
                                              abs=1e-7), name
    elif name.endswith("results.tsv"):
      np.testing.assert_allclose(np.array(_table(found), np.float64),
                                 np.array(_table(expected), np.float64),
                                 rtol=1e-6, atol=1e-7, err_msg=name)
    else:
      assert _read(found) == _read(expected), name


@pytest.mark.slow
def test_ner_on_ram_matches_the_local_run(tmp_path):
  """run_ner.py reads its CoNLL files (tasks/conll.py) from ram://."""
  def write_inputs(root):
    test_run_ner._write_model_files(root)  # pylint: disable=protected-access
    test_run_ner._write_data(os.path.join(root, "data"))  # pylint: disable=protected-access

  local, remote = _local_and_ram_runs(
      tmp_path, run_ner, write_inputs, lambda root, out: test_run_ner._command(  # pylint: disable=protected-access
          root, out, ["do_train", "do_eval", "do_predict"],
          ["--num_train_epochs=1"]))
  _assert_same_outputs(local, remote)


@pytest.mark.slow
def test_swag_on_ram_matches_the_local_run(tmp_path):
  """run_swag.py reads its CSV files (tasks/swag.py) from ram://."""
  def write_inputs(root):
    test_run_swag._write_swag_data(os.path.join(root, "data"))  # pylint: disable=protected-access
    test_run_swag._write_model_files(root)  # pylint: disable=protected-access

  local, remote = _local_and_ram_runs(
      tmp_path, run_swag, write_inputs, lambda root, out: test_run_swag._command(  # pylint: disable=protected-access
          root, out, ["do_train", "do_eval", "do_predict"]) + [
              "--num_train_epochs=1"])
  _assert_same_outputs(local, remote)


def test_conversion_reads_and_writes_ram(tmp_path):
  """convert_checkpoint's conversions with both folders on ram://: MiniLM's
  Hugging Face copy becomes the published Google copy and back."""
  # Names no other begins with: ram:// lists "hf_again" in a folder "hf".
  hf_source = os.path.join(_ram_root(), "source")
  _copy_tree(test_convert_checkpoint.HF_MINILM_DIR, hf_source)
  google_dir = os.path.join(os.path.dirname(hf_source), "google")
  hf_dir = os.path.join(os.path.dirname(hf_source), "back")
  with conversion.lock_output_dir(google_dir):
    assert conversion.convert(hf_source, google_dir) == conversion.GOOGLE
  reader = checkpoint_checks.reader_of(
      os.path.join(google_dir, "bert_model.ckpt"))
  published = checkpoint_checks.reader_of(test_convert_checkpoint.GOOGLE_MINILM)
  assert reader.get_variable_to_shape_map() == (
      published.get_variable_to_shape_map())
  for name in published.get_variable_to_shape_map():
    np.testing.assert_array_equal(reader.get_tensor(name),
                                  published.get_tensor(name), err_msg=name)
  assert not tf.io.gfile.exists(google_dir + ".tmp/bert_model.ckpt.index")
  conversion.convert(google_dir, hf_dir)
  got = safetensors_numpy.load(
      file_systems.read_bytes(os.path.join(hf_dir, "model.safetensors")))
  want = safetensors_numpy.load_file(os.path.join(
      test_convert_checkpoint.HF_MINILM_DIR, "model.safetensors"))
  want.pop("embeddings.position_ids")  # A buffer old transformers saved.
  assert sorted(got) == sorted(want)
  for name, value in want.items():
    np.testing.assert_array_equal(got[name], value, err_msg=name)
  local = str(tmp_path / "hf_local")
  conversion.convert(google_dir, local)
  assert _read(os.path.join(hf_dir, "config.json")) == _read(
      os.path.join(local, "config.json"))
  for folder in (hf_source, google_dir, hf_dir):  # Frees the memory they hold.
    for name in tf.io.gfile.listdir(folder):
      tf.io.gfile.remove(os.path.join(folder, name))


@pytest.mark.slow
def test_evaluations_during_training_on_ram_match_the_local_run(tmp_path):
  """Evaluations after every 5th update with every path on ram://: the
  same history, the same best step, its files copied into best/ (links
  are for local disks), the same final weights."""
  local = str(tmp_path)
  test_run_classifier._write_mrpc_data(os.path.join(local, "data"), seed=5)  # pylint: disable=protected-access
  test_run_classifier._write_model_files(local)  # pylint: disable=protected-access
  remote = _ram_root()
  _classifier_here_and_on_ram(local, remote,
                              ["do_train", "do_eval", "eval_every_steps=5"])
  histories = [[json.loads(line) for line in _read(os.path.join(
      root, "out", "eval_history.jsonl")).splitlines()]
               for root in (local, remote)]
  assert [e["global_step"] for e in histories[1]] == [5, 10, 15, 20]
  for got, want in zip(*reversed(histories)):
    assert sorted(got) == sorted(want)
    for key in want:
      if isinstance(want[key], str):
        assert got[key] == want[key], key
      else:
        assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-7), key
  records = [json.loads(_read(os.path.join(root, "out", "run_info.json")))[
      "best_checkpoint"] for root in (local, remote)]
  assert records[1]["global_step"] == records[0]["global_step"]
  best = os.path.join(remote, "out", records[1]["checkpoint"])
  assert sorted(tf.io.gfile.listdir(os.path.dirname(best))) == [
      os.path.basename(best) + suffix
      for suffix in (".data-00000-of-00001", ".index")]
  kept = checkpoint_checks.reader_of(best)
  original = checkpoint_checks.reader_of(os.path.join(
      remote, "out", os.path.basename(best)))
  for name in original.get_variable_to_shape_map():
    np.testing.assert_array_equal(kept.get_tensor(name),
                                  original.get_tensor(name), err_msg=name)
  tf.io.gfile.rmtree(remote)
