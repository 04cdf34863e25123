"""Issue 19 on a GPU: Lightning's ModelParallelStrategy (FSDP2 over NCCL) and the refusal of FSDPStrategy (FSDP1).

tests/test_sharded_tables.py runs the same ModelParallelStrategy fit on CPU processes; these run where CUDA is.
"""

from __future__ import annotations

import pytest
import torch

from lightning_embinit import EmbeddingInitCallback
from tests.host_models import make_trainer
from tests.lazy_models import LazyLM, lm_loader
from tests.test_sharded_tables import check_model_parallel_run, run_model_parallel

pytestmark = [
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA GPU: Lightning's FSDP strategies refuse the CPU"
    ),
    pytest.mark.timeout(300),
]


def test_model_parallel_strategy_on_cuda(tmp_path):
    devices = min(2, torch.cuda.device_count())
    run_model_parallel(tmp_path, devices, "cuda")
    check_model_parallel_run(tmp_path, devices)


def test_fsdp1_is_refused_naming_what_works(tmp_path):
    trainer = make_trainer(
        tmp_path, [EmbeddingInitCallback(source="ones", verbose=False)], accelerator="cuda", devices=1, strategy="fsdp"
    )
    with pytest.raises(ValueError, match=r"does not support FSDPStrategy \(FSDP1\).*Use ModelParallelStrategy"):
        trainer.fit(LazyLM(), lm_loader())
