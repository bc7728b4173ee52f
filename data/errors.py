"""The one exception type for bad input to the data pipeline; data/prepare.py prints it as one line and exits 1."""


class PrepareError(Exception):
    """Bad input (missing/empty source, bad argument, wrong file). The message names the problem and the fix."""
