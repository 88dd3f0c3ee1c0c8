"""Supernet pre-training: SPOS on MLM through NNI's one-shot machinery and Lightning."""
