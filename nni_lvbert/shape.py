"""The model's shape: every field of a model configuration, with its default, in one place.

`config.ModelConfig` (the project's, with its checks) and `hf.LVBertConfig` (transformers', saved as config.json)
are both this dataclass plus their own concerns. Standard library only: a saved model directory's
configuration_lvbert.py carries this class's source (hf/bundle.py pastes it there), so it loads without the package.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(kw_only=True, repr=False, eq=False)  # the subclasses' own repr/eq (transformers' for HF)
class ModelShape:
    vocab_size: int = 30522
    hidden_size: int = 256
    embedding_size: int = 128  # E; a linear E->H projection follows the embeddings when E != H (ALBERT)
    ff_size: int = 1024
    num_heads: int = 4  # self-attention heads
    conv_kernel: int = 9  # dynamic convolution kernel k
    conv_head_size: int = 64  # dynamic convolution uses hidden_size / conv_head_size heads
    glu_activation: str = "gelu"  # sigmoid (GLU) | identity (Bilinear) | relu (ReGLU) | gelu (GEGLU) | gelu_tanh |
    #                               silu (SwiGLU)
    glu_bias: bool = False  # the GLU-variants paper has no biases
    glu_ff_size: int | None = None  # default round(ff_size * 2/3): as many parameters as FF
    max_length: int = 128  # sequence length of the data (trained with); the position table is max_position long
    max_position: int = 512
    type_vocab_size: int = 2
    dropout: float = 0.1
    attention_dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    sharing: str = "none"  # none | type (all slots of one layer type share one module, ALBERT-style)
    pad_token_id: int | None = 0

    @property
    def conv_heads(self) -> int:
        """Dynamic-convolution heads (the layers read it)."""
        return max(1, self.hidden_size // self.conv_head_size)

    @property
    def glu_width(self) -> int:
        """Inner width of a GLU layer."""
        return self.glu_ff_size if self.glu_ff_size is not None else round(self.ff_size * 2 / 3)


SHAPE_FIELDS = tuple(f.name for f in dataclasses.fields(ModelShape))
