"""One exception type for bad user input: the CLI prints its message on one line and exits non-zero."""


class UserError(Exception):
    """Raised for anything the user can fix (bad arch string, missing file, wrong vocab...).

    The message must be a single line naming the problem; `lvbert` prints `error: <message>` and exits 2.
    """
