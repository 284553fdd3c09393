"""Bad inputs to the training scripts, extract_features.py and
memory_plan.py, for the harness of tests/test_bad_inputs.py.

CASES maps a case's name to its Case: the script, its arguments (with
{tmp}, {out} and the asset names of `fill` to fill in), the parts its one
line must hold, and what to prepare in the case's folder first (a function
of the folder, or of the folder and the finished runs).
"""
import collections
import json
import os
import shutil


import pretraining_records

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ASSETS = os.path.join(os.path.dirname(REPO_ROOT), "shared", "assets")
UNCASED = os.path.join(ASSETS, "bert_vocab", "uncased", "vocab.txt")
CASED = os.path.join(ASSETS, "bert_vocab", "cased", "vocab.txt")
MINILM = os.path.join(ASSETS, "models", "minilm-l6-h384-uncased")
SQUAD_DEV = os.path.join(ASSETS, "squad", "v1.1", "dev-v1.1.json")
TINY_CONFIG = os.path.join(REPO_ROOT, "sample_data", "tiny_bert_config.json")
MRPC = os.path.join(REPO_ROOT, "sample_data", "mrpc_sample")
TIMEOUT = 300

# The TINY command (issue 23) with an output folder.
TINY = ["--task_name=MRPC", "--data_dir={MRPC}", "--vocab_file={UNCASED}",
        "--bert_config_file={TINY_CONFIG}", "--max_seq_length=32",
        "--train_batch_size=8", "--output_dir={out}"]
TRAIN = TINY + ["--do_train", "--num_train_epochs=1"]
SQUAD = ["--vocab_file={UNCASED}", "--bert_config_file={TINY_CONFIG}",
         "--max_seq_length=64", "--max_query_length=16", "--doc_stride=16",
         "--train_batch_size=4", "--output_dir={out}"]
EXTRACT = ["--input_file={tmp}/input.txt", "--output_file={out}/out.jsonl",
           "--vocab_file={MINILM}/vocab.txt",
           "--bert_config_file={MINILM}/bert_config.json",
           "--init_checkpoint={MINILM}/bert_model.ckpt",
           "--max_seq_length=16"]

# run_classifier.py on your own files in tmp (written by `_own_files`).
OWN_FLAGS = ["--vocab_file={UNCASED}", "--bert_config_file={TINY_CONFIG}",
             "--max_seq_length=32", "--train_batch_size=2",
             "--output_dir={out}"]
OWN = OWN_FLAGS + ["--train_file={tmp}/train.csv", "--do_train"]

# run_pretraining.py on records of 32 tokens and 5 predictions in
# tmp/records (written by `_records`).
PRETRAIN = ["--input_file={tmp}/records/*.tfrecord",
            "--bert_config_file={TINY_CONFIG}", "--max_seq_length=32",
            "--max_predictions_per_seq=5", "--train_batch_size=4",
            "--num_train_steps=2", "--num_warmup_steps=0",
            "--output_dir={out}"]
PRETRAIN_TRAIN = PRETRAIN + ["--do_train"]

Case = collections.namedtuple("Case", ["script", "args", "expect",
                                       "prepare", "stdin", "fault"])


def case(script, args, *expect, prepare=None, stdin=None, fault=False):
  """A Case: `script` run with `args` ends in one line holding each of
  `expect`; `prepare` fills the case's folder first; `stdin` is the text
  of its standard input (none by default). A `fault` (a full disk) is met
  once the run has started: its settings lines come first, and it ends
  with the status of a failure, not of a usage error."""
  return Case(script, args, expect, prepare, stdin, fault)


# ------------------------------------------------------- preparing files --


def _write(path, text, mode="w"):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, mode) as f:
    f.write(text)


def _mrpc_copy(tmp, train=None):
  """A copy of the MRPC sample in tmp/data; `train` replaces train.tsv."""
  data = os.path.join(tmp, "data")
  shutil.copytree(MRPC, data)
  if train is not None:
    _write(os.path.join(data, "train.tsv"), train,
           "wb" if isinstance(train, bytes) else "w")
  return data


def _own_files(tmp, dev_label=None, empty_text=False, only_yes=False):
  """tmp/train.csv (and dev.csv) of texts labeled yes / no; the dev file's
  second example labeled `dev_label`."""
  train = ["text,label", "A good day.,yes", "A bad day.,no",
           "Rain again.,no", "Sun at last.,yes"]
  if only_yes:
    train = [row.replace(",no", ",yes") for row in train]
  if empty_text:
    train[3] = '"  ",no'
  _write(os.path.join(tmp, "train.csv"), "\n".join(train) + "\n")
  if dev_label:
    _write(os.path.join(tmp, "dev.csv"), "text,label\nFine.,yes\nOdd.,%s\n"
           % dev_label)


def _lines(name):
  with open(os.path.join(MRPC, name), encoding="utf-8-sig") as f:
    return f.read().splitlines(keepends=True)


