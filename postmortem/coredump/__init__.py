"""Reading CUDA GPU coredumps natively: the ELF container, the tables, the faults."""

from postmortem.coredump.faults import read_faults
from postmortem.coredump.reader import Coredump, open_coredump

__all__ = ["Coredump", "open_coredump", "read_faults"]
