"""vLLM's engine dump read from a log, and joined beside a dump.

The lines are test-made, written to the format strings of ``vllm/logging_utils/dump_input.py``
(``logger.error("Dumping input data for V1 LLM engine (v%s) with config: %s, ", …)``, the
scheduler output's ``prepare_object_to_dump`` and the dataclasses' reprs) in the layouts its
versions used; they are not recorded output. The recorded excerpt is read in
tests/fixtures/test_host_parsers.py.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from postmortem.analysis.host.join import join_host
from postmortem.analysis.host.vllm import batch_shape, join_vllm, vllm_checks
from postmortem.findings import FindingCode, Severity
from postmortem.host.model import HostLogKind, VllmRequest
from postmortem.host.reader import parse_host_lines
from postmortem.host.vllm import parse_vllm_dump
from postmortem.report.host import host_json

P = "(EngineCore_DP0 pid=7) ERROR 11-25 12:06:16 "
CONFIG = (
    "model='/models/Qwen3-8B', speculative_config=None, tokenizer='/models/Qwen3-8B', "
    "skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, trust_remote_code=False, "
    "dtype=torch.bfloat16, max_seq_len=32768, download_dir=None, load_format=auto, "
    "tensor_parallel_size=2, pipeline_parallel_size=1, data_parallel_size=1, "
    "disable_custom_all_reduce=False, quantization=fp8, enforce_eager=False, "
    "kv_cache_dtype=auto, device_config=cuda, structured_outputs_config=StructuredOutputsConfig("
    "backend='auto', reasoning_parser=''), seed=0, served_model_name=qwen, "
    "enable_prefix_caching=True, chunked_prefill_enabled=True, pooler_config=None, "
    'compilation_config={"level":3,"splitting_ops":["vllm.unified_attention"],'
    '"cudagraph_capture_sizes":[8,4,2,1],"local_cache_dir":null}, '
)


def new_request(rid: str, prompt: int, computed: int = 0) -> str:
    return (
        f"NewRequestData(req_id={rid},prompt_token_ids_len={prompt},mm_features=[],"
        "sampling_params=SamplingParams(n=1, temperature=0.0, stop=[], stop_token_ids=[1], "
        "bad_words=[], max_tokens=50, structured_outputs=None, extra_args=None),"
        f"block_ids=([1, 2],),num_computed_tokens={computed},lora_request=None,"
        "prompt_embeds_shape=None)"
    )


def output(new: str, cached: str, scheduled: str, total: int, tail: str = "") -> str:
    return (
        f"{P}[dump_input.py:76] Dumping scheduler output for model execution: "
        f"SchedulerOutput(scheduled_new_reqs=[{new}], scheduled_cached_reqs={cached}, "
        f"num_scheduled_tokens={{{scheduled}}}, total_num_scheduled_tokens={total}, "
        "scheduled_spec_decode_tokens={}, scheduled_encoder_inputs={}, "
        f"num_common_prefix_blocks=[0], finished_req_ids=[], free_encoder_mm_hashes=[]{tail})"
    )


HEADER = f"{P}[dump_input.py:69] Dumping input data for V1 LLM engine (v0.11.0) with config: "
STATS = (
    f"{P}[dump_input.py:79] Dumping scheduler stats: SchedulerStats(num_running_reqs=3, "
    "num_waiting_reqs=2, step_counter=0, current_wave=0, kv_cache_usage=0.5217360521098839, "
    "prefix_cache_stats=PrefixCacheStats(reset=False, requests=0, queries=0, hits=0), "
    "spec_decoding_stats=None, kv_connector_stats=None, num_corrupted_reqs=0)"
)
COLUMNS = (
    "CachedRequestData(req_ids=['chatcmpl-a', 'chatcmpl-b'], resumed_req_ids=set(), "
    "new_token_ids=[], all_token_ids={}, new_block_ids=[None, None], "
    "num_computed_tokens=[1769, 3851], num_output_tokens=[12, 40])"
)
BATCH = output(
    new_request("cmpl-new-0", 513),
    COLUMNS,
    "cmpl-new-0: 513, chatcmpl-a: 1, chatcmpl-b: 1",
    515,
)


def test_the_v0_11_layout_gives_config_batch_and_stats():
    # GIVEN a dump block as v0.11 logs it: config, scheduler output, stats
    log = parse_vllm_dump(["INFO started", HEADER + CONFIG, BATCH, STATS])
    # THEN each piece is read, and the pieces are one dump
    (dump,) = log.dumps
    assert (log.dumps_seen, dump.line, dump.version, dump.reason) == (1, 2, "0.11.0", None)
    assert dump.process == "EngineCore_DP0 pid=7"
    config = dump.config
    assert (config.model, config.served_model_name, config.dtype) == (
        "/models/Qwen3-8B", "qwen", "torch.bfloat16",
    )  # fmt: skip
    assert (config.tensor_parallel_size, config.pipeline_parallel_size) == (2, 1)
    assert (config.data_parallel_size, config.max_model_len, config.quantization) == (
        1, 32768, "fp8",
    )  # fmt: skip
    assert (config.enforce_eager, config.enable_prefix_caching, config.device) == (
        False, True, "cuda",
    )  # fmt: skip
    assert (config.speculative_config, config.load_format, config.fields_seen) == (
        None, "auto", 26,
    )  # fmt: skip
    out = dump.scheduler
    assert (out.line, out.new_requests, out.cached_requests, out.total_scheduled_tokens) == (
        3, 1, 2, 515,
    )  # fmt: skip
    assert (out.scheduled_entries, out.spec_decode_requests, out.finished_requests) == (3, 0, 0)
    assert out.complete
    assert out.requests == (
        VllmRequest("cmpl-new-0", True, 513, 0, 513),
        VllmRequest("chatcmpl-a", False, None, 1769, 1),
        VllmRequest("chatcmpl-b", False, None, 3851, 1),
    )
    stats = dump.stats
    assert (stats.line, stats.running, stats.waiting) == (4, 3, 2)
    assert stats.kv_cache_usage == 0.5217360521098839


def test_the_layout_before_v0_9_splits_the_block_over_more_lines():
    # GIVEN the first layout: a bare opening line, the output on the line after its marker,
    # a bare SchedulerStats line, gpu_cache_usage, no spaces after the object's commas
    lines = [
        "ERROR 05-01 10:00:00 [dump_input.py:62] Dumping input data",
        "ERROR 05-01 10:00:00 [dump_input.py:64] V1 LLM engine (v0.8.5) with config: "
        "model='m', dtype=torch.float16, max_seq_len=2048, tensor_parallel_size=2, "
        "enforce_eager=True, device_config=cuda, ",
        "ERROR 05-01 10:00:00 [dump_input.py:71] Dumping scheduler output for model execution:",
        "ERROR 05-01 10:00:00 [dump_input.py:72] SchedulerOutput(scheduled_new_reqs=["
        "NewRequestData(req_id=r1,prompt_token_ids_len=7,mm_inputs=[],sampling_params="
        "SamplingParams(n=1),block_ids=[1],num_computed_tokens=0,lora_request=None)],"
        "scheduled_cached_reqs=[],num_scheduled_tokens={r1: 7},total_num_scheduled_tokens=7,"
        "scheduled_spec_decode_tokens={},finished_req_ids=[],grammar_bitmask=null)",
        "ERROR 05-01 10:00:00 [dump_input.py:74] SchedulerStats(num_running_reqs=1, "
        "num_waiting_reqs=2, gpu_cache_usage=0.25, prefix_cache_stats=PrefixCacheStats())",
    ]
    (dump,) = parse_vllm_dump(lines).dumps
    assert (dump.line, dump.version, dump.process) == (2, "0.8.5", None)
    assert (dump.config.tensor_parallel_size, dump.config.enforce_eager) == (2, True)
    out = dump.scheduler
    assert (out.line, out.new_requests, out.cached_requests, out.total_scheduled_tokens) == (
        3, 1, 0, 7,
    )  # fmt: skip
    assert out.requests == (VllmRequest("r1", True, 7, 0, 7),)
    assert (dump.stats.line, dump.stats.running, dump.stats.kv_cache_usage) == (5, 1, 0.25)


def test_cached_requests_one_object_each_as_before_v0_10():
    cached = (
        "[CachedRequestData(req_id='chatcmpl-f7', resumed_from_preemption=false, "
        "new_token_ids=[], new_block_ids=[[]], num_computed_tokens=5280), "
        "CachedRequestData(req_id='chatcmpl-9a', resumed_from_preemption=false, "
        "new_token_ids=[], new_block_ids=[[600, 601]], num_computed_tokens=2047)]"
    )
    line = output("", cached, "chatcmpl-f7: 1, chatcmpl-9a: 279", 280)
    out = parse_vllm_dump([line]).dumps[0].scheduler
    assert (out.new_requests, out.cached_requests) == (0, 2)
    assert out.requests == (
        VllmRequest("chatcmpl-f7", False, None, 5280, 1),
        VllmRequest("chatcmpl-9a", False, None, 2047, 279),
    )


def test_the_reason_form_and_a_value_logged_over_several_lines():
    # GIVEN the (v…, reason=…) form, and a numpy array whose repr spans lines: vLLM's
    # formatter repeats the prefix on each
    tag = f"{P}[dump_input.py:79] "
    lines = [
        f"{P}[dump_input.py:72] Dumping input data for V1 LLM engine "
        f"(v0.16.1rc1.dev224+g289fc48ab, reason=exception) with config: {CONFIG}",
        f"{tag}Dumping scheduler output for model execution: SchedulerOutput("
        f"scheduled_new_reqs=[], scheduled_cached_reqs={COLUMNS}, "
        "num_scheduled_tokens={chatcmpl-a: 1, chatcmpl-b: 1}, total_num_scheduled_tokens=2, "
        "grammar_bitmask=array([[        -1,         -1],",
        f"{tag}       ...,",
        f"{tag}       [         0,          0]], shape=(21, 4748), dtype=int32), "
        "finished_req_ids=['z'], kv_connector_metadata=null)",
        STATS,
    ]
    (dump,) = parse_vllm_dump(lines).dumps
    assert (dump.version, dump.reason) == ("0.16.1rc1.dev224+g289fc48ab", "exception")
    out = dump.scheduler
    assert (out.total_scheduled_tokens, out.finished_requests, out.complete) == (2, 1, True)
    assert dump.stats.line == 5


def test_two_engines_logging_between_each_other_keep_their_own_pieces():
    # GIVEN data-parallel engines DP0 and DP1 dumping at once, their lines interleaved
    dp1 = "(EngineCore_DP1 pid=8) ERROR 11-25 12:06:16 "
    lines = [
        HEADER + CONFIG,
        (HEADER + CONFIG).replace(P, dp1).replace("(v0.11.0)", "(v0.11.1)"),
        BATCH,
        output(new_request("dp1-req", 3), "CachedRequestData(req_ids=[])", "dp1-req: 3", 3).replace(
            P, dp1
        ),
        STATS.replace(P, dp1),
        STATS,
    ]
    first, second = parse_vllm_dump(lines).dumps
    assert (first.process, first.version, first.scheduler.total_scheduled_tokens) == (
        "EngineCore_DP0 pid=7", "0.11.0", 515,
    )  # fmt: skip
    assert (first.stats.line, second.stats.line) == (6, 5)
    assert (second.process, second.version, second.scheduler.requests[0].request_id) == (
        "EngineCore_DP1 pid=8", "0.11.1", "dp1-req",
    )  # fmt: skip


def test_a_block_whose_config_line_was_cut_off_is_still_read():
    # GIVEN the tail of a log that starts after the config line
    (dump,) = parse_vllm_dump([BATCH, STATS]).dumps
    assert (dump.line, dump.version, dump.config) == (1, None, None)
    assert dump.scheduler.total_scheduled_tokens == 515 and dump.stats.running == 3


def test_only_the_last_dumps_and_the_first_requests_are_kept():
    # GIVEN ten dumps, the last of a batch of a hundred new requests
    many = ", ".join(new_request(f"r{n}", n + 1) for n in range(100))
    scheduled = ", ".join(f"r{n}: {n + 1}" for n in range(100))
    blocks = [[HEADER + CONFIG, BATCH, STATS] for _ in range(9)]
    last = [HEADER + CONFIG, output(many, "CachedRequestData(req_ids=[])", scheduled, 5050)]
    log = parse_vllm_dump([line for block in blocks for line in block] + last)
    # THEN all are counted, the last four kept, and the batch's first 32 requests
    assert log.dumps_seen == 10 and [d.line for d in log.dumps] == [19, 22, 25, 28]
    out = log.dumps[-1].scheduler
    assert (out.new_requests, out.scheduled_entries, len(out.requests)) == (100, 100, 32)
    assert out.requests[31] == VllmRequest("r31", True, 32, 0, 32)


def test_a_scheduler_output_cut_short_says_so():
    cut = BATCH[: BATCH.index("total_num_scheduled_tokens")]
    out = parse_vllm_dump([cut]).dumps[0].scheduler
    assert (out.complete, out.total_scheduled_tokens, out.new_requests) == (False, None, 1)


def test_quotes_apostrophes_and_commas_in_values_do_not_shift_the_fields():
    # An unquoted value with an apostrophe, one with a comma, a quoted one with both.
    config = (
        "model='/m/it''s, here', served_model_name=bob's model, x, "
        'tokenizer="a\\"b", dtype=torch.float16, tensor_parallel_size=8, '
    )
    (dump,) = parse_vllm_dump([HEADER + config]).dumps
    assert dump.config.served_model_name == "bob's model, x"
    assert (dump.config.dtype, dump.config.tensor_parallel_size) == ("torch.float16", 8)


def test_ansi_colours_and_a_container_prefix_around_the_process():
    line = "qwen3  | \x1b[1;36m(EngineCore_DP0 pid=481282)\x1b[0;0m " + HEADER[len(P) :] + CONFIG
    (dump,) = parse_vllm_dump([line]).dumps
    assert (dump.process, dump.version) == ("EngineCore_DP0 pid=481282", "0.11.0")


def test_a_log_without_a_dump_is_none():
    assert parse_vllm_dump(["INFO 11-25 [loggers.py:123] Engine 000: Running: 3 reqs"]) is None
    assert parse_vllm_dump([]) is None


@given(st.lists(st.sampled_from([HEADER, BATCH, STATS, CONFIG, "(", "]", "'", "=", "\x00"])))
def test_any_mix_of_the_pieces_never_raises(pieces):
    lines = ["".join(pieces[: n + 1]) for n in range(len(pieces))]
    log = parse_vllm_dump(lines)
    assert log is None or all(1 <= d.line <= len(lines) for d in log.dumps)


# --- Joined beside a dump -----------------------------------------------------------------


def _joined(lines):
    host = parse_host_lines(Path("server.log"), lines, 1, 0)
    return join_host([host], (), (), Path("core.nvcudmp"))


def test_the_batch_in_flight_is_one_finding_with_its_config():
    # GIVEN the whole block in a log given with a dump
    join = _joined(["INFO started", HEADER + CONFIG, BATCH, STATS])
    # THEN its batch is said, with the config a replay needs and what it does not prove
    (engine,) = join.vllm
    assert engine.batch.words == "3 requests (1 new, 2 running), 515 tokens scheduled"
    assert (engine.batch.largest_tokens, engine.batch.largest_request) == (513, "cmpl-new-0")
    assert (engine.batch.one_token, engine.batch.read) == (2, 3)
    (finding,) = [f for f in join.findings if f.code is FindingCode.VLLM_BATCH_IN_FLIGHT]
    assert finding.severity is Severity.INFO
    assert finding.message == (
        "vLLM v0.11.0 was running 3 requests (1 new, 2 running), 515 tokens scheduled when "
        "its engine core died"
    )
    assert finding.evidence[0] == (
        "server.log:2: engine v0.11.0: model /models/Qwen3-8B, dtype torch.bfloat16, "
        "quantization fp8, tensor parallel 2, pipeline parallel 1, data parallel 1, "
        "max_model_len 32768, enforce_eager False, device cuda"
    )
    assert finding.evidence[1] == (
        "server.log:3: request cmpl-new-0: new, prompt 513, computed 0, scheduled 513"
    )
    assert finding.evidence[-1] == (
        "server.log:4: scheduler stats: 3 running, 2 waiting, KV cache 52.2% used"
    )
    assert "--enforce-eager" in finding.remedy
    assert "nothing here names the kernel" in finding.caveat
    # AND the one fact compared, the device, agrees
    assert [(c.fact, c.host, c.agrees) for c in join.checks] == [("device", "cuda", True)]


def test_an_engine_on_another_device_is_not_the_dump_s_run():
    config = CONFIG.replace("device_config=cuda", "device_config=npu")
    join = _joined([HEADER + config])
    (check,) = join.checks
    assert (check.fact, check.host, check.dump, check.agrees) == ("device", "npu", "cuda", False)
    assert FindingCode.HOST_DISAGREES in {f.code for f in join.findings}


def test_a_timeout_dump_says_the_step_timed_out():
    header = HEADER.replace("(v0.11.0)", "(v0.17.0, reason=timeout)")
    join = _joined([header + CONFIG, BATCH])
    (finding,) = [f for f in join.findings if f.code is FindingCode.VLLM_BATCH_IN_FLIGHT]
    assert finding.message.endswith("515 tokens scheduled when its engine core timed out")


def test_batch_shape_without_the_scheduled_counts_adds_new_and_cached():
    # GIVEN an output cut before num_scheduled_tokens
    cut = BATCH[: BATCH.index("num_scheduled_tokens")]
    shape = batch_shape(parse_vllm_dump([cut]).dumps[0].scheduler)
    assert (shape.requests, shape.largest_tokens, shape.one_token, shape.read) == (
        3, None, None, 0,
    )  # fmt: skip
    assert (shape.words, shape.complete) == ("3 requests (1 new, 2 running)", False)


def test_a_dump_without_config_or_batch_compares_nothing():
    log = parse_vllm_dump([STATS])
    assert log is not None and log.dumps[0].stats is not None
    engine = join_vllm(Path("x.log"), log)
    assert engine.batch is None and vllm_checks(Path("x.log"), log) == []


def test_the_report_projects_the_dump_as_plain_data():
    join = _joined([HEADER + CONFIG, BATCH, STATS])
    data = host_json(join)
    assert data["files"][0]["recognized"] == [HostLogKind.VLLM_DUMP.value]
    (engine,) = data["vllm"]
    assert (engine["file"], engine["dumps_seen"]) == ("server.log", 1)
    dump = engine["dumps"][0]
    assert dump["config"]["tensor_parallel_size"] == 2
    assert dump["scheduler"]["requests"][1] == {
        "id": "chatcmpl-a",
        "new": False,
        "prompt_tokens": None,
        "computed_tokens": 1769,
        "scheduled_tokens": 1,
    }
    assert dump["stats"] == {
        "line": 3, "running": 3, "waiting": 2, "kv_cache_usage": 0.5217360521098839,
    }  # fmt: skip
    assert engine["batch"]["words"] == "3 requests (1 new, 2 running), 515 tokens scheduled"
