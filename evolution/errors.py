"""The one exception type the evolution package raises for bad input.

`evolution` imports nothing from `popula`, so it cannot raise `PopulaError`; callers in
the trainer (the run loop, `popula retention`) catch `EvolutionError` and re-raise it as
their own user-facing error. It subclasses `ValueError` so generic callers still see a
familiar type.
"""


class EvolutionError(ValueError):
    """Bad input to an evolution function: the message names the key, field or value at fault."""
