"""The FLOP accounting of bench/throughput.py against hand computations.

Pure arithmetic; nothing is timed.
"""

import pytest

from bench import throughput

BASE = throughput.MODELS["base"]


def test_base_layer_params_by_hand():
  # Q, K, V, O: 4 x (768*768 + 768) = 2,362,368
  # FFN: 768*3072 + 3072 + 3072*768 + 768 = 4,722,432
  # two LayerNorms: 4 * 768 = 3,072
  assert throughput.encoder_layer_params(768, 3072) == 7087872
  # 12 layers: the familiar ~85M non-embedding parameters of BERT-Base.
  assert 12 * throughput.encoder_layer_params(768, 3072) == 85054464


def test_base_head_params_by_hand():
  # pooler 768*768 + 768, classifier 768*2 + 2
  assert throughput.head_params(768) == 590592 + 1538


def test_base_training_flops_seq128_by_hand():
  # 6 * 85,054,464 * 128 + 6 * 592,130 + 12 * 12 * 128^2 * 768
  expected = 65321828352 + 3552780 + 1811939328
  assert throughput.flops_per_example(BASE, 128, True) == expected
  # ~67.1 GFLOP per example; at the anchor of 3.15 ex/s that is
  # 211 GFLOP/s, i.e. the ~57% of a 367 GFLOP/s peak the issue quotes.
  assert abs(3.15 * expected / 367e9 - 0.576) < 0.001


def test_base_inference_flops_seq128_by_hand():
  # 2 * 85,054,464 * 128 + 2 * 592,130 + 4 * 12 * 128^2 * 768
  assert throughput.flops_per_example(BASE, 128, False) == (
      21773942784 + 1184260 + 603979776)


def test_attention_term_grows_with_seq_squared():
  # At seq 384 the attention matmuls are 3x as large per token as at 128.
  def attention(seq):
    return (throughput.flops_per_example(BASE, seq, True)
            - 6 * (85054464 * seq + 592130))
  assert attention(128) == 1811939328
  assert attention(384) == 9 * 1811939328


def test_small_model_flops_by_hand():
  small = throughput.MODELS["small"]
  # layer: 4*(256*256+256) + (256*1024+1024) + (1024*256+256) + 4*256
  layer = 263168 + 263168 + 262400 + 1024
  assert throughput.encoder_layer_params(256, 1024) == layer
  head = 256 * 256 + 256 + 256 * 2 + 2
  assert throughput.flops_per_example(small, 128, True) == (
      6 * (4 * layer * 128 + head) + 12 * 4 * 128 * 128 * 256)


def test_real_token_accounting_uses_the_inputs_real_lengths():
  """The lengths the MFU counts are the inputs' mask sums, and MFU counts
  the mean of the examples' FLOPs at those lengths."""
  lengths = throughput.synthetic_lengths(128, 8)
  mask = throughput._synthetic_inputs(128, 8)["input_mask"]
  assert lengths == [int(n) for n in mask.sum(axis=1)]
  assert all(64 <= n <= 128 for n in lengths) and min(lengths) < 128
  result = dict(config="base-s128-b8-train", impl="ours", dtype="fp32",
                xla=False, checkpointing=False, skip_padding=True,
                model="base", seq_length=128, batch_size=8, training=True,
                examples_per_sec=2.0, xla_compiled=False)
  (row,) = throughput.summarize([result], {"fp32": [1000.0], "bf16": []})
  by_length = [throughput.flops_per_example(BASE, n, True) for n in lengths]
  assert row["mfu"] == pytest.approx(2.0 * (sum(by_length) / 8) / 1e12)
  assert row["mfu_all_positions"] == pytest.approx(
      2.0 * throughput.flops_per_example(BASE, 128, True) / 1e12)
  assert row["mfu"] < row["mfu_all_positions"]


