"""`postmortem scan`: many dumps found, analyzed in parallel, grouped by crash signature."""
