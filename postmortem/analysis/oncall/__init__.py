"""The block an on-call note starts with: problem class, strongest signal, best guess, next step."""