def test_masked_lm_head_flops_by_hand():
  # transform 768*768 + 768, LayerNorm 2*768, output 30522*768 + 30522
  assert throughput.masked_lm_params(768) == (
      589824 + 768 + 1536 + 23440896 + 30522)
  # 20 masked positions, 6 FLOPs per parameter and position in training:
  # BERT-Base's head adds ~2.9 GFLOP to an example's ~67.1.
  extra = 6 * 20 * 24063546
  assert (throughput.flops_per_example(BASE, 128, True, "pretraining") -
          throughput.flops_per_example(BASE, 128, True)) == extra
  assert extra == 2887625520


def test_pretraining_inputs_mask_real_tokens_only():
  features = throughput._synthetic_pretraining_inputs(128, 8)
  lengths = throughput.synthetic_lengths(128, 8)
  positions = features["masked_lm_positions"]
  assert positions.shape == (8, throughput.MAX_PREDICTIONS_PER_SEQ)
  for row, length in zip(positions, lengths):
    assert len(set(row.tolist())) == len(row)
    assert row.max() < length
  for example in range(8):
    assert (features["masked_lm_ids"][example].tolist() ==
            features["input_ids"][example][positions[example]].tolist())
  assert features["next_sentence_labels"].shape == (8, 1)


def test_peers_run_every_position_of_every_layer():
  for impl in ("hf", "tfm", "khub", "google"):
    assert throughput.executed_flops_per_example(
        BASE, 128, 64, False, "classifier", impl, False) == (
            throughput.flops_per_example(BASE, 128, False))


def test_ours_last_layer_runs_the_first_position_only_by_hand():
  # Inference, no padding skipped, 128 tokens. A full layer:
  #   2 * 7,087,872 * 128 (its matmuls) + 4 * 128 * 768 * 128 (attention)
  full_layer = 1814495232 + 50331648
  # The last layer: keys and values of all 128 rows (2 * 2 * 590,592 *
  # 128), the rest of the layer's parameters for one row (2 * (7,087,872 -
  # 2 * 590,592)), attention for one query (4 * 128 * 768).
  last_layer = 302383104 + 11813376 + 393216
  expected = 11 * full_layer + last_layer + 2 * 592130
  assert expected == 20828869636
  assert throughput.executed_flops_per_example(
      BASE, 128, 128, False, "classifier", "ours", False) == expected
  # Training: three times the forward pass.
  assert throughput.executed_flops_per_example(
      BASE, 128, 128, True, "classifier", "ours", False) == 3 * expected


def test_ours_skip_padding_runs_dense_layers_on_real_rows_by_hand():
  # 64 real tokens of 128: the dense matmuls get 64 rows, attention still
  # spans 128 positions.
  full_layer = 2 * 7087872 * 64 + 4 * 128 * 768 * 128
  last_layer = 2 * 2 * 590592 * 64 + 2 * (7087872 - 2 * 590592) + (
      4 * 128 * 768)
  assert throughput.executed_flops_per_example(
      BASE, 128, 64, False, "classifier", "ours", True) == (
          11 * full_layer + last_layer + 2 * 592130)


def test_ours_pretraining_runs_the_whole_last_layer_and_the_first_pass():
  # The masked-LM head reads every position: all 12 layers in full, plus
  # the pooler's first-position pass of the last layer.
  first_pass = 2 * 2 * 590592 * 128 + 2 * (7087872 - 2 * 590592) + (
      4 * 128 * 768)
  assert throughput.executed_flops_per_example(
      BASE, 128, 128, True, "pretraining", "ours", False) == (
          throughput.flops_per_example(BASE, 128, True, "pretraining") +
          3 * first_pass)


def _result(impl, dtype, rate, config="base-s128-b8-train", **settings):
  spec = dict(config=config, impl=impl, dtype=dtype, xla=False,
              checkpointing=False, skip_padding=False, model="base",
              seq_length=128, batch_size=8, training=config.endswith("train"),
              examples_per_sec=rate, xla_compiled=False)
  spec.update(settings)
  return spec


