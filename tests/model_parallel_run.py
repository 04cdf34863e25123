"""Lightning's ModelParallelStrategy (FSDP2) on CPU processes: run as a script, so Lightning can launch its ranks.

``python tests/model_parallel_run.py <directory> <devices> <accelerator>``: a fit of LazyLM built on the
meta device and sharded with ``fully_shard`` in ``configure_model``, then a fit resumed from its
checkpoint. Each rank saves its whole tables at train start and end (TablesAtTrainStart); the test
(tests/test_sharded_tables.py, tests/test_sharded_cuda.py) compares them with the single-process build.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

    import lightning as L
    from lightning.pytorch.strategies import ModelParallelStrategy

    from lightning_embinit import EmbeddingInitCallback, EmbeddingVarianceMonitor, InitialLossMonitor
    from tests.lazy_models import LazyLM, TablesAtTrainStart, lm_loader
    from tests.sources_for_tests import RankMarkedScheme

    directory, devices, accelerator = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

    def trainer(name: str, callbacks: list, max_steps: int) -> L.Trainer:
        (directory / name).mkdir(exist_ok=True)
        return L.Trainer(
            accelerator=accelerator,
            devices=devices,
            max_steps=max_steps,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=directory,
            strategy=ModelParallelStrategy(data_parallel_size=devices, tensor_parallel_size=1),
            callbacks=[*callbacks, TablesAtTrainStart(directory / name, names=("embed", "frozen"))],
        )

    source = RankMarkedScheme("normal:0.5", str(directory))
    init = EmbeddingInitCallback(
        source=source,
        standardize="xavier",
        seed=5,
        slots={"embed": None, "frozen": {"trainable": False}},
        verbose=False,
    )
    variance, initial = EmbeddingVarianceMonitor(every_n_steps=None, figures=False), InitialLossMonitor()
    first = trainer("first", [init, variance, initial], max_steps=2)
    first.fit(LazyLM(meta=True, shard=True, extra=True, weight_decay=0.1), lm_loader())
    first.save_checkpoint(directory / "run.ckpt")  # a distributed checkpoint: a directory with every rank's shards
    if first.global_rank == 0:
        record = {
            "reports": init.reports,
            "variance": variance.start,
            "init_loss": initial.init_loss,
            "predicted": initial.predicted,
            "requires_grad": first.lightning_module.frozen.weight.requires_grad,
        }
        (directory / "first.json").write_text(json.dumps(record, default=str))

    again = EmbeddingInitCallback(source="ones", slots={"embed": None, "frozen": {"trainable": False}}, verbose=False)
    second = trainer("second", [again], max_steps=3)
    second.fit(LazyLM(meta=True, shard=True, extra=True), lm_loader(), ckpt_path=directory / "run.ckpt")
    if second.global_rank == 0:
        (directory / "second.json").write_text(
            json.dumps({"resumed": again.resumed, "reports": again.reports}, default=str)
        )
