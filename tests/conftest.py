import warnings

import pytest
import torch

from nni_lvbert.config import ModelConfig

warnings.filterwarnings("ignore", message=".*is found to be not a nn.Module.*")


def tiny_config(**kw) -> ModelConfig:
    """HF-test-sized config: hidden 32, 4 heads (2 DC heads of 16), vocab 100."""
    base = dict(vocab_size=100, hidden_size=32, embedding_size=32, ff_size=64, num_heads=4, conv_head_size=16,
                max_length=32, max_position=64, dropout=0.0, attention_dropout=0.0)
    base.update(kw)
    return ModelConfig(**base)


@pytest.fixture
def cfg():
    return tiny_config()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
