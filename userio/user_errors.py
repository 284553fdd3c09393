# coding=utf-8
"""`UserError`: input the user can fix, said in one line.

Every module that refuses a flag, a file, a config or a checkpoint raises
it, and userio/cli.py, which re-exports it as `cli.UserError`, turns it into
the command's last line. It lives apart from cli.py so that the modules cli
itself imports (file_systems, directly and through disk_space) can raise it
without importing cli back. This module imports nothing of the project.
"""


class UserError(ValueError):
  """Input the user can fix; the message names what and how, in one line.

  Raised as `UserError(message)` or as `UserError(finding, fix=...)`: the
  second form keeps what is wrong (`finding`, e.g. "train.tsv:7: found 3
  columns, expected 5") apart from the advice (`fix`), so that a caller
  whose own flags differ can restate the finding with its own advice. The
  message is then "<finding>. <fix>".
  """

  def __init__(self, finding, fix=None):
    self.finding = str(finding)
    self.fix = fix
    super().__init__("%s. %s" % (self.finding, fix) if fix else self.finding)

  def __reduce__(self):
    # Pickled across processes (the data workers) with both parts.
    return (type(self), (self.finding, self.fix))
