"""Several command lines of one program (train_main.py, eval_main.py) for the price of one TensorFlow import.

Each command line of a bad-input test is a process of its own in the tests that check what a user sees
(exit status, stderr), and each such process spends most of its seconds importing TensorFlow. Here one
Python process imports the program once, as running the script would, then forks one child per command
line: the child sets ``sys.argv`` and calls the script's entry point, with its stdout and stderr in files of
its own. A child is the process a user would have started, minus the import already done: its stderr is
what the import printed followed by what the child printed, an uncaught exception prints its traceback and
exits 1 as the interpreter does, ``sys.exit`` codes and deaths by signal come back as ``returncode``.
Nothing has run a TensorFlow op before the fork (importing builds no runtime), so each child starts its own.
A case may carry a file-size limit: the child sets it (RLIMIT_FSIZE, SIGXFSZ ignored, so a write past it fails
with EFBIG as a full disk's fails with ENOSPC) before it runs, as a ``preexec_fn`` would for a process of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys

_DRIVER = r'''
import json, os, resource, runpy, signal, sys, tempfile, traceback

script, cases, limits = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
sys.argv = [script]
sys.stderr.flush()
program = runpy.run_path(script, run_name="__program__")  # the script's imports, not its main()
sys.stdout.flush(); sys.stderr.flush()
results = []
for argv, limit in zip(cases, limits):
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    pid = os.fork()
    if pid == 0:  # the child: the user's process from here on
        os.dup2(out.fileno(), 1); os.dup2(err.fileno(), 2)
        if limit is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        sys.argv = [script, *argv]
        code = 0
        try:
            program["cli"]()
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:
                print(e.code, file=sys.stderr); code = 1
        except BaseException:
            traceback.print_exc(); code = 1
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    out.seek(0); err.seek(0)
    results.append({"returncode": code, "stdout": out.read().decode(errors="replace"),
                    "stderr": err.read().decode(errors="replace")})
print("\n@@RESULTS@@" + json.dumps(results))
'''


def run_program(script: str, cases: list[list[str]], *, cwd: str, env: dict[str, str], timeout: float = 600,
                max_file_bytes: dict[int, int] | None = None) -> list[subprocess.CompletedProcess]:
    """``python script *argv`` for each argv of ``cases``, as separate processes that share one import;
    ``max_file_bytes`` maps a case's index to the largest file its process may write."""
    limits = [(max_file_bytes or {}).get(i) for i in range(len(cases))]
    proc = subprocess.run([sys.executable, "-c", _DRIVER, script, json.dumps(cases), json.dumps(limits)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=timeout)
    marker = proc.stdout.rfind("\n@@RESULTS@@")
    assert proc.returncode == 0 and marker >= 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    imported_out, imported_err = proc.stdout[:marker], proc.stderr  # what importing printed, before any child
    return [subprocess.CompletedProcess([sys.executable, script, *argv], r["returncode"],
                                        imported_out + r["stdout"], imported_err + r["stderr"])
            for argv, r in zip(cases, json.loads(proc.stdout[marker + len("\n@@RESULTS@@"):]), strict=True)]
