from eosbatch.exceptions import TerminalError, TransientError


class AirflowSetupError(TerminalError):
    """The local Airflow could not be set up or started; the message names the step and its log."""


class AirflowNotReady(TransientError):
    """An Airflow component started but did not become healthy in time."""
