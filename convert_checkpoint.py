# coding=utf-8
"""Converts BERT models between Google's checkpoint layout and Hugging Face's.

  python convert_checkpoint.py --input=DIR_OR_PREFIX --output_dir=DIR

The layout of --input is recognized (or given with --from) and the output
is the other one, written into a new folder that appears only when
complete (a second conversion into the same --output_dir meanwhile is
refused): Google's (a checkpoint, bert_config.json, vocab.txt and this
project's run_info.json) or Hugging Face's (config.json, model.safetensors,
vocab.txt, tokenizer_config.json). The encoder, the pretraining heads and
the classifier and SQuAD heads convert exactly; optimizer state stays
behind. checkpoints/conversion.py does the work; docs/interop.md has the
details.
"""

from absl import flags

from checkpoints import layouts
from userio import cli
from userio import verbosity


def define_flags(flag_values=flags.FLAGS):
  """The command's flags (called from `__main__` only)."""
  flags.DEFINE_string(
      "input", None, "The model to convert: a Hugging Face folder "
      "(config.json, model.safetensors, vocab.txt) or a Google checkpoint "
      "prefix (.../bert_model.ckpt) or folder (its latest checkpoint).",
      flag_values=flag_values)
  flags.DEFINE_string(
      "output_dir", None, "New or empty folder for the converted model, in "
      "the other layout.", flag_values=flag_values)
  flags.DEFINE_enum(
      "from", None, [layouts.GOOGLE, layouts.HF], "Layout of --input; "
      "recognized when not given.", flag_values=flag_values)
  flags.DEFINE_string(
      "bert_config_file", None, "Google input only: its bert_config.json "
      "(default: the one beside the checkpoint).", flag_values=flag_values)
  flags.DEFINE_string(
      "vocab_file", None, "Google input only: its vocab.txt (default: the "
      "one beside the checkpoint).", flag_values=flag_values)
  flags.DEFINE_bool(
      "do_lower_case", None, "Google input only: the tokenizer's casing "
      "(default: run_info.json's beside the checkpoint, else told from the "
      "vocabulary).", flag_values=flag_values)
  flags.mark_flags_as_required(["input", "output_dir"],
                               flag_values=flag_values)


# --help is answered here, before TensorFlow loads (seconds).
cli.answer_help(__name__, define_flags)

# pylint: disable=g-import-not-at-top,wrong-import-position
from checkpoints import conversion
# pylint: enable=g-import-not-at-top,wrong-import-position


def main(_):
  verbosity.start_logging()
  values = flags.FLAGS
  with conversion.lock_output_dir(values.output_dir):
    conversion.convert(values.input, values.output_dir, values["from"].value,
                       bert_config_file=values.bert_config_file,
                       vocab_file=values.vocab_file,
                       do_lower_case=values.do_lower_case)


if __name__ == "__main__":
  define_flags()
  cli.run(main)
