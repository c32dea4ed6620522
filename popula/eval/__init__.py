"""Evaluation: how well adapters (or a bare base) answer held-out tasks, and how to compare them.

`evaluate` poses task records to an engine and judges the answers in the sandbox (pass@k);
`heldout` is the run's trend on one fixed held-out set; `population` summarises a run's
live students; `paired` compares two models task by task; `plots` draws reports side by
side. The package sits below the run loop, which uses it: what a run directory or a model
spec names for `popula eval` is `popula.apps.targets`, above the run's builders.
"""
