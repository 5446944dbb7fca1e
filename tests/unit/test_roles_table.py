"""The roles' table (issue 59) is one table: docs/security.md shows
det_sdk.master.permissions.ROLES as it is."""

from __future__ import annotations

import re
from pathlib import Path

from det_sdk.master.permissions import ROLES

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def test_security_md_shows_the_roles_table_of_the_code() -> None:
    text = DOC.read_text()
    section = text[text.index("## Roles"):]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| (\w+) \| (`PERMISSION_TYPE_.*) \|$", line)
        if m:
            rows[m.group(1)] = set(re.findall(r"`(\w+)`", m.group(2)))
    assert rows == {name: set(perms) for name, perms in ROLES.items()}
