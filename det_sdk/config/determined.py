"""Determined's configs: the fields det_sdk accepts without implementing them, and
Determined's entrypoints (``module:Class`` trials, its launchers) as det_sdk runs them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from det_sdk.config._base import ConfigError

# --- Determined configs: what det_sdk accepts without implementing it ---------------------
#
# Users migrating from Determined bring configs written for it. Fields that Determined
# knows but det_sdk does not implement are accepted and dropped, with one warning that
# lists them (``ignored_fields``); any other unknown key is still an error, so a typo
# never passes silently. Source: Determined's experiment config reference
# (docs/reference/experiment-config-reference, "Experiment Configuration Reference") and
# its schema, master/pkg/schemas/expconf/experiment_config.go (ExperimentConfigV0, with
# its legacy fields data_layer, internal, batches_per_step from older releases).
IGNORED_DETERMINED_FIELDS: dict[str, frozenset[str]] = {
    # top level
    "": frozenset({
        "bind_mounts", "checkpoint_policy", "data_layer", "debug", "integration",
        "internal", "labels", "log_policies", "optimizations",
        "pbs", "perform_initial_validation", "project", "security", "slurm",
        "tensorboard_storage", "workspace", "batches_per_step",
    }),
    # resources: det_sdk schedules slots on one host; pools and devices are moot (priority,
    # weight and max_slots are det_sdk's queue's: det_sdk.config.experiment)
    "resources": frozenset({
        "native_parallel", "shm_size", "resource_pool",
        "is_single_node", "devices",
    }),
    # searcher: warm starts from another trial's checkpoint and custom brackets are not
    # implemented (det_sdk's ASHA already stops once)
    "searcher": frozenset({
        "source_trial_id", "source_checkpoint_uuid", "stop_once", "bracket_rungs",
    }),
    # environment: det_sdk implements environment_variables; tasks are processes on the
    # master's host or a Slurm cluster, with no container image, pod or ports of their own
    "environment": frozenset({
        "image", "force_pull_image", "registry_auth", "pod_spec", "add_capabilities",
        "drop_capabilities", "ports", "proxy_ports",
    }),
    # checkpoint_storage (shared_fs): container paths mean nothing without containers
    "checkpoint_storage": frozenset({
        "storage_path", "propagation", "container_path", "checkpoint_path",
        "tensorboard_path",
    }),
    # integrations: det_sdk reads webhooks (det_sdk.config.integrations), not Pachyderm
    "integrations": frozenset({"pachyderm"}),
}

#: The command that runs a trial class: Determined's "module:Class" entrypoint
#: (``model_def:MNISTTrial``) becomes ``python3 -m det_sdk.launch.trial model_def:MNISTTrial``,
#: which runs a TFKerasTrial or a PyTorchTrial (it dispatches on the class).
TRIAL_RUNNER = "python3 -m det_sdk.launch.trial"
_TRIAL_CLASS = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


def trial_class_command(entrypoint: str) -> str:
    """The command for an entrypoint: a ``module:Class`` runs that trial class.

    >>> trial_class_command("model_def:MNISTTrial")
    'python3 -m det_sdk.launch.trial model_def:MNISTTrial'
    >>> trial_class_command("python3 train.py")
    'python3 train.py'
    """
    spec = entrypoint.strip()
    return f"{TRIAL_RUNNER} {spec}" if _TRIAL_CLASS.fullmatch(spec) else entrypoint


# Determined's launcher modules, under either package name: they start a node's workers
_LAUNCHER = re.compile(r"(?:^|\s)-m\s+(?:det_sdk|determined)\.launch\."
                       r"(?:horovod|torch_distributed|tensorflow)\b")


def _det_sdk_launchers(command: str) -> str:
    """Determined's launcher modules by det_sdk's name (``determined.launch.X``).

    >>> _det_sdk_launchers("python3 -m determined.launch.torch_distributed python3 t.py")
    'python3 -m det_sdk.launch.torch_distributed python3 t.py'
    """
    if re.search(r"-m\s+(?:det_sdk|determined)\.launch\.deepspeed\b", command):
        raise ConfigError("DeepSpeed's launcher (launch.deepspeed) is not provided by det_sdk; "
                          "use launch.torch_distributed, launch.horovod or launch.tensorflow")
    return re.sub(r"(-m\s+)determined\.launch\.", r"\1det_sdk.launch.", command)


def entrypoint_runs_of(raw: Mapping[str, Any]) -> str:
    """How the master runs a raw config's command: ``per_node`` or ``per_slot``.

    Determined's ``entrypoint:`` runs once per node (its launchers start the workers);
    the proposal's ``entrypoint_script:`` and a ``module:Class`` trial run once per slot
    under horovodrun, as det_sdk always has.

    >>> entrypoint_runs_of({"entrypoint": "python3 launcher.py python3 train.py"})
    'per_node'
    >>> entrypoint_runs_of({"entrypoint_script": "python3 train.py"})
    'per_slot'
    >>> entrypoint_runs_of({"entrypoint": "model_def:MNistTrial"})
    'per_slot'
    """
    command = raw.get("entrypoint")
    if "entrypoint_script" in raw or not isinstance(command, str):
        return "per_slot"
    return "per_slot" if _TRIAL_CLASS.fullmatch(command.strip()) else "per_node"


def without_container_environment(raw: Any) -> Any:
    """``raw`` (a config as given) without Determined's ``environment`` fields that only
    a container has (``image``, ``pod_spec``, ...): a job's and a command's config take
    them and drop them (an experiment's warns, through :func:`ignored_fields`).

    >>> without_container_environment({"environment": {"image": "x", "environment_variables": []}})
    {'environment': {'environment_variables': []}}
    """
    env = raw.get("environment") if isinstance(raw, Mapping) else None
    if isinstance(env, Mapping):
        names = IGNORED_DETERMINED_FIELDS["environment"]
        raw = {**raw, "environment": {k: v for k, v in env.items() if k not in names}}
    return raw


def ignored_fields(raw: Any) -> list[str]:
    """The Determined fields of an experiment config that det_sdk accepts but ignores.

    >>> ignored_fields({"environment": {"image": "x"}, "resources": {"shm_size": 1}})
    ['environment.image', 'resources.shm_size']
    """
    if not isinstance(raw, Mapping):
        return []
    found = []
    for section, names in IGNORED_DETERMINED_FIELDS.items():
        where = raw if not section else raw.get(section)
        if isinstance(where, Mapping):
            found += [f"{section}.{k}" if section else k for k in where if k in names]
    env = raw.get("environment")
    by_device = env.get("environment_variables") if isinstance(env, Mapping) else None
    if isinstance(by_device, Mapping):  # det_sdk's slots are CPUs: only `cpu` applies
        found += [f"environment.environment_variables.{k}" for k in ("cuda", "gpu", "rocm")
                  if by_device.get(k)]
    return sorted(found)


def ignored_fields_warning(fields: list[str]) -> str:
    """The one warning for a config's ignored Determined fields."""
    return ("det_sdk ignores these Determined config fields, which it does not implement: "
            + ", ".join(fields))


def _without_ignored(raw: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in raw.items() if k not in IGNORED_DETERMINED_FIELDS[""]}
    for section, names in IGNORED_DETERMINED_FIELDS.items():
        if section and isinstance(out.get(section), Mapping):
            out[section] = {k: v for k, v in out[section].items() if k not in names}
    return out
