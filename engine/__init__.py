"""What Google's modules call behind small named calls: hand-written
backward passes, compiled kernels, dropout masks, padding layouts,
graph bookkeeping and ordering, the process's heap, BERT config checks
and the few private TensorFlow internals.
"""
