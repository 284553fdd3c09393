"""What the task scripts share: the layout of one text or a pair of texts,
the official metrics of GLUE, SWAG's files, windows over long texts (SQuAD,
NER, long classified texts), and CoNLL-2003 named-entity files and their
scoring.
"""
