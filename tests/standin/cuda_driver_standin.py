"""A stand-in for the CUDA driver's coredump behaviour, for testing `postmortem capture` and
`postmortem trigger` on machines without a GPU. It is never a real capture: every dump it
"writes" is a copy of a committed fixture dump (fixtures/dumps/), and the lines it prints are
modelled on published samples, not recorded from a driver.

What it imitates, from the environment the driver reads:

- `CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1`: on the "exception" (`--fault FIXTURE`) a dump is
  written to `CUDA_COREDUMP_FILE` (default ``core_%t_%h_%p.nvcudmp``, cuda-gdb's manual) with
  ``%h`` the host name, ``%p`` the process id and ``%t`` Unix seconds.
- `CUDA_COREDUMP_SHOW_PROGRESS=1`: progress lines like those in vLLM's "CUDA Core Dump" posts
  (2025-08-11, 2025-12-03), ``[HH:MM:SS.ffffff] coredump: Writing ELF file to PATH`` among
  them. Which stream the driver prints them on is not documented; this prints them on
  standard error.
- Then, as a PyTorch program does, a Python traceback of the CUDA error on standard error, and
  a non-zero exit (`--exit N`), or SIGABRT (`--abort`) as the driver's own abort after a dump.
- `CUDA_ENABLE_USER_TRIGGERED_COREDUMP=1` with `--hang FIXTURE`: makes the FIFO named by
  `CUDA_COREDUMP_PIPE` (default ``corepipe.cuda.%h.%p``), blocks reading 1 MiB from it, then
  writes the hang dump and goes on hanging.
- `CUDA_COREDUMP_GENERATION_FLAGS` is ignored: the fixture is copied as it is.
- `--self-trigger` (with `--hang`): as SGLang's crash path does, the process writes its own
  pipe and logs ``Triggered CUDA user coredump for PID N via PIPE`` (on standard error, as
  its logger does); once the dump is written it exits (`--exit N`).

For the tests' sake: `--say TEXT` prints TEXT on standard output first; `--record FILE` appends
the name of every signal received to FILE (SIGUSR1/2 are survived, the others then kill it as
they would by default); `--ready FILE` writes the pid into FILE once the signal handlers and the
pipe are in place; `--wait` hangs until a signal ends it; `--worker` has a child process of its
own fault (its dump is named by the child's pid, found only through the printed line);
`--live SECONDS` ends the process (`--exit N`) after SECONDS whatever it is doing, the pipe
left behind as a killed process leaves it; `--coredump-file PATTERN` is the program setting
`CUDA_COREDUMP_FILE` itself before CUDA starts (its value wins over the environment's).
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

RECORDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
SURVIVED = ("SIGUSR1", "SIGUSR2")
TRIGGER_BYTES = 1 << 20


def expand(pattern: str) -> str:
    values = {"h": socket.gethostname(), "p": str(os.getpid()), "t": str(int(time.time()))}
    out, index = [], 0
    while index < len(pattern):
        if pattern[index] == "%" and index + 1 < len(pattern):
            spec = pattern[index + 1]
            out.append(values.get(spec, "%" if spec == "%" else pattern[index : index + 2]))
            index += 2
        else:
            out.append(pattern[index])
            index += 1
    return "".join(out)


def progress(line: str) -> None:
    if os.environ.get("CUDA_COREDUMP_SHOW_PROGRESS") == "1":
        now = datetime.datetime.now().strftime("%H:%M:%S.%f")
        print(f"[{now}] coredump: {line}", file=sys.stderr, flush=True)


def write_dump(fixture: Path) -> Path:
    target = Path(expand(os.environ.get("CUDA_COREDUMP_FILE") or "core_%t_%h_%p.nvcudmp"))
    progress(f"Writing ELF file to {target}")
    progress("Writing out global memory (0 bytes)")
    progress("Writing out device table")
    shutil.copyfile(fixture, target)
    progress("Writing out metadata")
    progress("Finalizing")
    progress("Writing done")
    progress("All done (took 00s)")
    return target


def fault(args: argparse.Namespace) -> None:
    if os.environ.get("CUDA_ENABLE_COREDUMP_ON_EXCEPTION") == "1":
        progress("Detected an exception of type CUDBG_EXCEPTION_WARP_ILLEGAL_ADDRESS (14)")
        progress("  - Device: 0")
        write_dump(args.fault)
    if args.abort:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no host core file beside the test
        os.abort()
    try:
        raise RuntimeError(
            "CUDA error: an illegal memory access was encountered\n"
            "CUDA kernel errors might be asynchronously reported at some other API call, so "
            "the stacktrace below might be incorrect.\n"
            "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
            "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."
        )
    except RuntimeError:
        import traceback

        traceback.print_exc()
    sys.exit(args.exit)


def hang(args: argparse.Namespace) -> None:
    if os.environ.get("CUDA_ENABLE_USER_TRIGGERED_COREDUMP") != "1":
        return
    pipe = Path(expand(os.environ.get("CUDA_COREDUMP_PIPE") or "corepipe.cuda.%h.%p"))
    os.mkfifo(pipe)
    ready(args)
    trigger = threading.Thread(target=self_trigger, args=(pipe,), daemon=True)
    if args.self_trigger:
        trigger.start()
    try:
        with open(pipe, "rb") as reader:  # blocks until a writer opens it
            taken = 0
            while taken < TRIGGER_BYTES and (chunk := reader.read(TRIGGER_BYTES - taken)):
                taken += len(chunk)
        write_dump(args.hang)
    finally:
        pipe.unlink()
    if args.self_trigger:
        trigger.join()  # its log line is out before the process ends (a loaded machine)
        sys.exit(args.exit)
    wait()


def self_trigger(pipe: Path) -> None:
    # SGLang's trigger_cuda_user_coredump: a non-blocking open, one byte, then its log line.
    while True:
        try:
            fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError:  # no reader yet
            time.sleep(0.01)
    try:
        os.write(fd, b"1")
    finally:
        os.close(fd)
    print(
        f"[2025-11-27 02:00:00 TP0] Triggered CUDA user coredump for PID {os.getpid()} via {pipe}",
        file=sys.stderr,
        flush=True,
    )


def record(path: Path) -> None:
    def handler(number: int, _frame: object) -> None:
        name = signal.Signals(number).name
        with open(path, "a", encoding="utf-8") as file:
            file.write(name + "\n")
        if name not in SURVIVED:
            signal.signal(number, signal.SIG_DFL)
            os.kill(os.getpid(), number)

    for name in RECORDED:
        signal.signal(getattr(signal, name), handler)


def ready(args: argparse.Namespace) -> None:
    if args.ready is not None:
        args.ready.write_text(str(os.getpid()))


def wait() -> None:
    deadline = time.monotonic() + 60  # never outlive a test run
    while time.monotonic() < deadline:
        time.sleep(0.05)
    sys.exit(99)


def worker(args: list[str]) -> None:
    child = subprocess.run([sys.executable, __file__, *(a for a in args if a != "--worker")])
    sys.exit(child.returncode if child.returncode >= 0 else 128 - child.returncode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fault", type=Path, metavar="FIXTURE")
    parser.add_argument("--hang", type=Path, metavar="FIXTURE")
    parser.add_argument("--exit", type=int, default=1)
    parser.add_argument("--abort", action="store_true")
    parser.add_argument("--say")
    parser.add_argument("--record", type=Path)
    parser.add_argument("--ready", type=Path)
    parser.add_argument("--wait", action="store_true")
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--self-trigger", action="store_true")
    parser.add_argument("--live", type=float, metavar="SECONDS")
    parser.add_argument("--coredump-file", metavar="PATTERN")
    args = parser.parse_args()
    if args.coredump_file is not None:
        os.environ["CUDA_COREDUMP_FILE"] = args.coredump_file
    if args.live is not None:
        threading.Timer(args.live, os._exit, args=(args.exit,)).start()
    if args.worker:
        worker(sys.argv[1:])
    if args.record is not None:
        record(args.record)
    if args.say is not None:
        print(args.say, flush=True)
    if args.hang is not None:
        hang(args)
    ready(args)
    if args.wait:
        wait()
    if args.fault is not None:
        fault(args)
    sys.exit(args.exit)


if __name__ == "__main__":
    main()
