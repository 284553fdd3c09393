"""Bad inputs to run_ner.py, run_swag.py, the corpus tools, the converter,
predictor.py, squad_evaluate.py and reproduce.py, for
tests/test_bad_inputs.py (same Case format as bad_input_cases.py).

The cases are named by command: ner_, swag_, cpd_ (create_pretraining_data
.py), vocab_ (create_vocab.py), convert_, predictor_, squad_eval_ and
reproduce_. What several cases share (an export of a tiny MRPC model, and a
copy of it without its serving signature) is made once by `build_shared`.
"""
import glob
import json
import os
import shutil

from bad_input_cases import ASSETS
from bad_input_cases import MINILM
from bad_input_cases import SQUAD_DEV
from bad_input_cases import TINY
from bad_input_cases import _config
from bad_input_cases import _damaged_checkpoint
from bad_input_cases import _uncased_head
from bad_input_cases import _write
from bad_input_cases import case
from bad_input_cases import fill

HF_MINILM = os.path.join(ASSETS, "models", "all-minilm-l6-v2-hf")
GLUE = os.path.join(ASSETS, "glue")

# A training run of the tiny model on files of the case's folder.
TRAINING = ["--vocab_file={UNCASED}", "--bert_config_file={TINY_CONFIG}",
            "--max_seq_length=32", "--train_batch_size=2",
            "--output_dir={out}", "--do_train"]
NER = TRAINING + ["--train_file={tmp}/train.txt"]
SWAG = TRAINING + ["--data_dir={tmp}/swag"]
# Pre-training records of a two-document corpus, written into the case's
# folder (which must stay as it was).
CPD = ["--input_file={tmp}/corpus.txt", "--output_file={tmp}/data.tfrecord",
       "--vocab_file={UNCASED}", "--max_seq_length=32",
       "--max_predictions_per_seq=5", "--dupe_factor=1"]
SCALABLE = CPD + ["--mode=scalable"]
VOCAB = ["--input_file={tmp}/corpus.txt", "--output_file={tmp}/vocab.txt",
         "--vocab_size=1100"]
CONVERT = ["--input={MINILM}/bert_model.ckpt", "--output_dir={out}"]
CONVERT_HF = ["--input={tmp}/hf", "--output_dir={out}"]
PREDICT = ["--export_dir={runs_export}", "--input={tmp}/input.txt"]
SQUAD_EVAL = [SQUAD_DEV, "{tmp}/predictions.json"]
# A dry run, so that a case the command wrongly accepts runs no cell.
REPRODUCE = ["--bert_dir={MINILM}", "--glue_dir=" + GLUE, "--tasks=MRPC",
             "--output_dir={out}", "--dry_run"]

SWAG_HEADER = (",video-id,fold-ind,startphrase,sent1,sent2,gold-source,"
               "ending0,ending1,ending2,ending3,label\n")
SWAG_ROW = "0,v1,7,A man sits. He,A man sits.,He,gold,eats.,runs.,naps.,sings.,"


# ------------------------------------------------------- preparing files --


def _text(name, text):
  """A function writing `text` (str, or bytes) to the case's file `name`."""
  return lambda tmp: _write(os.path.join(tmp, name), text,
                            "wb" if isinstance(text, bytes) else "w")


def _corpus(tmp):
  """Two documents of two sentences each in tmp/corpus.txt."""
  _write(os.path.join(tmp, "corpus.txt"),
         "The cat sat.\nIt was warm.\n\nA dog ran.\nIt barked.\n")


def _swag(text):
  """A function writing `text` as tmp/swag/train.csv."""
  return _text(os.path.join("swag", "train.csv"), text)


def _hf_folder(tmp, replace=None, drop=()):
  """MiniLM's Hugging Face folder in tmp/hf, its files linked to the
  assets; `replace` maps a name to the text written instead, `drop` lists
  names left out."""
  folder = os.path.join(tmp, "hf")
  os.makedirs(folder)
  for path in glob.glob(os.path.join(HF_MINILM, "*")):
    name = os.path.basename(path)
    if name in drop:
      continue
    if replace and name in replace:
      _write(os.path.join(folder, name), replace[name])
    else:
      os.symlink(path, os.path.join(folder, name))


