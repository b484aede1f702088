"""Cubins: the ELF images of device code, as stored in a coredump or on disk."""
