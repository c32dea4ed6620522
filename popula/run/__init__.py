"""`popula run`: the population self-play loop and the run directory it writes."""