def _config(tmp, **changes):
  """MiniLM's config with `changes`, in tmp/bert_config.json."""
  with open(os.path.join(MINILM, "bert_config.json")) as f:
    config = json.load(f)
  config.update(changes)
  _write(os.path.join(tmp, "bert_config.json"), json.dumps(config))


def _tiny_config(tmp, **changes):
  with open(TINY_CONFIG) as f:
    config = json.load(f)
  config.update(changes)
  _write(os.path.join(tmp, "bert_config.json"), json.dumps(config))


def _squad_file(tmp, text=None, data=None):
  if text is None:
    text = json.dumps({"version": "1.1", "data": data})
  _write(os.path.join(tmp, "squad.json"), text)


def _squad_sample():
  """The first article of SQuAD v1.1 dev, its first two paragraphs."""
  with open(SQUAD_DEV, encoding="utf-8") as f:
    article = json.load(f)["data"][0]
  return [dict(article, paragraphs=article["paragraphs"][:2])]


def _damaged_checkpoint(tmp):
  """MiniLM's checkpoint with its .data file cut in half, in tmp/ckpt."""
  prefix = os.path.join(tmp, "ckpt", "bert_model.ckpt")
  os.makedirs(os.path.dirname(prefix))
  shutil.copy(os.path.join(MINILM, "bert_model.ckpt.index"),
              prefix + ".index")
  data = os.path.join(MINILM, "bert_model.ckpt.data-00000-of-00001")
  with open(data, "rb") as f:
    content = f.read()
  _write(prefix + ".data-00000-of-00001", content[:len(content) // 2], "wb")


def _records(tmp, name="data.tfrecord", seq_length=32, predictions=5,
             vocab_size=30522):
  """Pretraining records (create_pretraining_data.py's layout) in
  tmp/records/name."""
  path = os.path.join(tmp, "records", name)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  pretraining_records.write_records(path, pretraining_records.random_examples(
      4, seq_length, predictions, vocab_size, 0))


def _classifier_records(tmp):
  """A record of run_classifier.py's train.tf_record layout."""
  path = os.path.join(tmp, "records", "train.tfrecord")
  os.makedirs(os.path.dirname(path), exist_ok=True)
  example = pretraining_records.random_examples(1, 32, 5, 30522, 0)[0]
  pretraining_records.write_records(path, [{
      "input_ids": example["input_ids"], "input_mask": example["input_mask"],
      "segment_ids": example["segment_ids"], "label_ids": [1],
      "is_real_example": [1]}])


def _truncate(path, size):
  with open(path, "r+b") as f:
    f.truncate(size)


def _finished(tmp, runs):
  """A copy of the finished MRPC run as output folder."""
  shutil.copytree(runs["mrpc"], os.path.join(tmp, "out"))


def _finished_squad(tmp, runs):
  shutil.copytree(runs["squad"], os.path.join(tmp, "out"))


def _truncate_latest(tmp):
  out = os.path.join(tmp, "out")
  data = [name for name in os.listdir(out) if ".data-" in name]
  path = os.path.join(out, sorted(data)[-1])
  with open(path, "r+b") as f:
    f.truncate(os.path.getsize(path) // 2)


# ------------------------------------------------------------------ cases

CASES = {
    # Runs that did nothing and exited 0 (issue 23, item 2).
    "negative_epochs": case(
        "run_classifier.py", TRAIN + ["--do_eval", "--num_train_epochs=-1"],
        "--num_train_epochs=-1"),
    "zero_epochs": case(
        "run_classifier.py", TRAIN + ["--num_train_epochs=0"],
        "--num_train_epochs=0"),
    "epochs_too_few_for_a_step": case(
        "run_classifier.py", TRAIN + ["--num_train_epochs=0.01"],
        "no training step", "--num_train_epochs"),
    "header_only_train_tsv": case(
        "run_classifier.py", TRAIN + ["--data_dir={tmp}/data"],
        "train.tsv holds no examples",
        prepare=lambda tmp: _mrpc_copy(tmp, _lines("train.tsv")[0])),
    "max_seq_length_3_on_pairs": case(
        "run_classifier.py", TRAIN + ["--max_seq_length=3"],
        "--max_seq_length=3"),
    # Accepted nonsense (item 3).
    "negative_learning_rate": case(
        "run_classifier.py", TRAIN + ["--learning_rate=-1e-4"],
        "--learning_rate=-0.0001"),
    "nan_learning_rate": case(
        "run_classifier.py", TRAIN + ["--learning_rate=nan"],
        "--learning_rate=nan"),
    "warmup_proportion_5": case(
        "run_classifier.py", TRAIN + ["--warmup_proportion=5"],
        "--warmup_proportion=5"),
    "negative_warmup_proportion": case(
        "run_classifier.py", TRAIN + ["--warmup_proportion=-0.1"],
        "--warmup_proportion=-0.1"),
    "vocab_larger_than_config": case(
        "run_classifier.py",
        TRAIN + ["--bert_config_file={tmp}/bert_config.json"],
        "30522 tokens", "vocab_size=1000",
        prepare=lambda tmp: _tiny_config(tmp, vocab_size=1000)),
    "cased_vocab_lower_cased": case(
        "run_classifier.py", TRAIN + ["--vocab_file={CASED}"],
        "--vocab_file=", "cased", "--do_lower_case=False"),
    "uncased_vocab_not_lower_cased": case(
        "run_classifier.py", TRAIN + ["--do_lower_case=False"],
        "uncased", "--do_lower_case=True"),
    "cased_google_folder_lower_cased": case(
        "run_classifier.py",
        TRAIN + ["--init_checkpoint={tmp}/cased_L-12_H-768_A-12/"
                 "bert_model.ckpt"], "--do_lower_case=False"),
    "config_with_more_layers_than_checkpoint": case(
        "run_classifier.py",
        TRAIN + ["--bert_config_file={tmp}/bert_config.json",
                 "--init_checkpoint={MINILM}/bert_model.ckpt"],
        "bert/encoder/layer_6/", "--bert_config_file",
        prepare=lambda tmp: _config(tmp, num_hidden_layers=8)),
    "config_with_other_hidden_size": case(
        "run_classifier.py",
        TRAIN + ["--bert_config_file={tmp}/bert_config.json",
                 "--init_checkpoint={MINILM}/bert_model.ckpt"],
        "bert/embeddings/word_embeddings", "[30522, 384]",
        prepare=lambda tmp: _config(tmp, hidden_size=256,
                                    intermediate_size=1024,
                                    num_attention_heads=8)),
    # Your own files (tasks/labeled_files.py): refused before training.
    "own_dev_label_not_in_training": case(
        "run_classifier.py", OWN + ["--do_eval", "--dev_file={tmp}/dev.csv"],
        "dev.csv:3: label 'spam' is not one of the model's labels (no, "
        "yes). Train with a file that has it, or add it to --labels.",
        prepare=lambda tmp: _own_files(tmp, dev_label="spam")),
    "own_regression_label_not_a_number": case(
        "run_classifier.py", OWN + ["--problem_type=regression"],
        "train.csv:2: label \"yes\" is not a number.",
        prepare=_own_files),
    "own_missing_column": case(
        "run_classifier.py", OWN + ["--text_a_column=sentence"],
        "train.csv:1: the header has no column 'sentence' (it has 'text', "
        "'label'). Pass --text_a_column with one of them.",
        prepare=_own_files),
    "own_empty_text": case(
        "run_classifier.py", OWN, "train.csv:4: text_a 'text' is empty.",
        prepare=lambda tmp: _own_files(tmp, empty_text=True)),
    "own_eval_without_dev_file": case(
        "run_classifier.py", OWN + ["--do_eval"],
        "--do_eval needs --dev_file", prepare=_own_files),
    "own_one_label": case(
        "run_classifier.py", OWN, "train.csv has one label, 'yes'; a "
        "classifier needs two or more.",
        prepare=lambda tmp: _own_files(tmp, only_yes=True)),
    "own_tune_threshold_of_one_label_per_example": case(
        "run_classifier.py", OWN + ["--tune_threshold", "--do_eval",
                                    "--dev_file={tmp}/train.csv"],
        "--tune_threshold applies to a multi-label problem; this one is "
        "single_label.", prepare=_own_files),
    "own_files_with_data_dir": case(
        "run_classifier.py", OWN + ["--data_dir={MRPC}"],
        "--data_dir reads GLUE's files", prepare=_own_files),
    "own_predict_without_a_trained_run": case(
        "run_classifier.py", [
            "--vocab_file={MINILM}/vocab.txt", "--do_predict",
            "--bert_config_file={MINILM}/bert_config.json",
            "--init_checkpoint={MINILM}/bert_model.ckpt",
            "--output_dir={out}", "--predict_file={tmp}/train.csv"],
        "Cannot tell the model's labels", "--train_file",
        prepare=_own_files),
    "own_pos_weight_per_label_count": case(
        "run_classifier.py", OWN + ["--pos_weight=1,2,3"],
        "--pos_weight gives 3 weights for 2 labels", prepare=_own_files),
    "fp16_on_cpu": case(
        "run_classifier.py", TRAIN + ["--precision=fp16"],
        "--precision=fp16", "--precision=bf16"),
    "resume_with_another_max_seq_length": case(
        "run_classifier.py", TRAIN + ["--max_seq_length=48"],
        "another --max_seq_length", "run_info.json", prepare=_finished),
    "resume_with_another_vocab": case(
        "run_classifier.py", TRAIN + ["--vocab_file={tmp}/vocab.txt"],
        "another vocabulary",
        prepare=lambda tmp, runs: (_finished(tmp, runs), _write(
            os.path.join(tmp, "vocab.txt"),
            "".join(_uncased_head(2000))))),
    "run_classifier_in_run_squad_output_dir": case(
        "run_classifier.py", TRAIN, "another task", "task='squad'",
        prepare=_finished_squad),
    "run_squad_in_run_classifier_output_dir": case(
        "run_squad.py", SQUAD + ["--do_train", "--train_file={tmp}/squad.json"],
        "another task", "task='mrpc'",
        prepare=lambda tmp, runs: (_finished(tmp, runs),
                                   _squad_file(tmp, data=_squad_sample()))),
    "another_task_in_finished_run": case(
        "run_classifier.py",
        TINY + ["--do_eval", "--task_name=RTE", "--data_dir={tmp}/rte"],
        "another task", "task='mrpc'",
        prepare=lambda tmp, runs: (_finished(tmp, runs), _write(
            os.path.join(tmp, "rte", "dev.tsv"),
            "index\tsentence1\tsentence2\tlabel\n0\tA b.\tC d.\tentailment\n"
        ))),
    # Crashes (item 4).
    "max_seq_length_0": case(
        "run_classifier.py", TRAIN + ["--max_seq_length=0"],
        "--max_seq_length=0"),
    "max_seq_length_beyond_positions": case(
        "run_classifier.py", TRAIN + ["--max_seq_length=129"],
        "--max_seq_length=129", "max_position_embeddings=128"),
    "train_batch_size_0": case(
        "run_classifier.py", TRAIN + ["--train_batch_size=0"],
        "--train_batch_size=0"),
    "eval_batch_size_0": case(
        "run_classifier.py", TINY + ["--do_eval", "--eval_batch_size=0"],
        "--eval_batch_size=0"),
    "predict_batch_size_0": case(
        "run_classifier.py", TRAIN + ["--predict_batch_size=0"],
        "--predict_batch_size=0"),
    "train_tsv_not_utf8": case(
        "run_classifier.py", TRAIN + ["--data_dir={tmp}/data"],
        "train.tsv:3:", "UTF-8",
        prepare=lambda tmp: _mrpc_copy(tmp, "".join(_lines("train.tsv")[:2])
                                       .encode("utf-8") +
                                       b"1\t1\t2\tCaf\xe9 au lait.\tA.\n")),
    "truncated_init_checkpoint": case(
        "run_classifier.py",
        TRAIN + ["--bert_config_file={MINILM}/bert_config.json",
                 "--init_checkpoint={tmp}/ckpt/bert_model.ckpt"],
        "bert_model.ckpt.data-00000-of-00001", "copy the checkpoint again",
        prepare=_damaged_checkpoint),
    "truncated_resume_checkpoint": case(
        "run_classifier.py", TRAIN,
        "the checkpoint of --output_dir", "copy the checkpoint again",
        prepare=lambda tmp, runs: (_finished(tmp, runs),
                                   _truncate_latest(tmp))),
    "output_dir_is_a_file": case(
        "run_classifier.py", TRAIN + ["--output_dir={tmp}/file"],
        "--output_dir=", "is a file",
        prepare=lambda tmp: _write(os.path.join(tmp, "file"), "x")),
    "output_dir_under_a_file": case(
        "run_classifier.py", TRAIN + ["--output_dir={tmp}/file/out"],
        "--output_dir=", "cannot be created",
        prepare=lambda tmp: _write(os.path.join(tmp, "file"), "x")),
    "full_disk_while_writing_features": case(
        "run_classifier.py", TRAIN, "No space left on device",
        "--output_dir", fault=True,
        prepare=lambda tmp: (os.makedirs(os.path.join(tmp, "out")), os.symlink(
            "/dev/full", os.path.join(tmp, "out", "train.tf_record.tmp")))),
    "config_not_json": case(
        "run_classifier.py",
        TRAIN + ["--bert_config_file={tmp}/bert_config.json"],
        "--bert_config_file=",
        prepare=lambda tmp: _write(os.path.join(tmp, "bert_config.json"),
                                   "{\"hidden_size\": 64,")),
    "config_with_misspelt_key": case(
        "run_classifier.py",
        TRAIN + ["--bert_config_file={tmp}/bert_config.json"],
        "bert_config.json has the unknown key 'hiden_size'; did you mean "
        "'hidden_size'?",
        prepare=lambda tmp: _config(tmp, hiden_size=384)),
    "missing_config": case(
        "run_classifier.py", TRAIN + ["--bert_config_file={tmp}/none.json"],
        "--bert_config_file=", "not found"),
    "missing_vocab": case(
        "run_classifier.py", TRAIN + ["--vocab_file={tmp}/none.txt"],
        "--vocab_file=", "not found"),
    "vocab_not_utf8": case(
        "run_classifier.py", TRAIN + ["--vocab_file={tmp}/vocab.txt"],
        "--vocab_file=", "UTF-8",
        prepare=lambda tmp: _write(os.path.join(tmp, "vocab.txt"),
                                   b"[PAD]\n[UNK]\ncaf\xe9\n", "wb")),
    "spm_model_not_a_model": case(
        "run_classifier.py", TRAIN + ["--spm_model_file={tmp}/spm.model"],
        "--spm_model_file=", "SentencePiece",
        prepare=lambda tmp: _write(os.path.join(tmp, "spm.model"), "text")),
    "init_checkpoint_is_a_directory": case(
        "run_classifier.py", TRAIN + ["--init_checkpoint={MINILM}"],
        "--init_checkpoint=", "prefix"),
    # Misleading (item 5).
    "empty_train_tsv": case(
        "run_classifier.py", TRAIN + ["--data_dir={tmp}/data"],
        "train.tsv is empty", prepare=lambda tmp: _mrpc_copy(tmp, "")),
    "cola_task_on_mrpc_data": case(
        "run_classifier.py", TRAIN + ["--task_name=CoLA"],
        "train.tsv:1:", "--task_name"),
    "missing_test_tsv_found_before_training": case(
        "run_classifier.py",
        TRAIN + ["--data_dir={tmp}/data", "--do_eval", "--do_predict"],
        "test.tsv does not exist",
        prepare=lambda tmp: os.remove(os.path.join(_mrpc_copy(tmp),
                                                   "test.tsv"))),
    "stray_tab_names_the_line": case(
        "run_classifier.py", TRAIN + ["--data_dir={tmp}/data"],
        "train.tsv:4:", "found 6 columns, expected 5",
        prepare=lambda tmp: _mrpc_copy(
            tmp, "".join(_lines("train.tsv")[:3]) +
            "1\t1\t2\tA\ttab.\tB.\n")),
    "unknown_label_names_the_line": case(
        "run_classifier.py", TRAIN + ["--data_dir={tmp}/data", "--do_eval"],
        "dev.tsv:2:", "label '7'",
        prepare=lambda tmp: _write(
            os.path.join(_mrpc_copy(tmp), "dev.tsv"),
            _lines("dev.tsv")[0] + "7\t1\t2\tA.\tB.\n")),
    # Flags (item 6 and the shared set-up).
    "nothing_to_do": case(
        "run_classifier.py", TINY, "--do_train"),
    "unknown_task": case(
        "run_classifier.py", TRAIN + ["--task_name=MRCP"],
        "--task_name=MRCP", "mrpc"),
    "missing_data_dir": case(
        "run_classifier.py", TRAIN + ["--data_dir={tmp}/none"],
        "--data_dir="),
    "required_flag_missing": case(
        "run_classifier.py", [a for a in TRAIN if "task_name" not in a],
        "--task_name"),
    "unknown_flag": case(
        "run_classifier.py", TRAIN + ["--num_train_epoch=2"],
        "num_train_epoch"),
    "flag_not_an_integer": case(
        "run_classifier.py", TRAIN + ["--train_batch_size=eight"],
        "--train_batch_size"),
    "precision_not_a_choice": case(
        "run_classifier.py", TRAIN + ["--precision=fp8"], "--precision"),
    "use_tpu": case(
        "run_classifier.py", TRAIN + ["--use_tpu"], "--use_tpu"),
    "tpu_name": case(
        "run_classifier.py", TRAIN + ["--tpu_name=grpc://1.2.3.4"],
        "--tpu_name"),
    "save_checkpoints_steps_0": case(
        "run_classifier.py", TRAIN + ["--save_checkpoints_steps=0"],
        "--save_checkpoints_steps=0"),
    "log_step_count_steps_0": case(
        "run_classifier.py", TRAIN + ["--log_step_count_steps=0"],
        "--log_step_count_steps=0"),
    "accumulation_steps_0": case(
        "run_classifier.py", TRAIN + ["--num_accumulation_steps=0"],
        "--num_accumulation_steps=0"),
    "accumulation_steps_not_dividing_batch": case(
        "run_classifier.py", TRAIN + ["--num_accumulation_steps=3"],
        "--num_accumulation_steps=3", "--train_batch_size=8"),
    "micro_batch_not_dividing_batch": case(
        "run_classifier.py", TRAIN + ["--micro_batch_size=3"],
        "--micro_batch_size=3"),
    "micro_batch_not_a_number": case(
        "run_classifier.py", TRAIN + ["--micro_batch_size=four"],
        "--micro_batch_size=four"),
    "micro_batch_contradicts_accumulation": case(
        "run_classifier.py",
        TRAIN + ["--micro_batch_size=4", "--num_accumulation_steps=4"],
        "--num_accumulation_steps=4"),
    "device_memory_nan": case(
        "run_classifier.py", TRAIN + ["--device_memory_gb=nan"],
        "--device_memory_gb=nan"),
    "device_memory_negative": case(
        "run_classifier.py", TRAIN + ["--device_memory_gb=-2"],
        "--device_memory_gb=-2"),
    "devices_without_mirrored": case(
        "run_classifier.py", TRAIN + ["--devices=/cpu:0,/cpu:1"],
        "--devices=/cpu:0,/cpu:1", "--distribution=mirrored"),
    "multi_worker_without_tf_config": case(
        "run_classifier.py", TRAIN + ["--distribution=multi_worker"],
        "TF_CONFIG"),
    "nothing_to_evaluate": case(
        "run_classifier.py", TINY + ["--do_eval"], "Nothing to evaluate",
        "--init_checkpoint"),
    # run_squad.py.
    "squad_missing_train_file": case(
        "run_squad.py", SQUAD + ["--do_train", "--train_file={tmp}/no.json"],
        "no.json does not exist"),
    "squad_train_without_train_file": case(
        "run_squad.py", SQUAD + ["--do_train"], "--train_file"),
    "squad_unterminated_json": case(
        "run_squad.py", SQUAD + ["--do_train", "--train_file={tmp}/squad.json"],
        "squad.json is not valid JSON (Unterminated string starting at: "
        "line 2 column 13",
        prepare=lambda tmp: _squad_file(tmp, "{\"data\": [\n  {\"title\": "
                                        "\"abc}]}")),
    "squad_json_not_utf8": case(
        "run_squad.py", SQUAD + ["--do_train", "--train_file={tmp}/squad.json"],
        "squad.json:1: byte 0xe9 at column 14 is not UTF-8",
        prepare=lambda tmp: _write(os.path.join(tmp, "squad.json"),
                                   b"{\"data\": \"caf\xe9\"}", "wb")),
    "squad_without_questions": case(
        "run_squad.py", SQUAD + ["--do_train", "--train_file={tmp}/squad.json"],
        "--train_file=", "holds no questions",
        prepare=lambda tmp: _squad_file(tmp, data=[])),
    "squad_without_answers_field": case(
        "run_squad.py", SQUAD + ["--do_train", "--train_file={tmp}/squad.json"],
        "question id 'q1'", "\"answers\"",
        prepare=lambda tmp: _squad_file(tmp, data=[{"paragraphs": [{
            "context": "A b c.", "qas": [{"id": "q1", "question": "A?"}]}]}])),
    "squad_impossible_without_v2": case(
        "run_squad.py", SQUAD + ["--do_train", "--train_file={tmp}/squad.json"],
        "--version_2_with_negative",
        prepare=lambda tmp: _squad_file(tmp, data=[{"paragraphs": [{
            "context": "A b c.", "qas": [{"id": "q1", "question": "A?",
                                          "is_impossible": True,
                                          "answers": []}]}]}])),
    "squad_doc_stride_too_large": case(
        "run_squad.py", SQUAD + ["--do_train", "--doc_stride=60",
                                 "--train_file={tmp}/squad.json"],
        "--doc_stride=60",
        prepare=lambda tmp: _squad_file(tmp, data=_squad_sample())),
    "squad_query_leaves_no_room": case(
        "run_squad.py", SQUAD + ["--do_train", "--max_query_length=61",
                                 "--train_file={tmp}/squad.json"],
        "--max_query_length=61",
        prepare=lambda tmp: _squad_file(tmp, data=_squad_sample())),
    "squad_n_best_size_0": case(
        "run_squad.py", SQUAD + ["--do_train", "--n_best_size=0",
                                 "--train_file={tmp}/squad.json"],
        "--n_best_size=0",
        prepare=lambda tmp: _squad_file(tmp, data=_squad_sample())),
    "squad_negative_learning_rate": case(
        "run_squad.py", SQUAD + ["--do_train", "--learning_rate=-3e-5",
                                 "--train_file={tmp}/squad.json"],
        "--learning_rate=-3e-05",
        prepare=lambda tmp: _squad_file(tmp, data=_squad_sample())),
    # extract_features.py.
    "extract_empty_input_file": case(
        "extract_features.py", EXTRACT, "--input_file=", "holds no text",
        prepare=lambda tmp: _write(os.path.join(tmp, "input.txt"), "")),
    "extract_missing_input_file": case(
        "extract_features.py", EXTRACT, "input.txt", "--input_file"),
    "extract_input_not_utf8": case(
        "extract_features.py", EXTRACT, "input.txt:2", "UTF-8",
        prepare=lambda tmp: _write(os.path.join(tmp, "input.txt"),
                                   b"Hello.\ncaf\xe9\n", "wb")),
    "extract_layer_out_of_range": case(
        "extract_features.py", EXTRACT + ["--layers=-1,-7"], "--layers=-1,-7",
        prepare=lambda tmp: _write(os.path.join(tmp, "input.txt"), "Hi.\n")),
    "extract_max_seq_length_2": case(
        "extract_features.py", EXTRACT + ["--max_seq_length=2"],
        "--max_seq_length=2",
        prepare=lambda tmp: _write(os.path.join(tmp, "input.txt"), "Hi.\n")),
    "extract_npz_without_pooling": case(
        "extract_features.py", EXTRACT + ["--output_file={out}/vectors.npz"],
        "--pooling", ".npz",
        prepare=lambda tmp: _write(os.path.join(tmp, "input.txt"), "Hi.\n")),
    "extract_pooling_into_json_lines": case(
        "extract_features.py", EXTRACT + ["--pooling=mean"], "--pooling=mean",
        prepare=lambda tmp: _write(os.path.join(tmp, "input.txt"), "Hi.\n")),
    "extract_unknown_pooling": case(
        "extract_features.py", EXTRACT + ["--pooling=max"], "--pooling",
        prepare=lambda tmp: _write(os.path.join(tmp, "input.txt"), "Hi.\n")),
    "extract_batch_size_0": case(
        "extract_features.py", EXTRACT + ["--batch_size=0"], "--batch_size=0",
        prepare=lambda tmp: _write(os.path.join(tmp, "input.txt"), "Hi.\n")),
    "extract_truncated_checkpoint": case(
        "extract_features.py",
        EXTRACT + ["--init_checkpoint={tmp}/ckpt/bert_model.ckpt"],
        "bert_model.ckpt.data-00000-of-00001",
        prepare=lambda tmp: (_damaged_checkpoint(tmp), _write(
            os.path.join(tmp, "input.txt"), "Hi.\n"))),
    "extract_config_with_more_layers": case(
        "extract_features.py",
        EXTRACT + ["--bert_config_file={tmp}/bert_config.json"],
        "bert/encoder/layer_6/",
        prepare=lambda tmp: (_config(tmp, num_hidden_layers=7), _write(
            os.path.join(tmp, "input.txt"), "Hi.\n"))),
    "extract_cased_vocab_lower_cased": case(
        "extract_features.py", EXTRACT + ["--vocab_file={CASED}"],
        "--do_lower_case=False",
        prepare=lambda tmp: _write(os.path.join(tmp, "input.txt"), "Hi.\n")),
    "extract_output_under_a_file": case(
        "extract_features.py", EXTRACT + ["--output_file={tmp}/f/out.jsonl"],
        "--output_file=", "cannot be created",
        prepare=lambda tmp: (_write(os.path.join(tmp, "f"), "x"), _write(
            os.path.join(tmp, "input.txt"), "Hi.\n"))),
    "extract_use_tpu": case(
        "extract_features.py", EXTRACT + ["--use_tpu"], "--use_tpu"),
    # run_pretraining.py.
    "pretrain_nothing_to_do": case(
        "run_pretraining.py", PRETRAIN, "--do_train", "--do_eval",
        prepare=_records),
    "pretrain_input_matches_no_file": case(
        "run_pretraining.py", PRETRAIN_TRAIN + [
            "--input_file={tmp}/records/*.tfrecord,{tmp}/none-*.tfrecord"],
        "--input_file:", "none-*.tfrecord", "matches no file",
        prepare=_records),
    "pretrain_records_of_another_max_seq_length": case(
        "run_pretraining.py", PRETRAIN_TRAIN,
        "data.tfrecord", "64 input_ids values", "--max_seq_length=32",
        "--max_seq_length=64",
        prepare=lambda tmp: _records(tmp, seq_length=64)),
    "pretrain_records_of_another_max_predictions": case(
        "run_pretraining.py", PRETRAIN_TRAIN,
        "data.tfrecord", "--max_predictions_per_seq=5",
        "--max_predictions_per_seq=8",
        prepare=lambda tmp: _records(tmp, predictions=8)),
    "pretrain_second_file_of_another_length": case(
        "run_pretraining.py", PRETRAIN_TRAIN, "b.tfrecord",
        "--max_seq_length=48",
        prepare=lambda tmp: (_records(tmp, "a.tfrecord"),
                             _records(tmp, "b.tfrecord", seq_length=48))),
    "pretrain_text_file_as_records": case(
        "run_pretraining.py", PRETRAIN_TRAIN, "notes.tfrecord",
        "is not a TFRecord file",
        prepare=lambda tmp: _write(os.path.join(tmp, "records",
                                                "notes.tfrecord"),
                                   "Some text, not records.\n" * 20)),
    "pretrain_truncated_record_file": case(
        "run_pretraining.py", PRETRAIN_TRAIN, "data.tfrecord",
        "cut short or damaged",
        prepare=lambda tmp: (_records(tmp), _truncate(os.path.join(
            tmp, "records", "data.tfrecord"), 100))),
    "pretrain_empty_record_file": case(
        "run_pretraining.py", PRETRAIN_TRAIN, "empty.tfrecord",
        "holds no records",
        prepare=lambda tmp: _write(os.path.join(tmp, "records",
                                                "empty.tfrecord"), "")),
    "pretrain_classifier_records": case(
        "run_pretraining.py", PRETRAIN_TRAIN, "train.tfrecord",
        "no feature masked_lm_positions", "create_pretraining_data.py",
        prepare=_classifier_records),
    "pretrain_token_ids_beyond_vocab": case(
        "run_pretraining.py",
        PRETRAIN_TRAIN + ["--bert_config_file={tmp}/bert_config.json"],
        "data.tfrecord", "vocab_size=1000", "another vocabulary",
        prepare=lambda tmp: (_records(tmp), _tiny_config(tmp,
                                                         vocab_size=1000))),
    "pretrain_max_predictions_0": case(
        "run_pretraining.py", PRETRAIN_TRAIN + ["--max_predictions_per_seq=0"],
        "--max_predictions_per_seq=0", prepare=_records),
    "pretrain_max_predictions_beyond_length": case(
        "run_pretraining.py",
        PRETRAIN_TRAIN + ["--max_predictions_per_seq=33"],
        "--max_predictions_per_seq=33", "--max_seq_length=32",
        prepare=_records),
    "pretrain_num_train_steps_0": case(
        "run_pretraining.py", PRETRAIN_TRAIN + ["--num_train_steps=0"],
        "--num_train_steps=0", prepare=_records),
    "pretrain_warmup_beyond_training": case(
        "run_pretraining.py", PRETRAIN_TRAIN + ["--num_warmup_steps=3"],
        "--num_warmup_steps=3", "--num_train_steps=2", prepare=_records),
    "pretrain_max_eval_steps_0": case(
        "run_pretraining.py", PRETRAIN_TRAIN + ["--do_eval",
                                                "--max_eval_steps=0"],
        "--max_eval_steps=0", prepare=_records),
    "pretrain_eval_all_without_do_eval": case(
        "run_pretraining.py", PRETRAIN_TRAIN + ["--eval_all_checkpoints"],
        "--eval_all_checkpoints", "--do_eval", prepare=_records),
    "pretrain_negative_learning_rate": case(
        "run_pretraining.py", PRETRAIN_TRAIN + ["--learning_rate=-1e-4"],
        "--learning_rate=-0.0001", prepare=_records),
    "pretrain_nothing_to_evaluate": case(
        "run_pretraining.py", PRETRAIN + ["--do_eval"], "Nothing to evaluate",
        "--init_checkpoint", prepare=_records),
    "pretrain_config_with_more_layers_than_checkpoint": case(
        "run_pretraining.py",
        PRETRAIN_TRAIN + ["--bert_config_file={tmp}/bert_config.json",
                          "--init_checkpoint={MINILM}/bert_model.ckpt"],
        "bert/encoder/layer_6/", "--bert_config_file",
        prepare=lambda tmp: (_records(tmp),
                             _config(tmp, num_hidden_layers=8))),
    "pretrain_in_run_classifier_output_dir": case(
        "run_pretraining.py", PRETRAIN_TRAIN, "another task", "task='mrpc'",
        prepare=lambda tmp, runs: (_finished(tmp, runs), _records(tmp))),
    "pretrain_use_tpu": case(
        "run_pretraining.py", PRETRAIN_TRAIN + ["--use_tpu"], "--use_tpu",
        prepare=_records),
    # memory_plan.py.
    "plan_nan_memory": case(
        "memory_plan.py", ["--bert_config_file={TINY_CONFIG}",
                           "--gpu_memory_gb=nan"], "--gpu_memory_gb=nan"),
    "plan_infinite_memory": case(
        "memory_plan.py", ["--bert_config_file={TINY_CONFIG}",
                           "--gpu_memory_gb=inf"], "--gpu_memory_gb=inf"),
    "plan_negative_memory": case(
        "memory_plan.py", ["--bert_config_file={TINY_CONFIG}",
                           "--gpu_memory_gb=-12"], "--gpu_memory_gb=-12"),
    "plan_missing_config": case(
        "memory_plan.py", ["--bert_config_file={tmp}/none.json"],
        "--bert_config_file="),
    "plan_lengths_not_numbers": case(
        "memory_plan.py", ["--bert_config_file={TINY_CONFIG}",
                           "--max_seq_length=128,long"], "--max_seq_length"),
    "plan_length_beyond_positions": case(
        "memory_plan.py", ["--bert_config_file={TINY_CONFIG}",
                           "--max_seq_length=512"], "--max_seq_length=512"),
    "plan_batch_0": case(
        "memory_plan.py", ["--bert_config_file={TINY_CONFIG}",
                           "--max_seq_length=128", "--train_batch_size=0"],
        "--train_batch_size=0"),
    "plan_predictions_beyond_length": case(
        "memory_plan.py", ["--bert_config_file={TINY_CONFIG}",
                           "--max_seq_length=32,128",
                           "--max_predictions_per_seq=40"],
        "--max_predictions_per_seq=40", "--max_seq_length=32"),
    "plan_config_not_json": case(
        "memory_plan.py", ["--bert_config_file={tmp}/bert_config.json"],
        "--bert_config_file=", "not valid JSON",
        prepare=lambda tmp: _write(os.path.join(tmp, "bert_config.json"),
                                   "{")),
}


def _uncased_head(count):
  with open(UNCASED, encoding="utf-8") as f:
    return [next(f) for _ in range(count)]


def fill(args, **paths):
  values = dict(MRPC=MRPC, UNCASED=UNCASED, CASED=CASED, MINILM=MINILM,
                TINY_CONFIG=TINY_CONFIG, **paths)
  return [arg.format(**values) for arg in args]
