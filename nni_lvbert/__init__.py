"""nni-lvbert: search BERT backbones by layer variety (LV-BERT) with Microsoft NNI."""

__version__ = "0.1.0"
