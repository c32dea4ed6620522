"""Reading one `popula eval --json` report back: the object, or a one-line error naming the file.

Every reader of a score file (the eval figure, the paired comparisons, the learning benchmark)
goes through here, so a missing file, one a scorer stopped mid-write, a population's combined
report and an unrelated JSON each get the same message wherever they are read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from popula.errors import PopulaError


def read_report(path: Path) -> dict[str, Any]:
    """One member's `popula eval --json` report from PATH, or a `PopulaError` naming the file."""
    try:
        report = json.loads(path.read_text())
    except FileNotFoundError:
        raise PopulaError(f"{path}: no such evaluation report") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PopulaError(f"{path}: not a JSON evaluation report ({err}); a scorer stopped mid-write leaves one "
                          "cut short: score it again with `popula eval ... --json`") from None
    if isinstance(report, dict) and report.get("kind") == "population":
        names = ", ".join(str(m.get("member")) for m in report.get("members", []))
        raise PopulaError(f"{path}: a population report (members {names}); read one member's report: score it with "
                          "`popula eval RUN_DIR --adapter NAME --json`, or save one entry of its \"members\" list "
                          "(each is that member's own report)")
    if not isinstance(report, dict) or "overall" not in report or "by_type" not in report:
        raise PopulaError(f"{path}: not a `popula eval --json` report (no 'overall' / 'by_type')")
    return report
