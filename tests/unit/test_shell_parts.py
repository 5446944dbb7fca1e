"""The parts of ``det shell`` (issue 58) that need no master and no process: the commands
table's kind column added to a table made before shells, the host key a task reports
(tests/e2e/test_shell_parts.py: its environment file and sshd config, with bash and sshd)."""

from __future__ import annotations

import pytest

from det_sdk.master.commands import CommandTable
from det_sdk.master.errors import InvalidRequest
from det_sdk.master.shells import ShellTable, check_host_key
from det_sdk.master.store import Store


def test_a_commands_table_made_before_shells_gets_its_kind_column() -> None:
    store = Store(":memory:")
    with store.tx() as db:
        db.execute("""CREATE TABLE commands (
            id INTEGER PRIMARY KEY AUTOINCREMENT, description TEXT NOT NULL,
            config TEXT NOT NULL, state TEXT NOT NULL, archive TEXT NOT NULL,
            allocation TEXT, exit_code INTEGER, exit_status TEXT,
            created REAL NOT NULL, started REAL, ended REAL, owner_id INTEGER)""")
        db.execute("INSERT INTO commands (description, config, state, archive, created) "
                   """VALUES ('old', '{"entrypoint": ["true"], "resources": {"slots": 1}}',"""
                   " 'TERMINATED', 'a.tgz', 0)")
    table = CommandTable(store)
    shell = table.insert({"entrypoint": ["x"], "resources": {"slots": 1}}, "b.tgz",
                         kind="shell")
    assert [r["id"] for r in table.all("command")] == [1]
    assert [r["id"] for r in table.all("shell")] == [shell]
    ShellTable(store).insert(shell, "PRIVATE", "ssh-ed25519 AAAA")
    assert ShellTable(store).get(shell)["private_key"] == "PRIVATE"


def test_a_reported_host_key_is_one_ed25519_key() -> None:
    assert check_host_key("ssh-ed25519 " + "A" * 68 + " comment") == "ssh-ed25519 " + "A" * 68
    # what follows the key (a comment, another line) is dropped: known_hosts gets one line
    assert check_host_key("ssh-ed25519 " + "A" * 68 + "\n@cert-authority *") == \
        "ssh-ed25519 " + "A" * 68
    for bad in ("", "ssh-ed25519", "ssh-rsa " + "A" * 68, "ssh-ed25519 AAAA;rm",
                "ssh-ed25519 " + "A" * 40 + "\x00"):
        with pytest.raises(InvalidRequest, match="host_key"):
            check_host_key(bad)
