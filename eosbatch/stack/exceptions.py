from eosbatch.exceptions import TerminalError, TransientError


class StackError(TerminalError):
    """A part of the embedded stack could not be installed or started; the message names the step and its log."""


class StackNotReady(TransientError):
    """A service started but did not become ready in time."""
