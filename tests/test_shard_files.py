"""corpus/shard_files.py: a failed corpus job leaves no file behind, even
one that a killed worker was writing atomically.

One shard stops inside an atomic write (userio/output_files.replacing, as
the pre-training and embedding shards write), and an earlier one then
fails with bad input; the run kills the busy worker at once, so the write's own
clean-up never runs, and `run` must remove what it left.
"""
import collections
import os
import time

import pytest

from corpus import shard_files
from corpus import shard_job
from userio import cli
from userio import output_files

Spec = collections.namedtuple("Spec", ["index", "begin", "end"])


class _StopsMidWrite(shard_files.ShardFilesJob):
  """Shard 1 writes half a file and waits; shard 0 fails once it has
  (results come in shard order, so the failure must be the earlier
  shard's to end the run)."""

  extension = ".txt"
  noun = "lines"

  def write_shard(self, spec, path):
    if spec.index == 1:
      with output_files.replacing(path) as temporary:
        with open(temporary, "w") as half_written:
          half_written.write("half")
        time.sleep(3600)
    deadline = time.monotonic() + 60
    while not os.path.exists(self.temp_path(1) + ".tmp"):
      assert time.monotonic() < deadline, "shard 1 never started writing"
      time.sleep(0.05)
    raise cli.UserError("bad input in shard 0")


def test_a_run_that_fails_leaves_no_file_of_a_killed_writer(tmp_path):
  job = _StopsMidWrite(str(tmp_path / "out"), num_shards=2)
  specs = [Spec(0, 0, 10), Spec(1, 10, 20)]
  with pytest.raises(cli.UserError, match="bad input in shard 0"):
    shard_files.run(job, specs, shard_job.LOCAL_RUNNER, num_workers=2)
  assert sorted(os.listdir(tmp_path)) == []
