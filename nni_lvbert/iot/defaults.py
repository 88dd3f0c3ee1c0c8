"""IOT defaults (no heavy imports: the CLI reads them for --help).

From the official IOT code (github.com/instance-wise-ordered-transformer/IOT): clamp 0.05, diversity (c1) 0.1 and
kl (c2) 0.01 are the README training script's values; the Gumbel-softmax temperature follows
fairseq/optim/gumbel_softmax_scheduler/base_gs.py, tau = max(tau_max * exp(-r * floor(step / every) * every),
tau_min), with its argparse defaults tau_max 10, tau_min 1, r 1e-4, every 5000 (the README's IWSLT script uses
a constant 20 instead: --tau 20 --tau-min 2 --tau-decay 0).
"""
CLAMP = 0.05
C1 = 0.1
C2 = 0.01
TAU = 10.0
TAU_MIN = 1.0
TAU_DECAY = 1e-4
TAU_EVERY = 5000
