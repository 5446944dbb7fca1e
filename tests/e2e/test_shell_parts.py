"""The task's side of ``det shell`` (issue 58, det_sdk.launch.sshd) with the real bash and
OpenSSH's own ``sshd -t``: its environment file gives a session every value as the task
had it, and sshd accepts its config."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from det_sdk.launch.sshd import environment_file, session_script, sshd_config

pytestmark = pytest.mark.stack_neutral


def test_the_environment_file_gives_bash_every_value_as_it_was(tmp_path: Path) -> None:
    values = {"DET_CONFIG": '{"a": "b c", "d": [1, 2]}', "QUOTES": "it's \"x\" $HOME `id`",
              "LINES": "one\ntwo", "EMPTY": "", "HOME": "/not/this", "TERM": "dumb"}
    env = tmp_path / "env"
    env.write_text(environment_file(values))
    script = tmp_path / "print.sh"
    script.write_text(session_script(env, tmp_path).replace(
        'exec -l "${SHELL:-/bin/bash}"', 'printf "%s\\0" "$PWD" "$DET_CONFIG" "$QUOTES" '
        '"$LINES" "${EMPTY-unset}" "$HOME"'))
    out = subprocess.run(["bash", str(script)], capture_output=True, check=True,
                         env={"HOME": "/home/me", "PATH": "/usr/bin:/bin"}).stdout
    pwd, config, quotes, lines, empty, home = out.decode().split("\0")[:6]
    assert (pwd, config, quotes, lines, empty) == (
        str(tmp_path), values["DET_CONFIG"], values["QUOTES"], "one\ntwo", "")
    assert home == "/home/me"  # the session's own, not the task's


@pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="no OpenSSH sshd")
def test_sshd_accepts_the_config(tmp_path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                    str(tmp_path / "host_key")], check=True)
    (tmp_path / "sshd_config").write_text(sshd_config(tmp_path, 2222, "nobody"))
    checked = subprocess.run(["/usr/sbin/sshd", "-t", "-f", str(tmp_path / "sshd_config")],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    # what sshd makes of it: ours, not the machine's defaults
    effective = subprocess.run(["/usr/sbin/sshd", "-T", "-f", str(tmp_path / "sshd_config")],
                               capture_output=True, text=True)
    if effective.returncode == 0:  # -T needs the privilege separation user's lookups
        lines = set(effective.stdout.splitlines())
        assert {"usepam no", "passwordauthentication no", "listenaddress 127.0.0.1:2222",
                "kbdinteractiveauthentication no"} <= lines, effective.stdout
