"""Tasks: the three task types, their JSONL records, prompts and answer parsing."""
