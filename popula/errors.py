"""The one exception type the command line turns into exit code 2.

Anything a user can get wrong (a file, a line, a config key) raises `PopulaError` with a
message that names the culprit; the CLI prints it as one paragraph and exits 2. Bugs stay
ordinary exceptions, so their tracebacks are not hidden.
"""


class PopulaError(Exception):
    """Bad usage or bad input: the message says what is wrong and where."""
