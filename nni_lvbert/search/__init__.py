"""Architecture search over a trained supernet (LV-BERT §3.3).

algorithm.py  LV-BERT Algorithm 1, pure ask/tell (no NNI)      scorer.py  in-process inherited-weight MLM accuracy
strategy.py   NNI Strategy adapter + built-in baselines         tuner.py   NNI Tuner adapter (nnictl)
run.py / cli.py  `lvbert search run|score|space-json|nnictl|export`   trial.py  the nnictl trial   cost.py  params/FLOPs
prefix_cache.py  the scorer's cache of slot prefixes   (the validation batches, device and MLM metrics: data/validation.py,
shared with the stand-alone models and the studies)
"""
