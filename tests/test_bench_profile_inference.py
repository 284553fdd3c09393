"""bench/profile_inference.py's aggregation of traced step stats.

Hand-made StepStats protos (the proto a traced Session.run fills); nothing
is run or timed.
"""

from tensorflow.core.framework import step_stats_pb2

from bench import profile_inference


def _step(*nodes):
  return step_stats_pb2.StepStats(dev_stats=[step_stats_pb2.DeviceStepStats(
      device="/cpu:0", node_stats=[
          step_stats_pb2.NodeExecStats(
              node_name=name, timeline_label=label, op_end_rel_micros=micros)
          for name, label, micros in nodes])])


def test_times_are_summed_by_executed_op_type_per_step():
  steps = [
      _step(("a/matmul", "a/matmul = _FusedMatMul(x, w, b)", 300),
            ("b/matmul", "b/matmul = _FusedMatMul(y, w)", 100),
            ("c/cast", "c/cast = Cast(z)", 50),
            ("_SOURCE", "", 2)),
      _step(("a/matmul", "a/matmul = _FusedMatMul(x, w, b)", 500),
            ("b/matmul", "b/matmul = _FusedMatMul(y, w)", 100),
            ("c/cast", "c/cast = Cast(z)", 150),
            ("_SOURCE", "", 2)),
  ]
  by_type, by_node = profile_inference.aggregate(steps)
  assert list(by_type) == ["_FusedMatMul", "Cast", "_SOURCE"]
  assert by_type["_FusedMatMul"] == (500.0, 2.0)
  assert by_type["Cast"] == (100.0, 1.0)
  assert by_node["a/matmul"] == (400.0, 1.0)
  table = profile_inference.share_table(by_type, 602.0, 1, "op type")
  assert "| _FusedMatMul | 2 | 0.50 | 83.1% |" in table
  assert "| (the rest) | | 0.10 | 16.9% |" in table
