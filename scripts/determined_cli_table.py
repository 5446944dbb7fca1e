"""Determined 0.38.1's daily `det` command lines and what det_sdk's `det` does with each:
the table of docs/determined-compat.md ("CLI: Determined's command lines"), generated from
det's own argparse tree (issue 48).

Each form is parsed by ``det_sdk.cli.main.build_parser``: a form marked ``same`` or
``different`` must parse to a command; ``refused`` must stop with a message naming what to
use instead (a parse error from a refused flag, or a handler that refuses);
``not built`` must not parse. tests/unit/test_cli_determined.py checks every row.

    python scripts/determined_cli_table.py          # print the markdown table
    python scripts/determined_cli_table.py --check  # exit 1 if a row does not hold
"""

from __future__ import annotations

import contextlib
import io
import shlex
import sys

#: (Determined's command line, status, why) — status: same, different, refused, not built
FORMS: list[tuple[str, str, str]] = [
    ("det -v", "same", "prints the version"),
    ("det version", "same", "the client's and the master's versions, as YAML"),
    ("det -m host:8080 e list", "same", "a bare host:port is http://host:port"),
    ("det e", "same", "a bare noun lists"),
    ("det e list", "same", "your experiments, archived ones left out (columns: ID, Owner, "
                           "Name, State, Progress, Trials; no pool or times)"),
    ("det e ls --all", "same", "every user's, archived ones too"),
    ("det e list --limit 10", "same", "a page's size: every page is read"),
    ("det e list --pages 1 --limit 10 --offset 20", "same", "one page"),
    ("det e list --csv", "same", ""),
    ("det e list --show_project", "same", "Workspace and Project columns first (issue 59)"),
    ("det e describe 1,2", "same", "comma lists"),
    ("det e describe 1,2 --json", "different", "a list of det_sdk's objects (not Determined's "
                                               "schema)"),
    ("det e describe 1 --json", "different", "det_sdk's object of the experiment, not in a "
                                             "list; --json everywhere is det_sdk's schema"),
    ("det e describe 1 --metrics", "refused", "every report: det t describe"),
    ("det e config 1", "same", "YAML"),
    ("det e logs 1", "same", "the first trial's log"),
    ("det e logs 1 -f", "same", "until the trial ends"),
    ("det e logs 1 --head 5", "same", ""),
    ("det e logs 1 --tail 5", "same", ""),
    ("det e logs 1 --json", "same", "Determined's records (v1TrialLogsResponse), one a line"),
    ("det e logs 1 --rank-id 0", "same", "rank from the launcher's line prefix (issue 60)"),
    ("det e logs 1 --level WARNING", "same", "level from the line's `LEVEL:` as Determined's"),
    ("det e create c.yaml .", "same", ""),
    ("det e create c.yaml", "same", "no model directory: an empty one"),
    ("det e create c.yaml . --config resources.slots_per_trial=2", "same", ""),
    ("det e create c.yaml . --paused", "same", "created PAUSED"),
    ("det e create c.yaml . -t", "same", "one trial of one scheduling unit, followed, archived"),
    ("det e create c.yaml . -f", "same", "follows the first trial's log"),
    ("det e create c.yaml . --follow-first-trial", "same", ""),
    ("det e create c.yaml . --follow", "same", "argparse's abbreviation of --follow-first-trial, "
                                               "as in Determined (exit 0; det e wait ID for the "
                                               "end state)"),
    ("det e create c.yaml . -i extra.py", "refused", "put the files in the directory"),
    ("det e create c.yaml . --local", "refused", "python train.py"),
    ("det e create c.yaml . --project_id 3", "same", "into that project (not an archived "
                                                     "one); without it, the config's "
                                                     "`workspace` and `project`, else "
                                                     "Uncategorized"),
    ("det e create c.yaml . --template t", "refused", "no templates"),
    ("det e lt 1", "same", ""),
    ("det e list-trials 1 --csv", "same", ""),
    ("det e lc 1", "same", ""),
    ("det e list-checkpoints 1 --best 2", "same", "by the searcher metric"),
    ("det e wait 1", "different", "polls every 0.5 s (Determined: 5) unless --polling-interval"),
    ("det e wait 1 --polling-interval 5", "same", ""),
    ("det e pause 1", "same", ""),
    ("det e activate 1", "same", ""),
    ("det e unpause 1", "same", ""),
    ("det e kill 1", "same", ""),
    ("det e cancel 1", "same", "its trials are asked to stop; CANCELED"),
    ("det e archive 1", "same", "an ended experiment, hidden from e list"),
    ("det e unarchive 1", "same", ""),
    ("det e delete 1", "same", "asks first (refuses without a terminal: --yes)"),
    ("det e delete 1 --yes", "same", "with its checkpoints' files and logs"),
    ("det e set name 1 new", "same", ""),
    ("det e set description 1 text", "same", "kept as the config's description"),
    ("det e set max-slots 1 2", "same", "its trials never hold more slots at once"),
    ("det e set weight 1 2", "same", "its weight in the fair share between users (det master "
                                     "up --scheduler fair_share; the priority scheduler, the "
                                     "default as in Determined, keeps it unused)"),
    ("det e set priority 1 2", "same", "1-99, lower first; may preempt lower-priority trials "
                                       "(they checkpoint, wait QUEUED, resume)"),
    ("det e label add 1 red", "same", "kept as the config's labels"),
    ("det e label remove 1 red", "same", ""),
    ("det e download 1", "same", "checkpoints/UUID of the best trial"),
    ("det e download 1 -o out --top-n 2 --sort-by loss --smaller-is-better true", "same", ""),
    ("det e continue 1", "same", "an ended experiment, same ids: a single searcher's trial "
                                 "from its latest checkpoint; a grid or random search's "
                                 "unfinished trials"),
    ("det e continue 1 --config searcher.max_length.epochs=5", "same",
     "refused when not longer than what the trial trained (Determined runs it and ends at once)"),
    ("det experiment continue 1 --config-file c.yaml -f", "same", "follows the trial's log"),
    ("det e move 1 ws proj", "same", "its owner or an admin; not into an archived project"),
    ("det e set gc-policy 1 --save-experiment-best 1 --save-trial-best 1 "
     "--save-trial-latest 1", "not built", "retention is the config's checkpoint_storage"),
    ("det t describe 1", "same", ""),
    ("det t describe 1 --metrics", "refused", "the reports are always shown"),
    ("det t logs 1", "same", ""),
    ("det t logs 1 -f", "same", "exit 0 when the log ends"),
    ("det t logs 1 --tail 20", "same", ""),
    ("det t logs 1 --json", "same", "Determined's records; time: when the master first saw "
                                   "the line (within 1 s, docs/observability.md)"),
    ("det t logs 1 --rank-id 1 --rank-id 0", "same", "the lines print as the task wrote them "
                                                    "(Determined prints its message)"),
    ("det t logs 1 --level ERROR --tail 5", "same", ""),
    ("det t logs 1 --stdtype stderr", "same", "horovodrun's mark (more than one slot), the "
                                             "stream index of a one-slot task's log; null "
                                             "for runs older than the index"),
    ("det t logs 1 --source task", "same", "task, or master for lines the master appends"),
    ("det t logs 1 --timestamp-after 2021-10-26T23:17:12Z", "same", ""),
    ("det t logs 1 --timestamp-before 2021-10-26T23:17:12Z -f", "same", ""),
    ("det t logs 1 --agent-id a", "refused", "no agents or containers: --rank-id"),
    ("det t download 1 --best", "same", "to checkpoints/UUID"),
    ("det t download 1 --best -o out", "same", ""),
    ("det t download 1 --latest", "same", ""),
    ("det t download 1 --uuid U -o out", "same", ""),
    ("det t download 1 --best --sort-by loss --smaller-is-better true", "same", ""),
    ("det t kill 1", "same", "this trial CANCELED; the others go on"),
    ("det t files 1 out", "different", "det_sdk's own: the trial's working directory "
                                       "(was det trial download)"),
    ("det c describe U", "same", ""),
    ("det c download U", "same", "to checkpoints/U"),
    ("det c download U -o out", "same", ""),
    ("det c download U -o out -q", "same", ""),
    ("det c download U --mode direct", "refused", "through the master only"),
    ("det c delete U1,U2", "same", "asks first"),
    ("det c delete U1,U2 --yes", "same", "files and records"),
    ("det m list", "same", ""),
    ("det m create name", "same", ""),
    ("det m describe name", "same", ""),
    ("det m register-version name U", "same", ""),
    ("det master info", "same", "address, version, slots"),
    ("det master logs", "same", ""),
    ("det master logs -f", "same", "until interrupted"),
    ("det master logs --tail 20", "same", ""),
    ("det master config", "refused", "settings are det master up's options"),
    ("det user login", "same", "the saved token's user if it works (`det master up`'s token: "
                               "the first admin, `determined`), else a password: a prompt, "
                               "or DET_PASS"),
    ("det user login determined", "same", ""),
    ("det user login ann", "same", "a password prompt, or DET_PASS; the new token saved"),
    ("det user logout", "same", "the token ended on the master and forgotten here (the "
                                "master's own token stays valid there)"),
    ("det user logout --all", "same", "one token is saved per master: the same"),
    ("det user whoami", "same", ""),
    ("det user list", "same", "User ID, Username, Display Name, Admin, Active"),
    ("det user ls --all", "same", "the deactivated users too"),
    ("det user create ann", "same", "a password asked twice on a terminal; elsewhere none set "
                                    "(the user signs in once an admin sets one)"),
    ("det user create ann --admin --password P", "same", "admins only; at least 8 characters"),
    ("det user change-password", "same", "your own; your other tokens and web UI sessions "
                                         "end, this terminal signs in again with the new one"),
    ("det user change-password ann", "same", "an admin's call; ann's tokens and web UI "
                                             "sessions end"),
    ("det user activate ann", "same", "admins only"),
    ("det user deactivate ann", "same", "admins only; their tokens and web UI sessions end at "
                                        "once"),
    ("det user rename ann anna", "same", "admins only; what they own stays theirs"),
    ("det user edit ann --display-name Ann", "same", "admins, or the user for their own "
                                                   "display name"),
    ("det user edit ann --username anna --active false --admin true", "same",
     "admins only; the fields given change together"),
    ("det user edit ann --remote true", "refused", "no remote (SSO) users: every user signs in "
                                                   "with a password"),
    ("det task list", "same", "what runs now: trial-N, job-N"),
    ("det slot list", "different", "one row per slot: the task holding it and its GPUs' "
                                   "use from the profiler (no agents: one host)"),
    ("det task logs trial-1", "same", ""),
    ("det task logs trial-1 -f", "same", ""),
    ("det job list", "same", "the scheduler's queue in the order it runs (priority, then "
                             "submission): experiments and batch jobs waiting for or holding "
                             "slots, IDs as experiment-N, job-N (no user column); det_sdk's "
                             "batch-job history: det job batches"),
    ("det j ls --json", "same", ""),
    ("det job", "same", "a bare noun lists the queue"),
    ("det job list -p pool", "refused", "one pool of slots"),
    ("det job update 1 --priority 3", "same", "ID as det job list shows it (experiment-N, "
                                              "job-N) or an experiment's number"),
    ("det job update experiment-1 -w 2", "refused", "det e set weight ID W"),
    ("det user link-with-agent-user ann --agent-uid 1001 --agent-gid 1001 --agent-user ann "
     "--agent-group ann", "same", "admins only; under a master running as root, ann's trials "
     "and batch jobs run as that account (it must exist on the master's host as given); "
     "otherwise as the master's (docs/security.md)"),
    ("det tensorboard start 1", "same", "the master runs it; waits until it serves, prints "
                                        "its URL and opens a browser. The URL is on the "
                                        "master's host at TensorBoard's own port (Determined: "
                                        "a path proxied by the master); every trial of the "
                                        "experiment (Determined: the best 100); over the same "
                                        "trials as one that serves, that one (as Determined's "
                                        "web UI); at most 8 at once"),
    ("det tensorboard start 1 2 -t 5 --no-browser", "same", ""),
    ("det tensorboard start -t 5 6", "same", ""),
    ("det tensorboard start 1 -d", "same", "prints its id"),
    ("det tensorboard start 1 --config description=mine", "same", "of its config, "
                                                                  "`description` is honoured; "
                                                                  "other keys are refused"),
    ("det tensorboard start 1 --config-file tb.yaml", "same", "as --config"),
    ("det tensorboard start 1 -c dir", "refused", "no files are sent to TensorBoard"),
    ("det tensorboard list", "same", "ID, Description, State, Experiment IDs, Trial IDs, "
                                     "Exit Status and URL (no user, pool or workspace); "
                                     "ended ones stay listed as TERMINATED"),
    ("det tensorboard", "same", "a bare noun lists"),
    ("det tensorboard ls --all", "same", "the same list (every user's TensorBoards are "
                                         "listed either way)"),
    ("det tensorboard list -q", "same", "the ids"),
    ("det tensorboard list --json", "different", "det_sdk's objects (id, state, "
                                                 "experiment_ids, trial_ids, url...)"),
    ("det tensorboard list --csv", "same", ""),
    ("det tensorboard kill ID", "same", "an id or a unique beginning of one"),
    ("det tensorboard kill ID1 ID2 -f", "same", ""),
    ("det tensorboard open ID", "same", "prints the URL too"),
    ("det tensorboard logs ID", "same", "what TensorBoard printed"),
    ("det tensorboard logs ID -f --tail 5", "same", ""),
    ("det tensorboard config ID", "refused", "no config beyond the description"),
    ("det tensorboard set priority ID 3", "refused", "no priorities"),
    # commands (issue 58): det_sdk.cli.command_cmd, det_sdk.master.commands
    ("det cmd run echo hi", "different", "runs on a slot of the master's queue (as trials "
                                         "and jobs); follows its output and exits with the "
                                         "command's exit code (Determined's exits 0 when the "
                                         "log ends); the launch and end lines go to stderr"),
    ("det command run -- python3 x.py", "same", "`command` and `cmd` are one noun"),
    ("det cmd run 'echo $HOME && ls'", "same", "one word runs under sh -c, several as they "
                                                 "are (Determined's entrypoint)"),
    ("det cmd run -d sleep 60", "same", "prints its id and returns (ids are numbers here, "
                                        "UUIDs in Determined)"),
    ("det cmd run -c dir python3 x.py", "same", "the directory's contents are its working "
                                                "directory (at most 64 MiB packed); its "
                                                "startup-hook.sh is sourced first"),
    ("det cmd run --config resources.slots=2 python3 x.py", "same",
     "runs once holding both slots (DET_SLOT_IDS); resources.slots=0 holds none"),
    ("det cmd run --config-file c.yaml", "same", "its entrypoint, description, resources.slots, "
                                                 "environment.environment_variables and "
                                                 "hyperparameters; Determined's other command "
                                                 "fields are refused by name"),
    ("det cmd run -i extra.py python3 x.py", "refused", "no container: put the files in the "
                                                        "context directory"),
    ("det cmd run -v /a:/b true", "refused", "no container to mount into"),
    ("det cmd run --template t true", "refused", "no templates"),
    ("det cmd list", "same", "ID, Description, State, Exit Status and Slots (no user, pool or "
                             "workspace); ended ones stay listed as TERMINATED"),
    ("det cmd", "same", "a bare noun lists"),
    ("det cmd ls -q", "same", "the ids"),
    ("det cmd list --all", "same", "one user: the same list"),
    ("det cmd list --json", "different", "det_sdk's objects (id, state, exit_code, "
                                         "exit_status, config...)"),
    ("det cmd list --csv", "same", ""),
    ("det cmd list --sort-by state", "same", "Determined's fields (startTime, the default: "
                                             "started ones first, then queued ones); "
                                             "resourcePool and workspaceName sort nothing"),
    ("det cmd list --sort-by id --order-by desc", "same", ""),
    ("det cmd describe 1", "same", ""),
    ("det cmd config 1", "same", "YAML, the defaults filled in"),
    ("det cmd logs 1", "same", "read 1 MiB at a time: 100 MB of output in bounded memory"),
    ("det cmd logs 1 -f --tail 5", "same", "--tail keeps N lines, not the log"),
    ("det cmd logs 1 --head 5", "same", ""),
    ("det cmd logs 1 --json", "refused", "logs are plain text"),
    ("det cmd kill 1", "same", "SIGTERM to its processes, SIGKILL 10 s later; a queued one "
                               "ends at once"),
    ("det cmd kill 1 2 -f", "same", "go on past errors"),
    ("det cmd set priority 1 3", "refused", "no priorities"),
    ("det task logs command-1", "different", "det_sdk's task ids: trial-N, job-N, command-N "
                                             "(det task list)"),
]
FORMS += [  # det shell (issue 58: docs/notebooks-commands-shells.md)
    ("det shell start", "different", "OpenSSH's sshd on a slot of the master's queue, run by "
                                     "the task as the master's account on 127.0.0.1 (no "
                                     "container, not root); ssh reaches it directly (through "
                                     "the master's host with ProxyJump when the master is "
                                     "remote), not through the master's proxy"),
    ("det shell start -d", "same", "prints its id and returns (ids are numbers here)"),
    ("det shell start -c dir", "different", "the directory's contents are the task's working "
                                            "directory, where every session starts "
                                            "(Determined's start in HOME); startup-hook.sh "
                                            "is sourced first"),
    ("det shell start --config resources.slots=2", "same", "holds both slots (DET_SLOT_IDS)"),
    ("det shell start --config-file c.yaml", "same", "description, resources.slots, "
                                                     "environment, hyperparameters; an "
                                                     "entrypoint is refused"),
    ("det shell start -- -L8080:localhost:8080", "same", "the words after -- go to ssh after "
                                                         "the destination"),
    ("det shell start --show-ssh-command", "same", ""),
    ("det shell start -i extra.py", "refused", "no container: put the files in the context "
                                               "directory"),
    ("det shell start -v /a:/b", "refused", "no container to mount into"),
    ("det shell start --template t", "refused", "no templates"),
    ("det shell", "same", "a bare noun lists"),
    ("det shell list", "same", "ID, Description, State, Exit Status and Slots"),
    ("det shell ls -q", "same", "the ids"),
    ("det shell list --all", "same", "every user's (as without it)"),
    ("det shell list --json", "different", "det_sdk's objects (id, state, port, host_key...)"),
    ("det shell list --csv", "same", ""),
    ("det shell open 1", "same", "waits for its sshd; the key is written 0600 under "
                                 "~/.det/shells/"),
    ("det shell open 1 -- echo hi", "different", "ssh's own tty choice (Determined forces "
                                                 "-tt, which turns a command's output's "
                                                 "newlines into CRLF); ssh's exit code"),
    ("det shell show_ssh_command 1", "different", "StrictHostKeyChecking=yes against the "
                                                  "task's host key, which the master keeps "
                                                  "(Determined's turns the check off)"),
    ("det shell show-ssh-command 1", "different", "as show_ssh_command"),
    ("det shell config 1", "same", "YAML, the defaults filled in"),
    ("det shell logs 1", "same", "its sshd's log (sign-ins, errors)"),
    ("det shell logs 1 -f", "same", ""),
    ("det shell kill 1", "same", "its sshd and every session end; its port is closed"),
    ("det shell kill 1 2 -f", "same", "go on past errors"),
    ("det shell set priority 1 3", "refused", "no priorities"),
]
FORMS += [  # det notebook (issue 58: docs/notebooks-commands-shells.md)
    ("det notebook start", "different", "JupyterLab (from PyPI) on a slot of the master's "
                                        "queue, reached only through the master's proxy "
                                        "(/proxy/notebooks/ID/, HTTP and websockets) with the "
                                        "master's sign-in; waits for it and opens the browser"),
    ("det notebook start -d", "same", "prints its id and returns (ids are numbers here)"),
    ("det notebook start --no-browser", "same", "prints its address only"),
    ("det notebook start -c dir", "same", "the directory's contents are JupyterLab's root "
                                          "(its working directory); startup-hook.sh first"),
    ("det notebook start --config resources.slots=0", "same", "a notebook without a slot"),
    ("det notebook start --config idle_timeout=30m", "same", "killed once idle that long "
                                                             "(its slot freed)"),
    ("det notebook start --config notebook_idle_type=activity", "same",
     "kernels_or_terminals (the default), kernel_connections or activity, as Determined's"),
    ("det notebook start --config-file c.yaml", "same", "description, resources.slots, "
                                                        "environment, hyperparameters, "
                                                        "idle_timeout, notebook_idle_type; an "
                                                        "entrypoint is refused"),
    ("det notebook start -i extra.py", "refused", "no container: put the files in the context "
                                                  "directory"),
    ("det notebook start -v /a:/b", "refused", "no container to mount into"),
    ("det notebook start --template t", "refused", "no templates"),
    ("det notebook start --preview", "refused", "no templates: det notebook config ID"),
    ("det notebook", "same", "a bare noun lists"),
    ("det notebook list", "same", "ID, Description, State, Exit Status and Slots"),
    ("det notebook ls -q", "same", "the ids"),
    ("det notebook list --all", "same", "every user's (as without it)"),
    ("det notebook list --json", "different", "det_sdk's objects (id, state, "
                                              "service_address...)"),
    ("det notebook list --csv", "same", ""),
    ("det notebook list --sort-by state --order-by desc", "same", "as det cmd list's"),
    ("det notebook open 1", "same", "waits for JupyterLab; a browser signed in to the web UI "
                                    "opens it, any other signs in first"),
    ("det notebook config 1", "same", "YAML, its idle settings included"),
    ("det notebook logs 1", "same", "JupyterLab's log"),
    ("det notebook logs 1 -f", "same", ""),
    ("det notebook kill 1", "same", "JupyterLab and every kernel end; its proxy answers 409 "
                                    "and its port is closed"),
    ("det notebook kill 1 2 -f", "same", "go on past errors"),
    ("det notebook set priority 1 3", "refused", "no priorities"),
]

