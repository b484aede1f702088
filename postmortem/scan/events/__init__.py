"""A dump as a crash-triage event: the event as plain data, and Sentry, where the run sends
each as its row arrives."""
