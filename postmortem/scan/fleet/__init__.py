"""What a fleet of rows means: groups by signature, hardware or code, Xid lines, owners, the CI
runs they came from, and the repository's known crashes."""
