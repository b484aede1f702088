"""What a scan hands on: its index, the incident block, triage and Sentry events, CI outputs."""
