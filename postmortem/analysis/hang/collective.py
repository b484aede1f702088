"""Kernels of collective communication, recognized by name.

In a multi-GPU job, one rank faults and the others stop where they wait for it: inside an
NCCL kernel, or a custom all-reduce of vLLM or SGLang, spinning on a flag its peer never
sets. Such a dump is collateral. The names below are kept as data, each pattern with where
its names come from:

- NCCL's kernels: ``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` (2.19 and later; see
  NVIDIA/nccl#2196), ``ncclKernel_SendRecv_RING`` (2.x, NVIDIA/nccl#739),
  ``ncclAllReduceRingLLKernel_sum`` (older, NVIDIA/nccl#536); RCCL keeps the names.
- The custom all-reduce of vLLM and SGLang (``custom_all_reduce.cuh``):
  ``cross_device_reduce_1stage<T, ngpus>``, ``cross_device_reduce_2stage<…>``.
- Other all-reduce kernels named for what they do: FlashInfer's and TensorRT-LLM's
  ``allreduce_fusion_kernel_oneshot_lamport``, PyTorch's symmetric-memory
  ``multimem_all_reduce_kernel`` and ``one_shot_all_reduce_kernel``, and the all-gather,
  reduce-scatter and all-to-all kernels spelled the same ways.

A name is matched on its last component, parameters, template arguments and return type
dropped (``void vllm::cross_device_reduce_1stage<float, 8>(…)`` → ``cross_device_reduce_1stage``).
"""

from __future__ import annotations

import re

from postmortem.demangle import base_name

_COLLECTIVE_NAMES = (
    re.compile(r"^nccl\w*Kernel"),
    re.compile(r"^cross_device_reduce"),
    # snake_case: a word that starts at the beginning or after a non-letter, so that
    # `small_reduce` is no all-reduce
    re.compile(r"(?:^|[^a-z])(?:all_?reduce|all_?gather|reduce_?scatter|all_?to_?all)"),
    re.compile(r"AllReduce|AllGather|ReduceScatter|AllToAll|Alltoall"),
)


def is_collective(name: str | None) -> bool:
    """True when `name` (mangled or demangled) names a collective communication kernel."""
    if not name:
        return False
    base = base_name(name)
    return any(pattern.search(base) for pattern in _COLLECTIVE_NAMES)
