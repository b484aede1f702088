"""Many dumps at once: crash signatures and the incident of one job's dumps."""
