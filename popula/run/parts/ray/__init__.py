"""A run's workers as Ray actors: the cluster, their placement, the actors and their proxies."""