FORMS += [  # workspaces and projects (issue 59: docs/team.md)
    ("det workspace list", "different", "ID, Name, # Projects, # Experiments, Archived (no "
                                        "agent user or group, no pools: one master)"),
    ("det w", "same", "a bare noun lists"),
    ("det workspace list --sort-by name --order-by desc", "same", ""),
    ("det workspace list-projects ws", "same", "ID, Name, Description, # Experiments, "
                                              "# Active Experiments (no key)"),
    ("det workspace create ws", "same", "any user; the name unique"),
    ("det workspace create ws --agent-uid 1000", "not built", "no agent users per workspace"),
    ("det workspace describe ws", "same", ""),
    ("det workspace delete ws --yes", "different", "its owner or an admin; refused (409) "
                                                   "while any of its projects holds an "
                                                   "experiment (Determined deletes them): move "
                                                   "or delete them first"),
    ("det workspace archive ws", "same", "no new projects in it; the default is never "
                                         "archived"),
    ("det workspace unarchive ws", "same", ""),
    ("det workspace edit ws --name x", "not built", "workspaces are not renamed"),
    ("det project list ws", "same", "ID, Name, Description, # Experiments, # Active "
                                    "Experiments (no key)"),
    ("det p list ws", "same", ""),
    ("det project create ws proj", "same", "any user, in a workspace not archived"),
    ("det project create ws proj --description d", "same", ""),
    ("det project describe ws proj", "same", "the project and its experiments"),
    ("det project delete ws proj --yes", "different", "its owner or an admin; refused (409) "
                                                      "while it holds experiments (Determined "
                                                      "deletes them): move or delete them "
                                                      "first"),
    ("det project archive ws proj", "same", "takes no experiments while archived"),
    ("det project unarchive ws proj", "same", ""),
    ("det project list-experiments ws proj", "not built", "det project describe lists them"),
    ("det rbac list-roles", "same", "ClusterAdmin, WorkspaceAdmin, Editor, Viewer with their "
                                    "permissions (docs/security.md)"),
    ("det rbac list-roles --exclude-global-roles", "same", "ClusterAdmin left out"),
    ("det rbac describe-role Editor", "same", "its permissions"),
    ("det rbac assign-role Viewer -u ann -w ws", "same", "roles are opt-in per workspace "
                                                         "(docs/team.md)"),
    ("det rbac assign-role ClusterAdmin -u ann", "same", "without -w: cluster-wide"),
    ("det rbac unassign-role Viewer -u ann -w ws", "same", ""),
    ("det rbac my-permissions", "same", "the caller's roles and where"),
    ("det rbac list-users-roles ann", "same", ""),
    ("det rbac assign-role Viewer -g team -w ws", "refused", "no user groups: -u per user"),
    ("det rbac list-groups-roles team", "refused", "no user groups"),
]


