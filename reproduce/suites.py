"""The registry of arm sets (``--suite``): what each runs and how its report is written, one entry per suite.

A suite is its arms (reproduce/<suite>_arms.py) and its report (reproduce/<suite>_report.py), which writes its own
block of docs/results.md; adding one is those two files and one entry here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from reproduce import (
    aware_arms,
    aware_report,
    comparison_arms,
    comparison_report,
    ledger,
    looc_arms,
    looc_report,
    main_arms,
    main_report,
    recipe_arms,
    recipe_report,
    vit_arms,
    vit_report,
)
from reproduce.arm_settings import Arm

#: (ledger entries, epochs or None, width or None) -> the suite's arms as the ledger stands.
ArmList = Callable[[list[dict], "int | None", "float | None"], list[Arm]]
#: (ledger dir, arms, results.md, picture, command) -> the block written.
ReportWriter = Callable[[str, Sequence[Arm], str, str, str], str]


@dataclasses.dataclass(frozen=True)
class Suite:
    """One arm set: its help line, its arms, its ``--quick`` smoke arms (or why it has none), its report."""

    name: str
    help: str
    arms: ArmList
    write_report: ReportWriter
    command: str
    quick_arms: Callable[[], list[Arm]] | None = None
    no_quick: str = ""  # why --quick has no version of this suite
    picture_file: str = ""  # its picture's file name, when not the ω-probe heat map <name>_omega_probe.png

    def picture(self) -> str:
        """The picture's file name (under docs/img/, or under ``--out`` with ``--quick``)."""
        return self.picture_file or f"{self.name}_omega_probe.png"


SUITES = {s.name: s for s in (
    Suite("main", "the main reproduction: SimSiam/MoCo ± AugSelf, CASSLE",
          lambda entries, epochs, width: main_arms.default_arms(epochs, width), main_report.write_report,
          ledger.COMMAND, main_arms.quick_arms, picture_file="reproduce_small_curves.png"),
    Suite("looc", "the paper's LooC comparison table",
          lambda entries, epochs, width: looc_arms.looc_table_arms(epochs, width), looc_report.write_report,
          looc_report.COMMAND, looc_arms.quick_looc_arms),
    Suite("aware", "the augmentation-aware family: AugSelf, CASSLE, EquiMod, E-SSL, STL on SimSiam and SimCLR",
          aware_arms.suite_arms, aware_report.write_report, aware_report.COMMAND, aware_arms.quick_aware_arms),
    Suite("recipe", "the ledger recipe's sweep, judged on a held-out split",
          lambda entries, epochs, width: recipe_arms.sweep_arms(), recipe_report.write_report, recipe_report.COMMAND,
          no_quick="its arms are the screen's"),
    Suite("comparison", "the README's rows, the family with its controls and the SimCLR rows at the ledger recipe, "
          "BN statistics recomputed", comparison_arms.suite_arms, comparison_report.write_report,
          comparison_report.COMMAND, no_quick="its arms wait for the recipe sweep's entries"),
    Suite("vit", "MoCo v3 and DINO ± AugSelf on the CPU-scale ViT and on the ledger's ResNet, beside their "
          "never-trained floors", vit_arms.suite_arms, vit_report.write_report, vit_report.COMMAND,
          no_quick="its arms wait for MoCo v2's recipe sweep", picture_file="vit_curves.png"),
)}
