"""The self-check's result: one verdict per check (pass, fail or not applicable, each with its figure), printed as a
table while the checks run and written as one JSON file to share."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

PASS, FAIL, NOT_APPLICABLE = "pass", "fail", "n/a"
SECTIONS = ("environment", "correctness", "placement", "speed")
#: Sections whose failed checks make the exit status non-zero: a wrong result, or a step that stalls the device
#: on the host at every step. A slow or input-bound measurement is reported, not failed on.
FATAL_SECTIONS = ("correctness", "placement")
EXIT_FAILED = 1


@dataclasses.dataclass
class Check:
    """One line of the report.

    Attributes:
      section: one of `SECTIONS`.
      name: what was checked, e.g. ``replicas match one device: moco``.
      status: `PASS`, `FAIL` or `NOT_APPLICABLE`.
      figure: the measured figure or the reason, in words, for the terminal.
      values: the same figures as numbers, for the JSON file.
      fatal: a failure here makes the exit status non-zero (None: when its section is one of `FATAL_SECTIONS`).
    """

    section: str
    name: str
    status: str
    figure: str
    values: dict[str, Any] = dataclasses.field(default_factory=dict)
    fatal: bool | None = None

    def __post_init__(self) -> None:
        if self.section not in SECTIONS or self.status not in (PASS, FAIL, NOT_APPLICABLE):
            raise ValueError(f"bad check {self.section!r}/{self.status!r}")

    def line(self) -> str:
        """The terminal line: verdict, name, figure."""
        return f"  {self.status.upper():<4}  {self.name:<44} {self.figure}"

    def as_json(self) -> dict[str, Any]:
        """The JSON entry of this check."""
        return {"name": self.name, "status": self.status, "figure": self.figure, "values": self.values,
                "fatal": self.fatal}


class Report:
    """The checks so far, printed as they arrive (a section's header before its first line)."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.checks: list[Check] = []
        self.facts: dict[str, Any] = {}
        self.out = out if out is not None else sys.stdout
        self._section: str | None = None

    def add(self, check: Check) -> Check:
        """Records ``check`` and prints its line."""
        if check.fatal is None:
            check.fatal = check.section in FATAL_SECTIONS
        if check.section != self._section:
            self._section = check.section
            print(f"\n{check.section.capitalize()}", file=self.out)
        self.checks.append(check)
        print(check.line(), file=self.out, flush=True)
        return check

    def guarded(self, section: str, name: str, run: Callable[[], Check | list[Check]]) -> list[Check]:
        """Runs one check; an exception becomes its failed line (the other checks still run)."""
        t0 = time.perf_counter()
        try:
            found = run()
        except Exception as err:  # a crash is the finding: report it and go on with the other checks
            from augself_tf.selfcheck.harness import first_line

            found = Check(section, name, FAIL, f"raised {first_line(err)}", {"error": first_line(err, 2000)})
        found = found if isinstance(found, list) else [found]
        for check in found:
            check.values.setdefault("seconds", round(time.perf_counter() - t0, 1))  # where a slow check's time went
        return [self.add(c) for c in found]

    def counts(self) -> dict[str, int]:
        """Checks per verdict."""
        return {s: sum(c.status == s for c in self.checks) for s in (PASS, FAIL, NOT_APPLICABLE)}

    def exit_status(self) -> int:
        """`EXIT_FAILED` when a check of `FATAL_SECTIONS` failed, else 0."""
        return EXIT_FAILED if any(c.fatal and c.status == FAIL for c in self.checks) else 0

    def summary(self) -> str:
        """The closing line."""
        counts = self.counts()
        fatal = sum(c.fatal and c.status == FAIL for c in self.checks)
        verdict = "FAILED" if fatal else "OK"
        return (f"{verdict}: {counts[PASS]} pass, {counts[FAIL]} fail ({fatal} failing the exit status), "
                f"{counts[NOT_APPLICABLE]} not applicable")

    def as_json(self, **header: Any) -> dict[str, Any]:
        """Everything, by section: ``header`` (command, settings, seconds), the environment's facts, every
        check, the counts and the exit status."""
        return {**header, "facts": self.facts,
                "sections": {s: [c.as_json() for c in self.checks if c.section == s] for s in SECTIONS},
                "counts": self.counts(), "exit_status": self.exit_status()}

    def write(self, path: str, **header: Any) -> None:
        """Writes `as_json` to ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.as_json(**header), f, indent=1, default=str)
            f.write("\n")
