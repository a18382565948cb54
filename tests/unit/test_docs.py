"""docs/security.md maps every guarantee to a test: every test it names must exist."""

from __future__ import annotations

import re

from support import ROOT


def test_every_test_named_in_the_security_checklist_exists():
    text = (ROOT / "docs" / "security.md").read_text()
    rows = [
        line
        for line in text.splitlines()
        if line.startswith("| ") and "---" not in line and not line.startswith("| guarantee")
    ]
    assert len(rows) >= 25
    for row in rows:
        references = re.findall(r"`((?:tests/[\w/]+\.py|…)(?:::[\w\[\] ]+)?)`", row)
        assert references, f"no test named for: {row}"
        current = None
        for reference in references:
            path, _, name = reference.partition("::")
            if path != "…":
                current = ROOT / path
                assert current.exists(), reference
            if name:
                function = name.split("[")[0]
                assert current is not None
                assert f"def {function}(" in current.read_text(), reference
