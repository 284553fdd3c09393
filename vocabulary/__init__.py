# coding=utf-8
"""Learning a WordPiece vocabulary from a text corpus (create_vocab.py's
library).

  text_input         the corpus files, lines, documents and shards, as
                     create_pretraining_data.py reads them
  word_counts        the corpus's words as tokenization.BasicTokenizer
                     splits them, counted shard by shard in worker
                     processes; count files to merge across machines
  wordpiece_learner  TensorFlow Text's WordPiece learning algorithm (a
                     binary search over a count threshold)
  layout             Google's vocab.txt layout: [PAD], [unusedN], [UNK],
                     [CLS], [SEP], [MASK], characters, then pieces
"""