def outcome(line: str) -> str:
    """What det_sdk's det does with ``line``: "parses", "refused" or "no such form"."""
    from det_sdk.cli.main import build_parser

    words = shlex.split(line)[1:]
    parser = build_parser(words)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args = parser.parse_args(words)
    except SystemExit as done:
        if done.code == 0:  # --version, --help
            return "parses"
        return "refused" if "refused by det_sdk" in err.getvalue() else "no such form"
    func = getattr(args, "func", None)
    if func is None:  # a bare noun: its default verb
        return "parses"
    return "refused" if getattr(func, "refusal", None) else "parses"


EXPECTED = {"same": "parses", "different": "parses", "refused": "refused",
            "not built": "no such form"}


def check() -> list[str]:
    """The rows whose outcome is not what their status says."""
    return [f"{line}: {status}, but det {outcome(line)}" for line, status, _ in FORMS
            if outcome(line) != EXPECTED[status]]


def table() -> str:
    rows = ["| Determined's command line | det_sdk | Why / how |", "|---|---|---|"]
    rows += [f"| `{line}` | {status} | {why} |" for line, status, why in FORMS]
    return "\n".join(rows)


if __name__ == "__main__":
    if "--check" in sys.argv:
        bad = check()
        print("\n".join(bad) or "every row holds")
        sys.exit(1 if bad else 0)
    print(table())
