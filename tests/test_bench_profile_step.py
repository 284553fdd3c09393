"""bench/profile_step.py's aggregation of traced step stats.

Hand-made StepStats protos (the proto a traced Session.run fills); nothing
is run or timed.
"""

import pytest
from tensorflow.core.framework import step_stats_pb2

from bench import profile_step


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
  by_type, by_node = profile_step.aggregate(steps)
  assert list(by_type) == ["_FusedMatMul", "Cast", "_SOURCE"]
  assert by_type["_FusedMatMul"] == (500.0, 2.0)
  assert by_type["Cast"] == (100.0, 1.0)
  assert by_node["a/matmul"] == (400.0, 1.0)
  table = profile_step.share_table(by_type, 602.0, 1, "op type")
  assert "| _FusedMatMul | 2 | 0.50 | 83.1% |" in table
  assert "| (the rest) | | 0.10 | 16.9% |" in table


_BASE = dict(layers=12, hidden=768, heads=12, intermediate=3072)


def test_dense_shapes_carry_six_times_the_weights_per_row_in_training():
  # The usual accounting: a training step costs 6 FLOPs per weight per row
  # (forward 2, input gradient 2, weight gradient 2); the encoder's dense
  # weights are 4 h^2 + 2 h I per layer.
  rows = 1000
  weights = 12 * (4 * 768 * 768 + 2 * 768 * 3072)
  shapes = profile_step.dense_matmul_shapes(_BASE, rows, training=True)
  assert sum(profile_step.matmul_flops(s) * s["count"]
             for s in shapes) == 6 * weights * rows
  inference = profile_step.dense_matmul_shapes(_BASE, rows, training=False)
  assert sum(profile_step.matmul_flops(s) * s["count"]
             for s in inference) == 2 * weights * rows


def test_dense_shapes_are_the_gradients_of_their_forward_matmul():
  shapes = profile_step.dense_matmul_shapes(_BASE, 10, training=True)
  # x[10, 768] @ w[768, 3072]; dx = dy[10, 3072] @ w^T is 10 x 3072 x 768
  # with b transposed; dw = x^T @ dy is 768 x 10 x 3072 with a transposed.
  found = {(s["role"], s["rows"], s["inner"], s["cols"], s["transpose_a"],
            s["transpose_b"], s["count"]) for s in shapes}
  assert ("forward", 10, 768, 3072, False, False, 12) in found
  assert ("input gradient", 10, 3072, 768, False, True, 12) in found
  assert ("weight gradient", 768, 10, 3072, True, False, 12) in found
  assert ("forward", 10, 768, 768, False, False, 48) in found
  assert len(shapes) == 9


def test_mfu_is_the_product_of_its_factors():
  # 6 GFLOP in a 1 s step on a 10 GFLOP/s peak is 60%. The traced ops sum
  # to 0.9 s, 0.75 s of it in matmul ops: 6 GFLOP / 0.75 s is 8 GFLOP/s,
  # 80% of the peak; 60% = 0.75 / 0.9 x 80% x 0.9.
  by_type = {"_MklMatMul": (500000.0, 3), "_MklFusedBatchMatMulV2": (
      250000.0, 1), "Mul": (150000.0, 9)}
  factors = profile_step.mfu_factors(6e9, 1.0, by_type, 10.0)
  assert factors["mfu"] == pytest.approx(0.6)
  assert factors["matmul_share"] == pytest.approx(0.75 / 0.9)
  assert factors["matmul_of_peak"] == pytest.approx(0.8)
  assert factors["traced_over_untraced"] == pytest.approx(0.9)
  assert factors["matmul_share"] * factors["matmul_of_peak"] * factors[
      "traced_over_untraced"] == pytest.approx(factors["mfu"])


def test_dense_alone_is_total_flops_over_summed_times():
  shapes = [dict(rows=10, inner=10, cols=10, count=1),
            dict(rows=10, inner=10, cols=10, count=3)]
  # 2000 FLOP at 1 GFLOP/s (2 us) and 6000 at 3 GFLOP/s (2 us): 8000 / 4 us.
  gflops, of_peak = profile_step.dense_alone(shapes, [1.0, 3.0], 4.0)
  assert gflops == pytest.approx(2.0)
  assert of_peak == pytest.approx(0.5)
