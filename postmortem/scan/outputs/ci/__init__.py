"""What a scan leaves for a CI system: the exit policy, GitHub Actions output, JUnit XML, a
tracker comment, and the runs a CI artifact's folders name."""