def _hf_config(**changes):
  with open(os.path.join(HF_MINILM, "config.json")) as f:
    config = json.load(f)
  config.update(changes)
  return json.dumps(config)


def _export_without_record(tmp, runs):
  """A copy of the shared export without assets.extra/run_info.json."""
  target = os.path.join(tmp, "export")
  shutil.copytree(runs["runs_no_signature"], target)
  os.remove(os.path.join(target, "assets.extra", "run_info.json"))


def _predictions(text="{}"):
  return _text("predictions.json", text)


def _data_and_predictions(data):
  """tmp/data.json holding `data` (str or bytes) and empty predictions."""
  return lambda tmp: (_text("data.json", data)(tmp), _predictions()(tmp))


# ------------------------------------------------------------------ cases

CASES = {
    # run_ner.py: CoNLL files and its flags.
    "ner_missing_train_file": case(
        "run_ner.py", NER + ["--train_file={tmp}/none.txt"],
        "none.txt: file not found", "CoNLL file"),
    "ner_folder_as_train_file": case(
        "run_ner.py", NER + ["--train_file={tmp}"], "(or a folder)"),
    "ner_token_line_without_tag": case(
        "run_ner.py", NER, "train.txt:2: found 1 fields, but line 1 has 2",
        prepare=_text("train.txt", "anna I-PER\nwent\n\nparis I-LOC\n")),
    "ner_tag_against_scheme": case(
        "run_ner.py", NER + ["--tag_scheme=iob2"], "train.txt:4:",
        "--tag_scheme=iob1",
        prepare=_text("train.txt", "anna B-PER\nwent O\n\nparis I-LOC\n")),
    "ner_train_file_not_utf8": case(
        "run_ner.py", NER, "train.txt:2: byte 0xe9", "UTF-8",
        prepare=_text("train.txt", b"anna I-PER\ncaf\xe9 O\n")),
    "ner_empty_train_file": case(
        "run_ner.py", NER, "train.txt holds no tokens",
        prepare=_text("train.txt", "")),
    "ner_data_dir_and_own_files": case(
        "run_ner.py", NER + ["--data_dir={tmp}"], "--data_dir",
        "--train_file", "not both",
        prepare=_text("train.txt", "anna I-PER\nwent O\n")),
    "ner_lstm_size_0": case(
        "run_ner.py", NER + ["--feature_mode=last", "--lstm_size=0"],
        "--lstm_size=0",
        prepare=_text("train.txt", "anna I-PER\nwent O\n")),
    # run_swag.py: SWAG's CSV files and its flags.
    "swag_without_data_dir": case(
        "run_swag.py", TRAINING, "--data_dir"),
    "swag_data_dir_is_a_file": case(
        "run_swag.py", SWAG, "--data_dir=", "is not a directory",
        prepare=_text("swag", "x")),
    "swag_header_lacks_an_ending": case(
        "run_swag.py", SWAG, "train.csv:1: the header lacks the column "
        "ending3",
        prepare=_swag(SWAG_HEADER.replace("ending3,", "") +
                      SWAG_ROW.replace("sings.,", "") + "1\n")),
    "swag_label_beyond_the_endings": case(
        "run_swag.py", SWAG, "train.csv:2: label '5'", "0 to 3",
        prepare=_swag(SWAG_HEADER + SWAG_ROW + "5\n")),
    "swag_cell_not_utf8": case(
        "run_swag.py", SWAG, "train.csv:2: byte 0xe9", "UTF-8",
        prepare=_swag(SWAG_HEADER.encode() + SWAG_ROW.replace(
            "naps.", "caf\xe9").encode("latin-1") + b"1\n")),
    "swag_empty_train_csv": case(
        "run_swag.py", SWAG, "train.csv is empty", prepare=_swag("")),
    "swag_eval_without_val_csv": case(
        "run_swag.py", SWAG + ["--do_eval"], "val.csv does not exist",
        "--data_dir", prepare=_swag(SWAG_HEADER + SWAG_ROW + "1\n")),
    "swag_example_order_not_a_choice": case(
        "run_swag.py", SWAG + ["--train_example_order=random"],
        "--train_example_order=random", "shuffled"),
    # create_pretraining_data.py: the corpus, the vocabulary, the flags
    # and Beam's runner options.
    "cpd_input_matches_no_file": case(
        "create_pretraining_data.py", CPD, "--input_file:", "corpus.txt",
        "matches no file"),
    "cpd_empty_corpus": case(
        "create_pretraining_data.py", CPD, "corpus.txt is empty (0 bytes)",
        "no documents",
        prepare=lambda tmp: _write(os.path.join(tmp, "corpus.txt"), "")),
    "cpd_empty_corpus_on_beam": case(
        "create_pretraining_data.py", SCALABLE + ["--runner=DirectRunner"],
        "corpus.txt is empty (0 bytes)",
        prepare=lambda tmp: _write(os.path.join(tmp, "corpus.txt"), "")),
    "cpd_input_is_a_folder": case(
        "create_pretraining_data.py", CPD + ["--input_file={tmp}"],
        "is a directory", "*.txt"),
    "cpd_output_folder_missing": case(
        "create_pretraining_data.py",
        CPD + ["--output_file={tmp}/none/data.tfrecord"],
        "--output_file=", "none does not exist", prepare=_corpus),
    "cpd_predictions_beyond_length": case(
        "create_pretraining_data.py", CPD + ["--max_predictions_per_seq=40"],
        "--max_predictions_per_seq=40", "--max_seq_length=32",
        prepare=_corpus),
    "cpd_masked_lm_prob_above_1": case(
        "create_pretraining_data.py", CPD + ["--masked_lm_prob=1.5"],
        "--masked_lm_prob=1.5", prepare=_corpus),
    "cpd_cased_vocab_lower_cased": case(
        "create_pretraining_data.py", CPD + ["--vocab_file={CASED}"],
        "--do_lower_case=False", prepare=_corpus),
    "cpd_vocab_without_special_tokens": case(
        "create_pretraining_data.py", CPD + ["--vocab_file={tmp}/vocab.txt"],
        "[CLS]", "vocabulary of a BERT model",
        prepare=lambda tmp: (_corpus(tmp), _text(
            "vocab.txt", "[PAD]\n[UNK]\nthe\ncat\n")(tmp))),
    "cpd_unknown_scheme": case(
        "create_pretraining_data.py",
        CPD + ["--input_file=foo://bucket/corpus.txt"],
        "--input_file=foo://bucket/corpus.txt", "foo://", "gs://"),
    "cpd_ram_path_missing": case(
        "create_pretraining_data.py",
        CPD + ["--input_file=ram://none/corpus.txt"],
        "ram://none/corpus.txt matches no file"),
    "cpd_runner_in_faithful_mode": case(
        "create_pretraining_data.py", CPD + ["--runner=DirectRunner"],
        "--runner=DirectRunner", "--mode=scalable", prepare=_corpus),
    "cpd_direct_runner_unknown_option": case(
        "create_pretraining_data.py",
        SCALABLE + ["--runner=DirectRunner", "--direct_num_workerz=2"],
        "--direct_num_workerz=2", "PipelineOptions", prepare=_corpus),
    "cpd_direct_num_workers_not_a_number": case(
        "create_pretraining_data.py",
        SCALABLE + ["--runner=DirectRunner", "--direct_num_workers=two"],
        "--direct_num_workers", "'two'", "whole number", prepare=_corpus),
    "cpd_beam_option_on_local_runner": case(
        "create_pretraining_data.py",
        SCALABLE + ["--runner=local", "--direct_num_workers=2"],
        "--direct_num_workers=2", "Beam --runner only", prepare=_corpus),
    # create_vocab.py.
    "vocab_input_flag_misspelt": case(
        "create_vocab.py", ["--input_fle={tmp}/corpus.txt",
                            "--output_file={tmp}/vocab.txt"],
        "--input_fle=", "not a flag of this script"),
    "vocab_input_matches_no_file": case(
        "create_vocab.py", VOCAB, "--input_file:", "matches no file"),
    "vocab_input_and_counts_input": case(
        "create_vocab.py", VOCAB + ["--counts_input={tmp}/counts.txt"],
        "--input_file", "--counts_input", prepare=_corpus),
    "vocab_size_below_reserved_tokens": case(
        "create_vocab.py", VOCAB + ["--vocab_size=100"], "--vocab_size=100",
        "at least 1000", prepare=_corpus),
    "vocab_corpus_not_utf8": case(
        "create_vocab.py", VOCAB, "corpus.txt:2: byte 0xe9", "UTF-8",
        prepare=_text("corpus.txt", b"The cat.\ncaf\xe9 au lait.\n")),
    "vocab_empty_corpus": case(
        "create_vocab.py", VOCAB, "corpus.txt is empty (0 bytes)",
        prepare=_text("corpus.txt", "")),
    "vocab_output_is_a_folder": case(
        "create_vocab.py", VOCAB + ["--output_file={tmp}/vocab"],
        "--output_file=", "is a folder",
        prepare=lambda tmp: (_corpus(tmp), os.mkdir(os.path.join(tmp,
                                                                 "vocab")))),
    "vocab_counts_input_not_counts": case(
        "create_vocab.py", ["--counts_input={tmp}/corpus.txt",
                            "--output_file={tmp}/vocab.txt",
                            "--vocab_size=1100"],
        "corpus.txt, line 1", "--counts_output", prepare=_corpus),
    "vocab_direct_runner_unknown_option": case(
        "create_vocab.py", VOCAB + ["--runner=DirectRunner",
                                    "--direct_num_workerz=2"],
        "--direct_num_workerz=2", "PipelineOptions", prepare=_corpus),
    "vocab_direct_num_workers_not_a_number": case(
        "create_vocab.py", VOCAB + ["--runner=DirectRunner",
                                    "--direct_num_workers=two"],
        "--direct_num_workers", "'two'", prepare=_corpus),
    "vocab_beam_option_on_local_runner": case(
        "create_vocab.py", VOCAB + ["--runner=local",
                                    "--direct_running_mode=multi_processing"],
        "--direct_running_mode=multi_processing", "Beam --runner only",
        prepare=_corpus),
    "vocab_runner_with_counts_input": case(
        "create_vocab.py", ["--counts_input={tmp}/corpus.txt",
                            "--output_file={tmp}/vocab.txt",
                            "--runner=DirectRunner"],
        "--runner=DirectRunner", "--counts_input", prepare=_corpus),
    "vocab_ram_glob_matches_nothing": case(
        "create_vocab.py", VOCAB + ["--input_file=ram://none/*.txt"],
        "ram://none/*.txt matches no file"),
    # convert_checkpoint.py: Google's layout and Hugging Face's.
    "convert_without_output_dir": case(
        "convert_checkpoint.py", CONVERT[:1], "--output_dir"),
    "convert_from_not_a_layout": case(
        "convert_checkpoint.py", CONVERT + ["--from=onnx"], "--from=onnx",
        "google|hf"),
    "convert_google_checkpoint_from_hf": case(
        "convert_checkpoint.py", CONVERT + ["--from=hf"],
        "bert_model.ckpt has no config.json"),
    "convert_missing_input": case(
        "convert_checkpoint.py", CONVERT + ["--input={tmp}/none.ckpt"],
        "--input=", "none.ckpt is neither"),
    "convert_truncated_google_checkpoint": case(
        "convert_checkpoint.py",
        CONVERT + ["--input={tmp}/ckpt/bert_model.ckpt",
                   "--bert_config_file={MINILM}/bert_config.json",
                   "--vocab_file={MINILM}/vocab.txt"],
        "bert_model.ckpt cannot be read", "intact checkpoint",
        prepare=_damaged_checkpoint),
    "convert_google_config_of_another_width": case(
        "convert_checkpoint.py",
        CONVERT + ["--bert_config_file={tmp}/bert_config.json"],
        "bert/embeddings/word_embeddings", "[30522, 384]",
        prepare=lambda tmp: _config(tmp, hidden_size=256,
                                    num_attention_heads=8)),
    "convert_vocab_larger_than_embeddings": case(
        "convert_checkpoint.py", CONVERT + ["--vocab_file={tmp}/vocab.txt"],
        "--vocab_file=", "30572 tokens", "vocab_size=30522",
        prepare=lambda tmp: _text("vocab.txt", "".join(_uncased_head(
            30522)) + "".join("extra%d\n" % i for i in range(50)))(tmp)),
    "convert_cased_vocab_lower_cased": case(
        "convert_checkpoint.py",
        CONVERT + ["--vocab_file={CASED}", "--do_lower_case=True"],
        "--vocab_file=", "--do_lower_case=False"),
    "convert_output_dir_not_empty": case(
        "convert_checkpoint.py", CONVERT, "--output_dir=", "already holds",
        prepare=_text(os.path.join("out", "notes.txt"), "mine\n")),
    "convert_hf_config_not_json": case(
        "convert_checkpoint.py", CONVERT_HF, "config.json is not valid JSON",
        prepare=lambda tmp: _hf_folder(tmp, {"config.json": "{"})),
    "convert_hf_without_weights": case(
        "convert_checkpoint.py", CONVERT_HF, "has no model.safetensors",
        prepare=lambda tmp: _hf_folder(tmp, drop=("model.safetensors",))),
    "convert_hf_weights_not_safetensors": case(
        "convert_checkpoint.py", CONVERT_HF,
        "model.safetensors is not a readable safetensors file",
        prepare=lambda tmp: _hf_folder(tmp, {"model.safetensors": "text"})),
    "convert_hf_config_with_more_layers": case(
        "convert_checkpoint.py", CONVERT_HF,
        "lacks encoder.layer.6.attention.self.query.weight",
        prepare=lambda tmp: _hf_folder(
            tmp, {"config.json": _hf_config(num_hidden_layers=8)})),
    "convert_hf_with_google_only_flag": case(
        "convert_checkpoint.py",
        CONVERT_HF + ["--bert_config_file={MINILM}/bert_config.json"],
        "--bert_config_file applies to a Google checkpoint only",
        prepare=_hf_folder),
    "convert_hf_without_vocabulary": case(
        "convert_checkpoint.py", CONVERT_HF, "has no vocab.txt",
        prepare=lambda tmp: _hf_folder(tmp, drop=("vocab.txt",
                                                  "tokenizer.json"))),
    "convert_unknown_scheme": case(
        "convert_checkpoint.py", CONVERT + ["--input=foo://b/bert_model.ckpt"],
        "foo://b/bert_model.ckpt", "no file system for foo://"),
    # predictor.py: exports and input lines.
    "predictor_required_flag_misspelt": case(
        "predictor.py", ["--export_dr={tmp}", "--input={tmp}/input.txt"],
        "--export_dir", "is not a flag of this script", "--export_dr="),
    "predictor_folder_not_an_export": case(
        "predictor.py", PREDICT + ["--export_dir={tmp}"],
        "holds no saved_model.pb", "--export_dir"),
    "predictor_export_dir_is_a_file": case(
        "predictor.py", PREDICT + ["--export_dir={tmp}/input.txt"],
        "--export_dir=", "is not a folder",
        prepare=_text("input.txt", "A b.\tC d.\n")),
    "predictor_export_without_signature": case(
        "predictor.py", PREDICT + ["--export_dir={runs_no_signature}"],
        "no serving_default signature", "export the model again",
        prepare=_text("input.txt", "A b.\tC d.\n")),
    "predictor_export_without_run_info": case(
        "predictor.py", PREDICT + ["--export_dir={tmp}/export"],
        "has no assets.extra/run_info.json", prepare=_export_without_record),
    "predictor_threshold_on_single_label_model": case(
        "predictor.py", PREDICT + ["--threshold=0.3"],
        "--threshold applies to a multi-label classifier", "mrpc model",
        prepare=_text("input.txt", "A b.\tC d.\n")),
    "predictor_squad_line_to_classifier": case(
        "predictor.py", PREDICT + ["--input={tmp}/input.jsonl"],
        "input.jsonl:2: unknown field 'context'", "text_a, text_b",
        prepare=_text("input.jsonl", '{"text_a": "A b.", "text_b": "C."}\n'
                      '{"question": "Who?", "context": "Me."}\n')),
    "predictor_line_not_json": case(
        "predictor.py", PREDICT + ["--input={tmp}/input.jsonl"],
        "input.jsonl:1: not valid JSON",
        prepare=_text("input.jsonl", '{"text_a": "A b.",\n')),
    "predictor_input_not_utf8": case(
        "predictor.py", PREDICT, "input.txt:2: byte 0xe9", "UTF-8",
        prepare=_text("input.txt", b"A b.\tC d.\ncaf\xe9\tx\n")),
    "predictor_pair_model_given_one_text": case(
        "predictor.py", PREDICT, "input.txt:1: text_b is missing",
        prepare=_text("input.txt", "A b.\n")),
    "predictor_missing_input": case(
        "predictor.py", PREDICT, "--input=", "input.txt is not a file"),
    "predictor_empty_input_file": case(
        "predictor.py", PREDICT, "--input=", "input.txt holds no input",
        prepare=_text("input.txt", "")),
    "predictor_batch_size_0": case(
        "predictor.py", PREDICT + ["--batch_size=0"], "--batch_size=0",
        prepare=_text("input.txt", "A b.\tC d.\n")),
    "predictor_ram_export_missing": case(
        "predictor.py", PREDICT + ["--export_dir=ram://none/export"],
        "--export_dir=ram://none/export is not a folder"),
    # squad_evaluate.py: the SQuAD file, the predictions, its arguments.
    "squad_eval_missing_data_file": case(
        "squad_evaluate.py", ["{tmp}/none.json", "{tmp}/predictions.json"],
        "Data file", "none.json does not exist", prepare=_predictions()),
    "squad_eval_data_file_is_a_folder": case(
        "squad_evaluate.py", ["{tmp}", "{tmp}/predictions.json"],
        "is a folder", prepare=_predictions()),
    "squad_eval_data_not_utf8": case(
        "squad_evaluate.py", ["{tmp}/data.json", "{tmp}/predictions.json"],
        "data.json:1: byte 0xe9", "UTF-8",
        prepare=_data_and_predictions(b'{"data": "caf\xe9"}')),
    "squad_eval_data_without_data_list": case(
        "squad_evaluate.py", ["{tmp}/data.json", "{tmp}/predictions.json"],
        "no top-level \"data\" list",
        prepare=_data_and_predictions('{"version": "1.1"}')),
    "squad_eval_article_without_paragraphs": case(
        "squad_evaluate.py", ["{tmp}/data.json", "{tmp}/predictions.json"],
        "data[0] has no \"paragraphs\" list",
        prepare=_data_and_predictions('{"data": [{"title": "x"}]}')),
    "squad_eval_predictions_not_json": case(
        "squad_evaluate.py", SQUAD_EVAL, "predictions.json is not valid JSON",
        "line 2 column 5", prepare=_predictions('{"a": "b",\n "c"}')),
    "squad_eval_predictions_a_list": case(
        "squad_evaluate.py", SQUAD_EVAL, "must hold a JSON object",
        prepare=_predictions("[1, 2]")),
    "squad_eval_prediction_not_a_string": case(
        "squad_evaluate.py", SQUAD_EVAL, "'56be4db0acb8001400a502ec' maps to 3",
        prepare=_predictions('{"56be4db0acb8001400a502ec": 3}')),
    "squad_eval_version_not_a_choice": case(
        "squad_evaluate.py", SQUAD_EVAL + ["--version=3.0"], "--version",
        "'3.0'", prepare=_predictions()),
    "squad_eval_predictions_file_not_given": case(
        "squad_evaluate.py", [SQUAD_DEV], "required", "pred.json"),
    "squad_eval_out_file_in_missing_folder": case(
        "squad_evaluate.py", SQUAD_EVAL + ["--out-file={tmp}/none/eval.json"],
        "--out-file=", "none does not exist", prepare=_predictions()),
    "squad_eval_na_probs_with_version_1_1": case(
        "squad_evaluate.py", SQUAD_EVAL + [
            "--na-prob-file={tmp}/predictions.json", "--version=1.1"],
        "--na-prob-file", "--version=1.1", prepare=_predictions()),
    "squad_eval_unknown_scheme": case(
        "squad_evaluate.py", ["foo://bucket/dev.json",
                              "{tmp}/predictions.json"],
        "foo://bucket/dev.json", "no file system for foo://",
        prepare=_predictions()),
    # reproduce.py: the model folder, the data folders, the flags.
    "reproduce_model_folder_missing": case(
        "reproduce.py", REPRODUCE + ["--bert_dir={tmp}/uncased_L-2_H-64_A-2"],
        "bert_config.json does not exist", "--bert_dir"),
    "reproduce_casing_not_in_folder_name": case(
        "reproduce.py", REPRODUCE + ["--bert_dir={tmp}/model"],
        "Cannot tell the casing", "--do_lower_case",
        prepare=lambda tmp: os.symlink(MINILM, os.path.join(tmp, "model"))),
    "reproduce_unknown_task": case(
        "reproduce.py", REPRODUCE + ["--tasks=MRCP"], "--tasks",
        "unknown task 'MRCP'"),
    "reproduce_preset_not_a_choice": case(
        "reproduce.py", REPRODUCE + ["--preset=fast"], "--preset=fast"),
    "reproduce_learning_rates_not_numbers": case(
        "reproduce.py", REPRODUCE + ["--learning_rates=fast"],
        "--learning_rates=fast", "expected numbers"),
    "reproduce_misspelt_flag": case(
        "reproduce.py", REPRODUCE + ["--task=MRPC"], "'task'", "tasks"),
    "reproduce_stray_argument": case(
        "reproduce.py", REPRODUCE + ["MRPC"], "Unexpected arguments: MRPC"),
    "reproduce_squad_without_squad_dir": case(
        "reproduce.py", REPRODUCE + ["--tasks=SQuAD1.1"], "--squad_dir"),
    "reproduce_glue_dir_without_the_task": case(
        "reproduce.py", REPRODUCE + ["--glue_dir={tmp}/glue"],
        "MRPC/train.tsv does not exist"),
    "reproduce_device_not_a_gpu": case(
        "reproduce.py", REPRODUCE + ["--devices=gpu7"], "--devices=gpu7",
        "--devices=cpu"),
    "reproduce_output_dir_is_a_file": case(
        "reproduce.py", REPRODUCE + ["--output_dir={tmp}/results"],
        "--output_dir=", "is a file", prepare=_text("results", "x")),
    "reproduce_max_train_examples_0": case(
        "reproduce.py", REPRODUCE + ["--max_train_examples=0"],
        "--max_train_examples=0"),
    "reproduce_max_seq_length_beyond_positions": case(
        "reproduce.py", REPRODUCE + ["--max_seq_length=600"],
        "--max_seq_length=600", "max_position_embeddings=512",
        "at most 512"),
    "reproduce_extra_flags_length_beyond_positions": case(
        "reproduce.py", REPRODUCE + ["--extra_flags=--max_seq_length=600"],
        "--extra_flags's --max_seq_length=600", "at most 512"),
    "reproduce_extra_flags_length_not_a_number": case(
        "reproduce.py", REPRODUCE + ["--extra_flags=--max_seq_length=long"],
        "--extra_flags: --max_seq_length=long is not a whole number"),
    "reproduce_cased_vocab_for_an_uncased_folder": case(
        "reproduce.py", REPRODUCE + ["--vocab_file={CASED}"],
        "--vocab_file=", "is cased", "--do_lower_case=False"),
    "reproduce_unknown_scheme": case(
        "reproduce.py", REPRODUCE + ["--glue_dir=foo://bucket/glue"],
        "foo://bucket/glue/MRPC/train.tsv", "no file system for foo://"),
}


