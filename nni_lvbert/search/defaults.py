"""The search's defaults, one home for every command that scores or searches (search run/score/nnictl, the trial,
the scorer, the search study, lvbert run). Plain constants: importing this pulls in neither torch nor NNI."""

VAL_TOKENS = 16384  # validation tokens a candidate is scored on (fixed 15 % masking; about 2,500 masked tokens)
BATCH_SIZE = 64  # validation sequences per scoring batch
STRATEGIES = ("evolution", "regularized-evolution", "random")  # LV-BERT Algorithm 1, then NNI's baselines
