"""Reading CUDA GPU coredumps natively: the ELF container, the tables, the faults."""

from postmortem.coredump.faults import CodeMap, find_faults
from postmortem.coredump.reader import Coredump, open_coredump

__all__ = ["CodeMap", "Coredump", "find_faults", "open_coredump"]
