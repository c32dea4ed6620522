"""Tasks: generating the three task types' programs, and the prompts teachers and students see.

The records themselves (`TaskRecord`, `VerifyResult`, their JSONL form) are `popula.records`,
which the sandbox reads too.
"""