def build_shared(root, run_script):
  """Makes what the cases share under `root` (once per session): an
  export of the tiny MRPC model (root/export), and a copy of it whose
  saved_model.pb lacks the serving_default signature (root/no_signature)."""
  from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  paths = shared_paths(root)
  result = run_script("run_classifier.py", fill(
      TINY + ["--do_train", "--num_train_epochs=1",
              "--export_dir=" + paths["runs_export"]],
      out=os.path.join(root, "export_run")), 600)
  assert result.returncode == 0, result.stderr[-3000:]
  (model,) = os.listdir(paths["runs_export"])
  shutil.copytree(os.path.join(paths["runs_export"], model),
                  paths["runs_no_signature"])
  graph_file = os.path.join(paths["runs_no_signature"], "saved_model.pb")
  saved_model = saved_model_pb2.SavedModel()
  with open(graph_file, "rb") as f:
    saved_model.ParseFromString(f.read())
  for meta_graph in saved_model.meta_graphs:
    del meta_graph.signature_def["serving_default"]
  with open(graph_file, "wb") as f:
    f.write(saved_model.SerializeToString())


def shared_paths(root):
  """The paths `build_shared` made: "mrpc" and "squad" (finished runs),
  and each "runs_<name>" a case's arguments may name."""
  return {"mrpc": os.path.join(root, "mrpc"),
          "squad": os.path.join(root, "squad"),
          "runs_export": os.path.join(root, "export"),
          "runs_no_signature": os.path.join(root, "no_signature")}
