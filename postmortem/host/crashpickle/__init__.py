"""SGLang's crash dump (``crash_dump_<time>.pkl``), summarized without ever unpickling it.

What SGLang writes (sgl-project/sglang, ``python/sglang/srt/managers/tokenizer_manager.py``,
``TokenizerManager.dump_requests_before_crash``, with ``--crash-dump-folder``): one pickle,
by `pickle.dump` at Python's default protocol (4; 5 from Python 3.14), at
``<folder>/<hostname>/crash_dump_%Y-%m-%d_%H-%M-%S.pkl`` (the host's local time), of a dict:

- ``server_args``: the `sglang.srt.server_args.ServerArgs` dataclass (its ``__dict__``:
  ``model_path``, ``tp_size``, ``dp_size``, ``pp_size``, ``ep_size``, ``quantization``,
  ``dtype``, ``kv_cache_dtype``, ``attention_backend``, ``mem_fraction_static``,
  ``max_running_requests``, ``chunked_prefill_size``, ``disable_cuda_graph``, …), or None
  when it could not be pickled (a ``--trust-remote-code`` model): the dump is retried without;
- ``requests``: a list of 4-tuples ``(obj, output, created_time, end_time)``: first the
  requests that finished in the last 5 minutes (``record_request_for_crash_dump``: the final
  output dict, whose ``meta_info["finish_reason"]`` is set, and the finish time), then the
  requests still in flight (the last output dict, whose ``finish_reason`` is None, or
  ``ReqState.get_crash_dump_output``'s ``text``/``output_ids``, or ``{}`` in older versions;
  the end time is the time of the dump). ``obj`` is the request:
  `sglang.srt.managers.io_struct.GenerateReqInput` (``rid``, ``text``, ``input_ids``,
  ``sampling_params`` dict with ``max_new_tokens``, ``stream``, …) or ``EmbeddingReqInput``.
  Times are wall-clock seconds since the epoch;
- ``launch_command``: ``" ".join(sys.argv)`` (in later versions; older ones lack it);
- ``config_updates`` and ``resolved_config``: in the newest versions, the runtime overrides
  and a snapshot of the resolved configuration (None when ``server_args`` is).

``scripts/playground/replay_request_dump.py`` (``read_records``) reads it back, and also takes a
bare list of such tuples (the older ``--dump-requests-folder`` files).

Loading a pickle runs whatever callables it names, so this package never loads one: the
opcodes are read with `pickletools.genops`, which only decodes them, and a small symbolic
stack machine builds lists, tuples, dicts and memo references of its own. A class or a
function the pickle names is never imported or called: it becomes an opaque object labelled
``module.qualname``, holding the state a ``BUILD`` gives it. Everything is bounded
(`CrashPickleLimits`): the opcodes read, the time, the stack depth, the memo, the containers
made (about 250 bytes each, so a bomb stops near 125 MB at worst), the items kept per
container, the characters kept per string, the bytes of one value. A damaged, truncated or
foreign pickle gives a summary saying what could not be read; the containers still open
where reading stopped are closed, so what came before is summarized too.

The modules, one job each: `limits` (`CrashPickleLimits`), `values` (the symbolic values),
`machine` (the stack machine), `reader` (one bounded reading of the opcodes), `model` (the
typed summary), `layout` (SGLang's layout read into the summary) and `text` (the summary on
one screen).
"""

from postmortem.host.crashpickle.layout import summarize_crash_pickle
from postmortem.host.crashpickle.limits import CrashPickleLimits
from postmortem.host.crashpickle.model import (
    CrashPickleLayout,
    CrashPickleSummary,
    CrashRequest,
    ServerArgsSummary,
)
from postmortem.host.crashpickle.text import crash_pickle_text

__all__ = [
    "CrashPickleLayout",
    "CrashPickleLimits",
    "CrashPickleSummary",
    "CrashRequest",
    "ServerArgsSummary",
    "crash_pickle_text",
    "summarize_crash_pickle",
]
