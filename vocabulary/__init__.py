# coding=utf-8
"""Learning a WordPiece vocabulary from a text corpus (create_vocab.py's
library; corpus/text_files.py reads the corpus).

  word_counts        the corpus's words as tokenization.BasicTokenizer
                     splits them, counted shard by shard; count files to
                     learn again without counting
  vocab_job          create_vocab.py's work as a corpus job
                     (corpus/shard_job.py): count, add up, learn, write,
                     on local processes or an Apache Beam runner
  wordpiece_learner  TensorFlow Text's WordPiece learning algorithm (a
                     binary search over a count threshold)
  layout             Google's vocab.txt layout: [PAD], [unusedN], [UNK],
                     [CLS], [SEP], [MASK], characters, then pieces
"""
