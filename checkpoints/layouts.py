# coding=utf-8
"""The names of the two checkpoint layouts convert_checkpoint.py converts
between, as its --from flag takes them.

Kept apart from checkpoints/conversion.py, which loads TensorFlow, so that
the command answers --help without loading it.
"""

GOOGLE = "google"
HF = "hf"
