"""A shell's task (``det shell start``; the master's side: ``det_sdk.master.shells``):
OpenSSH's ``sshd`` in the foreground, unprivileged, as the master's account.

``python3 -m det_sdk.launch.sshd --public-key KEY`` makes a private directory (0700, out
of the task's working directory, whose files are kept and downloadable when it ends)
with a new ed25519 host key, an ``authorized_keys`` of ``KEY`` alone and an
``sshd_config`` of its own (127.0.0.1 on a free port, ``UsePAM no``, no password or
keyboard-interactive sign-in, only this account); starts ``sshd -D -e`` (its log is the
task's); tells the master its port and host key with the task's token; and waits.

Each SSH session starts in the task's working directory with the task's environment
(its ``DET_*`` variables: ``det.keras.init()`` there knows it is in a task), as
Determined's shells carry the container's environment into their sessions.

A session leaves sshd's process group (OpenSSH calls ``setsid``), so the task's kill
would miss it: this process is their subreaper and ends every one of them when it is
told to stop, and when sshd ends.

>>> print(session_script(Path("/tmp/d/env"), Path("/work dir")).splitlines()[2])
. /tmp/d/env
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from det_sdk.launch.ports import start_listening

TYPE_CHECKING = False
if TYPE_CHECKING:
    from det_sdk.info import ClusterInfo

__all__ = ["environment_file", "main", "session_script", "sshd_config"]

log = logging.getLogger("det_sdk.launch.sshd")

#: variables a session takes from sshd or the client, not from the task
_OWN = re.compile(r"^(_|HOME|TERM|LANG|LC_.*|SHLVL|PWD|OLDPWD|SHELL|USER|LOGNAME|MAIL|SSH_.*)$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SFTP = ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server",
         "/usr/libexec/sftp-server")
START_SECONDS = 30.0  # for sshd to listen
STOP_SECONDS = 3.0  # between SIGTERM and SIGKILL to what is left of the sessions


def environment_file(environ: dict[str, str]) -> str:
    """The task's variables as lines a shell sources (each value quoted).

    >>> print(environment_file({"DET_X": "a b", "HOME": "/h", "bad name": "x"}), end="")
    export DET_X='a b'
    """
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(environ.items())
                   if _NAME.match(k) and not _OWN.match(k) and "\x00" not in v)


def session_script(env_file: Path, workdir: Path) -> str:
    """What sshd runs for each session (its ``ForceCommand``): the task's environment, its
    working directory, then the command the client asked for, or a login shell."""
    return (
        "#!/bin/bash\n"
        "set -a\n"
        f". {shlex.quote(str(env_file))}\n"
        "set +a\n"
        f"cd {shlex.quote(str(workdir))} 2>/dev/null || true\n"
        'if [ -n "$SSH_ORIGINAL_COMMAND" ]; then\n'
        # --norc: bash started under sshd reads ~/.bashrc, which may put its own PATH
        # (pyenv's shims) before the task's, and python3 would not be the task's
        '  exec /bin/bash --noprofile --norc -c "$SSH_ORIGINAL_COMMAND"\n'
        "fi\n"
        'exec -l "${SHELL:-/bin/bash}"\n')


def sshd_config(folder: Path, port: int, user: str) -> str:
    """The sshd config of a shell whose files are in ``folder``.

    >>> "UsePAM no" in sshd_config(Path("/d"), 2222, "me").splitlines()
    True
    """
    lines = [
        f"Port {port}", "ListenAddress 127.0.0.1", "AddressFamily inet",
        f"HostKey {folder / 'host_key'}", f"PidFile {folder / 'sshd.pid'}",
        f"AuthorizedKeysFile {folder / 'authorized_keys'}",
        "UsePAM no", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "PubkeyAuthentication yes", "PermitEmptyPasswords no",
        # root only where the master runs as root (its account), and by key only
        "PermitRootLogin prohibit-password", f"AllowUsers {user}",
        # the folder is the task's own (0700); its parents may be /tmp's (1777), which
        # StrictModes would refuse
        "StrictModes no", "PrintMotd no", "PrintLastLog no", "X11Forwarding no",
        "AllowTcpForwarding yes", "PermitUserEnvironment no", "LogLevel INFO",
        f"ForceCommand {folder / 'session.sh'}",
    ]
    sftp = next((p for p in _SFTP if Path(p).exists()), None)
    if sftp is not None:  # an IDE's file transfers
        lines.append(f"Subsystem sftp {sftp}")
    return "\n".join(lines) + "\n"


def _sshd() -> str:
    found = shutil.which("sshd") or next(
        (p for p in ("/usr/sbin/sshd", "/usr/local/sbin/sshd") if Path(p).exists()), None)
    if found is None:
        raise SystemExit("det shell: no sshd on this machine (Debian: apt-get install "
                         "openssh-server)")
    return str(Path(found).resolve())  # sshd re-executes itself: an absolute path


def _descendants(root: int) -> list[int]:
    """Every process under ``root`` (by parent, read from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        kids = [p for p, pp in parents.items() if pp == pid]
        found += kids
        frontier += kids
    return found


def _end_all() -> None:
    """SIGTERM to everything under this process (sshd and its sessions), SIGKILL to what
    is left after :data:`STOP_SECONDS`; each reaped."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = _descendants(os.getpid())
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + STOP_SECONDS
        while time.monotonic() < deadline and _descendants(os.getpid()):
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
            time.sleep(0.05)
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def _subreaper() -> None:
    """Orphaned sessions come to this process (Linux's PR_SET_CHILD_SUBREAPER)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)


def _report(info: ClusterInfo, shell_id: int, port: int, host_key: str, user: str) -> None:
    from det_sdk.client import MasterClient

    client = MasterClient(info.master_url, info.session_token)
    client.request("POST", f"/api/v1/shells/{shell_id}/ready",
                   json={"port": port, "host_key": host_key, "user": user})


def _start(folder: Path, user: str) -> tuple[subprocess.Popen[bytes], int]:
    """sshd, listening (a port taken between the pick and sshd's bind: another)."""
    sshd = _sshd()

    def launch(port: int) -> subprocess.Popen[bytes]:
        (folder / "sshd_config").write_text(sshd_config(folder, port, user))
        return subprocess.Popen([sshd, "-D", "-e", "-f", str(folder / "sshd_config")],
                                stdin=subprocess.DEVNULL)

    started = start_listening(launch, START_SECONDS, every=0.05)
    if started is None:
        raise SystemExit("det shell: sshd did not start (its output is above)")
    return started


def main(argv: list[str] | None = None) -> int:
    """Run the shell's sshd until the task is told to stop; its exit code."""
    parser = argparse.ArgumentParser(prog="python3 -m det_sdk.launch.sshd")
    parser.add_argument("--public-key", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="det shell: %(message)s")
    from det_sdk.info import get_cluster_info

    info = get_cluster_info()
    words = info.allocation_id.split("-") if info is not None else []
    if info is None or len(words) < 3 or not words[1].isdigit():
        raise SystemExit("det_sdk.launch.sshd runs in a shell's task (det shell start)")
    shell_id = int(words[1])
    user = pwd.getpwuid(os.getuid()).pw_name
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    _subreaper()
    if os.geteuid() == 0:  # sshd run by root wants its privilege separation directory
        Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"det-shell-{shell_id}-"))
    try:
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C",
                        f"det-shell-{shell_id}", "-f", str(folder / "host_key")],
                       check=True, stdin=subprocess.DEVNULL, timeout=30)
        (folder / "authorized_keys").write_text(args.public_key.strip() + "\n")
        env_file = folder / "env"
        env_file.write_text(environment_file(dict(os.environ)))
        session = folder / "session.sh"
        session.write_text(session_script(env_file, Path.cwd()))
        session.chmod(0o700)
        proc, port = _start(folder, user)
        host_key = (folder / "host_key.pub").read_text().strip()
        _report(info, shell_id, port, host_key, user)
        log.info("sshd listens on 127.0.0.1:%s (det shell open %s)", port, shell_id)
        while not stop and proc.poll() is None:
            time.sleep(0.2)
        code = proc.poll()
        return 0 if stop else (code if code is not None else 1)
    finally:
        _end_all()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
