# coding=utf-8
"""The text corpus BERT is pre-trained on, as the scripts read it.

  text_files  the files --input_file names, their lines, the documents
              they hold (an empty line between two) and shards: byte ranges
              of a file cut at documents' ends, decided from the files'
              sizes alone; create_pretraining_data.py builds its records
              from them and create_vocab.py learns its vocabulary from the
              same text, cut into the same shards.
  shard_job   a job over the shards (work, add up, finish once) and its
              run on this machine's processes (--runner=local).
  beam_pipeline
              the same job as an Apache Beam pipeline, on any Beam runner;
              the only module that imports apache_beam, and only then.
  record_sidecars
              the sidecar of a records file: the vocabulary (sha256, size)
              and settings it was made with, and run_pretraining.py's check
              that they fit the model.
  workers     forked processes that work through the shards, results in
              the shards' order; they end with the run, however it ends.
"""
