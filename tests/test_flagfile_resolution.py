"""Every flagfile in flags/ resolves, includes and all, to the flags it resolved to when it was recorded.

The flagfiles share their paper settings through absl's nested ``--flagfile=`` includes (flags/base/). absl
opens an included path as written, relative to the directory the command runs in, not to the including file;
the repository's flagfiles are written for its root, where every documented command runs, so they are parsed
from there. tests/snapshots/flagfile_resolved_flags.json holds, for each flagfile, the value of every flag
augself-train defines and the flags it sets, recorded from the flagfiles before they shared any setting: a
change of any resolved value, or a flag set or no longer set, fails here.

After a deliberate change of a flagfile, record again from the repository root and review the diff:
``python -m tests.test_flagfile_resolution``.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re

import pytest
from absl import flags as absl_flags

from augself_tf.training.train_config import define_train_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SNAPSHOT = os.path.join(ROOT, "tests", "snapshots", "flagfile_resolved_flags.json")
#: The runnable flagfiles: flags/*.cfg (the shared parts under flags/base/ are included, never run alone).
NAMES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "flags", "*.cfg")))
INCLUDE = re.compile(r"^\s*--?flagfile=(\S+)\s*$")


def resolve(name: str) -> dict:
    """``--flagfile=flags/NAME`` parsed by augself-train's flags from the repository root: every flag's value,
    and the names of the flags the file sets (its includes' too)."""
    values = absl_flags.FlagValues()
    define_train_flags(values, "augself-train")
    with contextlib.chdir(ROOT):
        values(["augself-train", f"--flagfile=flags/{name}"])
    return {"values": {flag: values[flag].value for flag in sorted(values)},
            "set": sorted(flag for flag in values if values[flag].present)}


def record() -> dict:
    """What the snapshot holds: every runnable flagfile's resolution."""
    return {name: resolve(name) for name in NAMES}


@pytest.fixture(scope="module")
def snapshot() -> dict:
    with open(SNAPSHOT) as f:
        return json.load(f)


def test_the_snapshot_covers_every_flagfile(snapshot):
    assert sorted(snapshot) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_a_flagfile_resolves_to_its_recorded_flags(name, snapshot):
    before, now = snapshot[name], resolve(name)
    assert now["set"] == before["set"], name
    # A flag defined after the recording (a new setting) is at its default in every flagfile: set nowhere.
    assert {flag: now["values"].get(flag, "(not defined)") for flag in before["values"]} == before["values"], name


def test_every_include_is_written_from_the_repository_root_and_exists():
    """An include is a path from the root (absl resolves it from the working directory, which for every
    documented command is the root), under flags/, and no flagfile includes itself through another."""
    files = glob.glob(os.path.join(ROOT, "flags", "**", "*.cfg"), recursive=True)
    includes = 0
    for path in files:
        with open(path) as f:
            for line in f:
                if m := INCLUDE.match(line):
                    includes += 1
                    target = m.group(1)
                    assert target.startswith("flags/") and not os.path.isabs(target), (path, target)
                    assert os.path.isfile(os.path.join(ROOT, target)), (path, target)
                    assert os.path.normpath(os.path.join(ROOT, target)) != os.path.normpath(path), path
    assert includes >= len(NAMES) - 5  # the paper's settings are included, not repeated (see flags/base/)


def test_an_include_is_resolved_from_the_working_directory_not_the_including_file(tmp_path):
    """absl's behaviour the scheme rests on: from another directory a root-relative include is not found, and
    the error names the path."""
    values = absl_flags.FlagValues()
    define_train_flags(values, "augself-train")
    with contextlib.chdir(tmp_path), pytest.raises(absl_flags.CantOpenFlagFileError, match="flags/base/"):
        values(["augself-train", f"--flagfile={os.path.join(ROOT, 'flags', 'stl10_simsiam.cfg')}"])


def test_the_programs_say_where_includes_are_opened_from(tmp_path, monkeypatch, capsys):
    """Run from elsewhere, a repository flagfile's include is not found: one line says why, exit status 2."""
    from augself_tf import train  # noqa: F401 (defines augself-train's flags on absl's FLAGS)
    from augself_tf.startup import parse_flags_or_exit_2

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        parse_flags_or_exit_2(["augself-train", f"--flagfile={os.path.join(ROOT, 'flags', 'stl10_simsiam.cfg')}"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1
    assert "flags/base/stl10.cfg" in err and "opened from the directory the command runs in" in err


if __name__ == "__main__":
    with open(SNAPSHOT, "w") as out:
        json.dump(record(), out, indent=1, sort_keys=True)
        out.write("\n")
    print(f"recorded {len(NAMES)} flagfiles in {os.path.relpath(SNAPSHOT, ROOT)}")
