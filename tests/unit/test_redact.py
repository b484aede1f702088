"""Secrets and home folders are hidden in what the host logs say, in linear time."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from postmortem.host.redact import REDACTED, redact, redact_strings

R = REDACTED


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("--hf-token=hf_abcdefghijklmnopqrstuvwxyz0123456789", f"--hf-token={REDACTED}"),
        ("HF_TOKEN=hf_abc123 python serve.py", f"HF_TOKEN={REDACTED} python serve.py"),
        ('{"api_key": "sk-live-1234"}', f'{{"api_key": {REDACTED}}}'),
        ("password: hunter2, user: bob", f"password: {REDACTED}, user: bob"),
        ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG", f"AWS_SECRET_ACCESS_KEY={REDACTED}"),
        ("Authorization: Bearer eyAbCdEfGh123456", f"Authorization: Bearer {REDACTED}"),
        ("s3://bob:s3cr3t@store.example/bucket", f"s3://bob:{REDACTED}@store.example/bucket"),
        ("key AKIAIOSFODNN7EXAMPLE in use", f"key {REDACTED} in use"),
        ("ghp_" + "a" * 36, REDACTED),
        ("sk-" + "b" * 40, REDACTED),
        ('File "/home/alice/proj/x.py", line 3', 'File "~/proj/x.py", line 3'),
        ("/Users/bob/src and /root/.cache", "~/src and ~/.cache"),
        # what must stay: kernel names, addresses, words that only look like keys
        ("token_embedding_kernel<float> at 0x7f3b40543000", None),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", None),
        ("/homes/x and /home_dir and ./home/alice", None),
    ],
)
def test_secrets_are_hidden_and_the_rest_is_kept(text, expected):
    assert redact(text) == (text if expected is None else expected)


AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # AWS's documented example
PEM_BODY = "MIIEowIBAAKCAQEA7bq0\nZmFrZSBrZXkgYm9keQ==\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # secret-named flags written with a space, as SGLang and vLLM servers are launched
        (
            "python -m sglang.launch_server --model-path m --api-key s3cr3t --port 30000",
            f"python -m sglang.launch_server --model-path m --api-key {R} --port 30000",
        ),
        ("vllm serve m --api-key 'two words' --tp 8", f"vllm serve m --api-key {R} --tp 8"),
        ("--password hunter2", f"--password {R}"),
        ("--hf-token hf_abc", f"--hf-token {R}"),
        ("--secret xyz --token tok123", f"--secret {R} --token {R}"),
        ("--aws-secret-access-key abc", f"--aws-secret-access-key {R}"),
        ("--account-key abc", f"--account-key {R}"),
        ("-PASSWORD abc", f"-PASSWORD {R}"),
        ("credentials=abc private_key: def", f"credentials={R} private_key: {R}"),
        # a printed argv: the flag and its value are two quoted words
        (
            "['python', '-m', 'sglang.launch_server', '--api-key', 'sk1', '--port', '30000']",
            f"['python', '-m', 'sglang.launch_server', '--api-key', {R}, '--port', '30000']",
        ),
        ('["--secret", "xyz"]', f'["--secret", {R}]'),
        # the = form still works, and a flag with no value keeps the next flag
        ("--api-key=s3cr3t --port 1", f"--api-key={R} --port 1"),
        ("--token --port 1", None),
        # PEM private keys: the whole block, whatever the key's kind, escaped or not
        (
            "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7+/=\n"
            "-----END RSA PRIVATE KEY-----\nnext",
            f"key:\n{R}\nnext",
        ),
        (
            f'{{"pem": "-----BEGIN PRIVATE KEY-----\\n{PEM_BODY}-----END PRIVATE KEY-----"}}',
            f'{{"pem": "{R}"}}',
        ),
        (
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n"
            "DEK-Info: AES-128-CBC,AB12\n\nMIIE\n-----END ENCRYPTED PRIVATE KEY----- done",
            f"{R} done",
        ),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\n", R),
        # token shapes
        ("glpat-abcdefghij1234567890ABCD ok", f"{R} ok"),
        (
            "POST https://hooks.slack.com/services/T0000AAAA/B0000BBBB/XXXXXXXXXXXXXXXX done",
            f"POST https://hooks.slack.com/services/{R} done",
        ),
        (
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=abc+def/ghi==;"
            "EndpointSuffix=core.windows.net",
            f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={R};"
            "EndpointSuffix=core.windows.net",
        ),
        ("Endpoint=sb://x/;SharedAccessKey=q1w2e3=", f"Endpoint=sb://x/;SharedAccessKey={R}"),
        ("maps key AIzaSyA1234567890abcdefghijklmnopqrstuv used", f"maps key {R} used"),
        # AWS secret access keys: after their name (=, : or only a space), and alone
        (f"aws_secret_access_key = {AWS_SECRET}", f"aws_secret_access_key = {R}"),
        (
            f"aws configure set aws_secret_access_key {AWS_SECRET}",
            f"aws configure set aws_secret_access_key {R}",
        ),
        (f'"SecretAccessKey": "{AWS_SECRET}"', f'"SecretAccessKey": {R}'),
        (f"leaked {AWS_SECRET} here", f"leaked {R} here"),
        # home folders wherever a path ends: quotes, colons, brackets
        ('cwd="/home/alice" PATH=/root:/usr/bin', 'cwd="~" PATH=~:/usr/bin'),
        ("(/Users/bob.smith/src)", "(~/src)"),
    ],
)
def test_new_secret_shapes_are_hidden(text, expected):
    assert redact(text) == (text if expected is None else expected)


@pytest.mark.parametrize(
    "text",
    [
        "fault at 0x7f3b40543000, error PC 0x00007f3b40543a10",
        "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "sha1 da39a3ee5e6b4b0d3255bfef95601890afd80709 DA39A3EE5E6B4B0D3255BFEF95601890AFD80709",
        "_ZN7cutlass6KernelINS_4gemm6kernel13GemmUniversalINS_4arch7OpClassTensorOpEEEEEvNT_6ParamsE",
        "cutlass::Kernel<cutlass::gemm::kernel::GemmUniversal<Sm80TensorOpGemmF16Accum128x128x32Stage3>>",
        "cutlass_80_tensorop_f16_s16816gemm_relu_f16_256x128_32x3_tn_align8",
        "void sglang::token_to_kv_pool::store_kernel<float>(float*)",
        "ld.global.nc.v4.u32 {%r1, %r2, %r3, %r4}, [%rd12+4096];",
        ".param .align 8 .b8 _Z10oob_kernelPfif_param_0[40], $L__BB0_3, __cudart_i2opi_f",
        "Zm9yIGEgUFRYIGJ5dGVzIHRoYXQgbG9vayBsaWtlIGJhc2U2NCBidXQgYXJlbnQ=",
        "QWxhZGRpbjpvcGVuIHNlc2FtZQ+AbCdEfGhIjKlMnOpQrStUvWxYz0123456789/+",
        "gemm/kernel/Sm90GemmTmaWarpSpecialized12 and src/Include/Cute/Atom/Mma128x256x64",
        "num_tokens=128 max_tokens: 4096 tokenizer_path=/models/x --max-num-batched-tokens 8192",
        "--tokenizer-mode auto --skip-tokenizer-init --enable-prefix-caching",
        "AIzaSyA1234567890abcdefghijklmnopqrstuvwxyz0123 (too long for a Google key)",
    ],
)
def test_look_alikes_are_kept(text):
    assert redact(text) == text


# Each line is 1 MiB or so, and aims at one pattern: a key's word or a flag repeated with no
# value after it, a marker with no end, a run of a class that a bounded repetition walks.
CRAFTED = {
    "keys": "password" * 131_072,
    "long-value": "token=" + "a" * 1_048_576,
    "key-no-value": ("api_key" + "a" * 31 + " " * 3) * 25_000,
    "bearers": "Bearer " * 150_000,
    "url": "x://" + "a" * 1_048_576 + ":",
    "homes": "/home/" * 175_000,
    "home-long-name": "/home/" + "a" * 1_048_576,
    "jwt-like": "eyJ" + "a" * 1_048_576,
    "flags": "--api-key" * 116_000,
    "flag-words": "--a-b-c-d-e-f-" * 75_000,
    "flag-dashes": "-- " * 350_000,
    "flag-no-value": "--token " * 131_072,
    "pem-begins": "-----BEGIN PRIVATE KEY-----" * 38_000,
    "pem-no-end": "-----BEGIN PRIVATE KEY-----" + "A" * 1_048_576,
    "pem-dashes": "-----BEGIN PRIVATE KEY-----" + "-" * 1_048_576,
    "aws-named": "secret_key " * 95_000,
    "aws-runs": "Ab1/" * 262_144,
    "aws-words": ("Ab1/" * 10 + " ") * 25_000,
    "slack": "hooks.slack.com/services/" * 42_000,
    "google": "AIza" * 262_144,
    "gitlab": "glpat-" * 175_000,
}
# A crafted line costs what plain text of its length costs (1 to 2 times, measured): the
# bound is a ratio to plain text timed in the same process, so a loaded machine slows both,
# while a pattern that backtracks takes minutes, thousands of times more.
LINEAR_RATIO = 10.0


def _best_seconds(text: str, runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        redact(text)
        best = min(best, time.perf_counter() - started)
    return best


@pytest.fixture(scope="module")
def plain_seconds() -> float:
    return _best_seconds("the quick brown fox " * 52_429, runs=3)


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_redaction_is_linear_on_crafted_lines(case, plain_seconds):
    line = CRAFTED[case]
    assert len(line) >= 1_000_000
    assert _best_seconds(line, runs=2) < LINEAR_RATIO * plain_seconds


@dataclass(frozen=True, slots=True)
class _Inner:
    text: str
    number: int


@dataclass(frozen=True, slots=True)
class _Outer:
    inner: _Inner
    lines: tuple[str, ...]
    extra: dict[str, str]


def test_every_string_of_a_nested_value_is_redacted():
    value = _Outer(_Inner("token=abc", 3), ("/home/eve/a", "plain"), {"k": "passwd=x"})
    assert redact_strings(value) == _Outer(
        _Inner(f"token={REDACTED}", 3), ("~/a", "plain"), {"k": f"passwd={REDACTED}"}
    )


def test_home_folders_alone_are_hidden_in_a_report_s_strings():
    from postmortem.host.redact import hide_home_folders

    report = {"path": "/home/bob/d/x.nvcudmp", "logs": ["/Users/eve/l.txt", "/rootless/x"],
              "n": 3, "pair": ("/root/a", "token=abc")}  # fmt: skip
    assert hide_home_folders(report) == {
        "path": "~/d/x.nvcudmp", "logs": ["~/l.txt", "/rootless/x"], "n": 3,
        "pair": ("~/a", "token=abc"),
    }  # fmt: skip
