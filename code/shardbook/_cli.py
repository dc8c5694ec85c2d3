"""How the package's command lines end: flushed, and quietly when the
reader closed the pipe early (`| head`), with status 1 rather than a
traceback, as Python's documentation advises for SIGPIPE; and how a
library's refusal names the option the reader typed."""

import argparse
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


def as_flag(parser, message):
    """A library's 'name: rule' message as the command line's '--name: rule'
    where --name is one of `parser`'s options (`seq_len` is --seq-len); any
    other message as it is."""
    if not isinstance(parser, argparse.ArgumentParser):
        raise TypeError(f"parser: must be an argparse.ArgumentParser, got {type(parser).__name__}")
    if not isinstance(message, str):
        raise TypeError(f"message: must be a string, got {type(message).__name__}")
    name, sep, rule = message.partition(": ")
    flag = "--" + name.replace("_", "-")
    if sep and not name.startswith("-") and flag in parser._option_string_actions:
        return f"{flag}: {rule}"
    return message
