"""bench/fit_memory_calibration.py recovers known factors from peaks that a
known calibration of the term model produced. Pure arithmetic."""

import json

import conftest
from memory import memory_model

fit_calibration = conftest.load_bench_script("fit_memory_calibration")

_SMALL = dict(memory_model.BERT_BASE, num_hidden_layers=4, hidden_size=512,
              num_attention_heads=8, intermediate_size=2048)


def _runs(calibration):
  runs = []
  for bert, seq, batch in ((memory_model.BERT_LARGE, 512, 2),
                           (memory_model.BERT_LARGE, 512, 8),
                           (memory_model.BERT_BASE, 128, 32),
                           (_SMALL, 512, 4)):
    for precision in ("fp32", "bf16"):
      for checkpointing in (False, True):
        run = {"model": "m", "bert": bert, "seq": seq, "batch": batch,
               "precision": precision, "checkpointing": checkpointing}
        run["allocator_peak_bytes"] = memory_model.estimate_bytes(
            bert, seq, batch, precision, checkpointing,
            calibration=calibration)["total"]
        runs.append(run)
  return runs


def test_fit_recovers_the_factors_that_made_the_peaks(tmp_path):
  truth = memory_model.Calibration(state_factor=0.7, linear_factor=0.3,
                                  quadratic_factor=0.5, workspace_gb=0.05)
  path = tmp_path / "memory.json"
  # A failed run (no allocator peak) is left out, not fitted.
  path.write_text(json.dumps({"runs": _runs(truth) + [{"error": "killed"}]}))
  runs = fit_calibration.load_runs([str(path)])
  assert len(runs) == 16
  terms, fixed = fit_calibration.term_matrix(runs, truth.workspace_gb)
  measured = [run["allocator_peak_bytes"] for run in runs]
  factors = fit_calibration.fit(terms, fixed, measured)
  assert factors == {"state_factor": 0.7, "linear_factor": 0.3,
                     "quadratic_factor": 0.5}
