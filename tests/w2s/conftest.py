import pytest
import torch

from anchorft.w2s.config import W2SConfig


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def tiny() -> W2SConfig:
    """A small, fast problem (d=48, s=8) with the paper's structure."""
    return W2SConfig(
        d=48,
        s=8,
        group_sizes=[4, 6],
        weak_neurons=4,
        batch_size=8,
        steps=60,
        n_seeds=2,
        n_log=8,
        chunk=8,
        eta_w2s=0.3,
        eta_sft=1.0,
        anchor_rank=4,
    ).validate()
