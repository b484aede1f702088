"""What the facts mean: fault localization, source quoting, diagnoses."""
