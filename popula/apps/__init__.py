"""The offline applications built on the run's parts, above the loop and `popula/eval/`.

`targets`: what `popula eval RUN_DIR|MODEL` names (which base, engine and adapters, or a
run's live students in one engine), built with the run's builders and scored with
`popula/eval/`. `retention`: `popula retention`'s measurement of every evolution operator on
a run directory. `ladder`: the learning ladder (one student, one teacher, trained alone with
the run's parts). The run loop imports none of them (`tests/test_import_graph.py`).
"""
