"""The parts the run loop is built from and placed with, beneath it.

`builders`: the one place an engine, sandbox pool or learner is built from a config (for the
run, its Ray actors, and the offline applications in `popula.apps`). `workers`: where they
run, this process or Ray. `ray/`: the cluster (`cluster`), each actor's ask and the
placement group that reserves them (`placement`), the actors (`actors`) and their
driver-side proxies (`workers`). Nothing here imports the loop.
"""
