"""The known crash patterns, on the frames gdb prints for them (pure)."""

from __future__ import annotations

import pytest

from rankscope.core.backtrace import explain, parse_gdb
from rankscope.model import Frame


def _frames(*functions: str) -> list[Frame]:
    return [Frame(name, "", 0, "") for name in functions]


ABORT = ("__pthread_kill_implementation", "__GI_raise", "__GI_abort")


@pytest.mark.parametrize(
    ("functions", "words"),
    [
        (
            (
                *ABORT,
                "__gnu_cxx::__verbose_terminate_handler",
                "std::terminate()",
                "c10d::ProcessGroupNCCL::WorkNCCL::handleNCCLGuard(c10d::ErrorHandlingMode)",
                "c10d::ProcessGroupNCCL::Watchdog::runLoop()",
            ),
            "asynchronous NCCL error surfaced by ProcessGroupNCCL's watchdog",
        ),
        (
            (*ABORT, "c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, int, bool)"),
            "CUDA_LAUNCH_BLOCKING=1",
        ),
        (
            (
                *ABORT,
                "std::terminate()",
                "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc",
            ),
            "out of memory",
        ),
        ((*ABORT, "__libc_message", "malloc_printerr", "_int_free"), "heap damaged"),
        ((*ABORT, "std::terminate()", "__cxa_rethrow"), "std::terminate"),
        (ABORT, "called abort()"),
    ],
)
def test_sigabrt_patterns(functions: tuple[str, ...], words: str) -> None:
    meaning = explain("SIGABRT", _frames(*functions), [], gcore=False)
    assert meaning is not None and words in meaning


def test_a_segfault_names_the_extension_not_libc_or_python() -> None:
    frames = [Frame("memcpy", "", 0, "/lib/libc.so.6"), Frame("kernel_launch", "", 0, "libmyext.so")]
    meaning = explain("SIGSEGV", frames, ["libmyext.so", "libpython3.11.so.1.0"], gcore=False)
    assert meaning is not None and meaning.startswith("SIGSEGV in native code called from libmyext.so")


def test_a_gcore_is_not_a_crash() -> None:
    meaning = explain("no signal", _frames(*ABORT), [], gcore=True)
    assert meaning is not None and "not a crash" in meaning


def test_gdb_text_without_markers_or_threads_gives_nothing() -> None:
    assert parse_gdb("garbage\n#0 nothing\n") == (None, [])
