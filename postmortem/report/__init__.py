"""Presenting what the analysis found: text for terminals, JSON for programs."""
