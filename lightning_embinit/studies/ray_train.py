"""One trial as a multi-worker DDP run on Ray Train, for a trial that needs several GPUs or nodes.

Each worker runs :func:`~.trial.run_trial` with a :class:`~.trial.TrialLaunch` that replaces the config's
:data:`RAY_TRAINER_KEYS`; rank 0 writes the run directory and the record and sends the record to the driver
(docs/studies.md#running-on-ray). Needs the ``ray`` extra.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_embinit.studies.keys import RAY_INSTALL, StudyError
from lightning_embinit.studies.spec import Trial
from lightning_embinit.studies.trial import TrialLaunch, failed_record, own_record, trial_job

RAY_TRAINER_KEYS = ("strategy", "plugins", "devices", "num_nodes", "accelerator")
"""Trainer settings Ray Train supplies; a trial's config values for them are set aside."""
REPORTED_RECORD = "embinit_record"
"""The key of the JSON record in the metrics a trial reports to Tune or Ray Train."""


def require_ray() -> None:
    """StudyError naming the install command when Ray Tune or Ray Train is missing (checked before any trial starts)."""
    if any(importlib.util.find_spec(name) is None for name in ("ray", "ray.tune", "ray.train")):
        raise StudyError(f"--engine ray needs Ray Tune and Ray Train, which are not installed: {RAY_INSTALL}")


def run_trial_on_ray_train(
    trial: Trial | Mapping[str, Any],
    results_dir: str | Path,
    *,
    num_workers: int = 2,
    gpus_per_worker: int = 0,
    cpus_per_worker: int = 1,
) -> dict[str, Any]:
    """Run ``trial`` as a DDP run of ``num_workers`` Ray Train workers on the running Ray instance (``ray.init``
    first, or one is started); write and return its record (``failed`` with the error when the run failed)."""
    require_ray()
    if num_workers < 1 or cpus_per_worker < 1 or gpus_per_worker < 0:
        raise StudyError(
            f"a Ray Train trial needs ≥ 1 worker, ≥ 1 CPU and ≥ 0 GPUs per worker; got {num_workers}, "
            f"{cpus_per_worker} and {gpus_per_worker}"
        )
    trial = trial if isinstance(trial, Trial) else Trial.from_dict(trial)
    scaling = {"num_workers": num_workers, "gpus_per_worker": gpus_per_worker}
    return run_ray_train_job(trial_job(trial, Path(results_dir).resolve(), cpus_per_worker, **scaling))


def run_ray_train_job(job: Mapping[str, Any]) -> dict[str, Any]:
    """Run one trial's job (:func:`~.trial.trial_job` with ``num_workers`` and ``gpus_per_worker``) on Ray Train;
    the record its rank 0 reported or wrote, else a failed one."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    gpus = int(job["gpus_per_worker"])
    trainer = TorchTrainer(
        ray_train_worker,
        train_loop_config={"job": dict(job)},
        scaling_config=ScalingConfig(
            num_workers=int(job["num_workers"]),
            use_gpu=gpus > 0,
            resources_per_worker={"CPU": int(job["threads"]), **({"GPU": gpus} if gpus else {})},
        ),
        torch_config=TorchConfig(backend="nccl" if gpus else "gloo"),
        run_config=RunConfig(
            name=f"{job['trial']['trial_id']}-{job['run_id'][:8]}", storage_path=str(Path(job["results_dir"]) / "ray")
        ),
    )
    try:
        reported, failure = (trainer.fit().metrics or {}).get(REPORTED_RECORD), None
    except Exception as error:  # noqa: BLE001 - the trial fails, the sweep goes on
        reported, failure = None, error
    message = f"the Ray Train run ended before its rank 0 reported the record: {failure!r}"
    return own_record(job, reported) or failed_record(job, "RayTrainError", message)


def ray_train_worker(config: Mapping[str, Any]) -> None:
    """One Ray Train worker of a trial: its output to the trial's log (rank k > 0: ``<trial>.rank<k>.log``), its
    threads, then :func:`~.trial.run_trial` with Ray's strategy and environment."""
    import ray.train
    import torch.distributed as dist
    from ray.train.lightning import RayDDPStrategy, RayLightningEnvironment, prepare_trainer

    from lightning_embinit.studies.trial import run_trial
    from lightning_embinit.studies.worker import enter_job

    job = config["job"]
    context = ray.train.get_context()
    rank, world_size = context.get_world_rank(), context.get_world_size()
    enter_job(job, None if rank == 0 else str(Path(job["log_file"]).with_suffix(f".rank{rank}.log")))
    launch = TrialLaunch(
        rank=rank,
        world_size=world_size,
        trainer_keys=RAY_TRAINER_KEYS,
        prepare=prepare_trainer,
        barrier=dist.barrier,
        trainer_defaults={
            "strategy": {"class_path": _path(RayDDPStrategy)},  # the parser takes class paths
            "plugins": [{"class_path": _path(RayLightningEnvironment)}],
            "devices": "auto",
            "accelerator": "auto",
        },
    )
    record = run_trial(job["trial"], job["results_dir"], run_id=job["run_id"], launch=launch)
    ray.train.report({REPORTED_RECORD: json.dumps(record) if rank == 0 else ""})


def _path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
