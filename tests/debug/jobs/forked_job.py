"""A multiprocessing child (its stdin is /dev/null) stopped in rankscope.ForkedPdb."""

import multiprocessing

import rankscope


def child(n: int) -> None:
    rankscope.ForkedPdb().set_trace()
    doubled = n * 2
    print(f"child doubled {doubled}", flush=True)


if __name__ == "__main__":
    process = multiprocessing.get_context("fork").Process(target=child, args=(21,))
    process.start()
    process.join()
    print(f"child exit {process.exitcode}", flush=True)
