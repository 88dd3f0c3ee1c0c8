"""nni-lvbert: search BERT backbones by layer variety (LV-BERT) with Microsoft NNI.

Importing the package makes transformers' Auto* factories know model_type "lvbert" (nni_lvbert.hf.hook), without
importing transformers or torch here: `lvbert --help` stays fast.
"""

__version__ = "0.1.0"

from .hf.hook import install as _install_hf_hook  # noqa: E402  (stdlib only)

_install_hf_hook()

