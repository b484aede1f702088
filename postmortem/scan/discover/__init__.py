"""Finding the dumps to scan: in directory trees (by content), under object-store prefixes,
and what lies beside each (a serving engine's crash folder)."""
