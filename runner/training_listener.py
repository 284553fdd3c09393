# coding=utf-8
"""What the training loop tells a listener, and when (Estimator.train's
`saving_listeners`, as tf.estimator's were called around its saves).

After each optimizer update, the loop asks every listener whether it needs
a checkpoint of that update. If one does, the loop saves one (unless it
just did) and calls `after_checkpoint` with its path; a listener returning
True asks training to stop there. A resumed run calls `after_checkpoint`
for the checkpoint it restored as well, when a listener needs that update,
before its first step, and so does a run that finds its training already
done: work that a stop cut short after the save gets done then.

Under multi-worker training every worker calls its listeners (only the
chief saves; the others get None for the path), and the wish to stop is
summed over the workers, so that all of them stop after the same update.
"""


class TrainingListener(object):
  """A listener that needs nothing; subclasses override both methods."""

  def needs_checkpoint(self, step):
    """Whether the loop must save (and call `after_checkpoint`) after
    update `step`."""
    del step  # Unused.
    return False

  def after_checkpoint(self, step, checkpoint):
    """Called once checkpoint `checkpoint` (a path prefix; None on a
    worker that does not save) holds update `step`.

    Returns:
      True to stop training after this update.
    """
    del step, checkpoint  # Unused.
    return False