def test_ratio_table_compares_ours_with_the_fastest_peer():
  """Each implementation at its fastest setting; the ratio is ours over
  the fastest peer; a peer that failed or did not run is a dash."""
  results = [
      _result("ours", "fp32", 3.0, skip_padding=True),
      _result("ours", "fp32", 2.0),
      _result("hf", "fp32", 2.5),
      _result("tfm", "fp32", 1.0),
      _result("tfm", "fp32", 4.0, xla=True),
      _result("khub", "fp32", 1.5),
      _result("google", "fp32", 0.5),
      _result("ours", "bf16", 6.0, skip_padding=True),
      _result("hf", "bf16", 3.0),
      dict(_result("khub", "bf16", 0.0), error="exit 1: boom"),
  ]
  rows = throughput.summarize(results, {"fp32": [100.0], "bf16": [200.0]})
  best = throughput.fastest_by_impl(rows)
  assert best[("base-s128-b8-train", "fp32")]["ours"]["skip_padding"]
  assert best[("base-s128-b8-train", "fp32")]["tfm"]["xla"]
  assert "khub" not in best[("base-s128-b8-train", "bf16")]
  lines = throughput.ratio_table(rows).splitlines()
  assert lines[0].startswith("| config | mode | dtype | ours | hf | tfm | "
                             "khub | google |")
  fp32 = [line for line in lines if "| fp32 |" in line]
  bf16 = [line for line in lines if "| bf16 |" in line]
  assert "| 0.75x vs tfm |" in fp32[0]
  assert "| 3.00 (skip pad) | 2.50 | 4.00 (xla) | 1.50 | 0.50 |" in fp32[0]
  assert "| 2.00x vs hf |" in bf16[0]
  assert "| 6.00 (skip pad) | 3.00 | - | - | - |" in bf16[0]
  assert "| training |" in fp32[0]
  # MFU of ours (all positions / run): 3 ex/s at 100 GFLOP/s.
  ours = best[("base-s128-b8-train", "fp32")]["ours"]
  assert ours["mfu_all_positions"] == pytest.approx(
      3.0 * throughput.flops_per_example(BASE, 128, True) / 100e9)
  lengths = throughput.synthetic_lengths(128, 8)
  assert ours["mfu_executed"] == pytest.approx(3.0 * sum(
      throughput.executed_flops_per_example(BASE, 128, n, True, "classifier",
                                            "ours", True)
      for n in lengths) / 8 / 100e9)
  assert ours["mfu_executed"] < ours["mfu_all_positions"]


def test_peer_environments_are_found_or_named(tmp_path):
  python, missing = throughput.impl_python("khub", bench_dir=str(tmp_path))
  assert python is None
  assert missing == ("bench/.venv-kerashub/bin/python not found; run: bash "
                     "bench/setup_kerashub_env.sh")
  (tmp_path / ".venv-google" / "bin").mkdir(parents=True)
  (tmp_path / ".venv-google" / "bin" / "python").write_text("")
  assert throughput.impl_python("google", bench_dir=str(tmp_path)) == (
      str(tmp_path / ".venv-google" / "bin" / "python"), None)
  assert throughput.impl_python("ours", bench_dir=str(tmp_path))[1] is None


def test_plan_runs_gives_google_fp32_only_and_every_impl_a_turn():
  # --quick's plan: the small configs, XLA and checkpointing off.
  runs = throughput.plan_runs(
      configs=throughput.QUICK_CONFIGS, only=list(throughput.ALL_IMPLS),
      dtypes=["fp32", "bf16"], xla=[False], checkpointing=[False],
      skip_padding=[True], threads=2, steps=3, warmup_steps=1)
  assert {run["config"] for run in runs} == set(throughput.QUICK_CONFIGS)
  by_impl = {}
  for run in runs:
    by_impl.setdefault(run["impl"], []).append(run["dtype"])
  assert sorted(by_impl) == sorted(throughput.ALL_IMPLS)
  assert by_impl["google"] == ["fp32", "fp32"]
  assert sorted(by_impl["khub"]) == ["bf16", "bf16", "fp32", "fp32"]
  # Round-robin: the first runs of a config cycle through the impls.
  assert [run["impl"] for run in runs[:5]] == list(throughput.ALL_IMPLS)
