"""rankscope.meanwhile: modules imported in a thread while the caller waits."""

from __future__ import annotations

import subprocess
import sys

#: A fresh interpreter: which modules the thread imported, that a broken one raised nothing there,
#: that the caller's own import raises it, and that the switch interval is back.
CODE = """
import sys
before = sys.getswitchinterval()
from rankscope.meanwhile import Meanwhile
warm = Meanwhile(["rankscope.stacks.report", "rankscope.no_such_module", "json"])
warm.join()
print("report" if "rankscope.stacks.report" in sys.modules else "-")
print("interval back" if sys.getswitchinterval() == before else "interval changed")
try:
    import rankscope.no_such_module
except ImportError:
    print("raised in the caller")
Meanwhile(["json"]).join()  # nothing left to import: no thread, join returns
print("done")
"""


def test_modules_are_imported_meanwhile_and_errors_stay_with_the_caller() -> None:
    run = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n") == ["report", "interval back", "raised in the caller", "done", ""]
    assert run.stderr == ""


#: ``then`` runs in the thread after the imports; join returns its result, None where it raised.
THEN = """
import _thread
from rankscope.meanwhile import Meanwhile
main = _thread.get_ident()
print(Meanwhile(["json"], then=lambda: _thread.get_ident() != main).join())
def broken():
    raise OSError("listing failed")
print(Meanwhile([], then=broken).join())
"""


def test_the_call_after_the_imports_runs_in_the_thread_and_its_error_stays_there() -> None:
    run = subprocess.run([sys.executable, "-c", THEN], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n") == ["True", "None", ""]
    assert run.stderr == ""
