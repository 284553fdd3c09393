# coding=utf-8
"""The text corpus BERT is pre-trained on, as the scripts read it.

  text_files  the files --input_file names, their lines, the documents
              they hold (an empty line between two) and shards of whole
              documents; create_pretraining_data.py builds its records from
              them and create_vocab.py learns its vocabulary from the same
              text, cut into the same shards.
  record_sidecars
              the sidecar of a records file: the vocabulary (sha256, size)
              and settings it was made with, and run_pretraining.py's check
              that they fit the model.
  workers     forked processes that work through the shards, results in
              the shards' order; they end with the run, however it ends.
"""
