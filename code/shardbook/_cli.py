"""How the package's command lines end: flushed, and quietly when the
reader closed the pipe early (`| head`), with status 1 rather than a
traceback, as Python's documentation advises for SIGPIPE."""

import os
import sys


def exit_with(main):
    """sys.exit(main()), a closed standard output ending it quietly."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # what is still buffered would raise again at exit: point stdout at devnull
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    sys.exit(code)
